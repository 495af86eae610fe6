"""A study file: one workload, its fixed parameters, the parameters varied, repetitions and seeds, where to run.

    study: neural-style                 # name (letters, digits, - _ .)
    title: The neural-style parameter study
    workload: style_transfer            # gpulab.workloads name
    framework: torch
    size: full                          # tiny | quick | standard | full
    precision: plan                     # plan: what the precision plan picks for the GPU (fp32 on CPU workers)
    fixed: {width: 512, iterations: 1000, content_weight: 1, learning_rate: 10, ...}
    vary:
      mode: star                        # star: one at a time around `fixed` | grid: every combination | zip: in step
      params: {learning_rate: [1, 5, 20], tv_weight: [0, 10, 1000]}
    repeat: 1                           # runs of each parameter set, each with its own seed
    seed: 0                             # run k of the study gets seed + k
    epochs: {epochs: 5, val_fraction: 0.1, optimizer: adam, target_accuracy: 0.8}   # train to a result
    launcher: worker                    # worker: each run on one worker's device; dataparallel | ddp | mirrored:
    gpus: all                           #   each run takes the machine's GPUs (`gpus`) through `gpulab run`
    workers: all                        # one worker per GPU (or N of them); CPU workers where there is no GPU
    per_gpu: auto                       # runs at once on each GPU: auto (sized from the first runs) or N
    batch_runs: 1                       # runs optimised together as one batch: 1, N or auto (gpulab.studies.batching)
    threads: 1                          # CPU threads per CPU worker
    baseline: neural-style-2018         # a published baseline shipped with gpulab (studies/baselines/)
    variants:                           # named overrides, e.g. a tiny one for CI: --variant tiny
      tiny: {size: tiny, fixed: {width: 32, iterations: 5}}

A varied parameter may be a workload parameter, a run field (precision, channels_last, batch, steps) or, with a
whole-machine launcher, `launcher` and `gpus`. Every problem is reported at once, one per line, naming the key.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpulab import names
from gpulab.errors import GpulabError, UnknownValue, yaml_problem
from gpulab.paths import load_yaml, read_input_text, shown
from gpulab.workloads import data as data_names

MAX_STUDY_BYTES = 1 << 20
MAX_RUNS = 20_000  # a study's runs (sets × repeat): beyond, a mistake in the file, refused before any work
MACHINE_PARAMS = ("launcher", "gpus")  # varied with a whole-machine launcher
# scikit-learn's digits, torchvision's data sets (fetched on first use), a small set made in the study directory
NAMED_DATA = (*data_names.NAMED, "generated")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
MODES = ("star", "grid", "zip")
WORKER = "worker"  # a run on one worker's device (gpu, or cpu on a worker without one)
MACHINE_LAUNCHERS = names.RUN_LAUNCHERS  # through `gpulab run`, one run at a time
RUN_FIELDS = ("precision", "channels_last", "batch", "steps", "warmup", "num_workers")
EPOCH_KEYS = ("epochs", "val_fraction", "optimizer", "target_accuracy", "weights")
TOP_KEYS = (
    "study",
    "title",
    "source",
    "workload",
    "framework",
    "size",
    "precision",
    "channels_last",
    "batch",
    "steps",
    "warmup",
    "data",
    "fixed",
    "vary",
    "repeat",
    "seed",
    "epochs",
    "launcher",
    "gpus",
    "workers",
    "per_gpu",
    "batch_runs",
    "threads",
    "baseline",
    "variants",
)
HINT = "see docs/studies.md"


@dataclass(frozen=True)
class Vary:
    mode: str = "star"
    params: dict[str, list[Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Study:
    """A checked study file (after its variant was applied)."""

    name: str
    workload: str
    framework: names.Framework = names.DEFAULT_FRAMEWORK
    title: str = ""
    source: str = ""
    size: str = "standard"
    precision: str = "plan"
    run: dict[str, Any] = field(default_factory=dict)  # RunConfig fields: channels_last, batch, steps, warmup...
    data: Path | None = None
    fixed: dict[str, Any] = field(default_factory=dict)
    vary: Vary = field(default_factory=Vary)
    repeat: int = 1
    seed: int = 0
    epochs: dict[str, Any] | None = None
    launcher: str = WORKER
    gpus: int | str = 1
    workers: int | str = "all"
    per_gpu: int | str = "auto"  # runs at once per GPU (gpulab.studies.packing); the study file's key, study.json's
    batch_runs: int | str = 1  # runs optimised together as one batch (gpulab.studies.batching)
    threads: int = 1
    baseline: str | None = None
    variant: str | None = None
    path: Path | None = None
    document: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the mapping, variant applied

    @property
    def whole_machine(self) -> bool:
        """Runs that span the machine's GPUs go one after another through `gpulab run`, not to the workers."""
        return self.launcher != WORKER or "launcher" in self.vary.params or "gpus" in self.vary.params


