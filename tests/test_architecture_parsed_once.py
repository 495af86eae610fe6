"""A GPU's architecture is a value type: gpulab.names.Architecture, the matrix's architectures ordered by age (a str
enum whose value is the matrix's name, `.driver_name` the one drivers report), or for one a driver names that the
matrix does not list (newer than it: NVML's Rubin) an UnlistedArchitecture holding the driver's text. Its parsers read
a name at the edges only: matrix.yml, the pre-flight's target stack, NVML and nvidia-smi, a recorded fingerprint and
`--precision-plan`. Below the edges every record holds the value, and an order is asked with `>=`, not an index."""

from __future__ import annotations

import ast
import json
import typing
from pathlib import Path

import pytest

from gpulab.compat import GpuSpec, all_gpus
from gpulab.compat.data import BranchEntry, load_raw, parse_matrix
from gpulab.compat.existing import decide
from gpulab.compat.resolve import TargetGpu
from gpulab.errors import GpulabError, UnknownValue
from gpulab.hw.discover import fingerprint
from gpulab.names import ARCHITECTURES, Architecture, ReportedArchitecture, UnlistedArchitecture
from gpulab.records import Fingerprint, GpuInfo
from gpulab.validation.session import Options
from gpulab.workloads import precision_plan
from gpulab.workloads.precision_plan import PrecisionPlan
from vocabulary_reads import compared_with, offenders, quiet_edges, text_reads

FIXTURES = Path(__file__).parent / "fixtures"
EDGES = {
    "src/gpulab/names.py": "the parser",
    "src/gpulab/compat/data.py": "matrix.yml",
    "src/gpulab/compat/existing.py": "the pre-flight's target stack (an Ansible fact)",
    "src/gpulab/compat/lifecycle.py": "the pre-flight's target stack (an Ansible fact)",
    "src/gpulab/hw/nvml.py": "nvmlDeviceGetArchitecture's code",
    "src/gpulab/hw/smi/xml.py": "nvidia-smi's <product_architecture>",
    "src/gpulab/records/machine.py": "a recorded fingerprint",
    "src/gpulab/workloads/precision_plan.py": "--precision-plan (the parser of the architectures with a plan)",
    "src/gpulab/validation/plugin.py": "pytest validate/ --precision-plan",
}
# Every way an architecture is spelt: the matrix's names, the drivers' where they differ, and one newer than both.
TEXTS = {*ARCHITECTURES, *(a.driver_name for a in Architecture), "Rubin"}


def _architecture_reads(tree: ast.AST) -> list[str]:
    """Code that reads an architecture's name: a parser called (Architecture.parse, parse_reported, from_nvml,
    Architecture("Ada"), --precision-plan's plan_architecture), a membership test in the architecture names, or the
    spelling table used."""
    return text_reads(
        tree,
        types=("Architecture", "UnlistedArchitecture"),
        parsers=("parse", "parse_reported", "from_nvml"),
        functions=("plan_architecture", "precision_plan.plan_architecture"),
        names="ARCHITECTURES",
        table="_ARCHITECTURE_SPELLINGS",
    )


def test_no_module_but_the_edges_reads_an_architectures_name() -> None:
    assert offenders(_architecture_reads, EDGES) == {}


def test_every_edge_named_still_reads_one() -> None:
    assert quiet_edges(_architecture_reads, EDGES) == []


def test_the_check_finds_each_way_an_architecture_was_read() -> None:
    source = (
        "a = Architecture.parse(x)\nb = names.Architecture.parse_reported(x)\nc = Architecture.from_nvml(8)\n"
        'd = Architecture("Ada")\ne = x in names.ARCHITECTURES\nf = _ARCHITECTURE_SPELLINGS[x]\n'
        'g = plan_architecture(x)\nh = UnlistedArchitecture("Rubin")\n'
    )
    assert len(_architecture_reads(ast.parse(source))) == 8
    quiet = "a = spec.architecture >= Architecture.AMPERE\nb = list(Architecture)\nc = arch in branch.architectures\n"
    assert _architecture_reads(ast.parse(quiet)) == []


def test_no_module_compares_an_architecture_with_its_name() -> None:
    def compared(tree: ast.AST) -> list[str]:
        return compared_with(tree, TEXTS)

    assert offenders(compared, ["src/gpulab/names.py"]) == {}
    source = 'a = spec.architecture == "Hopper"\nb = x in ("Pascal", "Volta")\nc = arch is Architecture.ADA\n'
    assert len(compared(ast.parse(source))) == 2


@pytest.mark.parametrize("member", list(Architecture), ids=str)
def test_each_architecture_is_read_from_its_spellings_and_written_as_its_value(member: Architecture) -> None:
    for spelling in (member.value, member.driver_name, member.value.upper(), f" {member.driver_name.lower()} "):
        assert Architecture.parse(spelling) is member is Architecture.parse_reported(spelling)
    assert Architecture.parse(member) is member
    assert str(member) == f"{member}" == member.value and json.dumps(member) == json.dumps(member.value)


def test_the_order_is_age_and_only_between_architectures() -> None:
    assert list(Architecture) == sorted(Architecture, key=lambda a: ARCHITECTURES.index(a.value))
    assert Architecture.ADA < Architecture.HOPPER and Architecture.AMPERE >= Architecture.AMPERE
    assert sorted([Architecture.HOPPER, Architecture.ADA, Architecture.AMPERE]) == [
        Architecture.AMPERE,
        Architecture.ADA,
        Architecture.HOPPER,
    ]
    assert max(Architecture) is Architecture.BLACKWELL and Architecture.ADA.driver_name == "Ada Lovelace"
    with pytest.raises(TypeError, match="parse it first"):
        _ = Architecture.HOPPER < "Ampere"  # alphabetically Ampere is first: never compared as text
    with pytest.raises(TypeError):
        _ = [Architecture.HOPPER, UnlistedArchitecture("Rubin")].sort()


