"""A real Debian 12 guest for the tests: a debootstrap root for chroot runs, and a VM booted under libvirt.

Fixtures (registered in tests/conftest.py):

- ``require_root_tools`` -- a callable, ``require_root_tools("virsh", "mkfs.ext4")``: root plus these
  executables, or the test skips with one line naming what is missing and the apt package that brings it. With
  ``GPULAB_REQUIRE_ALL=1`` (CI) a missing prerequisite fails instead. The same rule for Python modules:
  ``guest.prereq.require_module("libvirt", "vm")``; for anything else: ``guest.prereq.missing("why")``.
- ``guest_rootfs`` (session) -- the path of the cached root tarball (Debian 12 minbase with openssh-server,
  python3, python3-apt, python3-venv, the amd64 kernel and its headers, systemd, udev, iproute2, dbus, kmod,
  pciutils, initramfs-tools, ca-certificates, sudo; apt sources main contrib non-free non-free-firmware for
  bookworm, -updates and -security, package lists already fetched). Built on first use (~3.5 min cold with
  downloads, less when the .deb cache is warm) under ``${GPULAB_CI_CACHE:-/var/cache/gpulab-ci}/guest/``.
- ``debian_root`` (function) -- a fresh unpacked copy of that root (~10 s) at ``tmp_path/"root"``, with /proc,
  /sys, /dev, /dev/pts and resolv.conf bind-mounted, a policy-rc.d that keeps services from starting, and
  ``/var/cache/apt/archives`` seeded from the shared ``.../apt-archives`` cache so repeated runs download each
  .deb once. Yields the root's path; unmounted and deleted afterwards. Use it with Ansible's
  ``community.general.chroot`` connection (``ansible_host=<root>``) or ``guest.image.in_chroot(root, *cmd)``.
- ``trixie_rootfs`` (session), ``trixie_root`` (function) -- the same for Debian 13 (trixie): its own tarball
  (~2 min cold) and apt archive cache (``.../apt-archives-trixie``).
- ``libvirt_system`` (session) -- an open ``qemu:///system`` connection (gpulab.vm.connect); virtlogd and
  libvirtd are started by hand when they do not run (``/dev/kvm`` made group-kvm first, or every libvirt call
  re-probes QEMU), and test guests left by dead sessions are removed.
- ``booted_guest`` (session) -- a ``guest.ssh.Guest`` for a VM booted from that root: gpulab.vm renders
  libvirt/domain.xml.j2 for it (domain type ``qemu``, cpu ``maximum``, no hostdevs), makes its qcow2 overlay on
  the cached base disk, its cloud-init seed (a key generated for the session) and the isolated network
  ``gpulab-test`` (``192.168.213.1/24``); the kernel boots directly. Ready when systemd has finished booting
  (1.5-2.5 min under TCG). ``guest.ssh("cmd", ...)``; ``guest.host``, ``.user`` (``gpulab``, passwordless
  sudo), ``.key``, ``.kernel_release``, ``.host_address`` (this machine on the guest's network: serve apt repos
  or a PyPI mirror there; the guest has no other network), ``.boot_seconds``, ``.console_log``;
  ``guest.inventory(path, group="gpu_nodes", **hostvars)`` writes an Ansible inventory for it
  (``guest.ansible_vars()`` gives the connection variables alone). Destroyed and undefined at session end.

The building blocks, for tests that need another shape (e.g. one root shared by a module):
``guest.image.rootfs_tarball(suite="bookworm")``, ``unpack_root(dest, suite="bookworm")`` (also ``"trixie"``,
Debian 13: the ``trixie_root`` fixture), ``chroot_mounts(root, apt_cache=None)`` (a context
manager; always unmounts), ``remove_root(root)`` (never crosses a mount), ``in_chroot(root, *cmd)``,
``kernel_release(root)``; ``guest.disk.base_disk()`` (the root as an ext4 qcow2 plus its kernel and initrd,
cached), ``guest.boot.boot(conn, name, key)``, ``guest.boot.remove_guest(conn, name)``.

The image includes cloud-init, trimmed for TCG: one stage (network) with the modules a gpulab seed uses
(hostname, users and keys, SSH); the local, config and final stages are masked, each costing 10-70 s of Python
start-up under emulation.

"""
