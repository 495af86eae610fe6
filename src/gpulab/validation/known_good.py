"""Known-good workload throughput per GPU model, built from real validation reports, with their provenance.

A workload row (samples/s of a training run) has no datasheet figure to be judged against; the known-good row of
the same GPU model, workload, framework, launcher, device count, precision, size, layout and batch gives it one:
a healthy machine reaches at least `BOUND` of it, judged on the row's interval (below: fail; straddling after a
re-measure: marginal).

Each known-good row keeps every source run's median (its spread), the hosts it came from (CPU model, threads, VM
or bare metal) and how busy its GPU was. A row whose GPU was under HOST_BOUND_BUSY_PCT busy is host-bound: the
host's CPU, loader and launch latency set its pace, so it is judged only on a comparable bare-metal host (same CPU
model and threads) that is not contended at the time; elsewhere (another host, any VM guest) it is reported without
a verdict and says why. A row from fewer than MIN_RUNS source runs has no spread to judge by: shown, not judged.

The shipped table (known_good.json beside this file) is derived, never edited by hand:

    python -m gpulab.validation.known_good REPORT.json [REPORT.json ...] > src/gpulab/validation/known_good.json

and tests/test_known_good.py rebuilds it from the reports in tests/fixtures/reports/ to keep the two equal.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.names import Framework, Launcher, Precision, ReportPrecision, ValidationTier
from gpulab.records import Check, Report, Result, Threshold
from gpulab.report import spread

SCHEMA = "gpulab.known-good/2"
HOST_BOUND_BUSY_PCT = 80.0  # as compare: a GPU under 80 % busy waits for its host
# Source runs a row needs before it judges: fewer show no spread (cifar10 on one quiet 2x H200 guest: 11,571 then
# 16,114 samples/s), and a bar from one or two of them can sit anywhere in it.
MIN_RUNS = 3
BOUND = Threshold(
    name="workload.min_pct_of_known_good",
    value=85.0,
    unit="%",
    source="gpulab default, against the GPU model's known-good row (gpulab/validation/known_good.json)",
    basis="repeated runs on one healthy machine spread within 10 % (4331 and 3956 img/s for ResNet50 bf16 on "
    "one H200); below 85 % is a real shortfall",
)


@dataclass(frozen=True)
class KnownGood:
    gpu_model: str
    workload: str
    framework: Framework
    launcher: Launcher
    n: int
    precision: ReportPrecision
    size: str | None
    channels_last: bool | None
    batch: int | None
    value: float  # the median of a report's measurements; of several reports, the lowest of their medians
    unit: str
    measurements: int
    source: str  # the reports it came from (file, GPUs, date, tier, driver, torch, OS), joined by "; "
    runs: tuple[float, ...] = ()  # each source report's median: the row's spread over runs
    hosts: tuple[str, ...] = ()  # each source host: "CPU model, N threads, KVM" (host_text)
    gpu_busy_pct: float | None = None  # the GPU's median busy share over the source runs (NVML utilisation)

    @property
    def host_bound(self) -> bool:
        return self.gpu_busy_pct is not None and self.gpu_busy_pct < HOST_BOUND_BUSY_PCT

    def key(self) -> tuple[Any, ...]:
        return _key(
            self.gpu_model,
            self.workload,
            self.framework,
            self.launcher,
            self.n,
            self.precision,
            self.size,
            self.channels_last,
            self.batch,
        )


def _key(*parts: Any) -> tuple[Any, ...]:
    return tuple(parts)


def result_key(gpu_model: str, result: Result) -> tuple[Any, ...]:
    params = result.params
    return _key(
        gpu_model,
        result.workload,
        result.framework,
        result.launcher,
        result.n,
        result.precision,
        params.get("size"),
        params.get("channels_last"),
        result.batch,
    )


def gpu_model(report: Report) -> str | None:
    """The report's GPU model, when every GPU of the run is the same model."""
    names = {g.get("name") for g in report.fingerprint.get("gpus") or []}
    return names.pop() if len(names) == 1 else None


def host_text(fingerprint: dict[str, Any]) -> str:
    """The host a row was measured on, as comparability needs it: CPU model, hardware threads, VM or bare metal."""
    host = fingerprint.get("host") or {}
    cpu = host.get("cpu") or {}
    model, threads = cpu.get("model") or "unknown CPU", cpu.get("threads") or "?"
    return f"{model}, {threads} threads, {host.get('hypervisor') or 'bare metal'}"


def busy_pct(result: Result) -> float | None:
    """The row's GPUs' mean NVML utilisation over its timed loop (their lowest), None without telemetry."""
    tel = result.telemetry
    utils = [g.util_mean for g in (tel.per_gpu if tel else [])]
    numbers = [float(u) for u in utils if isinstance(u, (int, float))]
    return min(numbers) if numbers else None