def load_study(path: Path, variant: str | None = None) -> Study:
    """Read and check a study file: a regular UTF-8 file holding one YAML mapping."""
    where = f"study file {shown(Path(path))}"
    text = read_input_text(path, "study file", f"give the path of a study file (YAML, {HINT})", limit=MAX_STUDY_BYTES)
    try:
        data = load_yaml(text)  # a SafeLoader with limits that refuses repeated keys
    except yaml.YAMLError as err:
        raise GpulabError(f"{where} is not valid YAML: {yaml_problem(err)}; fix it ({HINT})") from None
    except RecursionError:
        raise GpulabError(f"{where} is nested too deeply to be a study file; {HINT}") from None
    return study_from_dict(data, where=where, variant=variant, base_dir=Path(path).resolve().parent, path=Path(path))


def _identity(data: dict[Any, Any], problems: list[str]) -> tuple[Any, Any, Any, Any, Any]:
    """(name, workload, framework, size, precision) as the study names them; what is wrong goes to `problems`."""
    unknown = sorted(str(k) for k in data if k not in TOP_KEYS)
    if unknown:
        problems.append(f"unknown key(s) {', '.join(unknown)}; known: {', '.join(TOP_KEYS)}")
    name = data.get("study")
    if not isinstance(name, str) or not NAME.match(name):
        problems.append(f"study: {name!r} is not a name (letters, digits, - _ . up to 63, first a letter or digit)")
    workload = data.get("workload")
    if not isinstance(workload, str) or not workload:
        from gpulab.workloads import REGISTRY

        problems.append(f"workload: missing; name one ({', '.join(REGISTRY)})")
    framework = data.get("framework", names.DEFAULT_FRAMEWORK)
    if framework not in names.FRAMEWORKS:
        problems.append(f"framework: {framework!r} is not one of {', '.join(names.FRAMEWORKS)}")
    size = data.get("size", "standard")
    if size not in names.SIZES:
        problems.append(f"size: {size!r} is not one of {', '.join(names.SIZES)}")
    precision = data.get("precision", "plan")
    if precision != "plan":
        try:
            precision = names.Precision.parse(precision, training=True).value  # a pset's column holds the text
        except UnknownValue:
            problems.append(f"precision: {precision!r} is not plan or one of {', '.join(names.TRAINING_PRECISIONS)}")
    return name, workload, framework, size, precision


def _raise_problems(problems: list[str], where: str, variant: str | None) -> None:
    """GpulabError listing every problem found in a study, when there is one."""
    if problems:
        head = f"{where}" + (f" (variant {variant})" if variant else "")
        if len(problems) == 1:
            raise GpulabError(f"{head}: {problems[0]}; {HINT}")
        raise GpulabError(f"{head} has {len(problems)} problems ({HINT}):\n  " + "\n  ".join(problems))


