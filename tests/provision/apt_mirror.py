"""A signed apt repository laid out like NVIDIA's CUDA network repository, built at test time.

NVIDIA's repository cannot be reached from CI, so its code path runs against this stand-in: real Debian packages
(fetched with `apt-get download` inside a Debian 12 root, cached outside the clone) re-packaged under NVIDIA's
package names, indexed with dpkg-scanpackages, signed with a key generated for the run and delivered the way NVIDIA
delivers its key: in a `cuda-keyring` package whose sources file points at NVIDIA's own URL.
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

from guest import prereq
from provision.files import cache_root

NVIDIA_REPO = "https://developer.download.nvidia.com/compute/cuda/repos"
KEYRING_FILE = "usr/share/keyrings/cuda-archive-keyring.gpg"


@dataclass
class Mirror:
    served: Path  # the directory a file server publishes (the repository's base URL)
    repo: Path  # served/<distro>/<arch>: Packages, InRelease, the .debs, cuda-keyring
    fingerprint: str
    keyring_deb: Path


def _run(*cmd: str, **kwargs: object) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc.stdout


def candidate_version(root: Path, package: str) -> str:
    """The version apt would install in the Debian root."""
    for line in _run("chroot", str(root), "apt-cache", "policy", package).splitlines():
        if line.strip().startswith("Candidate:"):
            version = line.split(":", 1)[1].strip()
            if version != "(none)":
                return version
    raise RuntimeError(f"apt in {root} offers no {package} (are Debian's non-free sources enabled?)")


def downloaded_debs(root: Path, packages: list[str]) -> dict[str, Path]:
    """`apt-get download` of the candidate version of `packages` inside the Debian root (its apt sources), cached
    by file name under ${GPULAB_CI_CACHE}/mirror-debs; returns package name -> .deb."""
    cache = cache_root() / "mirror-debs"
    cache.mkdir(parents=True, exist_ok=True)
    found: dict[str, Path] = {}
    for package in packages:
        version = candidate_version(root, package).replace(":", "%3a")
        cached = sorted(cache.glob(f"{package}_{version}_*.deb"))
        if not cached:
            work = root / "tmp" / "mirror-download"
            work.mkdir(parents=True, exist_ok=True)
            _run("chroot", str(root), "sh", "-c", f"cd /tmp/mirror-download && apt-get download -q {package}")
            for deb in work.glob("*.deb"):
                shutil.move(str(deb), cache / deb.name)
            shutil.rmtree(work)
            cached = sorted(cache.glob(f"{package}_{version}_*.deb"))
        if not cached:
            raise RuntimeError(f"apt-get download did not fetch {package} {version}")
        found[package] = cached[0]
    return found


def build_deb(
    tree: Path, out_dir: Path, control: dict[str, str], conffiles: tuple[str, ...] = (), triggers: str = ""
) -> Path:
    """dpkg-deb --build of `tree` with this control file (fast gzip compression; root-owned files)."""
    debian = tree / "DEBIAN"
    debian.mkdir(parents=True, exist_ok=True)
    fields = {"Maintainer": "gpulab test mirror <mirror@gpulab.invalid>", **control}
    (debian / "control").write_text("".join(f"{k}: {v}\n" for k, v in fields.items()))
    if conffiles:
        (debian / "conffiles").write_text("".join(f"{c}\n" for c in conffiles))
    if triggers:
        (debian / "triggers").write_text(triggers)
    out = out_dir / f"{control['Package']}_{control['Version']}_{control['Architecture']}.deb"
    _run("dpkg-deb", "-Zgzip", "-z1", "--root-owner-group", "--build", str(tree), str(out))
    return out


def control_of(deb: Path) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in _run("dpkg-deb", "--field", str(deb)).splitlines():
        if line[:1].isspace() and fields:
            key = list(fields)[-1]
            fields[key] += "\n" + line
        elif ":" in line:
            key, value = line.split(":", 1)
            fields[key] = value.strip()
    return fields


def renamed(deb: Path, work: Path, out_dir: Path, package: str, version: str) -> Path:
    """The same package's files and dependencies under another name and version (NVIDIA's naming)."""
    tree = work / package
    _run("dpkg-deb", "-x", str(deb), str(tree))
    fields = control_of(deb)
    control = {"Package": package, "Version": version, "Architecture": fields["Architecture"]}
    for key in ("Depends", "Pre-Depends"):
        if key in fields:
            control[key] = fields[key]
    control["Description"] = f"{fields['Package']} {fields['Version']} re-packaged as {package}"
    return build_deb(tree, out_dir, control)


def toolkit_stand_in(work: Path, out_dir: Path, cuda: str, version: str) -> Path:
    """cuda-toolkit-X-Y whose /usr/local/cuda-X.Y/bin/nvcc reports that release as NVIDIA's nvcc does.

    NVIDIA's repository for Debian 12 carries CUDA 12.2 and newer, and Debian's own nvcc is 11.8, so no real
    compiler of a release the repository carries can be re-packaged here; the roles only read its version."""
    tree = work / "cuda-toolkit"
    bin_dir = tree / f"usr/local/cuda-{cuda}/bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "nvcc").write_text(
        "#!/bin/sh\n"
        "echo 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
        f"echo 'Cuda compilation tools, release {cuda}, V{version.split('-')[0]}'\n"
    )
    (bin_dir / "nvcc").chmod(0o755)
    (tree / f"usr/local/cuda-{cuda}/lib64").mkdir(parents=True)
    control = {
        "Package": f"cuda-toolkit-{cuda.replace('.', '-')}",
        "Version": version,
        "Architecture": "amd64",
        "Description": f"CUDA {cuda} compiler driver stand-in (reports its version only)",
    }
    return build_deb(tree, out_dir, control)


def cudnn_from_wheel(wheel: Path, work: Path, out_dir: Path, cuda_major: str, version: str) -> list[Path]:
    """libcudnn9-cuda-N and libcudnn9-dev-cuda-N from NVIDIA's nvidia-cudnn-cuN wheel: its libcudnn.so.9 and headers
    at the paths NVIDIA's packages use."""
    major = version.split(".")[0]
    lib_pkg, dev_pkg = f"libcudnn{major}-cuda-{cuda_major}", f"libcudnn{major}-dev-cuda-{cuda_major}"
    lib_tree, dev_tree = work / lib_pkg, work / dev_pkg
    lib_dir, inc_dir = lib_tree / "usr/lib/x86_64-linux-gnu", dev_tree / "usr/include/x86_64-linux-gnu"
    lib_dir.mkdir(parents=True)
    inc_dir.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as whl:
        for name in whl.namelist():
            base = name.rsplit("/", 1)[-1]
            if name.startswith("nvidia/cudnn/lib/") and base == f"libcudnn.so.{major}":
                (lib_dir / base).write_bytes(whl.read(name))
            elif name.startswith("nvidia/cudnn/include/") and base.endswith(".h"):
                (inc_dir / base).write_bytes(whl.read(name))
    deb_version = f"{version}-1"
    lib = build_deb(
        lib_tree,
        out_dir,
        {
            "Package": lib_pkg,
            "Version": deb_version,
            "Architecture": "amd64",
            "Description": f"cuDNN {version} runtime from {wheel.name}",
        },
        triggers="activate-noawait ldconfig\n",
    )
    dev = build_deb(
        dev_tree,
        out_dir,
        {
            "Package": dev_pkg,
            "Version": deb_version,
            "Architecture": "amd64",
            "Depends": f"{lib_pkg} (= {deb_version})",
            "Description": f"cuDNN {version} headers from {wheel.name}",
        },
    )
    return [lib, dev]