def test_an_architecture_newer_than_the_matrix_is_held_as_the_drivers_text() -> None:
    rubin = Architecture.parse_reported("Rubin")
    assert rubin == UnlistedArchitecture("Rubin") == Architecture.from_nvml(13)
    assert str(rubin) == rubin.driver_name == "Rubin" and not isinstance(rubin, str)
    assert Architecture.from_nvml(8) is Architecture.ADA and Architecture.from_nvml(0) is None
    with pytest.raises(UnknownValue) as err:
        Architecture.parse("Rubin", who="--precision-plan")  # the matrix has nothing to say of it
    assert (err.value.what, err.value.value, err.value.choices) == ("architecture", "Rubin", ARCHITECTURES)
    assert (
        str(err.value) == f"--precision-plan: unknown architecture 'Rubin'; choose one of: {', '.join(ARCHITECTURES)}"
    )


@pytest.mark.parametrize("bad", ["", "  ", None, 9, True])
def test_a_value_that_names_nothing_is_one_error_with_the_choices(bad: object) -> None:
    for parse in (Architecture.parse, Architecture.parse_reported):
        with pytest.raises(UnknownValue) as err:
            parse(bad)
        assert (err.value.value, err.value.choices) == (bad, ARCHITECTURES)


def test_the_records_hold_the_type() -> None:
    assert typing.get_type_hints(GpuInfo)["architecture"] == ReportedArchitecture | None
    assert typing.get_type_hints(GpuSpec)["architecture"] is Architecture
    assert typing.get_type_hints(BranchEntry)["architectures"] == tuple[Architecture, ...]
    assert typing.get_type_hints(BranchEntry)["open_kernel_modules"] == Architecture | None
    assert typing.get_type_hints(TargetGpu)["architecture"] is Architecture
    assert typing.get_type_hints(PrecisionPlan)["architecture"] == ReportedArchitecture | None
    assert typing.get_type_hints(Options)["precision_plan"] == Architecture | None
    assert all(isinstance(s.architecture, Architecture) for s in all_gpus())


def test_matrix_yml_is_read_into_members_and_a_bad_name_is_named() -> None:
    raw = load_raw()
    gpus = [{**raw["gpus"][0], "architecture": "Tesla"}, *raw["gpus"][1:]]
    with pytest.raises(GpulabError, match=r"matrix.yml: gpus\[0\].architecture='Tesla' is not one of Fermi, Kepler"):
        parse_matrix({**raw, "gpus": gpus})


def test_a_capture_and_its_fingerprint_read_the_drivers_name_and_write_it_back() -> None:
    fp = fingerprint(smi_xml=FIXTURES / "captures" / "rtx-4090-tlimit.xml", probe_frameworks=False)
    assert fp.gpus[0].architecture is Architecture.ADA
    written = fp.to_dict()
    assert written["gpus"][0]["architecture"] == "Ada Lovelace"  # as the driver wrote it, as reports always held it
    again = Fingerprint.from_dict(json.loads(json.dumps(written)))
    assert again.gpus[0].architecture is Architecture.ADA and again.to_dict() == written
    newer = {**written, "gpus": [{**written["gpus"][0], "architecture": "Rubin"}]}
    assert Fingerprint.from_dict(newer).gpus[0].architecture == UnlistedArchitecture("Rubin")
    assert Fingerprint.from_dict(newer).to_dict()["gpus"][0]["architecture"] == "Rubin"


def test_precision_plan_reads_an_architecture_with_a_plan_once() -> None:
    assert precision_plan.plan_architecture(" Volta ") is Architecture.VOLTA
    assert precision_plan.plan_architecture("ada lovelace") is Architecture.ADA
    with pytest.raises(UnknownValue) as err:
        precision_plan.plan_architecture("kepler")  # an architecture, but the matrix lists no GPU of it to plan by
    assert str(err.value).startswith("--precision-plan: unknown architecture 'kepler'; choose one of: pascal")
    plan = precision_plan.for_architecture(Architecture.VOLTA)
    assert plan.architecture is Architecture.VOLTA and plan.to_dict()["architecture"] == "Volta"
    reported = precision_plan.for_gpu(None, "8.9", Architecture.ADA)
    assert reported is not None and reported.to_dict()["architecture"] == "Ada Lovelace"  # as its driver named it
    assert precision_plan.for_gpu(None, "9.0", None).to_dict()["architecture"] == "sm_9.0"


def test_the_target_stack_names_an_architecture_and_a_bad_one_is_named() -> None:
    facts = {"packages": [{"name": "nvidia-driver", "version": "580.95.05-1"}], "dkms": [], "loaded": None}
    target = {"driver": "580.95.05", "gpus": [{"name": "H100 SXM5", "architecture": "Hopper"}], "cuda": []}
    assert decide(facts, target, "keep").action == "keep"
    blackwell = {**target, "gpus": [{"name": "B200", "architecture": "blackwell"}]}
    assert (
        "driven only by the open kernel modules"
        in decide({**facts, "flavour": "proprietary"}, blackwell, "keep").message
    )
    with pytest.raises(UnknownValue, match=r"unknown gpulab_target_stack gpus\[\].architecture 'Hoper'"):
        decide(facts, {**target, "gpus": [{"name": "H100 SXM5", "architecture": "Hoper"}]}, "keep")
