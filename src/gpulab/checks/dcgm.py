"""NVIDIA DCGM's active diagnostic, `dcgmi diag -r LEVEL -j`, as one report Check.

`dcgmi` asks the host engine (nv-hostengine, the `nvidia-dcgm` service that roles/nvidia_dcgm installs) to run the
diagnostic suite of a level: 1 takes seconds (deployment checks), 2 about two minutes, 3 about half an hour, 4 hours.
Its JSON comes in two shapes, both read here:

- DCGM 3 (and NVVS): `{"DCGM GPU Diagnostic": {"test_categories": [...], "version": ...}}`, one result per GPU
  (`gpu_ids`, a string or a number; the deployment tests one result for all GPUs, `"0,1,2,3"`), warnings as
  strings or `{"warning", "error_id"}` objects, `info` as a list or one string, and `null` holes in the arrays.
- DCGM 4: `{"DCGM Diagnostic": {"test_categories": [...]}, "entity_groups": [...], "metadata": {"version",
  "Driver Version Detected"}}`, one result per entity (`entity_group`, `entity_id`) and a `test_summary` per test.

A run that could not start prints `{"DCGM Diagnostic": {"runtime_error": ...}}`. dcgmi exits non-zero when a test
fails, so the exit status alone decides nothing: the JSON does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from gpulab import names
from gpulab.errors import GpulabError
from gpulab.records import Check

LEVELS = (1, 2, 3, 4)
# Seconds before a run is abandoned: several times DCGM's documented durations (r1 seconds, r2 about 2 min,
# r3 15-30 min, r4 about 1.5 h), since some tests take the GPUs one after another.
TIMEOUT_S = {1: 300, 2: 1200, 3: 5400, 4: 4 * 3600}
STATUS_WORDS = {
    "pass": "pass",
    "fail": "fail",
    "warn": "warn",
    "warning": "warn",
    "skip": "skip",
    "skipped": "skip",
    "not run": "skip",
}
ENABLE_HINT = "to turn it on, set gpulab_dcgm: true in the inventory and provision again (roles/nvidia_dcgm)"
# What dcgmi says when no host engine answers ("Error: unable to establish a connection to the specified host").
_UNREACHABLE = ("establish a connection", "connection to the specified host", "host engine is not running")
_TOP_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")


class DcgmOutputError(GpulabError):
    """dcgmi printed something that is not a DCGM diagnostic document."""


@dataclass(frozen=True)
class TestResult:
    """One test's verdict for one GPU (`gpu` "0"), a set of GPUs ("0,1,2,3") or the whole run (None)."""

    category: str
    test: str
    gpu: str | None
    status: str  # pass | fail | warn | skip, or the word DCGM used when it is none of those
    warnings: tuple[str, ...] = ()
    info: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        if self.gpu is None:
            return "all GPUs"
        if not self.gpu[:1].isdigit():
            return self.gpu  # another entity group: "CPU 0"
        return f"GPUs {self.gpu}" if "," in self.gpu else f"GPU {self.gpu}"

    @property
    def failed(self) -> bool:
        return self.status not in ("pass", "warn", "skip")


@dataclass
class Diagnostic:
    """A parsed `dcgmi diag -j` document."""

    shape: str  # "dcgm4" or "dcgm3"
    version: str | None
    driver: str | None
    results: list[TestResult] = field(default_factory=list)
    runtime_error: str | None = None

    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "fail": 0, "warn": 0, "skip": 0}
        for r in self.results:
            out["fail" if r.failed else r.status] += 1
        return out


