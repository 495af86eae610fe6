"""One definition of "NVIDIA GPU" and of a GPU's companion functions (gpulab.hw.pci_gpu), used by gpulab and, through
a symbolic link in the collection's module_utils, by the Ansible modules that run on hosts without gpulab; both
sides give the same answers on the captured machines and the libvirt fixtures."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import vm_fakehost as fake
from gpulab.hw import pci_gpu
from gpulab.hw.nvml import pci_gpus
from gpulab.vm import discover_host, pci
from gpulab.vm.nodedev import PciDevice, parse_pci_nodedev
from playbook import REPO, ansible_env
from provision.inventory import require_ansible

if str(REPO / "collections") not in sys.path:
    sys.path.insert(0, str(REPO / "collections"))
from ansible_collections.gpulab.provision.plugins.module_utils import pci_gpu as module_pci_gpu

COLLECTION = REPO / "collections/ansible_collections/gpulab/provision"
SOURCE = REPO / "src/gpulab/hw/pci_gpu.py"
MODULE_UTILS = COLLECTION / "plugins/module_utils/pci_gpu.py"
SHARED = "ansible_collections.gpulab.provision.plugins.module_utils.pci_gpu"
H200_CAPTURE = REPO / "tests/fixtures/h200x4-firecracker/sysfs-nvidia-pci.txt"


def imports(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(module, names) of every import statement in a Python file."""
    found: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            found.append((node.module or "", tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            found.extend((a.name, ()) for a in node.names)
    return found


# -- one source ---------------------------------------------------------------------------------------------------
def test_the_collections_module_utils_is_a_link_to_gpulabs_file() -> None:
    assert MODULE_UTILS.is_symlink()
    assert not os.path.isabs(os.readlink(MODULE_UTILS))  # relative: holds wherever the checkout lies
    assert MODULE_UTILS.resolve() == SOURCE.resolve()
    # Standard library only: the modules run it on hosts that have neither gpulab nor anything else installed.
    assert [module for module, _ in imports(SOURCE)] == ["__future__"]


@pytest.mark.parametrize("module", ["gpu_facts", "vfio_devices"])
def test_the_modules_take_the_predicate_from_module_utils(module: str) -> None:
    path = COLLECTION / "plugins/modules" / f"{module}.py"
    names = {name for mod, found in imports(path) if mod == SHARED for name in found}
    assert "is_nvidia_gpu" in names
    constants = {node.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)}
    own = constants & {0x10DE, "0x10de", 0x0300, 0x0302, 0x03}  # the vendor or a display class of its own
    assert not own, f"{module} compares with {own} itself"


def test_gpulab_uses_the_same_functions_and_never_imports_the_collection() -> None:
    assert pci.is_bridge is pci_gpu.is_bridge and pci.NVIDIA_VENDOR == pci_gpu.NVIDIA_VENDOR
    for path in sorted((REPO / "src/gpulab").rglob("*.py")):
        assert not [m for m, _ in imports(path) if m.startswith("ansible_collections")], path


# -- the definition -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("vendor", "class_code", "gpu"),
    [
        (0x10DE, 0x030000, True),  # VGA controller (GeForce GTX 1080 Ti, shared-groups.xml)
        (0x10DE, 0x030200, True),  # 3D controller (H200 and P100 captures)
        (0x10DE, 0x038000, False),  # display controller, other: not a class the NVIDIA driver binds
        (0x10DE, 0x040300, False),  # the GPU's HDMI audio
        (0x10DE, 0x0C0330, False),  # the GPU's USB 3 controller (xHCI)
        (0x10DE, 0x0C8000, False),  # the GPU's USB-C UCSI controller
        (0x10DE, 0x068000, False),  # NVSwitch
        (0x1002, 0x030000, False),  # an AMD VGA controller
        (0x8086, 0x020000, False),
    ],
)
def test_a_gpu_is_an_nvidia_vga_or_3d_controller(vendor: int, class_code: int, gpu: bool) -> None:
    assert pci_gpu.is_nvidia_gpu(vendor, class_code) is gpu
    assert module_pci_gpu.is_nvidia_gpu(vendor, class_code) is gpu
    address = pci.PciAddress.parse("0000:3b:00.0")
    assert PciDevice(address, vendor_id=vendor, product_id=0, class_code=class_code).is_nvidia_gpu is gpu


@pytest.mark.parametrize(
    ("address", "class_code", "companion"),
    [
        ("0000:01:00.1", 0x040300, True),  # audio
        ("0000:01:00.2", 0x0C0330, True),  # USB
        ("0000:01:00.3", 0x0C8000, True),  # USB-C UCSI
        ("0000:01:00.0", 0x030000, False),  # the GPU itself
        ("0000:01:00.4", 0x060400, False),  # a bridge is the path, not a passenger
        ("0000:01:00.1", 0x020000, False),  # an Ethernet controller in the slot is no part of a graphics board
        ("0000:01:00.2", 0x010802, False),  # nor is an NVMe controller
        ("0000:02:00.1", 0x040300, False),  # another card's audio
        ("0001:01:00.1", 0x040300, False),  # the same bus and slot in another PCI domain
    ],
)
def test_companions_are_the_audio_usb_and_ucsi_functions_of_the_gpus_device(
    address: str, class_code: int, companion: bool
) -> None:
    assert pci_gpu.is_companion("0000:01:00.0", address, class_code) is companion
    assert module_pci_gpu.is_companion("0000:01:00.0", address, class_code) is companion