def _provenance(report: Report, label: str) -> str:
    fp = report.fingerprint
    software, host = fp.get("software") or {}, fp.get("host") or {}
    torch = next((f.get("version") for f in software.get("frameworks") or [] if f.get("name") == "torch"), None)
    return (
        f"{label}: {len(fp.get('gpus') or [])}x {gpu_model(report)}, {report.created[:10]}, tier {report.tier}, "
        f"driver {software.get('driver_version')}, torch {torch}, {host.get('os')} "
        f"({host.get('hypervisor') or 'bare metal'})"
    )


Measured = tuple[list[Result], str, str]  # a report's rows of one key, its provenance, its host


def _measurements(report: Report, label: str) -> dict[tuple[Any, ...], Measured]:
    """The report's workload rows (samples/s) grouped by known-good key, with the report's provenance and host."""
    model = gpu_model(report)
    if model is None:
        raise GpulabError(f"{label}: not one GPU model throughout; known-good rows need a uniform machine")
    source = _provenance(report, label)
    host = host_text(report.fingerprint)
    groups: dict[tuple[Any, ...], Measured] = {}
    for r in report.results:
        if r.launcher != Launcher.CPU and r.unit == "samples/s":  # a workload's rows on GPUs
            groups.setdefault(result_key(model, r), ([], source, host))[0].append(r)
    return groups


def _rows(groups: dict[tuple[Any, ...], list[Measured]]) -> list[KnownGood]:
    """One row per key, from every report that has it (their sources joined): each report's median, then the lowest
    of those. Every such machine was healthy, so a healthy machine may be as slow as the slowest of them: a row that
    leans on the host (a data loader on 16 cores or on 32) must not make the faster host the bar."""
    rows = []
    for key, reports in groups.items():
        model, workload, framework, launcher, n, precision, size, channels_last, batch = key
        medians = [round(statistics.median(r.value for r in results), 1) for results, _, _ in reports]
        busy = [b for results, _, _ in reports for b in map(busy_pct, results) if b is not None]
        rows.append(
            KnownGood(
                model,
                workload,
                framework,
                launcher,
                n,
                precision,
                size,
                channels_last,
                batch,
                value=min(medians),
                unit=reports[0][0][0].unit,
                measurements=sum(len(results) for results, _, _ in reports),
                source="; ".join(source for _, source, _ in reports),
                runs=tuple(medians),
                hosts=tuple(dict.fromkeys(host for _, _, host in reports)),
                gpu_busy_pct=round(statistics.median(busy), 1) if busy else None,
            )
        )
    return sorted(rows, key=lambda k: tuple(str(p) for p in k.key()))


def rows_from_report(report: Report, label: str) -> list[KnownGood]:
    """The report's workload rows (samples/s) as known-good rows, repeated measurements as their median."""
    return _rows({key: [measured] for key, measured in _measurements(report, label).items()})


def build(paths: Sequence[Path]) -> dict[str, Any]:
    """The table from these reports: a key measured on several machines of one model (a 1-GPU and a 2-GPU H100, say)
    is one row, the lowest of the machines' medians."""
    from gpulab.report.io import load_report

    merged: dict[tuple[Any, ...], list[Measured]] = {}
    for path in paths:
        for key, measured in _measurements(load_report(path), Path(path).name).items():
            merged.setdefault(key, []).append(measured)
    rows = [{**asdict(r), "runs": list(r.runs), "hosts": list(r.hosts)} for r in _rows(merged)]
    return {"schema": SCHEMA, "bound_pct": BOUND.value, "rows": rows}


@cache
def table() -> dict[tuple[Any, ...], KnownGood]:
    data = json.loads(resources.files("gpulab.validation").joinpath("known_good.json").read_text(encoding="utf-8"))
    rows = (
        KnownGood(
            **{
                **r,
                "precision": Precision.parse_reported(r["precision"], "known-good row's precision"),
                "framework": Framework.parse(r["framework"], "known-good row's framework"),
                "launcher": Launcher.parse(r["launcher"], "known-good row's launcher"),
                "runs": tuple(r.get("runs") or ()),
                "hosts": tuple(r.get("hosts") or ()),
            }
        )
        for r in data["rows"]
    )
    return {row.key(): row for row in rows}


def models() -> list[str]:
    return sorted({row.gpu_model for row in table().values()})


def lookup(model: str | None, result: Result) -> KnownGood | None:
    return table().get(result_key(model, result)) if model else None


