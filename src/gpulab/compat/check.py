"""check_stack: every reason a GPU + driver + CUDA + cuDNN + framework stack cannot work, each with a fix."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from gpulab.compat import advice, platforms, rules, versions
from gpulab.compat.data import CudaRelease, GpuSpec, OperatingSystem, TorchBuild, load_matrix
from gpulab.compat.gpus import resolve_gpu
from gpulab.errors import GpulabError
from gpulab.names import driver_version

T = TypeVar("T")

_ADD_FIX = "use one of the listed versions, or add this one to src/gpulab/compat/matrix.yml with its source"


@dataclass
class Stack:
    """A software stack on one GPU model. `cuda` may list side-by-side toolkits: "9.0,10.0"."""

    gpu: str | None = None
    driver: str | None = None
    cuda: str | None = None
    cudnn: str | None = None
    torch: str | None = None
    tensorflow: str | None = None
    python: str | None = None
    os: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return dataclasses.asdict(self)

    def override(self, **values: str | None) -> Stack:
        """A copy with the non-None `values` replacing fields (CLI flags over a profile)."""
        return dataclasses.replace(self, **{k: v for k, v in values.items() if v is not None})

    def cuda_list(self) -> list[str]:
        return [c for c in re.split(r"[,+\s]+", self.cuda or "") if c]


@dataclass
class Incompatibility:
    component: str
    reason: str
    fix: str

    def __str__(self) -> str:
        return f"[{self.component}] {self.reason} Fix: {self.fix}"


def ubuntu_release(os_name: str | None) -> str | None:
    """'ubuntu22.04', 'Ubuntu 22.04', '22.04' -> '22.04'; None for other systems (not checked)."""
    if not os_name:
        return None
    match = re.fullmatch(r"(?:ubuntu[\s_-]*)?(\d\d\.\d\d)(?:\.\d+)?(?:\s*lts)?", os_name.strip().lower())
    return match.group(1) if match else None


def _lts(releases: tuple[str, ...]) -> str:
    """Newest LTS (even year, April) in the list, else the newest release."""
    lts = [r for r in releases if r.endswith(".04") and int(r[:2]) % 2 == 0]
    return (lts or list(releases))[-1]


class _Checker:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.problems: list[Incompatibility] = []

    def add(self, component: str, reason: str, fix: str) -> None:
        self.problems.append(Incompatibility(component, reason, fix))

    def known(self, component: str, fn: Callable[[], T], fix: str = _ADD_FIX) -> T | None:
        """Run a lookup; an unknown or malformed version becomes an Incompatibility instead of an error."""
        try:
            return fn()
        except GpulabError as err:
            self.add(component, str(err), fix)
            return None

    # -- the parts ---------------------------------------------------------------------------------
    def run(self) -> list[Incompatibility]:
        s = self.stack
        gpu_fix = "pass a GPU listed by `gpulab matrix gpus` (name, alias or PCI id)"
        self.gpu = self.known("gpu", lambda: resolve_gpu(s.gpu or ""), gpu_fix) if s.gpu else None
        self.cc = self.gpu.compute_capability if self.gpu else None
        self.driver = self.known("driver", lambda: self._driver(s.driver or "")) if s.driver else None
        self.cudas: list[CudaRelease] = []
        for cuda in s.cuda_list():
            rel = self.known("cuda", functools.partial(rules.cuda_release, cuda))
            if rel is not None:
                self.cudas.append(rel)
        self.python = (
            self.known("python", lambda: versions.major_minor(s.python or "", "Python version")) if s.python else None
        )
        self._check_driver_arch()
        self.osr = platforms.operating_system(s.os)
        if self.osr and self.driver:
            self._check_driver_on_os(self.osr, self.driver)
        for rel in self.cudas:
            self._check_cuda(rel)
        if s.cudnn:
            self._check_cudnn(s.cudnn)
        if s.torch:
            self._check_torch(s.torch)
        if s.tensorflow:
            self._check_tf(s.tensorflow)
        return self.problems

    def _driver(self, driver: str) -> str:
        rules.branch_record(driver)  # raises for malformed or pre-matrix drivers
        return driver_version(driver)

    def _check_driver_arch(self) -> None:
        if not (self.gpu and self.driver):
            return
        arch, branch = self.gpu.architecture, rules.driver_branch(self.driver)
        if rules.driver_supports_arch(self.driver, arch):
            needed = self.gpu.min_driver
            if needed and not rules.driver_meets(self.driver, needed):
                newest = rules.newest_branch_for_arch(arch)
                self.add(
                    "driver",
                    f"driver {self.driver} ({branch}) predates {self.gpu.name}, which needs driver >= {needed}.",
                    f"install driver >= {needed} ({rules.driver_branch(needed)}), e.g. {newest.recommended}.",
                )
            return
        supporting = [b for b in load_matrix().drivers if arch in b.architectures]
        last = max(supporting, key=lambda b: b.number)
        if rules.branch_record(self.driver).number > last.number:
            self.add(
                "driver",
                f"driver {self.driver} ({branch}) does not support {self.gpu.name} ({arch}): {arch} support "
                f"ends with {last.branch}.",
                f"install an {last.branch} driver (e.g. {last.recommended}), the last branch for {arch}.",
            )
        else:
            first = min(supporting, key=lambda b: b.number)
            self.add(
                "driver",
                f"driver {self.driver} ({branch}) predates {arch} support, which starts with {first.branch}.",
                f"install driver {first.branch} or newer (e.g. {last.recommended}).",
            )

    def _check_cuda(self, rel: CudaRelease) -> None:
        if self.driver and not rules.driver_meets(self.driver, rel.min_driver):
            branch = rules.driver_branch(rel.min_driver)
            example = rules.branch_record(rel.min_driver).recommended
            self.add(
                "driver",
                f"driver {self.driver} is older than CUDA {rel.version} requires (>= {rel.min_driver}).",
                f"install driver >= {rel.min_driver} ({branch}), e.g. {example}, or use an older CUDA.",
            )
        if self.gpu and self.cc and not versions.in_range(self.cc, rel.cc_min, rel.cc_max):
            self._cuda_arch_problem(rel, self.gpu, self.cc)
        if self.osr:
            self._check_cuda_on_os(self.osr, rel)
            return
        ubuntu = ubuntu_release(self.stack.os)
        if ubuntu and ubuntu not in rel.ubuntu:
            others = [r.version for r in load_matrix().cuda if ubuntu in r.ubuntu]
            alt = f"CUDA {others[0]}–{others[-1]}" if others else "no CUDA in the matrix"
            self.add(
                "os",
                f"CUDA {rel.version} is not published for Ubuntu {ubuntu} (it supports Ubuntu "
                f"{', '.join(rel.ubuntu)}).",
                f"use Ubuntu {_lts(rel.ubuntu)}, or on Ubuntu {ubuntu} use {alt}.",
            )

    def _check_driver_on_os(self, osr: OperatingSystem, driver: str) -> None:
        """Some source gpulab installs from on this OS must carry the driver's branch."""
        number = versions.parse(driver)[0]
        archive, nvidia = platforms.archive_branches(osr), platforms.nvidia_branches(osr)
        if any(b.number == number for b in archive + nvidia):
            return
        self.add(
            "os",
            f"driver {driver} (R{number}) is not available on {osr.name}: {osr.archive} packages "
            f"{platforms.branch_span(archive)} and NVIDIA's repository {platforms.branch_span(nvidia)}.",
            f"on {osr.name} use a driver of one of those branches.",
        )

    def _check_cuda_on_os(self, osr: OperatingSystem, rel: CudaRelease) -> None:
        """Some source gpulab installs from on this OS must carry the toolkit."""
        archive, nvidia = platforms.archive_cuda(osr), platforms.nvidia_cuda(osr)
        if any(versions.compare(c.version, rel.version) == 0 for c in archive + nvidia):
            return
        published = [f"Ubuntu {', '.join(rel.ubuntu)}"] if rel.ubuntu else []
        published += [f"Debian {', '.join(rel.debian)}"] if rel.debian else []
        self.add(
            "os",
            f"CUDA {rel.version} is not available on {osr.name}: NVIDIA published it for "
            f"{' and '.join(published) or 'no OS gpulab provisions'}, and {osr.archive} has CUDA "
            f"{platforms.cuda_span(archive)}.",
            f"on {osr.name} use CUDA {platforms.cuda_span(archive)} ({osr.archive}) or "
            f"{platforms.cuda_span(nvidia)} (NVIDIA's repository).",
        )

    def _cuda_arch_problem(self, rel: CudaRelease, gpu: GpuSpec, cc: str) -> None:
        ok = advice.cuda_for_cc(cc)
        reason = (
            f"CUDA {rel.version} supports compute capability {rel.cc_min}–{rel.cc_max}; "
            f"{gpu.name} ({gpu.architecture}) is {cc}."
        )
        if not ok:
            self.add("cuda", reason, f"no CUDA in the matrix supports compute capability {cc}.")
        elif versions.compare(cc, rel.cc_min) < 0:
            self.add("cuda", reason, f"use CUDA {ok[-1].version} or older (the newest for {gpu.architecture}).")
        else:
            self.add("cuda", reason, f"use CUDA {ok[0].version} or newer (the first for {gpu.architecture}).")

    def _check_cudnn(self, cudnn: str) -> None:
        rel = self.known("cudnn", lambda: rules.cudnn_release(cudnn))
        if rel is None:
            return
        for cuda in self.cudas:
            if rules.cudnn_supports(rel, cuda.version, self.cc):
                continue
            alt = advice.newest_cudnn(cuda.version, self.cc)
            what = f"CUDA {cuda.version}" + (f" on compute capability {self.cc}" if self.cc else "")
            if rules.cudnn_supports(rel, cuda.version, None):
                reason = f"cuDNN {rel.version} has no kernels for {what} ({self.gpu.name if self.gpu else ''})."
            else:
                reason = f"cuDNN {rel.version} is not built for CUDA {cuda.version}."
            fix = f"use cuDNN {alt.version}, the newest built for {what}." if alt else self._cudnn_elsewhere(what)
            self.add("cudnn", reason, fix)

    def _cudnn_elsewhere(self, what: str) -> str:
        ok = advice.cuda_for_cc(self.cc) if self.cc else []
        alt = advice.newest_cudnn(ok[-1].version, self.cc) if ok else None
        if alt is None:
            return f"no cuDNN in the matrix supports {what}."
        return f"no cuDNN supports {what}; use CUDA {ok[-1].version} with cuDNN {alt.version}."

    def _check_python(self, component: str, name: str, supported: tuple[str, ...], suggest: str) -> None:
        if self.python and self.python not in supported:
            self.add(
                "python",
                f"{name} supports Python {supported[0]}–{supported[-1]}, not {self.python}.",
                f"use Python {supported[-1]} ({component}), or {suggest}.",
            )

    def _check_torch(self, torch: str) -> None:
        rel = self.known("torch", lambda: rules.torch_release(torch))
        if rel is None:
            return
        _, tag = versions.split_local(torch)
        name = f"torch {rel.version}"
        alt = advice.newest_torch(None, python=self.python) if self.python else None
        self._check_python("torch", name, rel.python, f"torch {alt[0].version}" if alt else "another torch")
        builds: tuple[TorchBuild, ...] = rel.builds
        if tag:
            builds = tuple(b for b in rel.builds if b.tag == tag)
            if not builds:
                offered = ", ".join(b.tag for b in rel.builds)
                self.add("torch", f"{name} has no {tag} build (offered: {offered}).", f"use one of {offered}.")
                return
        label = f"{name} ({tag})" if tag else name
        # Kernels for the GPU first: without them nothing else matters, and the fix names the right build.
        if self.gpu and self.cc:
            with_kernels = tuple(b for b in builds if rules.build_has_kernels(b, self.cc))
            if not with_kernels:
                self._torch_arch_problem(label, rel.version, builds)
                return
            builds = with_kernels
        majors = sorted({versions.major(c.version) for c in self.cudas})
        if majors:
            same = tuple(b for b in builds if versions.major(b.cuda) in majors)
            if not same:
                self._torch_cuda_problem(label, rel.version, builds, majors)
                return
            builds = same
        if self.driver:
            runnable = [b for b in builds if rules.driver_meets(self.driver, rules.framework_driver_minimum(b.cuda))]
            if not runnable:
                b = builds[0]
                need = rules.framework_driver_minimum(b.cuda)
                self.add(
                    "torch",
                    f"{label} {b.tag} wheels need driver >= {need} (CUDA {b.cuda}); the driver is {self.driver}.",
                    f"install driver >= {need} ({rules.driver_branch(need)}) or use an older torch build.",
                )

    def _torch_cuda_problem(self, label: str, version: str, builds: tuple[TorchBuild, ...], majors: list[int]) -> None:
        installed = ", ".join(f"{m}.x" for m in majors)
        cuda = max(self.cudas, key=lambda r: versions.key(r.version)).version
        alt = advice.newest_torch(self.cc, cuda=cuda, driver=self.driver, python=self.python)
        own = advice.pick_build(builds) or builds[-1]
        own_text = f"the {own.tag} build of torch {version} from {own.index_url} with CUDA {own.cuda}"
        if alt:
            fix = f"use torch {alt[0].version} ({alt[1].tag}) from {alt[1].index_url}, or {own_text}."
        else:
            fix = f"use {own_text}."
        self.add(
            "torch",
            f"{label} is built for CUDA {', '.join(b.cuda for b in builds)}, but CUDA {installed} is installed "
            "(CUDA extensions must be compiled with the same CUDA major as torch).",
            fix,
        )

    def _torch_arch_problem(self, label: str, version: str, builds: tuple[TorchBuild, ...]) -> None:
        assert self.gpu is not None and self.cc is not None
        arches = sorted({a for b in builds for a in b.arches}, key=versions.key)
        reason = (
            f"{label} {'/'.join(b.tag for b in builds)} wheels ship kernels for compute capability "
            f"{', '.join(arches)}; {self.gpu.name} is {self.cc} ({self.gpu.architecture})."
        )
        rel = rules.torch_release(version)
        same_release = advice.pick_build(advice.usable_builds(rel, self.cc, None, None))
        if same_release is not None:
            fix = f"use the {same_release.tag} build of torch {version} from {same_release.index_url}"
            if self.cudas and versions.major(same_release.cuda) not in {versions.major(c.version) for c in self.cudas}:
                fix += f" with CUDA {same_release.cuda}"
            self.add("torch", reason, fix + ".")
            return
        alt = advice.newest_torch(self.cc)
        fix = f"use torch {alt[0].version} ({alt[1].tag}) from {alt[1].index_url}." if alt else "no torch fits."
        self.add("torch", reason, fix)

    def _check_tf(self, tensorflow: str) -> None:
        rel = self.known("tensorflow", lambda: rules.tf_release(tensorflow))
        if rel is None:
            return
        name = f"TensorFlow {rel.version}"
        alt_py = advice.newest_tf(None, python=self.python) if self.python else None
        self._check_python("tensorflow", name, rel.python, f"TensorFlow {alt_py.version}" if alt_py else "another")
        if self.gpu and self.cc and not advice.tf_gpu_ok(rel, self.cc):
            alt = advice.newest_tf(self.cc)
            cuda_max = rules.cuda_release(rel.cuda).cc_max
            self.add(
                "tensorflow",
                f"{name} (CUDA {rel.cuda}) ships kernels for compute capability {rel.cc_min}–{cuda_max}; "
                f"{self.gpu.name} is {self.cc}.",
                f"use TensorFlow {alt.version}." if alt else f"no TensorFlow release supports {self.gpu.architecture}.",
            )
        need = rules.framework_driver_minimum(rel.cuda)
        if self.driver and not rules.driver_meets(self.driver, need):
            self.add(
                "tensorflow",
                f"{name} is built with CUDA {rel.cuda} and needs driver >= {need}; the driver is {self.driver}.",
                f"install driver >= {need} ({rules.driver_branch(need)}).",
            )
        if rel.and_cuda:
            return  # `tensorflow[and-cuda]` brings its own CUDA and cuDNN wheels
        if self.cudas and not any(advice.tf_cuda_matches(rel, c.version) for c in self.cudas):
            installed = ",".join(c.version for c in self.cudas)
            self.add(
                "tensorflow",
                f"{name} is built against CUDA {rel.cuda}, but CUDA {installed} is installed.",
                f"install CUDA {rel.cuda} alongside (cuda: '{installed},{rel.cuda}') or use a TensorFlow "
                f"built for CUDA {installed}.",
            )
        if self.stack.cudnn:
            try:
                have = versions.major_minor(self.stack.cudnn)
            except GpulabError:
                return  # already reported by the cuDNN check
            if versions.major(have) != versions.major(rel.cudnn) or versions.compare(have, rel.cudnn) < 0:
                self.add(
                    "tensorflow",
                    f"{name} needs cuDNN {versions.major(rel.cudnn)}.x >= {rel.cudnn}; cuDNN {have} is installed.",
                    f"install cuDNN {rel.cudnn} (or a newer {versions.major(rel.cudnn)}.x) for CUDA {rel.cuda}.",
                )


def check_stack(stack: Stack) -> list[Incompatibility]:
    """Every incompatibility in `stack` (empty when coherent). Unknown versions are reported, not raised."""
    return _Checker(stack).run()


def selected_torch_build(stack: Stack) -> TorchBuild | None:
    """The torch wheel build a coherent `stack` installs (for its index URL), or None."""
    if not stack.torch:
        return None
    try:
        rel = rules.torch_release(stack.torch)
        _, tag = versions.split_local(stack.torch)
        cc = resolve_gpu(stack.gpu).compute_capability if stack.gpu else None
        cudas = stack.cuda_list()
        cuda = max(cudas, key=versions.key) if cudas else None
        builds = advice.usable_builds(rel, cc, versions.major(cuda) if cuda else None, stack.driver)
    except GpulabError:
        return None
    if tag:
        builds = [b for b in builds if b.tag == tag]
    return advice.pick_build(builds, versions.cuda_version(cuda) if cuda else None)
