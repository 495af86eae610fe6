"""gpulab's vocabulary, named once: precisions, problem sizes, validation tiers, launchers, frameworks, DDP's
communication backends, driver branches and GPU architectures.

Every layer (workloads, probes, launchers, the validation suite, the report schema) takes its names and their
meaning from here, so a precision or a tier means the same thing wherever it is read:

    from gpulab import names

    mode = names.Precision.parse("bf16")  # Precision.BF16: .tf32 True, .autocast "bfloat16", .spec_field "bf16_tflops"
    tier = names.ValidationTier.STANDARD  # .meaning: .workload_size, .probe (matmul/copy work), .allreduce_mib, ...

Precisions, tiers, DDP's backends, driver branches and architectures are value types: the records hold them, and
their one parser reads a text at the edges only (the command line, a study file, a worker's message, a report being
loaded, what a driver reports).

This module imports nothing heavy (no torch, no TensorFlow): the command line and the schema read it too.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from gpulab.errors import GpulabError, UnknownValue


# -- precision -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Arithmetic:
    """What a precision means for the numbers a run computes (Precision's properties read it)."""

    dtype: str  # the tensors' element type (torch.<dtype>, tf.<dtype>)
    tf32: bool  # fp32 matmuls and convolutions on TF32 tensor cores
    autocast: str | None  # the reduced type training runs under (torch autocast, Keras' mixed policy); None: fp32
    spec_field: str  # the GpuSpec field holding the datasheet's dense rate at this precision
    loss_scaling: bool  # gradients scaled (dynamic loss scaling) so small ones survive the reduced range
    min_compute_capability: float  # the first architecture with hardware for it (TF32, bf16: Ampere)
    summary: str


class _Word(str, enum.Enum):
    """A word of the vocabulary: a str, so that JSON, dict keys and `==` see its value, and `str()` writes it."""

    def __str__(self) -> str:
        return str(self.value)


class Precision(_Word):
    """The arithmetic a run computes in, with its meaning as properties (`.dtype`, `.tf32`, `.autocast`,
    `.spec_field`, `.loss_scaling`, `.min_compute_capability`, `.summary`). A str, so that JSON, dict keys and
    `== "bf16"` see its value; parsed here only: `Precision.parse` at the edges (the command line, study files, a
    worker's config, a report row), and every layer below takes the member."""

    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"

    @property
    def _meaning(self) -> _Arithmetic:
        return _ARITHMETIC[self]

    @property
    def dtype(self) -> str:
        return self._meaning.dtype

    @property
    def tf32(self) -> bool:
        return self._meaning.tf32

    @property
    def autocast(self) -> str | None:
        return self._meaning.autocast

    @property
    def spec_field(self) -> str:
        return self._meaning.spec_field

    @property
    def loss_scaling(self) -> bool:
        return self._meaning.loss_scaling

    @property
    def min_compute_capability(self) -> float:
        return self._meaning.min_compute_capability

    @property
    def summary(self) -> str:
        return self._meaning.summary

    @classmethod
    def parse(cls, value: object, *, training: bool = False, who: str = "") -> Precision:
        """The Precision `value` names (exactly its value; `training`: one the workloads train at), or
        errors.UnknownValue with the choices. `who` prefixes the message."""
        if isinstance(value, Precision):
            return value
        allowed = TRAINING_PRECISIONS if training else PRECISIONS
        if isinstance(value, str) and value in allowed:
            return cls(value)
        raise UnknownValue("precision", value, allowed, who=who)

    @classmethod
    def parse_reported(cls, value: object, what: str = "precision") -> ReportPrecision:
        """A report row's precision: a Precision, or NO_PRECISION for a row that is not arithmetic."""
        if isinstance(value, Precision | NoPrecision):
            return value
        if value == NO_PRECISION.value:
            return NO_PRECISION
        if isinstance(value, str) and value in PRECISIONS:
            return cls(value)
        raise UnknownValue(what, value, REPORT_PRECISIONS)


class NoPrecision(_Word):
    """A report row's precision when the row is not arithmetic (memory copies, host transfers): "none". Apart from
    Precision, so that a Precision always has a meaning (a dtype, a datasheet rate) and a row's is asked for with
    `isinstance(row.precision, Precision)`."""

    NONE = "none"


_ARITHMETIC: dict[Precision, _Arithmetic] = {
    Precision.FP32: _Arithmetic("float32", False, None, "fp32_tflops", False, 0.0, "IEEE fp32 (TF32 off)"),
    Precision.TF32: _Arithmetic("float32", True, None, "tf32_tflops", False, 8.0, "fp32 with TF32 tensor cores"),
    Precision.BF16: _Arithmetic(
        "bfloat16", True, "bfloat16", "bf16_tflops", False, 8.0, "bf16 autocast (fp32 master weights)"
    ),
    # fp16 keeps fp32 matmuls IEEE (no TF32 before Ampere, where it would run); fp16 range needs loss scaling
    Precision.FP16: _Arithmetic(
        "float16", False, "float16", "fp16_tflops", True, 5.3, "fp16 autocast with loss scaling"
    ),
}
ReportPrecision: TypeAlias = Precision | NoPrecision  # what a report row's precision holds
PRECISIONS: tuple[str, ...] = tuple(p.value for p in Precision)
TRAINING_PRECISIONS: tuple[str, ...] = PRECISIONS
NO_PRECISION = NoPrecision.NONE  # a result that is not arithmetic (memory copies, host transfers)
REPORT_PRECISIONS: tuple[str, ...] = (*PRECISIONS, NO_PRECISION.value)
precision = Precision.parse  # the parser under the vocabulary's module-level spelling: names.precision("bf16")


# -- problem sizes and tiers ---------------------------------------------------------------------------------
# Workload problem sizes: "tiny" keeps CI on two CPU cores in seconds; "quick"/"standard" are the validation
# tiers' sizes; "full" is the size the original studies ran (1000 style-transfer iterations at 512 px, epochs).
SIZES: tuple[str, ...] = ("tiny", "quick", "standard", "full")


def size(name: str, who: str = "") -> str:
    if name not in SIZES:
        raise UnknownValue("size", name, SIZES, who=who)
    return name


@dataclass(frozen=True)
class ProbeSize:
    """How much work one probe does."""

    matmul_n: int = 8192
    matmul_iters: int = 10
    copy_mib: int = 1024
    copy_iters: int = 10
    repeats: int = 5  # timed batches: the figure's windows (5 give a 90 % interval of the median)

    def again(self, factor: int = 2) -> ProbeSize:
        """The same probe with `factor` times the timed batches (a re-measure: more windows)."""
        return dataclasses.replace(self, repeats=self.repeats * factor)


class ValidationTier(_Word):
    """A validation tier's name (`pytest validate/ --tier NAME`), its meaning `.meaning` (a Tier). A str, so that
    JSON and `== "quick"` see its value; parsed here only: `ValidationTier.parse` at the edges (the suite's --tier
    option), `parse_reported` for a report's tier, which may also be a ReportOrigin."""

    QUICK = "quick"
    STANDARD = "standard"
    FULL = "full"

    @property
    def meaning(self) -> Tier:
        return TIER_TABLE[self]

    @classmethod
    def parse(cls, value: object, what: str = "tier") -> ValidationTier:
        """The tier `value` names (exactly its value), or errors.UnknownValue with the choices."""
        if isinstance(value, ValidationTier):
            return value
        if isinstance(value, str) and value in TIERS:
            return cls(value)
        raise UnknownValue(what, value, TIERS)

    @classmethod
    def parse_reported(cls, value: object, what: str = "tier") -> ReportTier:
        """A report's tier: a validation tier, or the ReportOrigin of a report no validation run wrote."""
        if isinstance(value, ValidationTier | ReportOrigin):
            return value
        if isinstance(value, str) and value in REPORT_TIERS:
            return ReportOrigin(value) if value in ORIGIN_TIERS else cls(value)
        raise UnknownValue(what, value, REPORT_TIERS)


class ReportOrigin(_Word):
    """A report's tier when no validation tier wrote it: `gpulab run` / `sweep` / `study` ("run"), or a study's
    published figures transcribed with their provenance ("published", studies/baselines/)."""

    RUN = "run"
    PUBLISHED = "published"


@dataclass(frozen=True)
class Tier:
    """How deep a validation run goes (`pytest validate/ --tier NAME`)."""

    name: ValidationTier
    summary: str
    workload_size: str | None  # the training workloads' size; None: this tier trains nothing
    probe: ProbeSize  # the GPU matmul and copy probes
    allreduce_mib: int  # the all-reduce probe's buffer
    nccl_tests_size: str  # nccl-tests' all_reduce_perf -b/-e
    dcgm_level: int  # `dcgmi diag -r LEVEL`
    # Rows measured for comparison only (DataParallel's scaling): no verdict of theirs, so not in a tier kept short.
    comparison_rows: bool = False


_TIERS = (
    Tier(ValidationTier.QUICK, "seconds: probes and health, no training", None, ProbeSize(), 128, "128M", 1),
    Tier(
        ValidationTier.STANDARD,
        "minutes: probes, speedups and scaling at the standard size",
        "standard",
        ProbeSize(matmul_iters=25, copy_mib=2048, copy_iters=10, repeats=8),
        256,
        "256M",
        2,
    ),
    Tier(
        ValidationTier.FULL,
        "about an hour: the workloads at the studies' size, DCGM's long diagnostic",
        "full",
        ProbeSize(matmul_iters=25, copy_mib=2048, copy_iters=10, repeats=8),
        256,
        "256M",
        3,
        comparison_rows=True,
    ),
)
TIER_TABLE: dict[ValidationTier, Tier] = {t.name: t for t in _TIERS}
TIERS: tuple[str, ...] = tuple(t.value for t in ValidationTier)
DEFAULT_TIER = ValidationTier.QUICK
RUN_REPORT_TIER = ReportOrigin.RUN  # a report that `gpulab run` / `gpulab sweep` / `gpulab study` started
PUBLISHED_TIER = ReportOrigin.PUBLISHED  # a study's published figures, transcribed with their provenance
ORIGIN_TIERS: tuple[str, ...] = tuple(o.value for o in ReportOrigin)
REPORT_TIERS: tuple[str, ...] = (*TIERS, *ORIGIN_TIERS)
ReportTier: TypeAlias = ValidationTier | ReportOrigin  # what a report's tier holds


def tier(name: object) -> Tier:
    """The meaning of the validation tier `name` names (ValidationTier.parse, then its Tier)."""
    return ValidationTier.parse(name).meaning


# -- communication backends ----------------------------------------------------------------------------------
class CommBackend(_Word):
    """The process group's backend under torch.distributed (DDP, the all-reduce probe): NCCL between GPUs, gloo
    between CPU processes. Not a framework's backend (gpulab.launch.backends). A str, so that JSON writes its value;
    parsed here only: `CommBackend.parse` at the edges (the command line, a worker's message, a report)."""

    NCCL = "nccl"
    GLOO = "gloo"

    @classmethod
    def parse(cls, value: object, what: str = "DDP backend") -> CommBackend:
        """The backend `value` names (exactly its value, as `--backend` takes it), or a GpulabError naming `what`,
        the value and the choices."""
        if isinstance(value, CommBackend):
            return value
        if isinstance(value, str) and value in COMM_BACKENDS:
            return cls(value)
        raise UnknownValue(what, value, COMM_BACKENDS, labels=("nccl (GPUs)", "gloo (CPU processes)"))

    @classmethod
    def choose(cls, asked: CommBackend | None, *, gpus: bool) -> CommBackend:
        """The backend `asked` for; when none was, NCCL where there are GPUs, else gloo."""
        if asked is not None:
            return asked
        return cls.NCCL if gpus else cls.GLOO


COMM_BACKENDS: tuple[str, ...] = tuple(b.value for b in CommBackend)


# -- launchers and frameworks --------------------------------------------------------------------------------
class Launcher(_Word):
    """How a run's processes start and use their devices: `cpu` (threads), `gpu` (one GPU), `ddp` (one process
    per device in a torch.distributed process group, as torchrun starts them: DDP and the all-reduce probes),
    `dataparallel` (one process over several GPUs), `mirrored` (TensorFlow's MirroredStrategy) and `sweep`
    (independent runs, one per device). A str, so that JSON, dict keys and `== "ddp"` see its value; parsed here
    only: `Launcher.parse` at the edges (`gpulab run --launcher`, a study file and its database's rows, a report
    row, a child process's Result, the shipped known-good table)."""

    CPU = "cpu"
    GPU = "gpu"
    DDP = "ddp"
    DATAPARALLEL = "dataparallel"
    MIRRORED = "mirrored"
    SWEEP = "sweep"

    @property
    def one_device(self) -> bool:
        """Runs on one device (a GPU, or a CPU's threads)."""
        return self in (Launcher.CPU, Launcher.GPU)

    @property
    def multi_gpu(self) -> bool:
        """Spreads a run, or runs, over several devices."""
        return not self.one_device

    @property
    def runs(self) -> bool:
        """Taken by `gpulab run --launcher` (a sweep is `gpulab sweep`)."""
        return self != Launcher.SWEEP

    @classmethod
    def parse(cls, value: object, what: str = "launcher", *, run: bool = False) -> Launcher:
        """The launcher `value` names (exactly its value; `run`: one `gpulab run` takes), or errors.UnknownValue
        naming `what`, the value and the choices."""
        if isinstance(value, str) and value in (RUN_LAUNCHERS if run else LAUNCHERS):
            return value if isinstance(value, Launcher) else cls(value)
        raise UnknownValue(what, value, RUN_LAUNCHERS if run else LAUNCHERS)


# The launchers' values, as the parser's choices and the schema's enum list them
LAUNCHERS: tuple[str, ...] = tuple(launcher.value for launcher in Launcher)
RUN_LAUNCHERS: tuple[str, ...] = tuple(launcher.value for launcher in Launcher if launcher.runs)  # `gpulab run`
# Reports before /5 named the all-reduce probes' launcher by their transport; read as Launcher.DDP with it as the
# row's comm_backend (gpulab.records.report), never written again.
OLD_PROBE_LAUNCHERS: tuple[str, ...] = COMM_BACKENDS
REPORT_LAUNCHERS: tuple[str, ...] = (*LAUNCHERS, *OLD_PROBE_LAUNCHERS)  # what a result row of any version may name

FRAMEWORK_PATTERN = r"^[a-z][a-z0-9_-]*$"  # what a report accepts (nccl-tests' probe results included)


class Framework(str):
    """A framework's name: torch, tensorflow, one a launch backend adds (gpulab.launch.backends), or a probe
    tool's (nccl-tests). An open set, so a str checked against FRAMEWORK_PATTERN rather than an enum; JSON, dict
    keys and `==` see its text. Parsed here only: `Framework.parse` at the edges (`--framework`, the backends'
    registry, a study file, a report row and a child process's Result)."""

    __slots__ = ()
    TORCH: ClassVar[Framework]
    TENSORFLOW: ClassVar[Framework]
    NCCL_TESTS: ClassVar[Framework]

    @classmethod
    def parse(cls, value: object, what: str = "framework") -> Framework:
        """`value` as a Framework when it is a framework's name (FRAMEWORK_PATTERN), else a GpulabError naming
        `what`, the value and how a name is written."""
        if isinstance(value, Framework):
            return value
        if isinstance(value, str) and re.fullmatch(FRAMEWORK_PATTERN, value):
            return cls(value)
        raise GpulabError(
            f"{what} {value!r} is not a framework's name: write it in lower case, a letter first, then letters, "
            f"digits, '-' or '_' ({FRAMEWORK_PATTERN}), e.g. torch, tensorflow or nccl-tests"
        )


Framework.TORCH = Framework("torch")
Framework.TENSORFLOW = Framework("tensorflow")
Framework.NCCL_TESTS = Framework("nccl-tests")  # NVIDIA's nccl-tests: a probe tool's rows, no launch backend
# Frameworks the launchers know by default; a backend module may add its own (gpulab.launch.backends).
FRAMEWORKS: tuple[Framework, ...] = (Framework.TORCH, Framework.TENSORFLOW)
DEFAULT_FRAMEWORK = Framework.TORCH

BATCH_POLICIES: tuple[str, ...] = ("per_device", "global")

# Optimisers a run may choose instead of the workload's own (`gpulab run --optimizer`), with their default rates.
OPTIMIZERS: tuple[str, ...] = ("adam", "sgd")
OPTIMIZER_LR: dict[str, float] = {"adam": 1e-3, "sgd": 0.01}


def optimizer(name: str, who: str = "") -> str:
    """`name` when it is one of OPTIMIZERS, else UnknownValue naming `who` (the option or workload that asked)."""
    if name not in OPTIMIZERS:
        raise UnknownValue("optimizer", name, OPTIMIZERS, who=who)
    return name


# -- driver branches -----------------------------------------------------------------------------------------
_BRANCH_SPELLING = re.compile(r"[rR]?(?P<version>(?P<branch>[0-9]{3,4})(?:\.[0-9]+)*)")


@dataclass(frozen=True, order=True)
class DriverBranch:
    """An NVIDIA driver branch: a number (580). "R580", "580", 580 and a driver version "580.95.05" are its
    spellings; `str()` writes the R form the documentation uses, `number` is what package names and comparisons
    take. Parsed here only: `DriverBranch.parse` at the edges (inventories, spec files, records, filters)."""

    number: int

    def __str__(self) -> str:
        return f"R{self.number}"

    @classmethod
    def parse(cls, value: object, what: str = "driver branch") -> DriverBranch:
        """The branch `value` names, or a GpulabError naming `what` and the spellings it takes."""
        if isinstance(value, DriverBranch):
            return value
        return cls(int(_driver_spelling(value, what)["branch"]))


def driver_version(value: object, what: str = "driver version") -> str:
    """A driver request without its R: "580" for R580, "580.95.05" as it is (what apt pins and runfiles name)."""
    return _driver_spelling(value, what)["version"]


def _driver_spelling(value: object, what: str) -> re.Match[str]:
    text = str(value) if isinstance(value, int | str) and not isinstance(value, bool) else ""
    match = _BRANCH_SPELLING.fullmatch(text)
    if match is None:
        raise GpulabError(f"{what} {value!r} is not a driver branch or version; write e.g. R580, 580 or 580.95.05.")
    return match


# -- GPU architectures ---------------------------------------------------------------------------------------
class Architecture(_Word):
    """A GPU architecture the compatibility matrix lists, its value the matrix's name. Ordered by age, oldest first
    (`arch >= Architecture.AMPERE`); `.driver_name` is how NVML and nvidia-smi name it ("Ada Lovelace"). A str, so
    that JSON and dict keys see the matrix's name; parsed here only: `Architecture.parse` where the matrix or a
    person names one (matrix.yml, `--precision-plan`, the pre-flight's target stack), `parse_reported` and
    `from_nvml` where a driver or a recorded fingerprint does, which may name one newer than the matrix."""

    FERMI = "Fermi"
    KEPLER = "Kepler"
    MAXWELL = "Maxwell"
    PASCAL = "Pascal"
    VOLTA = "Volta"
    TURING = "Turing"
    AMPERE = "Ampere"
    ADA = "Ada"
    HOPPER = "Hopper"
    BLACKWELL = "Blackwell"

    @property
    def driver_name(self) -> str:
        """The name NVML and nvidia-smi's <product_architecture> report: "Ada Lovelace" for Ada, else the value."""
        return _DRIVER_NAMES.get(self, self.value)

    def _age(self, other: object) -> tuple[int, int]:
        if not isinstance(other, Architecture):  # a str would compare alphabetically: parse it first
            raise TypeError(f"an Architecture is ordered against another only, not {other!r}; parse it first")
        return _AGE[self], _AGE[other]

    def __lt__(self, other: object) -> bool:
        mine, theirs = self._age(other)
        return mine < theirs

    def __le__(self, other: object) -> bool:
        mine, theirs = self._age(other)
        return mine <= theirs

    def __gt__(self, other: object) -> bool:
        mine, theirs = self._age(other)
        return mine > theirs

    def __ge__(self, other: object) -> bool:
        mine, theirs = self._age(other)
        return mine >= theirs

    @classmethod
    def parse(cls, value: object, what: str = "architecture", *, who: str = "") -> Architecture:
        """The architecture `value` names as the matrix or a driver writes it, in any case ("Ada Lovelace", "ada",
        "Hopper"), or errors.UnknownValue naming `what` and the choices. `who` prefixes the message."""
        if isinstance(value, Architecture):
            return value
        found = _spelled(value)
        if found is None:
            raise UnknownValue(what, value, ARCHITECTURES, who=who)
        return found

    @classmethod
    def parse_reported(cls, value: object, what: str = "architecture") -> ReportedArchitecture:
        """An architecture as a driver or a recorded fingerprint names it: the member for a name the matrix's
        architectures go by, else an UnlistedArchitecture holding the text (one newer than the matrix, "Rubin").
        A value that is no name at all (not text, or blank) is errors.UnknownValue."""
        if isinstance(value, Architecture | UnlistedArchitecture):
            return value
        if not isinstance(value, str) or not value.strip():
            raise UnknownValue(what, value, ARCHITECTURES)
        found = _spelled(value)
        return found if found is not None else UnlistedArchitecture(value)

    @classmethod
    def from_nvml(cls, code: object) -> ReportedArchitecture | None:
        """nvmlDeviceGetArchitecture's code (nvml.h's nvmlDeviceArchitecture_t): the architecture, Rubin's 13 an
        UnlistedArchitecture; None for a code nvml.h did not name when this was written."""
        return _NVML_CODES.get(code) if isinstance(code, int) and not isinstance(code, bool) else None


@dataclass(frozen=True)
class UnlistedArchitecture:
    """An architecture a driver reports that the matrix does not list, held as the driver's text: one newer than
    the matrix (NVML's code 13, "Rubin") or a name a later driver brings. Not an Architecture: it has no age among
    them and the matrix says nothing of it, so nothing is judged by it (a health check notes it as not judged), and
    a fingerprint writes it back as it was read."""

    name: str

    def __str__(self) -> str:
        return self.name

    @property
    def driver_name(self) -> str:
        return self.name


ReportedArchitecture: TypeAlias = Architecture | UnlistedArchitecture  # what a GPU's reported architecture holds
ARCHITECTURES: tuple[str, ...] = tuple(a.value for a in Architecture)  # oldest first, as the matrix names them
_AGE: dict[Architecture, int] = {a: age for age, a in enumerate(Architecture)}
_DRIVER_NAMES: dict[Architecture, str] = {Architecture.ADA: "Ada Lovelace"}
_ARCHITECTURE_SPELLINGS: dict[str, Architecture] = {
    **{a.value.lower(): a for a in Architecture},
    **{a.driver_name.lower(): a for a in Architecture},
}


def _spelled(value: object) -> Architecture | None:
    """The architecture a text spells as the matrix or a driver does, in any case and spacing; None for another."""
    return _ARCHITECTURE_SPELLINGS.get(" ".join(value.lower().split())) if isinstance(value, str) else None


# nvmlDeviceArchitecture_t (nvml.h) -> the architecture; 13 (Rubin) is newer than the matrix.
_NVML_CODES: dict[int, ReportedArchitecture] = {
    2: Architecture.KEPLER,
    3: Architecture.MAXWELL,
    4: Architecture.PASCAL,
    5: Architecture.VOLTA,
    6: Architecture.TURING,
    7: Architecture.AMPERE,
    8: Architecture.ADA,
    9: Architecture.HOPPER,
    10: Architecture.BLACKWELL,
    13: UnlistedArchitecture("Rubin"),
}
