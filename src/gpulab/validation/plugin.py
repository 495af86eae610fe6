"""pytest plugin behind validate/: options, fixtures, and the report written at the end of every session.

The report is written in `pytest_sessionfinish`, which pytest also calls after failures and after Ctrl-C, so a
run always leaves a report (flagged `interrupted` when it was stopped early).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpulab import names
from gpulab.checks import health, occupancy
from gpulab.errors import GpulabError
from gpulab.hw import cuda_visible
from gpulab.hw.discover import fingerprint as discover
from gpulab.interrupts import raise_terminated, stop_on_signals, stopped
from gpulab.launch import progress
from gpulab.paths import Output, check_output, input_file, os_error_reason, output_dir
from gpulab.records import Check, GpuInfo, Status

# fixtures for validate/: rows several tests judge, measured once
from gpulab.validation.baselines import cpu_rows as cpu_rows
from gpulab.validation.baselines import measured_rows as measured_rows
from gpulab.validation.baselines import one_gpu_baseline as one_gpu_baseline
from gpulab.validation.pending_reboot import pending_reboot
from gpulab.validation.session import Lab, Options, gpus_for_option, write_run_record
from gpulab.validation.suite_progress import SuiteProgress

LAB_KEY = pytest.StashKey[Lab]()
# The run's exit status when nothing failed but the checks that define a healthy GPU could not judge anything
# (pytest's own statuses are 0-5): never 0, so a script cannot take "nothing could be read" for a pass.
EXIT_INCONCLUSIVE = 6
SUITE_KEY = pytest.StashKey[SuiteProgress]()
REPORT_PATH_KEY = pytest.StashKey[Path]()
STOP_STATUS_KEY = pytest.StashKey[int]()
STOP_STATUS_PLUGIN = "gpulab-stop-status"


def _tier(text: str) -> names.ValidationTier:
    """--tier: read by the vocabulary's one parser (pytest shows the message on a bad one)."""
    try:
        return names.ValidationTier.parse(text)
    except GpulabError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpulab", "gpulab validation")
    group.addoption(
        "--tier",
        type=_tier,
        choices=tuple(names.ValidationTier),
        default=names.DEFAULT_TIER,
        help="; ".join(f"{t.name}: {t.summary}" for t in names.TIER_TABLE.values()),
    )
    group.addoption("--gpus", default="all", help="'all', the first N ('2'), or indices ('0,2', '3,')")
    group.addoption("--expect-gpus", type=int, default=None, help="fail unless this many GPUs are visible")
    group.addoption(
        "--allow-busy",
        action="store_true",
        help="time GPUs that other processes occupy: occupancy.gpus_free is then skipped, not failed, and the "
        "timings include the contention",
    )
    group.addoption("--report-dir", type=Path, default=Path("reports"), help="where report-*.json goes")
    group.addoption("--baseline", type=Path, default=None, help="compare this run against an earlier report")
    group.addoption("--threshold", default="5%", help="regression threshold for --baseline (default 5%%)")
    group.addoption("--from-xml", type=Path, default=None, help="judge a captured `nvidia-smi -q -x` file")
    group.addoption("--topo", type=Path, default=None, help="with --from-xml: a captured `nvidia-smi topo -m`")
    group.addoption(
        "--precision-plan",
        metavar="ARCH",
        default=None,
        help="train the workload rows in the precisions chosen for this GPU architecture (pascal, volta, ...) "
        "instead of the selected GPU's own",
    )
    # No default: a fixed file such as <report-dir>/last-run.json would be shared by every run into that directory,
    # so a reader could take another (or an older) run's record for its own. Whoever reads the record names it.
    group.addoption(
        "--record",
        type=Path,
        default=None,
        help="at the end, write a JSON record of the run here (report paths, counts per status, exit status), "
        "atomically; for tools that start the suite",
    )
    group.addoption(
        "--dcgm-diag-level",
        type=int,
        choices=(0, 1, 2, 3, 4),
        default=None,
        help="`dcgmi diag -r LEVEL`: 1 seconds, 2 minutes, 3 about 30 min, 4 hours, 0 off; default follows --tier "
        "(quick 1, standard 2, full 3)",
    )
    from gpulab.checks.containers import DEFAULT_IMAGE, RUNTIMES

    group.addoption(
        "--container-runtime",
        choices=RUNTIMES,
        default="auto",
        help="run nvidia-smi in a container with docker or podman; auto: where nvidia-ctk and one of them are "
        "installed; none: skip",
    )
    group.addoption("--container-image", default=DEFAULT_IMAGE, help=f"image for it (default {DEFAULT_IMAGE})")


