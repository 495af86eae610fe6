"""The software stack against the GPUs: the driver new enough for every CUDA in use, and every component supporting
each GPU's architecture (the compatibility matrix)."""

from __future__ import annotations

import re

from gpulab import compat
from gpulab.checks.health import driver_age
from gpulab.checks.health.modes import vgpu_host
from gpulab.checks.health.verdict import failed, passed, reporter, skipped
from gpulab.compat import gpu_for
from gpulab.errors import GpulabError
from gpulab.names import ReportedArchitecture
from gpulab.records import Check, Fingerprint, GpuInfo, SoftwareInfo


def _known_version(value: str | None) -> bool:
    """A version string to judge with: "12.8", "2.11.0+cu130"; not None, "", "unknown" or "N/A"."""
    return bool(value) and re.match(r"\d+\.\d+", value or "") is not None


def driver_for_cuda(fp: Fingerprint) -> Check:
    """The driver is new enough for every CUDA the host uses: the frameworks' builds and the toolkits.

    A capture holds neither, so its driver is checked against the CUDA version the capture itself reports,
    never against this machine's toolkits.
    """
    name = "health.driver_for_cuda"
    sw = fp.software
    src = reporter(fp)
    driver = sw.driver_version
    if not driver:
        return skipped(name, f"driver version not reported by {src}" + ("" if fp.is_capture else " (no NVIDIA driver)"))
    needs: dict[str, str] = {}
    not_captured: list[str] = []
    if fp.is_capture and _known_version(sw.cuda_driver_version):
        needs[f"the captured driver's CUDA {sw.cuda_driver_version}"] = sw.cuda_driver_version or ""
    if sw.frameworks is None:
        not_captured.append("framework builds")
    for fw in sw.frameworks or []:
        if _known_version(fw.built_cuda):
            needs[f"{fw.name} {fw.version}"] = fw.built_cuda or ""
    if sw.toolkits is None:
        not_captured.append("CUDA toolkits")
    for tk in sw.toolkits or []:
        if _known_version(tk.get("version")):
            needs[f"CUDA toolkit at {tk.get('path', '?')}"] = tk["version"]
    absent = f"; {' and '.join(not_captured)} not captured" if not_captured else ""
    if not needs:
        if fp.is_capture:
            why = f"CUDA version not reported by {src}{absent}"
        else:
            why = "no CUDA build of a framework and no CUDA toolkit with a known version found"
        return skipped(name, f"{why}: nothing to check driver {driver} against", driver=driver)
    problems, unknown = [], []
    for who, cuda in sorted(needs.items()):
        try:
            minimum = compat.min_driver_for_cuda(_major_minor(cuda))
        except GpulabError as err:  # a CUDA the matrix does not know is not judged either way
            unknown.append(f"{who}: {err}")
            continue
        if _version_tuple(driver) < _version_tuple(minimum):
            problems.append(f"{who} needs CUDA {cuda}, which needs driver >= {minimum}")
    ev = {"driver": driver, "needs": needs, "not_judged": unknown}
    if problems:
        return failed(
            name,
            f"driver {driver} is too old: " + "; ".join(problems) + ". Fix: install a newer driver branch "
            "(`gpulab matrix plan --gpu <model>` names one) or use framework builds for an older CUDA",
            **ev,
        )
    if len(unknown) == len(needs):
        return skipped(name, f"cannot judge driver {driver}: " + "; ".join(unknown) + absent, **ev)
    judged = ", ".join(f"{k} (CUDA {v})" for k, v in needs.items() if not any(u.startswith(f"{k}:") for u in unknown))
    notes = ("; not judged: " + "; ".join(unknown) if unknown else "") + absent
    return passed(name, f"driver {driver} supports {judged}{notes}", **ev)


def _offered_stack(sw: SoftwareInfo) -> dict[str, str | None]:
    """The driver, CUDA, cuDNN and framework versions the software reports, None where unknown or not reported."""
    frameworks = sw.frameworks or []
    torch = next((fw for fw in frameworks if fw.name == "torch" and not fw.error), None)
    tf = next((fw for fw in frameworks if fw.name == "tensorflow" and not fw.error), None)
    cuda = (torch.built_cuda if torch else None) or (tf.built_cuda if tf else None)
    return {
        "driver": sw.driver_version if _known_version(sw.driver_version) else None,
        "cuda": _major_minor(cuda) if cuda and _known_version(cuda) else None,
        "cudnn": _major_minor(sw.cudnn_version) if sw.cudnn_version and _known_version(sw.cudnn_version) else None,
        "torch": _release(torch.version) if torch and _known_version(torch.version) else None,
        "tensorflow": _release(tf.version) if tf and _known_version(tf.version) else None,
    }