def judge(
    model: str | None,
    result: Result,
    threshold: Threshold = BOUND,
    *,
    host: dict[str, Any] | None = None,
    contention: str | None = None,
) -> Check:
    """`result` against its GPU model's known-good row; a model or configuration without one says so.

    `host` is this run's fingerprint (its host part decides whether a host-bound row is comparable); `contention`
    the reason this host is contended now (gpulab.validation.session.Lab.host_contention), or None."""
    name = f"known_good.{result.framework}.{result.workload}[{result.launcher},{result.n},{result.precision}]"
    row = lookup(model, result)
    if row is None:
        known = "; ".join(models())
        missing = "no known-good row for this configuration" if model in models() else f"{model} has no known-good rows"
        return Check(name, "skip", f"{missing} (known: {known}): judged against the datasheet and the CPU only")
    figure = spread.of_windows(spread.windows_of(result), result.unit)
    pct = spread.scaled(figure, 100 / row.value, "%")
    result.params["known_good"] = {"value": row.value, "pct": round(pct.median, 1), "source": row.source}
    runs = f"runs {min(row.runs):,.0f}–{max(row.runs):,.0f} ({len(row.runs)})" if row.runs else "one run"
    message = (
        f"{result.workload} {result.launcher}×{result.n} {result.precision}: "
        f"{spread.text(figure, lambda v: f'{v:,.0f}')} {result.unit} = "
        f"{pct.median:.0f} % [{pct.low:.0f}–{pct.high:.0f}] of known-good {row.value:,.0f} "
        f"({row.gpu_model}, {runs}, {row.source.split(':')[0]})"
    )
    evidence: dict[str, Any] = {
        "value": result.value,
        "known_good": row.value,
        "pct": pct.median,
        "pct_interval": [round(pct.low, 2), round(pct.high, 2)],
        "source": row.source,
        "known_good_runs": list(row.runs),
        "known_good_hosts": list(row.hosts),
    }
    if len(row.runs) < MIN_RUNS:
        return Check(
            name,
            "skip",
            f"{message}: not judged: the known-good row has {len(row.runs)} source run(s) and needs {MIN_RUNS} for its "
            "spread; add healthy reports of this GPU model (python -m gpulab.validation.known_good REPORT.json ...)",
            evidence,
        )
    busy = busy_pct(result)
    host_bound = row.host_bound or (busy is not None and busy < HOST_BOUND_BUSY_PCT)
    if host_bound:
        evidence["host_bound"] = True
        here = host_text({"host": host}) if host else None
        why: str | None = None
        if here is None or here not in row.hosts:
            theirs = "; ".join(row.hosts) or "not recorded"
            why = f"this host ({here or 'not recorded'}) is not the known-good's ({theirs})"
        elif hypervisor := (host or {}).get("hypervisor"):
            why = (
                f"this host is a {hypervisor} guest, whose neighbours move such rows unseen (cifar10 16,114 then "
                "11,613 samples/s five minutes apart on one quiet 2x H200 guest)"
            )
        elif contention:
            why = f"this host is contended ({contention})"
        if why:
            shares = (
                f"GPU {busy:.0f} % busy" if busy is not None else f"GPU {row.gpu_busy_pct:.0f} % busy at known-good"
            )
            return Check(
                name,
                "skip",
                f"{message}: not judged: a host-bound row ({shares}: the host sets its pace) and {why}",
                evidence,
            )
    where = spread.position(pct, threshold.value)
    if where == "above":
        return Check(name, "pass", message, evidence, threshold=threshold.name)
    if where == "straddles":
        return Check(
            name, "marginal", f"{message}: its interval straddles {threshold.value:g} %", evidence, threshold.name
        )
    return Check(name, "fail", f"{message}; below {threshold.value:g} %", evidence, threshold=threshold.name)


def as_report(model: str) -> Report:
    """The known-good rows of `model` as a report to compare against (`gpulab compare --known-good MODEL`)."""
    rows = [row for row in table().values() if row.gpu_model == model]
    if not rows:
        raise GpulabError(f"no known-good rows for {model!r}; known GPU models: {', '.join(models())}")
    results = [
        Result(
            row.workload,
            row.framework,
            row.launcher,
            row.n,
            row.precision,
            row.value,
            row.unit,
            device="cuda:0" if row.launcher == Launcher.GPU else None,
            batch=row.batch,
            params={"size": row.size, "channels_last": row.channels_last, "source": row.source},
        )
        for row in rows
    ]
    return Report(
        fingerprint={"hostname": f"known-good {model}", "gpus": [{"name": model}]},
        tier=ValidationTier.STANDARD,
        results=results,
        command=f"known-good rows of {model}",
    )


def main(argv: Iterable[str] | None = None) -> None:
    paths = [Path(p) for p in (list(argv) if argv is not None else sys.argv[1:])]
    if not paths:
        raise SystemExit("usage: python -m gpulab.validation.known_good REPORT.json [...] > known_good.json")
    sys.stdout.write(json.dumps(build(paths), indent=1) + "\n")


if __name__ == "__main__":
    main()