def _options(config: pytest.Config) -> Options:
    opts = Options(
        tier=config.getoption("--tier"),
        gpus=config.getoption("--gpus"),
        expect_gpus=config.getoption("--expect-gpus"),
        report_dir=config.getoption("--report-dir"),
        baseline=config.getoption("--baseline"),
        threshold=config.getoption("--threshold"),
        from_xml=config.getoption("--from-xml"),
        topo_file=config.getoption("--topo"),
        record=config.getoption("--record"),
        allow_busy=config.getoption("--allow-busy"),
    )
    if opts.from_xml is None and (pending := pending_reboot()) is not None:
        raise pytest.UsageError(pending)  # a mismatched driver would fail every check for a reason none names
    if opts.expect_gpus is not None and opts.expect_gpus < 0:
        raise pytest.UsageError(f"--expect-gpus {opts.expect_gpus}: give the number of GPUs this host should have")
    # Every file is checked before the first test: a baseline or report directory found bad at the end would
    # throw the whole run away.
    try:
        output_dir(opts.report_dir, "--report-dir")
        if opts.baseline is not None:
            from gpulab.report.io import load_report  # jsonschema loads only when a report is checked

            load_report(opts.baseline)
        if opts.from_xml is not None:
            input_file(opts.from_xml, "--from-xml", "capture one with `nvidia-smi -q -x > FILE`")
        if opts.topo_file is not None:
            input_file(opts.topo_file, "--topo", "capture one with `nvidia-smi topo -m > FILE`")
        if (plan := config.getoption("--precision-plan")) is not None:
            from gpulab.workloads.precision_plan import plan_architecture

            opts.precision_plan = plan_architecture(plan)  # one with no plan is refused before the first test
        if opts.record is not None:
            inputs = [p for p in (opts.baseline, opts.from_xml, opts.topo_file) if p is not None]
            check_output(Output(opts.record, "--record", "run.json"), inputs)
    except GpulabError as err:
        raise pytest.UsageError(str(err)) from None
    return opts


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs at least one NVIDIA GPU")
    config.addinivalue_line("markers", "multi_gpu: needs at least two NVIDIA GPUs")
    config.addinivalue_line(
        "markers",
        "live: measures or queries this machine (NVML, CUDA, its CPU): skipped when judging a captured file",
    )
    if not hasattr(config, "workerinput") and config.getoption("--tier", None) is None:
        return  # plugin loaded without our options (should not happen)
    opts = _options(config)
    try:
        # NVML first, without frameworks: the GPU selection must be in CUDA_VISIBLE_DEVICES before any framework
        # initialises CUDA, so in-process device K is the K-th selected GPU.
        base = discover(smi_xml=opts.from_xml, topo_file=opts.topo_file, probe_frameworks=False)
        # This machine's CUDA_VISIBLE_DEVICES says nothing about a captured host's GPUs.
        env = os.environ.get("CUDA_VISIBLE_DEVICES") if opts.from_xml is None else None
        gpus = gpus_for_option(cuda_visible.visible_to_cuda(base.gpus, env), opts.gpus)
    except GpulabError as err:
        raise pytest.UsageError(str(err)) from err
    # Before any framework or probe touches a GPU: what else occupies the selected ones. An xdist worker's
    # controller (its parent) and the other workers belong to the run as well.
    root = os.getppid() if hasattr(config, "workerinput") else os.getpid()
    seen = occupancy.look(gpus, opts.from_xml, ours=occupancy.own_pids(root) if opts.from_xml is None else ())
    if opts.from_xml is None:
        if gpus:
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(g.uuid for g in gpus)
        fp = discover(topo_file=opts.topo_file, probe_frameworks=True)
    else:
        fp = base  # a capture is judged on what it holds: nothing more is read from this machine
    worker = hasattr(config, "workerinput")  # the controller measures the host for the run
    lab = Lab(options=opts, fingerprint=fp, gpus=gpus, occupancy=seen, cuda_visible=env, calibrate_cpu=not worker)
    if seen.busy:
        lab.messages.append(
            occupancy.busy_line(
                seen.busy,
                "timings include the contention (--allow-busy)"
                if opts.allow_busy
                else "timing tests skipped (see occupancy.gpus_free)",
            )
        )
    config.stash[LAB_KEY] = lab
    _stop_gracefully_on_signals(config)