# -- both sides on real samples -----------------------------------------------------------------------------------
def sysfs_from_capture(root: Path) -> Path:
    """A sysfs tree from the `== <device dir>` / `key=value` capture of the 4x H200 machine."""
    devices = root / "sys/bus/pci/devices"
    address = None
    for line in H200_CAPTURE.read_text().splitlines():
        if line.startswith("== "):
            address = line.rsplit("/", 1)[-1]
            (devices / address).mkdir(parents=True)
        elif "=" in line and address:
            key, value = line.split("=", 1)
            if key in ("vendor", "device", "class"):
                (devices / address / key).write_text(value + "\n")
            elif key == "driver" and value:
                (root / "sys/bus/pci/drivers" / value).mkdir(parents=True, exist_ok=True)
                (devices / address / "driver").symlink_to(root / "sys/bus/pci/drivers" / value)
    return root


def sysfs_from_nodedevs(host: str, root: Path) -> Path:
    """The sysfs tree a host would show for the PCI node devices of a libvirt fixture."""
    for device in ET.parse(fake.FIXTURES / f"{host}.xml").getroot().iter("device"):
        parsed = parse_pci_nodedev(ET.tostring(device, encoding="unicode"))
        if parsed is None:
            continue
        cap = device.find("capability[@type='pci']")
        assert cap is not None
        dev = root / "sys/bus/pci/devices" / str(parsed.address)
        dev.mkdir(parents=True)
        (dev / "vendor").write_text(f"0x{parsed.vendor_id:04x}\n")
        (dev / "device").write_text(f"0x{parsed.product_id:04x}\n")
        (dev / "class").write_text(f"{cap.findtext('class')}\n")  # as libvirt read it from sysfs
        if parsed.iommu_group is not None:
            group = root / f"sys/kernel/iommu_groups/{parsed.iommu_group}"
            (group / "devices").mkdir(parents=True, exist_ok=True)
            (dev / "iommu_group").symlink_to(group)
    return root


def module_answers(root: Path) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """(gpu_facts' GPUs, vfio_devices' GPUs, vfio_devices' companions by GPU device) over a sysfs tree."""
    # In a child process: importing a module imports ansible.module_utils.basic, which patches this interpreter's
    # sys.intern (and torch's compiler refuses the patched function later in the session).
    script = (
        "import json, sys; sys.path.insert(0, sys.argv[2]);"
        "from ansible_collections.gpulab.provision.plugins.modules import gpu_facts, vfio_devices;"
        "print(json.dumps([gpu_facts.pci_devices(sys.argv[1])[0], vfio_devices.discover(sys.argv[1])[0]]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(root), str(REPO / "collections")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    facts_gpus, devices = json.loads(out)
    gpus = [d["address"] for d in devices if d["gpu"]]
    companions = {
        pci_gpu.device_of(g): sorted(
            d["address"] for d in devices if not d["gpu"] and pci_gpu.device_of(d["address"]) == pci_gpu.device_of(g)
        )
        for g in gpus
    }
    return [g["address"] for g in facts_gpus], gpus, companions


def test_both_sides_find_the_same_gpus_on_the_captured_h200_machine(tmp_path: Path) -> None:
    root = sysfs_from_capture(tmp_path)
    expected = [f"0000:00:0{n}.0" for n in (6, 7, 8, 9)]
    assert pci_gpus(root) == expected
    facts_gpus, vfio_gpus, companions = module_answers(root)
    assert facts_gpus == vfio_gpus == expected
    assert all(c == [] for c in companions.values())


@pytest.mark.parametrize("host", fake.HOSTS)
def test_both_sides_classify_the_libvirt_hosts_alike(host: str, tmp_path: Path) -> None:
    """gpulab.vm reads libvirt's node devices, the modules read sysfs: the same GPUs and the same companions."""
    found = discover_host(fake.connect(host))
    vm_gpus = [str(g.address) for g in found.gpus]
    vm_companions = {
        pci_gpu.device_of(str(g.address)): sorted(str(c.address) for c in g.companions) for g in found.gpus
    }
    assert vm_gpus, f"{host} has no GPU"

    root = sysfs_from_nodedevs(host, tmp_path)
    assert pci_gpus(root) == vm_gpus
    facts_gpus, vfio_gpus, companions = module_answers(root)
    assert facts_gpus == vfio_gpus == vm_gpus
    assert companions == vm_companions


def test_ansible_ships_the_linked_file_with_the_module(tmp_path: Path) -> None:
    """Run through Ansible, vfio_devices imports module_utils/pci_gpu.py from the payload Ansible builds (this Python
    cannot import the collection by itself) and answers as gpulab does on the host with a GPU audio function."""
    require_ansible("ansible")
    probe = subprocess.run(
        [sys.executable, "-c", f"import {SHARED}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr, probe.stderr
    root = sysfs_from_nodedevs("shared-groups", tmp_path / "host")
    env = ansible_env(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json")
    argv = [str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local"]
    argv += ["-m", "gpulab.provision.vfio_devices", "-a", f"root={root}"]
    argv += ["-e", f"ansible_python_interpreter={sys.executable}"]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result.get("failed") is not True, result
    found = discover_host(fake.connect("shared-groups"))
    shipped = [(d["address"], d["gpu"]) for d in result["devices"]]
    expected = [(str(g.address), True) for g in found.gpus]
    expected += [(str(c.address), False) for g in found.gpus for c in g.companions]
    assert shipped == expected