def _gpg(home: Path, *args: str, **kwargs: object) -> str:
    return _run(
        "gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase", "", *args, **kwargs
    )


# The Label of NVIDIA's repositories' Release files, which NVIDIA's cuda-repository-pin-600 pins by; a mirror keeps it.
NVIDIA_LABEL = "NVIDIA CUDA"


def release_file(repo: Path, label: str = NVIDIA_LABEL) -> str:
    """The Release file of a flat repository holding Packages and Packages.gz (its hashes), with this Label."""
    files = [repo / "Packages", repo / "Packages.gz"]
    lines = [
        "Origin: gpulab test mirror",
        f"Label: {label}",
        "Architectures: amd64 all",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        "SHA256:",
    ]
    for f in files:
        lines.append(f" {hashlib.sha256(f.read_bytes()).hexdigest()} {f.stat().st_size} {f.name}")
    return "\n".join(lines) + "\n"


def build_mirror(dest: Path, debs: list[Path], distro: str = "debian12", arch: str = "x86_64") -> Mirror:
    """A flat repository at dest/served/<distro>/<arch>/ holding `debs` and cuda-keyring_1.1-1_all.deb, signed
    with a new key (its fingerprint in the result)."""
    for tool in ("dpkg-deb", "dpkg-scanpackages", "gpg", "gpgconf"):
        prereq.require_tool(tool)
    home = dest / "gnupg"
    home.mkdir(mode=0o700, parents=True)
    try:
        return _signed_mirror(dest, home, debs, distro, arch)
    finally:
        # gpg started an agent for this home directory; it would outlive the test.
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False)


