"""The Debian test root: what the image promises the role tests, and that its mounts never leak."""

from __future__ import annotations

from pathlib import Path

import pytest

from guest import image, prereq


def test_missing_prerequisite_skips_or_fails_under_require_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPULAB_REQUIRE_ALL", raising=False)
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr(prereq, "provided_by", lambda: {"sh": "dash", "no-such-tool": "no-such-package"})
    with pytest.raises(pytest.skip.Exception, match=r"needs no-such-tool \(apt-get install no-such-package\)"):
        prereq.require_root_tools("sh", "no-such-tool")
    monkeypatch.setenv("GPULAB_REQUIRE_ALL", "1")
    with pytest.raises(pytest.fail.Exception, match="GPULAB_REQUIRE_ALL=1"):
        prereq.require_root_tools("no-such-tool")
    prereq.require_root_tools("sh")  # present: no exception


def test_a_tool_missing_from_the_package_table_fails_on_every_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    # Even where it is installed: a tool the table lacks would pass here and fail on a fresh machine.
    monkeypatch.delenv("GPULAB_REQUIRE_ALL", raising=False)
    monkeypatch.setattr("os.geteuid", lambda: 0)
    with pytest.raises(pytest.fail.Exception, match=r"the tests look for cat, but no package in .*system-packages"):
        prereq.require_root_tools("sh", "cat")
    with pytest.raises(pytest.fail.Exception, match=r"the tests look for /etc/hostname, but no package"):
        prereq.require_file("/etc/hostname")


@pytest.mark.slow
def test_root_has_what_the_role_tests_rely_on(debian_root: Path) -> None:
    release = image.kernel_release(debian_root)
    assert (debian_root / f"boot/initrd.img-{release}").is_file()
    assert (debian_root / f"usr/src/linux-headers-{release}").is_dir()
    sources = (debian_root / "etc/apt/sources.list.d/debian.sources").read_text()
    assert "Components: main contrib non-free non-free-firmware" in sources
    out = image.in_chroot(debian_root, "sh", "-c", "python3 -c 'import apt; print(\"apt ok\")'; id -nG gpulab").stdout
    assert "apt ok" in out
    assert "sudo" in out.split()
    # /sys is mounted: lspci sees this machine's PCI bus from inside the chroot.
    assert image.in_chroot(debian_root, "lspci", "-n").stdout.strip()
    # Services cannot start inside the chroot while it is mounted.
    assert image.in_chroot(debian_root, "sh", "-c", "/usr/sbin/policy-rc.d; echo $?").stdout.strip() == "101"


@pytest.mark.slow
def test_mounts_are_released_even_when_the_body_fails(guest_rootfs: Path, tmp_path: Path) -> None:
    root = image.unpack_root(tmp_path / "root")
    archives = tmp_path / "archives"
    with pytest.raises(RuntimeError, match="boom"), image.chroot_mounts(root, apt_cache=archives):
        assert len(image.mounts_under(root)) == 6
        raise RuntimeError("boom")
    assert image.mounts_under(root) == []
    assert not (root / "usr/sbin/policy-rc.d").exists()
    image.remove_root(root)
    assert not root.exists()


@pytest.mark.slow
def test_unpack_refuses_a_non_empty_directory(guest_rootfs: Path, tmp_path: Path) -> None:
    (tmp_path / "stray").write_text("x")
    with pytest.raises(RuntimeError, match="not empty"):
        image.unpack_root(tmp_path)