def stack_supports_arch(fp: Fingerprint) -> Check:
    """The driver, CUDA, cuDNN and framework builds all support each GPU model's architecture (the matrix).

    Only components that are reported and known to the matrix are judged; the check skips when none is.
    """
    name = "health.stack_supports_arch"
    if not fp.gpus:
        return skipped(name, fp.gpu_absent_reason or "no GPU")
    sw = fp.software
    src = reporter(fp)
    offered = _offered_stack(sw)
    not_judged: list[str] = []
    if offered["driver"] is None:
        not_judged.append(f"driver (not reported by {src})")
    if sw.frameworks is None:
        not_judged.append(f"CUDA, cuDNN and framework builds (not captured by {src})")
    components: dict[str, str] = {}
    for component, value in offered.items():
        if value is None:
            continue
        # Alone, a component can only be wrong by being unknown to the matrix: that is no verdict on the GPU.
        unknown = compat.check_stack(compat.Stack(**{component: value}))
        if unknown:
            not_judged.append(f"{component} {value} ({unknown[0].reason})")
        else:
            components[component] = value
    # A driver that runs no CUDA or framework build in use today on a GPU fails whatever else it supports.
    found = _too_old_for_today(fp, not_judged)
    issues = [text for text, _ in found.values()]
    too_old = {gpu: facts for gpu, (_, facts) in found.items()}
    stacks: dict[str, dict[str, str | None]] = {
        gpu: {"driver": sw.driver_version, "architecture": str(facts["architecture"])} for gpu, facts in too_old.items()
    }
    unknown_gpus = {g.name: g for g in fp.gpus if _model(g).startswith("?")}
    for gpu in unknown_gpus.values():
        if too_old.get(gpu.name, {}).get("predates_matrix"):  # no branch to judge the architecture by
            continue
        facts, problems, why = _judge_unknown_gpu(gpu, components)
        if facts:
            stacks[f"{gpu.name} (not in the matrix)"] = facts
            issues += problems
        else:
            not_judged.append(why)
    for model in sorted({_model(g) for g in fp.gpus}):
        if model.startswith("?"):
            continue
        if not components:
            continue
        stack = compat.Stack(gpu=model, **components)
        stacks[model] = {k: v for k, v in vars(stack).items() if v}
        issues += [f"{model}: {i.component}: {i.reason} Fix: {i.fix}" for i in compat.check_stack(stack)]
    ev: dict[str, object] = {"stacks": stacks, "not_judged": not_judged}
    if too_old:
        ev["driver_too_old"] = too_old
    rest = "; not judged: " + "; ".join(not_judged) if not_judged else ""
    if issues:
        return failed(name, "; ".join(issues) + rest, **ev)
    if not stacks:
        return skipped(name, "cannot judge architecture support: " + "; ".join(not_judged), **ev)
    judged = ", ".join(f"{k} {v}" for k, v in components.items())
    legacy = sorted(
        {(g.architecture, _own_cc(g)) for g in fp.gpus if g.architecture and not _current_arch(g.architecture)},
        key=lambda pair: str((pair[0].driver_name, pair[1])),
    )
    aged = "".join(
        f"; {a.driver_name}{f' (compute capability {cc})' if cc else ''} is a legacy architecture: the newest stack "
        f"for it is {_newest(a, cc)}"
        for a, cc in legacy
    )
    return passed(name, f"{', '.join(stacks)}: architecture supported by {judged}{rest}{aged}", **ev)