def _signed_mirror(dest: Path, home: Path, debs: list[Path], distro: str, arch: str) -> Mirror:
    _gpg(home, "--quick-gen-key", "gpulab test mirror <mirror@gpulab.invalid>", "rsa3072", "sign", "1d")
    colons = _gpg(home, "--with-colons", "--list-keys")
    fingerprint = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))

    served = dest / "served"
    repo = served / distro / arch
    repo.mkdir(parents=True)
    for deb in debs:
        shutil.copy2(deb, repo / deb.name)

    keyring_tree = dest / "cuda-keyring"
    (keyring_tree / KEYRING_FILE).parent.mkdir(parents=True)
    (keyring_tree / KEYRING_FILE).write_bytes(
        subprocess.run(["gpg", "--homedir", str(home), "--export", fingerprint], capture_output=True, check=True).stdout
    )
    sources = f"etc/apt/sources.list.d/cuda-{distro}-{arch}.list"
    (keyring_tree / sources).parent.mkdir(parents=True)
    # Like NVIDIA's: the sources file names NVIDIA's own URL; a mirror user must point it elsewhere.
    (keyring_tree / sources).write_text(f"deb [signed-by=/{KEYRING_FILE}] {NVIDIA_REPO}/{distro}/{arch}/ /\n")
    keyring_deb = build_deb(
        keyring_tree,
        repo,
        {
            "Package": "cuda-keyring",
            "Version": "1.1-1",
            "Architecture": "all",
            "Description": "signing key of the gpulab test mirror",
        },
        conffiles=(f"/{sources}",),
    )

    packages = _run("dpkg-scanpackages", "--multiversion", ".", "/dev/null", cwd=repo)
    (repo / "Packages").write_text(packages)
    (repo / "Packages.gz").write_bytes(gzip.compress(packages.encode()))
    (repo / "Release").write_text(release_file(repo))
    _gpg(
        home,
        "--local-user",
        fingerprint,
        "--digest-algo",
        "SHA256",
        "--clearsign",
        "--output",
        str(repo / "InRelease"),
        str(repo / "Release"),
    )
    _gpg(
        home,
        "--local-user",
        fingerprint,
        "--digest-algo",
        "SHA256",
        "--armor",
        "--detach-sign",
        "--output",
        str(repo / "Release.gpg"),
        str(repo / "Release"),
    )
    return Mirror(served=served, repo=repo, fingerprint=fingerprint, keyring_deb=keyring_deb)


def container_toolkit_stand_ins(work: Path, out_dir: Path, version: str) -> list[Path]:
    """nvidia-container-toolkit, -base, libnvidia-container-tools and libnvidia-container1 at `version` ("1.18.2-1"),
    with NVIDIA's dependencies between them: `nvidia-ctk --version` reports the release as NVIDIA's does and
    `nvidia-ctk cdi generate` prints a small spec, the runtime, hook and CLI are present at their paths (they only
    say what they are), and -base ships the nvidia-cdi-refresh units as 1.18 does. NVIDIA's builds cannot be
    fetched here; the role only installs, pins and points at them."""
    release = version.split("-")[0]
    script = "#!/bin/sh\necho '{} stand-in {}'\n"
    packages: dict[str, tuple[dict[str, str], str]] = {
        "libnvidia-container1": ({"usr/share/doc/libnvidia-container1/README": "stand-in\n"}, ""),
        "libnvidia-container-tools": (
            {"usr/bin/nvidia-container-cli": script.format("nvidia-container-cli", release)},
            f"libnvidia-container1 (>= {version})",
        ),
        "nvidia-container-toolkit-base": (
            {
                "usr/bin/nvidia-ctk": (
                    "#!/bin/sh\n"
                    f'if [ "$1" = --version ]; then echo "NVIDIA Container Toolkit CLI version {release}"; '
                    "echo 'commit: 0000000'; exit 0; fi\n"
                    # `cdi generate` prints a spec on stdout and its log on stderr, as NVIDIA's does.
                    'if [ "$1" = cdi ] && [ "$2" = generate ]; then\n'
                    "  echo 'level=info msg=\"Generated CDI spec with version 0.5.0\"' >&2\n"
                    "  printf 'cdiVersion: 0.5.0\\nkind: nvidia.com/gpu\\ndevices:\\n- name: all\\n'\n"
                    "  printf '  containerEdits:\\n    deviceNodes:\\n    - path: /dev/nvidia0\\n'; exit 0\n"
                    "fi\n"
                    "echo 'nvidia-ctk stand-in: only --version and cdi generate work' >&2; exit 1\n"
                ),
                "usr/bin/nvidia-container-runtime": script.format("nvidia-container-runtime", release),
                "usr/lib/systemd/system/nvidia-cdi-refresh.service": (
                    "[Unit]\nDescription=stand-in\n[Service]\nType=oneshot\nExecStart=/usr/bin/nvidia-ctk --version\n"
                    "[Install]\nWantedBy=multi-user.target\n"
                ),
                "usr/lib/systemd/system/nvidia-cdi-refresh.path": (
                    "[Unit]\nDescription=stand-in\n[Path]\nPathChanged=/lib/modules\n[Install]\nWantedBy=multi-user.target\n"
                ),
            },
            "",
        ),
        "nvidia-container-toolkit": (
            {"usr/bin/nvidia-container-runtime-hook": script.format("nvidia-container-runtime-hook", release)},
            f"nvidia-container-toolkit-base (= {version}), libnvidia-container-tools (>= {version})",
        ),
    }
    debs = []
    for package, (files, depends) in packages.items():
        tree = work / package
        for rel, text in files.items():
            path = tree / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            path.chmod(0o755 if rel.startswith("usr/bin/") else 0o644)
        control = {"Package": package, "Version": version, "Architecture": "amd64"}
        if depends:
            control["Depends"] = depends
        control["Description"] = f"{package} {release} stand-in (NVIDIA's name and version)"
        debs.append(build_deb(tree, out_dir, control))
    return debs