def study_from_dict(
    data: Any,
    *,
    where: str = "study",
    variant: str | None = None,
    base_dir: Path | None = None,
    path: Path | None = None,
) -> Study:
    if not isinstance(data, dict):
        raise GpulabError(f"{where} is not a mapping of keys (study, workload, fixed, vary, ...); {HINT}")
    data = _apply_variant(data, variant, where)
    problems: list[str] = []
    name, workload, framework, size, precision = _identity(data, problems)
    fixed = data.get("fixed") or {}
    if not isinstance(fixed, dict):
        problems.append("fixed: not a mapping of parameter: value")
        fixed = {}
    vary = _vary(data.get("vary"), problems)
    run = {k: data[k] for k in RUN_FIELDS if k in data and k != "precision"}
    epochs = _epochs(data.get("epochs"), problems)
    launcher = data.get("launcher", WORKER)
    if launcher != WORKER and launcher not in MACHINE_LAUNCHERS:
        problems.append(f"launcher: {launcher!r} is not {WORKER} or one of {', '.join(MACHINE_LAUNCHERS)}")
    gpus = _count(data.get("gpus", 1), "gpus", problems)
    workers = _count(data.get("workers", "all"), "workers", problems)
    runs_per_gpu = _runs_per_gpu(data.get("per_gpu", "auto"), problems)
    batch_runs = _batch_runs(data.get("batch_runs", 1), problems)
    repeat = _positive(data.get("repeat", 1), "repeat", problems)
    threads = _positive(data.get("threads", 1), "threads", problems)
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        problems.append(f"seed: {seed!r} is not an integer ≥ 0")
        seed = 0
    for key in ("title", "source", "baseline"):
        if key in data and data[key] is not None and not isinstance(data[key], str):
            problems.append(f"{key}: {data[key]!r} is not text")
    clash = sorted(set(vary.params) & {"seed", "repeat", "workload", "framework", "size"})
    if clash:
        problems.append(f"vary: {', '.join(clash)} cannot be varied (use repeat and seed for repetitions)")
    if ("launcher" in vary.params or "gpus" in vary.params) and launcher == WORKER:
        problems.append("vary: launcher/gpus are varied, so set launcher: to the first one's launcher (e.g. gpu)")
    data_path = _data_path(data.get("data"), base_dir, problems)
    if isinstance(workload, str) and workload:
        _check_params(workload, fixed, vary, problems)
    _check_size(vary, data.get("repeat", 1), problems)
    _raise_problems(problems, where, variant)
    return Study(
        name=str(name),
        workload=str(workload),
        framework=names.Framework.parse(framework),
        title=str(data.get("title") or ""),
        source=str(data.get("source") or ""),
        size=str(size),
        precision=str(precision),
        run=run,
        data=data_path,
        fixed=dict(fixed),
        vary=vary,
        repeat=int(repeat),
        seed=int(seed),
        epochs=epochs,
        launcher=str(launcher),
        gpus=gpus,
        workers=workers,
        per_gpu=runs_per_gpu,
        batch_runs=batch_runs,
        threads=int(threads),
        baseline=data.get("baseline"),
        variant=variant,
        path=path,
        document={**data, **({"data": str(data_path)} if data_path is not None else {})},
    )


def _workload_params(workload: str) -> set[str] | None:
    """The parameters the workload takes (its DEFAULTS); None for a workload gpulab does not have."""
    from gpulab.workloads import REGISTRY

    declared = REGISTRY.get(workload)
    return None if declared is None else set(declared.params)


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def _check_params(workload: str, fixed: dict[str, Any], vary: Vary, problems: list[str]) -> None:
    """Every parameter one the workload takes (or a run field), every value a finite one, no `output`."""
    from gpulab.workloads import REGISTRY

    known = _workload_params(workload)
    if known is None:
        problems.append(f"workload: {workload!r} is not one of {', '.join(REGISTRY)}")
        return
    allowed = known | set(RUN_FIELDS) | set(MACHINE_PARAMS)
    for where, params in (("fixed", fixed), ("vary.params", vary.params)):
        unknown = sorted(str(k) for k in params if k not in allowed)
        if unknown:
            named = ", ".join(sorted(known - {"output"}))
            problems.append(f"{where}: unknown parameter(s) {', '.join(unknown)} for {workload}; known: {named}")
        if "output" in params:
            problems.append(
                f"{where}: output is the study's to choose (each run's image goes in its run folder); drop it"
            )
        bad = sorted(str(k) for k, v in params.items() if not _finite(v))
        if bad:
            problems.append(f"{where}: {', '.join(bad)}: NaN or infinity is not a parameter value; give a number")