def _too_old_for_today(fp: Fingerprint, not_judged: list[str]) -> dict[str, tuple[str, dict[str, object]]]:
    """GPU name -> (the issue, its facts) for each GPU the installed driver runs no current build on; a vGPU host's
    GPUs are noted in `not_judged` instead (its VMs run CUDA on their own drivers)."""
    driver = fp.software.driver_version or ""
    out: dict[str, tuple[str, dict[str, object]]] = {}
    if not _known_version(driver):
        return out
    for gpu in {g.name: g for g in fp.gpus}.values():
        if vgpu_host(gpu):
            not_judged.append(
                f"driver {driver} against today's builds on {gpu.name} (a vGPU host: its VMs run CUDA on their own "
                "drivers)"
            )
            continue
        if not gpu.architecture:
            continue
        model = _model(gpu)
        found = driver_age.judge(driver, None if model.startswith("?") else model, gpu.architecture, _own_cc(gpu))
        if found is not None:
            out[gpu.name] = (f"{_named(gpu)}: {found.text}", found.facts)
    return out


def _newest(architecture: ReportedArchitecture, compute_capability: str | None = None) -> str:
    from gpulab.compat import newest_stack

    try:
        return newest_stack(architecture, compute_capability).text()
    except GpulabError as err:
        return f"unknown ({err})"


def _own_cc(gpu: GpuInfo) -> str | None:
    """The GPU's compute capability: the matrix's, else its chip's by PCI id (a GK104 Kepler is 3.0)."""
    from gpulab.compat import compute_capability_for_pci_id

    return gpu.compute_capability or compute_capability_for_pci_id(gpu.pci_device_id)


def _current_arch(architecture: ReportedArchitecture) -> bool:
    """The newest driver branch still supports the architecture (unknown names count as current)."""
    from gpulab.compat import newest_stack

    try:
        return newest_stack(architecture).current
    except (GpulabError, KeyError, ValueError):
        return True


def _named(gpu: GpuInfo) -> str:
    """A GPU as the matrix cannot name it: its reported name, PCI id and architecture."""
    arch = gpu.architecture.driver_name if gpu.architecture else "architecture unknown"
    return f"{gpu.name} (PCI id {gpu.pci_device_id or '?'}, {arch})"


def _model(gpu: GpuInfo) -> str:
    """The matrix's name for a GPU (by PCI id first: names vary by driver); "?<name>" when it has none."""
    spec = gpu_for(gpu.name, gpu.pci_device_id)
    return spec.name if spec is not None else f"?{gpu.name}"


def _judge_unknown_gpu(gpu: GpuInfo, components: dict[str, str]) -> tuple[dict[str, str | None], list[str], str]:
    """A GPU the matrix lacks, judged on what its source reported: the driver against its architecture, CUDA
    against its compute capability. Returns (what was judged, problems, why nothing was when so)."""
    arch, cc = gpu.architecture, gpu.compute_capability
    judged: dict[str, str | None] = {}
    problems: list[str] = []
    driver, cuda = components.get("driver"), components.get("cuda")
    try:
        if driver and arch:
            judged.update(driver=driver, architecture=arch.driver_name)
            if not compat.driver_supports_arch(driver, arch):
                problems.append(
                    f"{_named(gpu)}: driver {driver} ({compat.driver_branch(driver)}) does not support "
                    f"{arch.driver_name}; "
                    f"the newest stack for this GPU is {_newest(arch, _own_cc(gpu))}. Fix: install that driver branch"
                )
        if cuda and cc:
            judged.update(cuda=cuda, compute_capability=cc)
            if not compat.cuda_supports_cc(cuda, cc):
                problems.append(f"{gpu.name}: CUDA {cuda} has no kernels for compute capability {cc}.")
    except GpulabError as err:  # an architecture the matrix does not name is not judged either way
        return {}, [], f"GPU {gpu.name} (PCI id {gpu.pci_device_id or '?'}; not in the compatibility matrix; {err})"
    if judged:
        return judged, problems, ""
    reported = (("architecture", arch.driver_name if arch else None), ("compute capability", cc))
    known = ", ".join(f"{k} {v}" for k, v in reported if v)
    return (
        {},
        [],
        f"GPU {gpu.name} (PCI id {gpu.pci_device_id or '?'}; not in the compatibility matrix; "
        f"{known or 'architecture and compute capability'} "
        f"{'known, but nothing reported to judge it against' if known else 'not reported'}: spec-based checks "
        "skipped)",
    )


def _version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def _major_minor(v: str) -> str:
    return ".".join(v.split(".")[:2])


def _release(v: str) -> str:
    """'2.11.0+cu130' -> '2.11'."""
    return _major_minor(v.split("+")[0])