def _texts(value: Any) -> tuple[str, ...]:
    """Warnings and info: a list of strings or of {"warning": ...} objects, or one string."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, dict):
            text = item.get("warning") or item.get("message") or item.get("info")
            if text is None:
                continue
            out.append(str(text))
        elif item is not None:
            out.append(str(item))
    return tuple(" ".join(t.split()) for t in out if t.strip())


def _status(value: Any) -> str:
    word = str(value or "").strip().lower()
    return STATUS_WORDS.get(word, word or "missing")


def _where(result: dict[str, Any]) -> str | None:
    if "entity_id" in result:
        group = str(result.get("entity_group") or "GPU")
        return str(result["entity_id"]) if group == "GPU" else f"{group} {result['entity_id']}"
    for key in ("gpu_ids", "gpu_id"):
        if result.get(key) is not None and str(result[key]).strip() != "":
            return str(result[key]).strip()
    return None


def _test_results(category: str, test: dict[str, Any]) -> list[TestResult]:
    name = str(test.get("name") or "?")
    out = [
        TestResult(
            category=category,
            test=name,
            gpu=_where(r),
            status=_status(r.get("status")),
            warnings=_texts(r.get("warnings")),
            info=_texts(r.get("info")),
        )
        for r in test.get("results") or []
        if isinstance(r, dict)
    ]
    summary = test.get("test_summary")
    if isinstance(summary, dict):
        status = _status(summary.get("status"))
        # A test that failed on no entity of its own (an error about the run, not a GPU) must still show.
        if not out or (status not in ("pass", "skip") and all(r.status != status for r in out)):
            out.append(
                TestResult(
                    category=category,
                    test=name,
                    gpu=None,
                    status=status,
                    warnings=_texts(summary.get("warnings")),
                    info=_texts(summary.get("info")),
                )
            )
    return out


def _document(text: str) -> dict[str, Any]:
    """The JSON object in dcgmi's output: it may follow a line of text ("Successfully ran diagnostic for group.")."""
    start = text.find("{")
    if start < 0:
        raise DcgmOutputError("no JSON object in the output")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as err:
        raise DcgmOutputError(f"its JSON does not parse ({err.msg} at line {err.lineno})") from None
    if not isinstance(doc, dict):
        raise DcgmOutputError("its JSON is not an object")
    return doc


def parse(text: str) -> Diagnostic:
    """Per-test, per-GPU results of a `dcgmi diag -j` output (DCGM 3 or 4); DcgmOutputError when it is none."""
    doc = _document(text)
    key = next((k for k in _TOP_KEYS if isinstance(doc.get(k), dict)), None)
    if key is None:
        raise DcgmOutputError(f"the JSON has none of the keys {', '.join(repr(k) for k in _TOP_KEYS)}")
    body: dict[str, Any] = doc[key]
    raw_metadata = doc.get("metadata")
    metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    version = metadata.get("version") or body.get("version")
    driver = metadata.get("Driver Version Detected") or body.get("Driver Version Detected")
    diag = Diagnostic(
        shape="dcgm4" if key == "DCGM Diagnostic" else "dcgm3",
        version=str(version) if version else None,
        driver=str(driver) if driver else None,
        runtime_error=str(body["runtime_error"]) if body.get("runtime_error") else None,
    )
    for category in body.get("test_categories") or []:
        if not isinstance(category, dict):
            continue
        name = str(category.get("category") or "?")
        for test in category.get("tests") or []:
            if isinstance(test, dict):  # DCGM 3.1 leaves null holes between tests
                diag.results.extend(_test_results(name, test))
    return diag


def level_for(tier: names.ValidationTier, level: int | None = None) -> int:
    """The diagnostic level: the one given (0 disables), else the tier's."""
    if level is not None:
        if level != 0 and level not in LEVELS:
            raise GpulabError(
                f"--dcgm-diag-level {level}: use 1 (seconds), 2 (minutes), 3 (about half an hour), 4 (hours), "
                "or 0 to skip the DCGM diagnostic"
            )
        return level
    # quick runs the seconds-long deployment checks, standard the two-minute suite, full the long one
    return tier.meaning.dcgm_level


def _first_line(text: str) -> str:
    return next((" ".join(line.split()) for line in text.splitlines() if line.strip()), "(no output)")[:300]


def _skip(name: str, message: str, **evidence: Any) -> Check:
    return Check(name=name, status="skip", message=message, evidence=evidence)