def _check_size(vary: Vary, repeat: Any, problems: list[str]) -> None:
    lengths = [len(v) for v in vary.params.values()]
    if not lengths:
        sets = 1
    elif vary.mode == "grid":
        sets = math.prod(lengths)
    elif vary.mode == "star":
        sets = sum(lengths)
    else:
        sets = max(lengths)
    runs = sets * (repeat if isinstance(repeat, int) and not isinstance(repeat, bool) and repeat > 0 else 1)
    if runs > MAX_RUNS:
        problems.append(f"the study has {runs} runs, more than {MAX_RUNS}; vary fewer values (or split the study)")


def _apply_variant(data: dict[str, Any], variant: str | None, where: str) -> dict[str, Any]:
    """The file with `variants[variant]` laid over it (mappings merged one level deep: fixed, vary, epochs)."""
    variants = data.get("variants") or {}
    if not isinstance(variants, dict):
        raise GpulabError(f"{where}: variants: not a mapping of name: overrides; {HINT}")
    merged = {k: copy.deepcopy(v) for k, v in data.items() if k != "variants"}
    if variant is None:
        return merged
    if variant not in variants:
        known = ", ".join(map(str, variants)) or "none"
        raise GpulabError(f"{where} has no variant {variant!r}; its variants: {known}")
    over = variants[variant] or {}
    if not isinstance(over, dict):
        raise GpulabError(f"{where}: variants.{variant}: not a mapping of overrides; {HINT}")
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _vary(raw: Any, problems: list[str]) -> Vary:
    if raw is None:
        return Vary()
    if not isinstance(raw, dict):
        problems.append("vary: not a mapping (mode: star|grid|zip, params: {name: [values]})")
        return Vary()
    extra = sorted(set(map(str, raw)) - {"mode", "params"})
    if extra:
        problems.append(f"vary: unknown key(s) {', '.join(extra)}; known: mode, params")
    mode = raw.get("mode", "star")
    if mode not in MODES:
        problems.append(f"vary.mode: {mode!r} is not one of {', '.join(MODES)}")
        mode = "star"
    params = raw.get("params") or {}
    if not isinstance(params, dict):
        problems.append("vary.params: not a mapping of name: [values]")
        return Vary(mode)
    checked: dict[str, list[Any]] = {}
    for key, values in params.items():
        if isinstance(values, dict):
            values = _spaced(str(key), values, problems)
        if not isinstance(values, list) or not values:
            problems.append(f"vary.params.{key}: not a non-empty list of values, nor {{linspace|logspace: [a, b, n]}}")
            continue
        checked[str(key)] = list(values)
    if mode == "zip" and len({len(v) for v in checked.values()}) > 1:
        lengths = ", ".join(f"{k} {len(v)}" for k, v in checked.items())
        problems.append(f"vary: zip takes lists of one length; these have {lengths}")
    return Vary(str(mode), checked)


