"""Driver branches' end of life (the matrix's driver_lifecycle, with sources) and the one branch a fleet runs."""

from __future__ import annotations

import datetime

from gpulab.compat.data import load_matrix
from gpulab.compat.lifecycle import eol_warning, fleet_branch, past_end
from gpulab.compat.resolve import Request, resolve

TODAY = datetime.date(2026, 11, 25)
P100, V100, H100, H200 = "10de:15f8", "10de:1db1", "10de:2330", "10de:2335"


def plan(pci_id: str, source: str) -> dict:
    target, problems = resolve(
        Request(
            gpus=[{"pci_id": pci_id, "address": "0000:01:00.0", "name": "x"}],
            distribution="Debian",
            distribution_version="12",
            host_python="3.11",
            sources={"driver": source, "cuda": source, "cudnn": "cuda_repo" if source == "cuda_repo" else "wheel"},
            cudnn_wheels={"9.10-cu11": {}},
        )
    )
    assert not problems, problems
    return dict(target)


def test_every_recorded_end_of_life_has_a_source_and_r580_is_the_long_term_branch():
    lifecycle = {x.branch: x for x in load_matrix().lifecycle}
    assert all(x.source.startswith("NVIDIA") and "https://docs.nvidia.com/" in x.source for x in lifecycle.values())
    assert lifecycle["R580"].long_term and lifecycle["R580"].support_end == "2028-06"
    assert lifecycle["R535"].long_term and lifecycle["R535"].support_end == "2026-06"
    assert past_end(535, TODAY) and not past_end(580, TODAY)
    assert not past_end(535, datetime.date(2026, 6, 30))  # supported through its last month


def test_a_plan_past_its_branch_s_end_is_warned_about_naming_the_supported_long_term_branch():
    warning = eol_warning(plan(P100, "distro")["driver"], TODAY)
    assert warning is not None
    assert warning.startswith("driver R535 reached its end of life in 2026-06 (NVIDIA Data Center Drivers 615")
    assert warning.endswith(
        "R580 is the long-term branch supported until 2028-06: set nvidia_driver_source: cuda_repo (NVIDIA's "
        "repository or a mirror) or gpulab_stack.driver to use it."
    )
    assert eol_warning(plan(P100, "cuda_repo")["driver"], TODAY) is None


def test_p100_v100_and_h100_from_nvidia_s_repository_share_the_long_term_r580():
    plans = {"p100": plan(P100, "cuda_repo"), "v100": plan(V100, "cuda_repo"), "h100": plan(H100, "cuda_repo")}
    # Each host's newest: R580 is the last branch for Pascal and Volta, the H100 gets a newer one.
    assert [plans[h]["driver_branch"] for h in ("p100", "v100", "h100")] == ["580", "580", "595"]
    assert fleet_branch(plans, TODAY) == 580


def test_a_fleet_on_debian_s_archive_keeps_its_one_packaged_branch():
    plans = {"p100": plan(P100, "distro"), "h100": plan(H100, "distro")}
    assert fleet_branch(plans, TODAY) == 535  # no supported long-term branch there: the common planned one


def test_no_common_branch_leaves_each_host_its_plan():
    plans = {"p100": {**plan(P100, "cuda_repo"), "driver": "470.256.02"}, "h200": plan(H200, "cuda_repo")}
    assert fleet_branch(plans, TODAY) is None  # R470 cannot drive an H200, and no newer branch is <= 470