def judge(diag: Diagnostic, command: list[str], level: int, returncode: int) -> Check:
    """The Check for a parsed run: fail names every failing test and GPU with DCGM's own message."""
    name = f"dcgm.diag[r{level}]"
    cmd = " ".join(command)
    evidence: dict[str, Any] = {
        "command": command,
        "level": level,
        "returncode": returncode,
        "dcgm_version": diag.version,
        "driver": diag.driver,
        "shape": diag.shape,
        "counts": diag.counts(),
        # Lists, not tuples: the report is validated as JSON data.
        "results": [{**asdict(r), "warnings": list(r.warnings), "info": list(r.info)} for r in diag.results],
    }
    if diag.runtime_error:
        return Check(
            name=name,
            status="error",
            message=f"`{cmd}` could not run the diagnostic: {' '.join(diag.runtime_error.split())}. Fix that, then "
            "run it again (DCGM's logs: /var/log/nvidia-dcgm/).",
            evidence=evidence,
        )
    if not diag.results:
        return Check(
            name=name,
            status="error",
            message=f"`{cmd}` exited {returncode} with a DCGM document that holds no test results; run it by hand "
            "and read /var/log/nvidia-dcgm/nvvs.log.",
            evidence=evidence,
        )
    failed = [r for r in diag.results if r.failed]
    if failed:
        details = "; ".join(
            f"{r.test} on {r.where}: {' '.join(r.warnings) or f'status {r.status!r}, no message'}" for r in failed
        )
        return Check(
            name=name,
            status="fail",
            message=f"DCGM level {level} diagnostic failed {len(failed)} test result(s): {details}. See DCGM's "
            "diagnostics guide for each test; the full output is in this check's evidence.",
            evidence=evidence,
        )
    counts = diag.counts()
    if counts["skip"] == len(diag.results):
        return Check(
            name=name,
            status="skip",
            message=f"DCGM level {level} diagnostic skipped every test ({len(diag.results)}): DCGM does not run them "
            f"on this GPU or driver; first: {diag.results[0].test} on {diag.results[0].where}.",
            evidence=evidence,
        )
    warned = [r for r in diag.results if r.status == "warn"]
    message = (
        f"DCGM {diag.version or '?'} level {level}: {counts['pass']} passed, {counts['skip']} skipped, "
        f"{counts['warn']} warned"
    )
    if warned:
        message += ": " + "; ".join(f"{r.test} on {r.where}: {' '.join(r.warnings)}" for r in warned)
    return Check(name=name, status="pass", message=message, evidence=evidence)


def run_diag(level: int, dcgmi: str = "dcgmi", timeout: float | None = None) -> Check:
    """Run `dcgmi diag -r LEVEL -j` and judge it. Skips (one line) where dcgmi or its host engine is missing."""
    name = f"dcgm.diag[r{level}]"
    if level == 0:
        return _skip(name, "DCGM diagnostic disabled (--dcgm-diag-level 0).")
    if level not in LEVELS:
        level_for(names.ValidationTier.QUICK, level)  # raises with the valid levels
    exe = shutil.which(dcgmi)
    if exe is None:
        return _skip(
            name,
            f"DCGM diagnostic skipped: {dcgmi} is not on PATH (DCGM is not installed); {ENABLE_HINT}.",
            missing=dcgmi,
        )
    command = [exe, "diag", "-r", str(level), "-j"]
    cmd = f"{dcgmi} diag -r {level} -j"
    limit = TIMEOUT_S[level] if timeout is None else timeout
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=limit, check=False)
    except subprocess.TimeoutExpired:
        return Check(
            name=name,
            status="error",
            message=f"`{cmd}` did not finish within {limit:g} s (level {level} normally takes "
            f"{('seconds', 'about 2 minutes', 'about 30 minutes', 'hours')[level - 1]}): a GPU may hang; check "
            "`nvidia-smi` and `dmesg`, or choose a lower --dcgm-diag-level.",
            evidence={"command": command, "level": level, "timeout_s": limit},
        )
    except OSError as err:
        return Check(
            name=name,
            status="error",
            message=f"`{cmd}` could not be started ({err.strerror or err}): reinstall DCGM "
            "(gpulab_dcgm: true, roles/nvidia_dcgm).",
            evidence={"command": command, "level": level},
        )
    output = proc.stdout + ("\n" + proc.stderr if proc.stderr else "")
    try:
        diag = parse(proc.stdout)
    except DcgmOutputError as err:
        if any(word in output.lower() for word in _UNREACHABLE):
            return _skip(
                name,
                f"DCGM diagnostic skipped: the DCGM host engine is not reachable ({_first_line(output)}); start it "
                "with `systemctl start nvidia-dcgm` (gpulab_dcgm: true installs and enables it).",
                command=command,
                returncode=proc.returncode,
            )
        return Check(
            name=name,
            status="error",
            message=f"`{cmd}` exited {proc.returncode} without a DCGM result ({err}): {_first_line(output)}. Run it "
            "by hand; check the host engine (`systemctl status nvidia-dcgm`) and /var/log/nvidia-dcgm/.",
            evidence={"command": command, "level": level, "returncode": proc.returncode, "output": output[-4000:]},
        )
    return judge(diag, command, level, proc.returncode)
