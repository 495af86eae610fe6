"""gpulab's process census before a driver change or a reboot (gpulab.hw.gpu_census, the collection's gpu_census
module) and the GPU pods a Kubernetes drain evicts (the gpu_pods filter).

The module runs for real through `ansible localhost -m gpulab.provision.gpu_census`, with nvidia-smi and virsh
stand-ins first on PATH that print recorded captures; the census agrees with the validation's occupancy check on
every captured machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpulab.checks import occupancy
from gpulab.hw import gpu_census
from gpulab.hw.smi.xml import parse_smi_xml
from playbook import REPO, ansible_env, ansible_playbook
from provision.inventory import chroot_inventory, require_ansible

CAPTURES = REPO / "tests/fixtures/captures"
BUSY = CAPTURES / "v100s-pcie-x8-busy.xml"
IDLE = REPO / "tests/fixtures/h200x4-firecracker/nvidia-smi-q-x.xml"
MODULE_UTILS = REPO / "collections/ansible_collections/gpulab/provision/plugins/module_utils/gpu_census.py"
DOMAIN = """<domain type='kvm'><name>{name}</name><devices>
  <disk type='file'><source file='/var/lib/libvirt/images/{name}.qcow2'/></disk>
  {hostdev}
</devices></domain>"""
HOSTDEV = (
    "<hostdev mode='subsystem' type='pci' managed='yes'><source>"
    "<address domain='0x0000' bus='0x3b' slot='0x00' function='0x0'/></source></hostdev>"
)


def test_the_collections_module_utils_is_a_link_to_gpulabs_file() -> None:
    assert MODULE_UTILS.is_symlink() and not os.path.isabs(os.readlink(MODULE_UTILS))
    assert MODULE_UTILS.resolve() == (REPO / "src/gpulab/hw/gpu_census.py").resolve()
    # The validation's occupancy check and the census share their memory bound.
    assert occupancy.MEMORY_FLOOR_MIB is gpu_census.MEMORY_FLOOR_MIB


@pytest.mark.parametrize("capture", sorted(CAPTURES.glob("*.xml")), ids=lambda p: p.name)
def test_the_census_finds_the_processes_the_validation_finds(capture: Path) -> None:
    """On every captured machine: the pids the census calls busy are those occupancy.gpus_free calls busy."""
    text = capture.read_text(errors="replace")
    try:
        infos = parse_smi_xml(capture)[2]
    except Exception:
        pytest.skip(f"{capture.name}: not a capture the validation reads")
    looks = occupancy.from_capture(infos, capture).gpus
    expected = {p.pid for g in looks for p in g.foreign if f"pid {p.pid} " in " ".join(g.busy_reasons())}
    census = gpu_census.smi_gpus(text)
    found = {
        p["pid"] for g in census for p in g["processes"] if f"pid {p['pid']} " in " ".join(gpu_census.gpu_reasons(g))
    }
    assert found == expected
    hidden = {g.index for g in looks if any("not visible" in r for r in g.busy_reasons())}
    assert {g["index"] for g in census if any("explains" in r for r in gpu_census.gpu_reasons(g))} == hidden


def _stand_in(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def _census(tmp_path: Path, **args: str) -> dict:
    require_ansible("ansible")
    argv = [str(Path(sys.executable).parent / "ansible"), "localhost", "-m", "gpulab.provision.gpu_census"]
    if args:
        argv += ["-a", " ".join(f"{k}={v}" for k, v in args.items())]
    env = ansible_env(ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    env["PATH"] = f"{tmp_path / 'bin'}:{env['PATH']}"
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 2), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.mark.slow
def test_the_census_names_the_processes_and_guests_it_finds(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stand_in(bin_dir, "nvidia-smi", f"cat {BUSY}\n")
    # Two running guests: one with a GPU passed through, one without.
    (tmp_path / "gpu-vm.xml").write_text(DOMAIN.format(name="gpu-vm", hostdev=HOSTDEV))
    (tmp_path / "web.xml").write_text(DOMAIN.format(name="web", hostdev=""))
    _stand_in(
        bin_dir,
        "virsh",
        f'echo "virsh $*" >> {tmp_path}/virsh.log\n'
        'case "$3" in list) printf "gpu-vm\\nweb\\n\\n";; dumpxml) cat ' + f'{tmp_path}/"$4".xml;; esac\n',
    )
    busy = _census(tmp_path)
    assert busy["busy"] is True
    assert busy["reasons"] == [
        "pid 37305 python (compute) on GPUs 0, 1, 2, 3, 4, 5, 6, 7: 240.4 GiB",
        "libvirt domain gpu-vm runs with 0000:3b:00.0 passed through",
    ]
    assert busy["domains"] == [{"name": "gpu-vm", "pci": ["0000:3b:00.0"]}]
    assert (tmp_path / "virsh.log").read_text().splitlines() == [
        "virsh -c qemu:///system list --name --state-running",
        "virsh -c qemu:///system dumpxml gpu-vm",
        "virsh -c qemu:///system dumpxml web",
    ]

    # The recorded census of an idle 4x H200 machine; libvirt not looked at.
    _stand_in(bin_dir, "nvidia-smi", f"cat {IDLE}\n")
    idle = _census(tmp_path, libvirt="no")
    assert idle["busy"] is False and idle["reasons"] == [], idle

    # nvidia-smi failing where no NVIDIA module is loaded (this machine): nothing can run on a GPU.
    _stand_in(bin_dir, "nvidia-smi", "echo 'NVIDIA-SMI has failed because it couldn'\\''t communicate' >&2\nexit 9\n")
    if Path("/sys/module/nvidia").exists():
        pytest.skip("an NVIDIA module is loaded here: the device-file census would look at this machine")
    failed = _census(tmp_path, libvirt="no")
    assert failed["busy"] is False
    assert failed["source"].startswith("no NVIDIA module loaded (") and "couldn't communicate" in failed["source"]


def test_the_device_file_census_names_the_holders(tmp_path: Path) -> None:
    """The mismatch window's census: processes holding /dev/nvidia* open, read from a /proc tree."""
    for pid, name, targets in ((41, "python3", ["/dev/nvidia0", "/dev/nvidiactl"]), (42, "bash", ["/dev/pts/0"])):
        fd = tmp_path / str(pid) / "fd"
        fd.mkdir(parents=True)
        (tmp_path / str(pid) / "comm").write_text(name + "\n")
        for n, target in enumerate(targets):
            (fd / str(n)).symlink_to(target)
    assert gpu_census.device_holders(str(tmp_path)) == ["pid 41 python3 (/dev/nvidia0, /dev/nvidiactl)"]