def _stop_gracefully_on_signals(config: pytest.Config) -> None:
    """SIGTERM (a scheduler's or `timeout`'s stop) stops the run as Ctrl-C does, so the report is still written; a
    SIGINT ignored by the shell that started the suite in the background (`pytest validate/ &`) is taken back, so
    `kill -INT` stops it too. The run then exits 130 (Ctrl-C) or 143 (SIGTERM), as gpulab's commands do."""
    if threading.current_thread() is not threading.main_thread():
        return
    if hasattr(config, "workerinput"):  # an xdist worker: Ctrl-C is its controller's, as xdist arranges
        signal.signal(signal.SIGTERM, raise_terminated)
        return
    stop_on_signals()
    if not config.pluginmanager.has_plugin(STOP_STATUS_PLUGIN):
        config.pluginmanager.register(_StopStatus(config), STOP_STATUS_PLUGIN)


class _StopStatus:
    """Keeps the exit status of a run a signal stopped (the hook is told the exception, not the session)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        if isinstance(excinfo.value, KeyboardInterrupt):  # not pytest.exit(), which names its own status
            self.config.stash[STOP_STATUS_KEY] = stopped(excinfo.value)[1]


def _lab(config: pytest.Config) -> Lab:
    return config.stash[LAB_KEY]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    lab = _lab(config)
    no_gpu = pytest.mark.skip(reason=lab.fingerprint.gpu_absent_reason or "no GPU selected (see gpus.selected)")
    one_gpu = pytest.mark.skip(reason=f"needs 2 or more GPUs, {len(lab.gpus)} selected")
    looked = lab.occupancy
    busy = {} if lab.options.allow_busy or looked is None else {g.index: g for g in looked.busy}
    captured = pytest.mark.skip(
        reason=f"judging a captured file ({lab.options.from_xml}): this measures the machine it runs on, "
        "which is not the captured host"
    )
    for item in items:
        if ("gpu" in item.keywords or "multi_gpu" in item.keywords) and not lab.gpus:
            item.add_marker(no_gpu)
        elif "multi_gpu" in item.keywords and len(lab.gpus) < 2:
            item.add_marker(one_gpu)
        elif "live" in item.keywords and lab.options.from_xml is not None:
            item.add_marker(captured)
        elif (consequence := _needs_idle(item)) is not None:
            looks = [busy[g.index] for g in _gpus_of(item, lab) if g.index in busy]
            split = [n for n in (health.whole_gpu_notice(g) for g in _gpus_of(item, lab)) if n]
            if looks:
                item.add_marker(pytest.mark.skip(reason=occupancy.busy_line(looks, consequence)))
            elif split and "live" in item.keywords:  # MIG instances or a vGPU slice: no whole GPU to time
                item.add_marker(pytest.mark.skip(reason=split[0]))
    # The run's preconditions lead, so their rows come first in the report.
    items.sort(key=lambda item: item.path.name != "test_occupancy.py")


# Fixtures through which validate/'s tests time work on a GPU: the probes, speedup, scaling and TensorFlow rows.
_TIMING_FIXTURES = frozenset({"measured_rows", "one_gpu_baseline", "size", "tier"})
# Tests that judge a GPU's idle state: a GPU that other work keeps busy is not idle.
_IDLE_STATE_TESTS = frozenset({"test_no_throttling_at_idle"})


def _needs_idle(item: pytest.Item) -> str | None:
    """Why a GPU test needs its GPUs free of other work (the end of its skip line), or None when it does not."""
    if "gpu" not in item.keywords and "multi_gpu" not in item.keywords:
        return None
    if "live" in item.keywords and _TIMING_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "timing would measure the contention; --allow-busy runs them anyway"
    if getattr(item, "originalname", item.name) in _IDLE_STATE_TESTS:
        return "it is not idle, so its idle state cannot be judged; --allow-busy judges it anyway"
    return None


def _gpus_of(item: pytest.Item, lab: Lab) -> list[GpuInfo]:
    """The selected GPUs a test runs on: its `gpu` parameter, the first one (one-GPU rows), or all of them."""
    callspec = getattr(item, "callspec", None)
    gpu = callspec.params.get("gpu") if callspec is not None else None
    if isinstance(gpu, GpuInfo):
        return [gpu]
    if "multi_gpu" in item.keywords:
        return list(lab.gpus)
    return lab.gpus[:1]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "gpu" in metafunc.fixturenames:
        gpus: list[GpuInfo | None] = list(_lab(metafunc.config).gpus) or [None]
        metafunc.parametrize("gpu", gpus, ids=[f"gpu{g.index}" if g else "no-gpu" for g in gpus])


@pytest.fixture(scope="session")
def lab(request: pytest.FixtureRequest) -> Lab:
    return _lab(request.config)


@pytest.fixture(scope="session")
def workload_size(lab: Lab) -> str:
    """The workloads' size for this tier; the quick tier runs no training workloads."""
    workload_size = lab.options.tier.meaning.workload_size
    if workload_size is None:
        trained = " and ".join(t.name for t in names.TIER_TABLE.values() if t.workload_size)
        pytest.skip(f"workloads run in --tier {trained}")
    return workload_size


