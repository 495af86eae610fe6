"""From report schema /5 the all-reduce probes' rows name their launcher ddp (torchrun's one process per device in
a process group, as DDP) and their transport (nccl, gloo) in the row's comm_backend; before, the transport was the
launcher. An older report's probe row is read as /5 writes it, so old and new rows show, group and compare alike
("ddp · nccl"), and no /5 report can name a transport as a launcher."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gpulab.errors import GpulabError
from gpulab.names import CommBackend, Framework, Launcher, Precision
from gpulab.probes.nccl_tests import parse_all_reduce_json
from gpulab.records import READABLE_SCHEMAS, SCHEMA_ID, Result
from gpulab.report.compare import compare
from gpulab.report.io import ReportError, load_report, report_from_data, report_json, schema_errors
from gpulab.report.render import to_markdown
from gpulab.report.scaling import scaling, speedups
from report_builders import sample_report

REPORTS = Path(__file__).parent / "fixtures" / "reports"
V4 = REPORTS / "h200x2-standard-v4.json"  # a /4 report with one all-reduce probe row (launcher "nccl")
OLD = sorted(
    p for p in REPORTS.glob("*.json") if any(r["launcher"] == "nccl" for r in json.loads(p.read_text())["results"])
)


def _probe(backend: CommBackend = CommBackend.NCCL, value: float = 300.0) -> Result:
    return Result(
        "allreduce",
        Framework.TORCH,
        Launcher.DDP,
        2,
        Precision.FP32,
        value,
        "GB/s",
        devices=["cuda:0", "cuda:1"],
        params={"metric": "bus bandwidth", "correct": True},
        comm_backend=backend,
    )


def test_the_version_is_five_and_four_stays_readable() -> None:
    assert SCHEMA_ID == "gpulab.report/5" and READABLE_SCHEMAS[-2:] == ("gpulab.report/4", SCHEMA_ID)
    raw = json.loads(V4.read_text())
    assert raw["schema"] == "gpulab.report/4" and schema_errors(raw) == []


@pytest.mark.parametrize("path", OLD, ids=lambda p: p.stem)
def test_an_old_probe_row_in_is_ddp_with_its_transport_out(path: Path) -> None:
    """The migration, stated: a row written {"launcher": "nccl", "comm_backend": null} is read, and written back
    as /5, as {"launcher": "ddp", "comm_backend": "nccl"}; every other field of the row is as it was."""
    raw = json.loads(path.read_text())
    report = load_report(path)
    again = json.loads(report_json(report))
    assert again["schema"] == SCHEMA_ID and schema_errors(again) == []
    for before, row, after in zip(raw["results"], report.results, again["results"], strict=True):
        if before["launcher"] in ("nccl", "gloo"):
            assert (row.launcher, row.comm_backend) == (Launcher.DDP, CommBackend.parse(before["launcher"]))
            assert (after["launcher"], after["comm_backend"]) == ("ddp", before["launcher"])
            assert row.launched() == f"ddp · {before['launcher']}" and row.measures_transport()
            before = {**before, "launcher": "ddp", "comm_backend": before["launcher"]}
        elif raw["schema"] < "gpulab.report/4" and "backend" in (before.get("params") or {}):  # the /4 move
            params = {k: v for k, v in before["params"].items() if k != "backend"}
            before = {**before, "params": params, "comm_backend": before["params"]["backend"]}
        assert {k: v for k, v in after.items() if k in before} == before


def test_a_current_report_keeps_its_probe_rows_as_written() -> None:
    report = sample_report()
    report.results = [_probe(CommBackend.GLOO)]
    data = json.loads(report_json(report))
    assert (data["results"][0]["launcher"], data["results"][0]["comm_backend"]) == ("ddp", "gloo")
    assert report_from_data(data).results == report.results


def test_a_five_report_cannot_name_a_transport_as_its_launcher() -> None:
    report = sample_report()
    report.results = [_probe()]
    data = json.loads(report_json(report))
    data["results"][0]["launcher"] = "nccl"
    assert any("launcher" in e and "'nccl' is not one of" in e for e in schema_errors(data))
    with pytest.raises(ReportError, match=r"\$\.results\[0\] \(allreduce torch nccl n=2 fp32\)\.launcher"):
        report_from_data(data)
    data["schema"] = "gpulab.report/4"  # the same row in a /4 report is the probe's old spelling
    assert schema_errors(data) == [] and report_from_data(data).results[0].launched() == "ddp · nccl"
    forced = copy.deepcopy(report)
    forced.results[0].launcher = "nccl"  # type: ignore[assignment]  # what the writer refuses
    with pytest.raises(GpulabError, match=r"does not match gpulab\.report/5"):
        report_json(forced)


def test_old_and_new_probe_rows_compare_as_one_row() -> None:
    old = load_report(V4)
    new = copy.deepcopy(old)
    (probe,) = [r for r in new.results if r.workload == "allreduce"]
    probe.value *= 0.5
    c = compare([("/4", old), ("/5", report_from_data(json.loads(report_json(new))))])
    (row,) = [r for r in c.rows if r.key[0] == "allreduce"]
    assert row.key[2] == "ddp · nccl" and row.ratios[1] == pytest.approx(0.5)


def test_a_probe_over_gloo_and_one_over_nccl_stay_apart() -> None:
    """The transport was part of the row's key as its launcher; it still is, as "ddp · nccl" or "ddp · gloo"."""
    assert _probe(CommBackend.NCCL).key() != _probe(CommBackend.GLOO).key()
    ddp = Result("resnet50", Framework.TORCH, Launcher.DDP, 2, Precision.BF16, 1.0, "samples/s")
    with_backend = Result(
        "resnet50", Framework.TORCH, Launcher.DDP, 2, Precision.BF16, 1.0, "samples/s", comm_backend=CommBackend.NCCL
    )
    assert ddp.key() == with_backend.key() and with_backend.launched() == "ddp"  # a training row shows ddp alone


def test_the_views_show_the_transport_and_scaling_leaves_the_probe_out() -> None:
    report = load_report(V4)
    text = to_markdown(report)
    assert "| allreduce | torch | ddp · nccl | 2 |" in text
    probe = next(r for r in report.results if r.workload == "allreduce")
    one = Result(
        "allreduce", Framework.TORCH, Launcher.DDP, 1, Precision.FP32, 500.0, "GB/s", comm_backend=probe.comm_backend
    )
    assert scaling([one, probe]) == [] and speedups([one, probe]) == []


def test_nccl_tests_rows_name_ddp_over_nccl() -> None:
    data = {
        "config": {"nthreads": 1, "ngpus": 2, "iterations": 20},
        "results": [
            {"size": 1 << 28, "type": "float", "out_of_place": {"time": 1000.0, "alg_bw": 200.0, "bus_bw": 200.0}}
        ],
    }
    row = parse_all_reduce_json(data)
    assert (row.framework, row.launcher, row.comm_backend) == ("nccl-tests", Launcher.DDP, CommBackend.NCCL)
    assert row.launched() == "ddp · nccl" and isinstance(row.framework, Framework)
    report = sample_report()
    report.results = [row]
    assert schema_errors(json.loads(report_json(report))) == []


def test_the_schema_says_how_old_versions_name_the_probe() -> None:
    from gpulab.report.io import load_schema

    schema = load_schema()
    assert "/5 names the all-reduce probes' launcher ddp" in schema["properties"]["schema"]["description"]
    assert "nccl, gloo" in schema["$defs"]["reported_launcher_name"]["description"]