def dcgm_stand_ins(work: Path, out_dir: Path, cuda_major: str, version: str) -> list[Path]:
    """datacenter-gpu-manager-4-core and -cuda<N> under NVIDIA's names and apt version (`1:4.6.0-1`).

    The core package carries what the role and the validation touch: a `dcgmi` that reports its version (and says
    the host engine is not running for anything else), `nv-hostengine`, and the nvidia-dcgm unit at the path
    NVIDIA's package installs it; the cuda<N> package depends on core at the same version, as NVIDIA's does. File
    names drop the epoch, as Debian pools do."""
    release = version.split(":", 1)[-1].split("-")[0]
    core_tree = work / "datacenter-gpu-manager-4-core"
    bin_dir = core_tree / "usr/bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "dcgmi").write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --version) echo 'dcgmi  version: {release}' ;;\n"
        "  *) echo 'Error: unable to establish a connection to the specified host: localhost' >&2; exit 255 ;;\n"
        "esac\n"
    )
    (bin_dir / "nv-hostengine").write_text("#!/bin/sh\necho 'nv-hostengine stand-in: no GPU here' >&2\nexit 1\n")
    for tool in ("dcgmi", "nv-hostengine"):
        (bin_dir / tool).chmod(0o755)
    unit_dir = core_tree / "usr/lib/systemd/system"
    unit_dir.mkdir(parents=True)
    (unit_dir / "nvidia-dcgm.service").write_text(
        "[Unit]\nDescription=NVIDIA DCGM service (stand-in)\n\n"
        "[Service]\nExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )
    runtime_tree = work / f"datacenter-gpu-manager-4-cuda{cuda_major}"
    plugins = runtime_tree / f"usr/libexec/datacenter-gpu-manager-4/plugins/cuda{cuda_major}"
    plugins.mkdir(parents=True)
    (plugins / "README").write_text(f"DCGM {release} CUDA {cuda_major} diagnostic plugins (stand-in, none)\n")
    debs = [
        build_deb(
            core_tree,
            out_dir,
            {
                "Package": "datacenter-gpu-manager-4-core",
                "Version": version,
                "Architecture": "amd64",
                "Description": f"DCGM {release} core stand-in (dcgmi reports its version only)",
            },
        ),
        build_deb(
            runtime_tree,
            out_dir,
            {
                "Package": f"datacenter-gpu-manager-4-cuda{cuda_major}",
                "Version": version,
                "Architecture": "amd64",
                "Depends": f"datacenter-gpu-manager-4-core (= {version})",
                "Description": f"DCGM {release} CUDA {cuda_major} runtime stand-in",
            },
        ),
    ]
    out = []
    for deb in debs:
        plain = deb.with_name(deb.name.replace(f"_{version}_", f"_{version.split(':', 1)[-1]}_"))
        deb.rename(plain)
        out.append(plain)
    return out
