"""Today's builds (the newest PyTorch and TensorFlow releases in matrix.yml) and the drivers that run them."""

from __future__ import annotations

from gpulab.compat import current, min_driver_for_cuda, versions
from gpulab.compat.data import load_matrix
from gpulab.names import Architecture


def test_current_builds_are_the_newest_releases_with_kernels_for_the_gpu():
    torch, tf = current.newest_releases()
    assert torch == max((r.version for r in load_matrix().torch), key=versions.key)
    builds = current.current_builds("6.0")
    assert {b.framework for b in builds} == {"PyTorch", "TensorFlow"}
    assert all(b.version.split("+")[0] in (torch, tf) for b in builds)
    # Oldest driver first, each the CUDA minor-version-compatibility floor of its build's CUDA.
    assert [b.min_driver for b in builds] == sorted((b.min_driver for b in builds), key=versions.key)
    assert all(b.min_driver == min_driver_for_cuda(b.cuda, minor_compat=True) for b in builds)
    assert current.current_builds("3.7") == ()  # no current build ships Kepler kernels


def test_driver_age_names_what_the_driver_runs_and_what_today_needs():
    assert current.driver_age("580.95.05", "6.0") is None
    old = current.driver_age("418.87", "6.0")
    assert old is not None and (old.max_cuda, old.predates) == ("10.1", None)
    assert old.needs is not None and old.needs.cuda.startswith("12.")
    assert current.driver_age("440.64", "7.5") is not None
    pre = current.driver_age("375.66", "6.0")
    assert pre is not None and (pre.max_cuda, pre.predates) == (None, "R384")
    kepler = current.driver_age("470.82.01", "3.7")
    assert kepler is not None and kepler.builds == () and kepler.needs is None and kepler.max_cuda == "11.4"


def test_first_branch_and_profiles_for_a_gpu():
    assert current.first_branch_for(Architecture.PASCAL, "525.60.13") == "R525"
    assert current.first_branch_for(Architecture.KEPLER, "525.60.13") is None
    assert "legacy-2018" in current.profiles_for(Architecture.KEPLER, "3.7")
    assert "modern" not in current.profiles_for(Architecture.KEPLER, "3.7")
    assert current.profiles_for(Architecture.FERMI, "2.0") == []
