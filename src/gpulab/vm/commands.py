"""`gpulab vm host | plan | define | start | destroy | undefine`: GPU-passthrough VMs on libvirt.

Exit 0 when done (also when nothing needed doing), 2 on bad input or a refused plan. With --json, define,
start, destroy and undefine print {"changed": ..., ...} so automation can report changes truthfully.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError

_STATUS_MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}


def _connect(args: argparse.Namespace) -> Any:
    from gpulab.vm.connection import connect

    return connect(args.connect)


def _root(args: argparse.Namespace) -> Path | None:
    root: Path | None = args.root
    if root is not None and not (root / "sys").is_dir():
        raise GpulabError(f"--root {root}: no sys/ directory there; point it at a directory holding a sysfs tree.")
    return root


def _spec(args: argparse.Namespace) -> Any:
    from gpulab.vm.spec import load_spec

    spec = load_spec(args.spec)
    if args.gpus is not None:
        spec = dataclasses.replace(spec, gpus=args.gpus)
    return spec


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _gib(value: int) -> str:
    return f"{value / (1 << 30):.1f} GiB"


def cmd_host(args: argparse.Namespace) -> int:
    from gpulab.vm.cputopo import cores_of, smt_width
    from gpulab.vm.host import discover_host
    from gpulab.vm.sysfs import format_cpulist

    host = discover_host(_connect(args), _root(args))
    if args.json:
        _print_json(host.to_dict())
        return 0
    iommu = {True: "on", False: "OFF (PCI passthrough impossible until it is enabled)", None: "unknown"}
    print(f"libvirt:  {host.uri}")
    print(f"IOMMU:    {iommu[host.iommu_enabled]}")
    memory = "unknown" if host.memory_mib is None else _gib(host.memory_mib << 20)
    print(f"CPUs:     {host.cpus if host.cpus is not None else 'unknown'}; memory {memory}")
    ir = host.interrupt_remapping
    if ir is None:
        print("IRQ remap: unknown (no sysfs read)")
    else:
        state = {True: "on", False: "OFF", None: "unknown"}[ir.enabled]
        unsafe = "; vfio allow_unsafe_interrupts SET" if ir.allow_unsafe else ""
        print(f"IRQ remap: {state} ({ir.detail}){unsafe}")
    if host.vfio_modules is not None:
        modules = ", ".join(f"{m} {'loaded' if ok else 'NOT loaded'}" for m, ok in host.vfio_modules.items())
        print(f"VFIO:     {modules}")
    else:
        print("VFIO:     unknown (no sysfs read)")
    if host.kernel_cmdline is not None:
        print(f"cmdline:  {host.kernel_cmdline}")
    print("NUMA:")
    if not host.numa:
        print("  unknown (libvirt reports no topology and no sysfs was read)")
    for node in host.numa:
        pages = ", ".join(
            f"{kib // 1024 if kib < 1 << 20 else kib >> 20}{'M' if kib < 1 << 20 else 'G'} {free}/{total} free"
            for kib, (free, total) in sorted(node.hugepages.items())
        )
        memory = "" if node.memory_mib is None else f"; memory {_gib(node.memory_mib << 20)}"
        print(
            f"  node {node.node}: CPUs {format_cpulist(node.cpus)}" + (f"; hugepages {pages}" if pages else "") + memory
        )
        if host.siblings:
            cores = cores_of(node.cpus, host.siblings)
            pairs = " ".join(format_cpulist(core) for core in cores[:4]) + (" ..." if len(cores) > 4 else "")
            print(f"    {len(cores)} cores, {smt_width(cores)} threads each: {pairs}")
    print(f"GPUs ({len(host.gpus)}):")
    for gpu in host.gpus:
        link = gpu.device.link
        numa = gpu.numa_node if gpu.numa_node is not None else "?"
        print(f"  {gpu.address}  {gpu.name} ({gpu.device.pci_id})  NUMA {numa}  PCIe {link if link else '?'}")
        members = []
        for address in gpu.device.iommu_members:
            device = host.devices.get(address)
            members.append(f"{address} {device.kind if device else '?'}")
        group = gpu.device.iommu_group
        print(f"      IOMMU group {group if group is not None else '?'}: {', '.join(members) or '-'}")
        companions = ", ".join(f"{c.address} {c.kind}" for c in gpu.companions) or "none"
        bar = f"{_gib(gpu.bar_bytes)} ({gpu.bar_source})"
        print(f"      companions: {companions}; driver: {gpu.driver or '?'}; BARs {bar}")
        extra = [f"P2P domain: {gpu.domain.label}"]
        if gpu.boot_vga:
            extra.append("boot VGA (drives the host's console)")
        extra += [f"in its slot, no GPU function: {f.address} {f.kind}" for f in gpu.foreign]
        print(f"      {'; '.join(extra)}")
        if gpu.reset_methods is not None:
            none = "NONE (a VM reboot may hang the card)"
            if gpu.companions or gpu.foreign:
                none = "none of its own (multi-function card: vfio-pci resets its slot's bus)"
            print(f"      reset: {', '.join(gpu.reset_methods) or none}")
    if host.nvswitches:
        print(f"NVSwitches ({len(host.nvswitches)}):")
        for device in host.nvswitches:
            number = "?" if device.iommu_group is None else str(device.iommu_group)
            print(f"  {device.describe()}  IOMMU group {number}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from gpulab.vm.plan import plan

    p = plan(_connect(args), _spec(args), root=_root(args))
    if args.json:
        _print_json(p.to_dict())
    elif args.xml:
        sys.stdout.write(p.xml)
    else:
        sys.stdout.write(p.xml)
        print(f"\nchecks for VM {p.spec.name} on {p.host.uri}:")
        for check in p.checks:
            print(f"  [{_STATUS_MARK[check.status]}] {check.name}: {check.message}")
    p.raise_for_failures()
    return 0


def _report(outcome: Any, as_json: bool) -> int:
    if as_json:
        _print_json(outcome.to_dict())
        return 0
    for message in outcome.messages:
        print(message)
    if outcome.diff:
        sys.stdout.write(outcome.diff)
    print(
        f"{outcome.name}: {'changed' if outcome.changed else 'unchanged'}"
        + (f", {outcome.state}" if outcome.state else "")
        + (f", ip {outcome.ip}" if outcome.ip else "")
    )
    return 0


def cmd_define(args: argparse.Namespace) -> int:
    from gpulab.vm.lifecycle import define

    return _report(define(_connect(args), _spec(args), root=_root(args)), args.json)


def cmd_start(args: argparse.Namespace) -> int:
    from gpulab.vm.lifecycle import start

    if not math.isfinite(args.timeout) or args.timeout <= 0:  # float() takes 'nan' and 'inf'
        raise GpulabError(f"--timeout {args.timeout}: give a positive number of seconds.")
    return _report(start(_connect(args), args.name, wait_ssh=args.wait_ssh, timeout=args.timeout), args.json)


def cmd_destroy(args: argparse.Namespace) -> int:
    from gpulab.vm.lifecycle import destroy

    return _report(destroy(_connect(args), args.name), args.json)


def cmd_undefine(args: argparse.Namespace) -> int:
    from gpulab.vm.lifecycle import undefine

    return _report(undefine(_connect(args), args.name, remove_storage=args.remove_storage), args.json)


def add_commands(sub: Any) -> None:
    """Register `vm` and its sub-commands on the top-level subparsers object."""
    from gpulab.vm.connection import DEFAULT_URI

    vm = sub.add_parser(
        "vm",
        help="GPU-passthrough VMs on libvirt: host discovery, plan, define, start, destroy, undefine",
        description="GPU-passthrough VMs on libvirt. The VM spec (YAML) is documented in docs/vm.md.",
    )
    vsub = vm.add_subparsers(dest="vm_command", required=True, metavar="SUBCOMMAND")

    def common(p: argparse.ArgumentParser, facts: bool = False) -> None:
        p.add_argument("--connect", default=DEFAULT_URI, metavar="URI", help=f"libvirt URI (default {DEFAULT_URI})")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if facts:
            p.add_argument(
                "--root",
                type=Path,
                metavar="DIR",
                help="read sysfs/proc facts (VFIO, hugepages, BARs) under DIR; default: / for a local URI, else none",
            )

    host = vsub.add_parser("host", help="GPUs, IOMMU groups, NUMA, VFIO and hugepages of the host")
    common(host, facts=True)
    host.set_defaults(func=cmd_host)

    for name, func, text in (
        ("plan", cmd_plan, "print the domain XML and the checks; change nothing (exit 2 if a check fails)"),
        ("define", cmd_define, "define the VM (network, disk overlay, cloud-init seed, domain); no-op if unchanged"),
    ):
        p = vsub.add_parser(name, help=text)
        p.add_argument("spec", type=Path, metavar="SPEC", help="VM spec YAML (see docs/vm.md)")
        p.add_argument(
            "--gpus", metavar="SELECTOR", help="override the spec's gpus: all, 4x10de:15f8, 2xP100, 0000:3b:00.0,..."
        )
        common(p, facts=True)
        if name == "plan":
            p.add_argument("--xml", action="store_true", help="print only the domain XML")
        p.set_defaults(func=func)

    start = vsub.add_parser("start", help="start the VM (optionally wait until SSH answers)")
    start.add_argument("name", metavar="NAME")
    start.add_argument("--wait-ssh", action="store_true", help="wait for a DHCP address and an SSH banner")
    start.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS", help="how long to wait (default 300)")
    common(start)
    start.set_defaults(func=cmd_start)

    destroy = vsub.add_parser("destroy", help="power the VM off")
    destroy.add_argument("name", metavar="NAME")
    common(destroy)
    destroy.set_defaults(func=cmd_destroy)

    undefine = vsub.add_parser("undefine", help="remove the VM's definition (it must be stopped)")
    undefine.add_argument("name", metavar="NAME")
    undefine.add_argument("--remove-storage", action="store_true", help="also delete the overlay and seed gpulab made")
    common(undefine)
    undefine.set_defaults(func=cmd_undefine)
