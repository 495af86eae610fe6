"""The validation refuses a host whose new driver libraries sit over the old kernel module (a pending reboot)."""

from __future__ import annotations

from pathlib import Path

from gpulab.validation.pending_reboot import pending_reboot

LIB = "usr/lib/x86_64-linux-gnu"


def host(root: Path, loaded: str | None, libraries: str | None) -> Path:
    if loaded is not None:
        (root / "sys/module/nvidia").mkdir(parents=True)
        (root / "sys/module/nvidia/version").write_text(loaded + "\n")
    if libraries is not None:
        (root / LIB).mkdir(parents=True)
        (root / LIB / f"libnvidia-ml.so.{libraries}").write_text("")
        (root / LIB / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{libraries}")
    return root


def test_new_libraries_over_the_old_module_are_refused_in_one_line(tmp_path):
    line = pending_reboot(host(tmp_path, "535.261.03", "580.95.05"))
    assert line == (
        "a reboot is pending: the loaded NVIDIA kernel module is 535.261.03 but the installed driver libraries are "
        "580.95.05, so every new CUDA process fails with 'Driver/library version mismatch'. Reboot this host (or "
        "unload the nvidia modules and load the new ones), then run the validation."
    )


def test_a_matching_driver_or_no_loaded_module_passes(tmp_path):
    assert pending_reboot(host(tmp_path / "same", "580.95.05", "580.95.05")) is None
    assert pending_reboot(host(tmp_path / "unloaded", None, "580.95.05")) is None  # no GPU driven: other checks say
    assert pending_reboot(host(tmp_path / "none", "580.95.05", None)) is None