def _pod(name: str, gpus: str | None, owner: str = "Job", phase: str = "Running") -> dict:
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    return {
        "metadata": {"name": name, "namespace": "ml", "ownerReferences": [{"kind": owner}]},
        "spec": {"containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": phase},
    }


def test_a_kubernetes_drain_evicts_running_gpu_pods_only() -> None:
    listing = {
        "items": [
            _pod("train", "2"),
            _pod("web", None),
            _pod("device-plugin", "1", owner="DaemonSet"),
            _pod("done", "1", phase="Succeeded"),
        ]
    }
    # The filter in a child process: importing Ansible patches this interpreter's sys.intern, which torch's compiler
    # refuses later in the session (tests/conftest.py checks no test leaves Ansible imported).
    script = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); listing = json.loads(sys.argv[2])\n"
        "from ansible_collections.gpulab.provision.plugins.filter.gpu_pods import gpu_pods\n"
        "out = {'gpu': gpu_pods(json.dumps(listing)), 'amd': gpu_pods(listing, 'amd.com/gpu')}\n"
        "try:\n    gpu_pods('error: You must be logged in to the server')\n"
        "except Exception as err:\n    out['error'] = str(err)\n"
        "print(json.dumps(out))"
    )
    argv = [sys.executable, "-c", script, str(REPO / "collections"), json.dumps(listing)]
    out = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    assert out["gpu"] == [{"namespace": "ml", "name": "train"}]
    assert out["amd"] == []
    assert "not the output of `kubectl get pods -o json`" in out["error"]


def test_the_drain_variables_are_documented_in_the_argument_specs() -> None:
    specs = yaml.safe_load((REPO / "roles/nvidia_driver/meta/argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((REPO / "roles/nvidia_driver/defaults/main.yml").read_text())
    for name in [k for k in defaults if k.startswith(("nvidia_driver_drain", "nvidia_driver_allow"))]:
        assert name in options, name
    assert options["nvidia_driver_drain"]["choices"] == ["none", "slurm", "kubernetes"]


GUESTS_PLAY = """\
- name: The KVM host's guests before a reboot
  hosts: kvm_hosts
  gather_facts: false
  tasks:
    - name: Look for running guests with GPUs
      ansible.builtin.include_role:
        name: vfio_host
        tasks_from: guests.yml
"""


@pytest.mark.slow
def test_a_kvm_host_does_not_reboot_away_its_gpu_guests(debian_root: Path, tmp_path: Path) -> None:
    """vfio_host's check before its reboot, in a Debian root with a virsh stand-in listing a guest with a GPU."""
    require_ansible()
    (debian_root / "var/lib/stand-in").mkdir(parents=True)
    (debian_root / "var/lib/stand-in/gpu-vm.xml").write_text(DOMAIN.format(name="gpu-vm", hostdev=HOSTDEV))
    _stand_in(
        debian_root / "usr/local/bin",
        "virsh",
        'echo "virsh $*" >> /var/log/virsh.log\n'
        'case "$3" in list) echo gpu-vm;; dumpxml) cat /var/lib/stand-in/"$4".xml;; esac\n',
    )
    play = tmp_path / "guests.yml"
    play.write_text(GUESTS_PLAY)
    refused = ansible_playbook(play, chroot_inventory(tmp_path / "inv", {"kvm01": {"root": debian_root}}, "kvm_hosts"))
    assert refused.rc == 2, refused.explain()
    said = " ".join(refused.output.split("fatal: [kvm01]: FAILED!", 1)[1].split())
    assert (
        "kvm01 must reboot for the IOMMU and vfio-pci but guests with GPUs run on it (libvirt domain gpu-vm runs "
        "with 0000:3b:00.0 passed through): shut them down (virsh shutdown <domain>) and run again, or set "
        "vfio_host_allow_running_guests: true to reboot them away."
    ) in said
    allowed = ansible_playbook(
        play,
        chroot_inventory(
            tmp_path / "inv2", {"kvm01": {"root": debian_root, "vfio_host_allow_running_guests": True}}, "kvm_hosts"
        ),
    )
    assert allowed.rc == 0, allowed.explain()
    assert "kvm01 reboots with guests running (libvirt domain gpu-vm" in " ".join(allowed.output.split())
    assert (debian_root / "var/log/virsh.log").read_text().count("list --name --state-running") == 2
