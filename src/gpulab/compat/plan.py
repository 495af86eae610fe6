"""plan_stack: the newest coherent stack for a GPU; profile: the named stacks from matrix.yml."""

from __future__ import annotations

from gpulab.compat import advice, platforms, rules, versions
from gpulab.compat.check import Stack, ubuntu_release
from gpulab.compat.data import load_matrix
from gpulab.compat.gpus import resolve_gpu
from gpulab.errors import GpulabError


def plan_stack(gpu: str, os: str | None = None) -> Stack:
    """Newest driver branch for the GPU's architecture, then the newest CUDA that driver and GPU allow (on
    `os` when it names an Ubuntu release or an OS gpulab provisions, from any source there), then the newest cuDNN,
    torch build and TensorFlow on top. gpulab.compat.delivery plans for the sources a host is configured with."""
    spec = resolve_gpu(gpu)
    cc = spec.compute_capability
    osr = platforms.operating_system(os)
    branch = rules.newest_branch_for_arch(spec.architecture)
    if osr is not None:
        carried = {b.number for b in platforms.archive_branches(osr) + platforms.nvidia_branches(osr)}
        fits = [
            b
            for b in load_matrix().drivers
            if b.number in carried
            and spec.architecture in b.architectures
            and (spec.min_driver is None or rules.driver_meets(b.recommended, spec.min_driver))
        ]
        branch = max(fits, key=lambda b: b.number) if fits else branch
    driver = branch.recommended
    ubuntu = ubuntu_release(os)
    cudas = advice.cuda_for_cc(cc, ubuntu=None if osr else ubuntu, driver=driver)
    if osr is not None:
        carried_cuda = {versions.key(c.version) for c in platforms.archive_cuda(osr) + platforms.nvidia_cuda(osr)}
        cudas = [c for c in cudas if versions.key(c.version) in carried_cuda]
    if not cudas:
        where = f" on {osr.name}" if osr else (f" on Ubuntu {ubuntu}" if ubuntu else "")
        raise GpulabError(
            f"no CUDA release in the matrix supports {spec.name} (compute capability {cc}){where} with driver "
            f"{branch.branch}. Try another OS (Ubuntu releases per CUDA: `gpulab matrix show` lists profiles)."
        )
    cuda = cudas[-1].version
    cudnn = advice.newest_cudnn(cuda, cc)
    torch = advice.newest_torch(cc, cuda=cuda, driver=driver)
    torch_python = torch[0].python if torch else None
    # Newest TensorFlow that shares a Python version with the chosen torch.
    tf_options = [advice.newest_tf(cc, cudas=[cuda], driver=driver, python=py) for py in torch_python or (None,)]
    found = [t for t in tf_options if t is not None]
    tf = max(found, key=lambda t: versions.key(t.version)) if found else None
    python = _pick_python(torch_python, tf.python if tf else None)
    return Stack(
        gpu=spec.name,
        driver=driver,
        cuda=cuda,
        cudnn=cudnn.version if cudnn else None,
        torch=f"{torch[0].version}+{torch[1].tag}" if torch else None,
        tensorflow=tf.version if tf else None,
        python=python,
        os=osr.os if osr else f"ubuntu{ubuntu}" if ubuntu else (f"ubuntu{cudas[-1].ubuntu[-1]}" if os is None else os),
    )


def _pick_python(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> str | None:
    """Newest Python both frameworks support."""
    pools = [set(p) for p in (a, b) if p]
    if not pools:
        return None
    common = set.intersection(*pools)
    return max(common, key=versions.key) if common else max(pools[0], key=versions.key)


def profile_names() -> list[str]:
    return [p.name for p in load_matrix().profiles]


def profile(name: str) -> Stack:
    for prof in load_matrix().profiles:
        if prof.name == name.strip().lower():
            return Stack(**prof.stack)
    raise GpulabError(f"unknown profile {name!r}; known profiles: {', '.join(profile_names())}.")


def profile_description(name: str) -> str:
    profile(name)  # raises the helpful error for unknown names
    return next(p.description for p in load_matrix().profiles if p.name == name.strip().lower())