@pytest.fixture
def verdict(request: pytest.FixtureRequest, lab: Lab) -> Callable[[Check], Check]:
    """Record a Check for the report and turn it into the test's outcome (fail/skip carry its message)."""

    def judge(check: Check) -> Check:
        lab.judged[request.node.nodeid] = check
        if check.status == "skip":
            pytest.skip(check.message)
        if check.status in ("fail", "error"):
            pytest.fail(check.message, pytrace=False)
        return check

    return judge


def pytest_collection_finish(session: pytest.Session) -> None:
    """The suite's progress line (suite_progress): tests done, the current one, the time left."""
    config = session.config
    lab = config.stash.get(LAB_KEY, None)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if lab is None or reporter is None or hasattr(config, "workerinput") or config.option.collectonly:
        return
    tests = [(item.nodeid, dict(getattr(getattr(item, "callspec", None), "params", {}))) for item in session.items]
    config.stash[SUITE_KEY] = SuiteProgress(tests, lab.options.tier, reporter.write_line, reporter.isatty())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    suite = item.config.stash.get(SUITE_KEY, None)
    if suite is None:
        return (yield)
    suite.start(item.nodeid)
    try:
        return (yield)
    finally:
        suite.finish(item.nodeid)


PROGRESS_AFTER_S = 5.0  # a test that trains longer than this shows its steps, rate and time left
PROGRESS_EVERY_S = 10.0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """While a test trains, a line now and then on the terminal: which run, steps done, rate, time left."""
    reporter = item.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or not reporter.isatty():
        return (yield)
    started = time.monotonic()
    shown = {"at": started + PROGRESS_AFTER_S - PROGRESS_EVERY_S}

    def show(p: progress.Progress) -> None:
        now = time.monotonic()
        if now - shown["at"] >= PROGRESS_EVERY_S or (p.done == p.total and now - started > PROGRESS_AFTER_S):
            shown["at"] = now
            reporter.write_line(f"    {item.name}: {p.text()} ({now - started:.0f} s in this test)")

    with progress.listening(show):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep: pytest.TestReport = yield
    lab = item.config.stash.get(LAB_KEY, None)
    if lab is None or not _decides(rep):
        return rep
    judged = lab.judged.get(item.nodeid)
    status = _status(rep)
    if status == "pass" and judged is not None and judged.status == "marginal":
        status = "marginal"  # the test passed (marginal fails nothing) but the report says what it was
    if status == "fail" and judged is not None and judged.status == "error":
        status = "error"  # a measurement that could not judge (a fault of the measurement), not a failed GPU
    message = _message(rep) if status not in ("pass", "marginal") else (judged.message if judged else "passed")
    check = Check(
        name=judged.name if judged else _check_name(item),
        status=status,
        message=message,
        evidence=judged.evidence if judged else {},
        threshold=judged.threshold if judged else None,
        seconds=round(rep.duration, 3),
    )
    lab.report.checks = [c for c in lab.report.checks if c.name != check.name] + [check]
    return rep


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A test module skipped whole (`pytest.importorskip` at import) is one skip in pytest's summary: it is one
    check in the report too, so both count the same skips."""
    if report.skipped:
        _COLLECTION_SKIPS.append(report)


_COLLECTION_SKIPS: list[pytest.CollectReport] = []


def _collection_checks() -> list[Check]:
    out = []
    for rep in _COLLECTION_SKIPS:
        module = Path(str(rep.fspath)).stem.removeprefix("test_")
        reason = str(rep.longrepr[2]) if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        out.append(Check(name=f"{module}.module", status="skip", message=reason.removeprefix("Skipped: ")))
    return out


def _decides(rep: pytest.TestReport) -> bool:
    """The report that settles a test: its call, or a setup/teardown that failed or skipped it."""
    return rep.when == "call" or (rep.when == "setup" and not rep.passed) or (rep.when == "teardown" and rep.failed)


def _status(rep: pytest.TestReport) -> Status:
    if rep.skipped:
        return "skip"
    if rep.passed:
        return "pass"
    return "fail" if rep.when == "call" else "error"


def _message(rep: pytest.TestReport) -> str:
    if rep.skipped and isinstance(rep.longrepr, tuple):
        return str(rep.longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(rep.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).removeprefix("Failed: ")
    return str(rep.longrepr).strip().splitlines()[-1] if rep.longrepr else rep.outcome


def _check_name(item: pytest.Item) -> str:
    module = Path(str(item.fspath)).stem.removeprefix("test_")
    return f"{module}.{item.name.removeprefix('test_')}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    lab = session.config.stash.get(LAB_KEY, None)
    if lab is None or hasattr(session.config, "workerinput"):
        return
    from gpulab.report.io import default_report_path, write_report
    from gpulab.report.render import write_rendered

    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    if interrupted and STOP_STATUS_KEY in session.config.stash:  # pytest's 2 said it to pytest's users
        session.exitstatus = session.config.stash[STOP_STATUS_KEY]
    program = "pytest" if Path(sys.argv[0]).name in ("__main__.py", "pytest") else Path(sys.argv[0]).name
    command = shlex.join([program, *sys.argv[1:]])
    known = {c.name for c in lab.report.checks}
    lab.report.checks += [c for c in _collection_checks() if c.name not in known]
    report = lab.finish(interrupted=interrupted, command=command)
    path = write_report(report, default_report_path(lab.options.report_dir, lab.hostname))
    session.config.stash[REPORT_PATH_KEY] = path
    from gpulab.report.views import inconclusive_text, verdict

    if verdict(report) == "inconclusive" and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = EXIT_INCONCLUSIVE
        lab.messages.append(f"INCONCLUSIVE (exit {EXIT_INCONCLUSIVE}): {inconclusive_text(report)}")
    rendered: tuple[Path, Path] | None = None
    try:
        rendered = write_rendered(report, path)
    except (GpulabError, OSError) as err:  # the JSON is written: `gpulab report` renders it later
        lab.messages.append(f"report views not written ({err}); render them with `gpulab report {path}`")
    if lab.options.baseline is not None and not interrupted:
        from gpulab.report.compare import compare, parse_threshold
        from gpulab.report.compare.render import to_text
        from gpulab.report.io import load_report

        try:
            base = load_report(lab.options.baseline)
            cmp = compare(
                [(str(lab.options.baseline), base), (str(path), report)],
                parse_threshold(lab.options.threshold),
            )
        except GpulabError as err:
            lab.messages.append(f"baseline comparison failed: {err}")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        else:
            lab.messages.append(to_text(cmp))
            if cmp.regressions:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if lab.options.record is not None:  # last: it holds the final exit status, regressions included
        record = lab.run_record(int(session.exitstatus), path, rendered)
        try:
            write_run_record(record, lab.options.record)
        except OSError as err:
            lab.messages.append(f"run record not written: {os_error_reason(err, lab.options.record)}")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lab = config.stash.get(LAB_KEY, None)
    if lab is None:
        return
    tr = terminalreporter
    tr.section("gpulab")
    if lab.options.from_xml is not None:
        tr.write_line(
            f"judged a capture: {', '.join(lab.fingerprint.captured_from)}; host, CPU, memory, CUDA toolkits, "
            "cuDNN and frameworks not captured"
        )
    if not lab.gpus:
        tr.write_line(f"verdict: {lab.fingerprint.gpu_absent_reason or 'no GPU selected'} (CPU results only)")
    for check in lab.report.checks:  # first: neither pass nor fail, so the reader decides (exit status stays 0)
        if check.status == "marginal":
            tr.write_line(f"MARGINAL {check.name}: {check.message}")
    for line in lab.messages:
        tr.write_line(line)
    path = config.stash.get(REPORT_PATH_KEY, None)
    if path is not None:
        from gpulab.report.views import host_verdict_text, verdict_text

        counts = lab.counts()
        shown = ", ".join(f"{counts[s]} {s}" for s in ("pass", "marginal", "fail", "error", "skip") if counts[s])
        tr.write_line(shown or "no checks ran")
        # Two verdicts side by side: the GPUs' (the checks) and the host's (contention measured over the run)
        tr.write_line(f"verdict: {verdict_text(lab.report)} · {host_verdict_text(lab.report)}")
        tr.write_line(f"report: {path}")


@pytest.fixture
def link_under_load(lab: Lab) -> Callable[[GpuInfo], Any]:
    """Read a GPU's PCIe link while it is busy (idle GPUs lower the link generation to save power)."""
    from gpulab.validation.live import link_under_load as read

    def under_load(gpu: GpuInfo) -> Any:
        if lab.options.from_xml is not None:
            return None
        return read(gpu, f"cuda:{lab.gpus.index(gpu)}")

    return under_load
