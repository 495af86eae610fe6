"""Which framework wheels a node gets: the compatibility matrix applied to the node's GPUs, driver and Python.

`plan_frameworks` turns the matrix's answers into pip requirement lines; the collection's `framework_bundle`
action packs them with gpulab's wheel for the node. The matrix names releases (torch 2.13, build cu126);
the exact patch comes from constraints.txt when it pins the same release, so nodes get what the project tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpulab.compat import advice, rules, versions
from gpulab.compat.check import Stack, check_stack
from gpulab.compat.data import GpuSpec, load_matrix
from gpulab.compat.gpus import gpu_by_pci_id, normalize_pci_id
from gpulab.errors import GpulabError

FRAMEWORKS = ("torch", "tensorflow")
# Packages whose pins follow a framework's release: dropped from the constraints when the matrix picks another.
FAMILIES = {"torch": ("torch", "torchvision"), "tensorflow": ("tensorflow", "tensorflow-cpu", "keras")}
CPU_TAG = "cpu"


def canonical(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(constraints: str) -> dict[str, str]:
    """`name==version` lines of a constraints file, keyed by normalised name (other lines are ignored)."""
    pins: dict[str, str] = {}
    for line in constraints.splitlines():
        match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)", line)
        if match:
            pins[canonical(match.group(1))] = match.group(2)
    return pins


@dataclass
class FrameworkChoice:
    name: str  # torch | tensorflow
    release: str  # matrix release, e.g. "2.13"
    requirement: str  # pip line, e.g. "torch==2.13.0+cu126"
    build: str  # torch: wheel tag (cu126, cpu); tensorflow: "and-cuda", "cuda <version> toolkit" or "cpu"
    index_tag: str | None = None  # torch: the per-build wheel index (<index base>/<tag>) the wheel comes from

    def describe(self) -> str:
        return f"{self.requirement} ({self.build})"


@dataclass
class FrameworkPlan:
    gpu: str | None  # the GPU model planned for, None on a host without NVIDIA GPUs
    compute_capability: str | None
    driver: str | None
    python: str
    choices: list[FrameworkChoice] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)  # gpulab extras that bring the frameworks' companions
    dropped_pins: list[str] = field(default_factory=list)  # constraint lines left out (another release)

    def constraints(self, text: str) -> str:
        """The constraints file without the pins of framework releases the matrix replaced."""
        dropped = set(self.dropped_pins)
        kept = [
            line
            for line in text.splitlines()
            if not (m := re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==", line))
            or canonical(m.group(1)) not in dropped
        ]
        return "\n".join(kept) + "\n"

    def summary(self) -> str:
        target = (
            f"{self.gpu} (compute capability {self.compute_capability})" if self.gpu else "no NVIDIA GPU: CPU builds"
        )
        driver = f", driver {self.driver}" if self.driver else ""
        chosen = "; ".join(c.describe() for c in self.choices) or "no framework (gpulab and its base dependencies)"
        return f"{target}{driver}, Python {self.python}: {chosen}"


def _gpus(pci_ids: list[str]) -> list[GpuSpec]:
    found: dict[str, GpuSpec] = {}
    unknown = []
    for pci_id in pci_ids:
        if normalize_pci_id(pci_id) is None:
            raise GpulabError(f"{pci_id!r} is not a PCI id; write it like '10de:15f8'.")
        spec = gpu_by_pci_id(pci_id)
        if spec is None:
            unknown.append(pci_id)
        else:
            found[spec.name] = spec
    if unknown:
        raise GpulabError(
            f"GPU PCI id(s) {', '.join(sorted(set(unknown)))} are not in the compatibility matrix, so no framework "
            "build can be chosen. Fix: add the GPU to src/gpulab/compat/matrix.yml with its source."
        )
    # The oldest architecture decides: a build with its kernels is checked against every other GPU below.
    return sorted(found.values(), key=lambda g: versions.key(g.compute_capability))


def _exact(name: str, release: str, pins: dict[str, str], dropped: list[str]) -> str:
    """`==2.13.0` when constraints.txt pins that release, else `==2.13.*` (and the pin's family is dropped)."""
    pin = pins.get(canonical(name))
    if pin is not None and versions.major_minor(pin.split("+")[0]) == versions.major_minor(release):
        return pin.split("+")[0]
    for member in FAMILIES[name]:
        if canonical(member) in pins and canonical(member) not in dropped:
            dropped.append(canonical(member))
    return f"{versions.major_minor(release)}.*"


def _torch(plan: FrameworkPlan, gpus: list[GpuSpec], requested: str, pins: dict[str, str]) -> FrameworkChoice:
    cc, driver, python = plan.compute_capability, plan.driver, plan.python
    _, tag = versions.split_local(requested) if requested else ("", None)
    if requested:
        rel = rules.torch_release(requested)
        if python not in rel.python:
            raise GpulabError(
                f"torch {rel.version} supports Python {rel.python[0]}–{rel.python[-1]}, not {python}. "
                "Fix: pick another torch release (dl_frameworks_torch) or another Python (dl_frameworks_python)."
            )
        if cc is None:
            build_tag = CPU_TAG
        else:
            usable = advice.usable_builds(rel, cc, None, driver)
            if tag:
                usable = [b for b in usable if b.tag == tag]
            build = advice.pick_build(usable)
            if build is None:
                problems = check_stack(Stack(gpu=plan.gpu, driver=driver, torch=requested, python=python))
                reasons = " ".join(str(p) for p in problems) or f"no {tag or ''} build of torch {rel.version} fits."
                raise GpulabError(f"torch {requested} cannot run on this host: {reasons}")
            build_tag = build.tag
    else:
        found = advice.newest_torch(cc, driver=driver, python=python)
        if found is None:
            what = f"{plan.gpu} (compute capability {cc})" if cc else "this host"
            raise GpulabError(
                f"no torch release in the matrix runs on {what} with Python {python}"
                + (f" and driver {driver}" if driver else "")
                + ". Fix: leave torch out of dl_frameworks_frameworks, or update the driver."
            )
        rel, build = found
        build_tag = CPU_TAG if cc is None else build.tag
    for other in gpus[1:]:
        problems = check_stack(Stack(gpu=other.name, driver=driver, torch=f"{rel.version}+{build_tag}"))
        if problems:
            raise GpulabError(
                f"this host mixes GPUs; torch {rel.version} ({build_tag}) chosen for {gpus[0].name} does not fit "
                f"{other.name}: {problems[0]}"
            )
    version = _exact("torch", rel.version, pins, plan.dropped_pins)
    requirement = f"torch=={version}+{build_tag}" if not version.endswith("*") else f"torch=={version}"
    return FrameworkChoice("torch", rel.version, requirement, build_tag, index_tag=build_tag)


def _tensorflow(plan: FrameworkPlan, requested: str, pins: dict[str, str]) -> FrameworkChoice:
    cc, driver, python = plan.compute_capability, plan.driver, plan.python
    if requested:
        rel = rules.tf_release(requested)
        problems = check_stack(Stack(gpu=plan.gpu, driver=driver, tensorflow=requested, python=python))
        if problems:
            raise GpulabError(f"TensorFlow {requested} cannot run on this host: {' '.join(map(str, problems))}")
    else:
        found = advice.newest_tf(cc, driver=driver, python=python)
        if found is None:
            what = f"{plan.gpu} (compute capability {cc})" if cc else "this host"
            raise GpulabError(
                f"no TensorFlow release in the matrix runs on {what} with Python {python}. "
                "Fix: leave tensorflow out of dl_frameworks_frameworks."
            )
        rel = found
    version = _exact("tensorflow", rel.version, pins, plan.dropped_pins)
    if cc is None:
        return FrameworkChoice("tensorflow", rel.version, f"tensorflow-cpu=={version}", CPU_TAG)
    if rel.and_cuda:
        return FrameworkChoice("tensorflow", rel.version, f"tensorflow[and-cuda]=={version}", "and-cuda")
    return FrameworkChoice("tensorflow", rel.version, f"tensorflow=={version}", f"CUDA {rel.cuda} toolkit")


def torch_index_base_default() -> str:
    """Where torch's per-build indexes live (the matrix's URLs without their tag): <base>/cu126, <base>/cpu."""
    url = load_matrix().torch[-1].builds[-1].index_url
    return url.rsplit("/", 1)[0]


def plan_frameworks(
    frameworks: list[str],
    gpu_pci_ids: list[str],
    python: str,
    driver: str | None = None,
    torch: str = "",
    tensorflow: str = "",
    constraints: str = "",
    extras: tuple[str, ...] | list[str] = (),
) -> FrameworkPlan:
    """The wheels for one node (plus gpulab `extras` such as "vm"). Raises GpulabError naming the problem and the
    fix."""
    bad = [e for e in extras if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", e)]
    if bad:
        raise GpulabError(f"gpulab extra(s) {bad} are not extra names; use those of pyproject.toml, e.g. 'vm'.")
    unknown = [f for f in frameworks if f not in FRAMEWORKS]
    if unknown:
        raise GpulabError(
            f"unknown framework(s) {', '.join(unknown)}; dl_frameworks_frameworks takes {', '.join(FRAMEWORKS)} "
            "(or [] for gpulab alone)."
        )
    python = versions.major_minor(python, "Python version")
    gpus = _gpus(gpu_pci_ids)
    driver = driver.strip() if driver and driver.strip() else None
    if driver:
        rules.branch_record(driver)  # a malformed or pre-matrix driver fails here with its own message
    gpu = gpus[0] if gpus else None
    plan = FrameworkPlan(
        gpu=gpu.name if gpu else None,
        compute_capability=gpu.compute_capability if gpu else None,
        driver=driver if gpu else None,
        python=python,
    )
    pins = parse_pins(constraints)
    if "torch" in frameworks:
        plan.choices.append(_torch(plan, gpus, torch, pins))
        plan.extras.append("torch")
    if "tensorflow" in frameworks:
        plan.choices.append(_tensorflow(plan, tensorflow, pins))
        plan.extras.append("tf" if gpu else "tf-cpu")
    plan.extras += [e for e in extras if e not in plan.extras]
    return plan


def requirements_text(
    plan: FrameworkPlan,
    gpulab_version: str,
    find_links: str,
    constraints_path: str | None,
    offline: bool,
    index_url: str = "",
    torch_index_base: str = "",
) -> str:
    """The node's requirements file: pip options first, then gpulab (with the frameworks' extras) and the
    frameworks pinned by the plan."""
    lines = [f"# gpulab dl_frameworks: {plan.summary()}"]
    if offline:
        lines.append("--no-index")
    else:
        if index_url:
            lines.append(f"--index-url {index_url}")
        base = (torch_index_base or torch_index_base_default()).rstrip("/")
        lines += [f"--extra-index-url {base}/{c.index_tag}" for c in plan.choices if c.index_tag]
    lines.append(f"--find-links {find_links}")
    if constraints_path:
        lines.append(f"-c {constraints_path}")
    extras = f"[{','.join(plan.extras)}]" if plan.extras else ""
    lines.append(f"gpulab{extras}=={gpulab_version}")
    lines += [c.requirement for c in plan.choices]
    return "\n".join(lines) + "\n"
