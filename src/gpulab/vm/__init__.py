"""GPU-passthrough VMs on libvirt: discover the host, pick GPUs, check IOMMU groups, render and define domains.

The API below is stable; the libvirt_vm role and the tests build on it. Every function takes an open libvirt
connection (`connect(uri)`), raises `GpulabError` with the problem and its fix, and changes nothing on the host
before its checks pass.

    conn = connect("qemu:///system")            # or qemu+ssh://host/system, test:///abs/path/host.xml
    host = discover_host(conn)                  # Host: .gpus (address, name, NUMA node, PCIe link, IOMMU group,
                                                #   companions, BAR bytes, driver, P2P domain, boot VGA, reset
                                                #   methods), .nvswitches, .numa, .siblings, .iommu_enabled,
                                                #   .interrupt_remapping, .vfio_modules, .cpus, .memory_mib
    gpus = select_gpus(host, "4x10de:15f8")     # also "all", "none", "2", "P100", "2xP100", "0000:3b:00.0,3c:00.0"
    spec = load_spec(Path("vm.yml"))            # or spec_from_dict({...}); keys documented in docs/vm.md
    p = plan(conn, spec)                        # Plan: .xml, .checks (ok/warn/fail), .ok, .gpus, .up_to_date
    out = define(conn, spec)                    # Outcome: .changed, .diff (unified diff when redefined), .state
    out = start(conn, spec.name, wait_ssh=True, timeout=600)   # Outcome with .ip (from the DHCP lease)
    out = destroy(conn, spec.name)              # Outcome; not running -> changed False
    out = undefine(conn, spec.name, remove_storage=False)

`discover_host`, `plan` and `define` read host facts (VFIO modules, hugepages, BARs) from sysfs: under "/"
for a local URI, nowhere for remote and test URIs unless `root=Path(...)` names a sysfs tree.
`start` turns libvirt's "host doesn't support passthrough of host PCI devices" into an error saying the host
has no IOMMU/VFIO and how to enable it. Templates: `render(template, **context)` over gpulab/vm/templates
(the repository's libvirt/ directory); `render_network(NetworkSpec)`, `render_seed(name, CloudInitSpec)` and
`build_seed_iso(seed, path)` make the isolated network and the cloud-init NoCloud seed.
"""

from __future__ import annotations

from gpulab.vm.connection import DEFAULT_URI, connect
from gpulab.vm.host import Gpu, Host, NumaCell, discover_host
from gpulab.vm.lifecycle import Outcome, define, destroy, start, undefine
from gpulab.vm.network import ensure_network, render_network
from gpulab.vm.pci import PciAddress
from gpulab.vm.plan import Plan, PlanCheck, plan
from gpulab.vm.rendering import render
from gpulab.vm.seed import Seed, build_seed_iso, render_seed
from gpulab.vm.select import select_gpus
from gpulab.vm.spec import CloudInitSpec, DiskSpec, KernelBoot, NetworkSpec, VmSpec, load_spec, spec_from_dict

__all__ = [
    "DEFAULT_URI",
    "CloudInitSpec",
    "DiskSpec",
    "Gpu",
    "Host",
    "KernelBoot",
    "NetworkSpec",
    "NumaCell",
    "Outcome",
    "PciAddress",
    "Plan",
    "PlanCheck",
    "Seed",
    "VmSpec",
    "build_seed_iso",
    "connect",
    "define",
    "destroy",
    "discover_host",
    "ensure_network",
    "load_spec",
    "plan",
    "render",
    "render_network",
    "render_seed",
    "select_gpus",
    "spec_from_dict",
    "start",
    "undefine",
]

# Besides this face, the modules other packages may import (tests/test_import_graph.py holds every import to them).
DOORS: tuple[str, ...] = ()