def _spaced(key: str, spec: dict[str, Any], problems: list[str]) -> list[float] | None:
    """{linspace: [a, b, n]} or {logspace: [a, b, n]} (a and b the end values, not exponents), 6 significant digits."""
    if len(spec) != 1 or next(iter(spec)) not in ("linspace", "logspace"):
        problems.append(f"vary.params.{key}: a mapping must be {{linspace: [a, b, n]}} or {{logspace: [a, b, n]}}")
        return None
    kind, args = next(iter(spec.items()))
    ok = isinstance(args, list) and len(args) == 3 and all(isinstance(v, (int, float)) for v in args)
    ok = ok and not any(isinstance(v, bool) for v in args) and isinstance(args[2], int) and args[2] >= 2
    if ok and kind == "logspace":
        ok = args[0] > 0 and args[1] > 0
    if not ok:
        problems.append(f"vary.params.{key}.{kind}: expected [first, last, count ≥ 2] (positive ends for logspace)")
        return None
    if args[2] > MAX_RUNS:
        problems.append(f"vary.params.{key}.{kind}: {args[2]} values, more than a study's {MAX_RUNS} runs")
        return None
    a, b, n = float(args[0]), float(args[1]), int(args[2])
    if kind == "linspace":
        values = [a + (b - a) * k / (n - 1) for k in range(n)]
    else:
        values = [a * (b / a) ** (k / (n - 1)) for k in range(n)]
    return [float(f"{v:.6g}") for v in values]


def _epochs(raw: Any, problems: list[str]) -> dict[str, Any] | None:
    if raw is None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = {"epochs": raw}
    if not isinstance(raw, dict):
        problems.append("epochs: not a number of epochs or a mapping (epochs, val_fraction, optimizer, ...)")
        return None
    extra = sorted(set(map(str, raw)) - set(EPOCH_KEYS))
    if extra:
        problems.append(f"epochs: unknown key(s) {', '.join(extra)}; known: {', '.join(EPOCH_KEYS)}")
    count = raw.get("epochs")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        problems.append(f"epochs.epochs: {count!r} is not a whole number ≥ 1")
    return dict(raw)


def _count(value: Any, key: str, problems: list[str]) -> int | str:
    if value == "all":
        return "all"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(f"{key}: {value!r} is not all or a whole number ≥ 1")
        return 1
    return int(value)


def _runs_per_gpu(value: Any, problems: list[str]) -> int | str:
    from gpulab.studies.packing import AUTO, runs_per_gpu_value

    return _checked(runs_per_gpu_value, value, problems, AUTO)


def _batch_runs(value: Any, problems: list[str]) -> int | str:
    from gpulab.studies.batching import batch_runs_value

    return _checked(batch_runs_value, value, problems, 1)


def _checked(parse: Callable[[Any], int | str], value: Any, problems: list[str], fallback: int | str) -> int | str:
    """`parse(value)`, or `fallback` with its refusal added to `problems` (every problem is reported at once)."""
    try:
        return parse(value)
    except GpulabError as err:
        problems.append(str(err))
        return fallback


def _positive(value: Any, key: str, problems: list[str]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(f"{key}: {value!r} is not a whole number ≥ 1")
        return 1
    return int(value)


def _data_path(value: Any, base_dir: Path | None, problems: list[str]) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        problems.append(f"data: {value!r} is not a path")
        return None
    if value in NAMED_DATA:
        return Path(value)
    path = Path(value).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return path


def with_overrides(study: Study, params: dict[str, Any], data: Path | None) -> Study:
    """The study with fixed parameters set (--param) and its data (--data) given on the command line; the
    recorded document changes too, so `resume` runs the same study."""
    import dataclasses

    if not params and data is None:
        return study
    problems: list[str] = []
    _check_params(study.workload, params, Vary(), problems)
    if problems:
        raise GpulabError("--param " + problems[0].removeprefix("fixed: ") + f"; {HINT}")
    varied = sorted(set(params) & set(study.vary.params))
    if varied:
        raise GpulabError(f"--param {', '.join(varied)}: the study varies it; set other parameters, or edit the file")
    document = dict(study.document)
    fixed = {**study.fixed, **params}
    document["fixed"] = fixed
    if data is not None:
        document["data"] = str(data) if str(data) in NAMED_DATA else str(Path(data).resolve())
    return dataclasses.replace(
        study, fixed=fixed, data=Path(document["data"]) if "data" in document else None, document=document
    )
