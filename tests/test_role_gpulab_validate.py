"""playbooks/validate.yml on this machine (two inventory hosts over the local connection, no GPU): the suite is
shipped and run on the CPU, each report found through the run's record and fetched to the controller with the views
the node rendered, and compared as a fleet; a failed check fails the play after its report is fetched; a run that
leaves no record, and bad input, are refused with the fix."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from gpulab.report.io import load_report
from playbook import REPO, ansible_playbook

PLAYBOOK = REPO / "playbooks" / "validate.yml"
HOSTS = ("node-a", "node-b")


def inventory(tmp_path: Path, hosts=HOSTS, **extra) -> Path:
    """gpu_nodes = local-connection hosts running the suite from this test's own venv, into tmp_path."""
    hostvars = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False}
    common = {
        "gpulab_validate_venv": sys.prefix,
        "gpulab_validate_home": str(tmp_path / "node" / "{{ inventory_hostname }}"),
        "gpulab_validate_node_reports_dir": str(tmp_path / "node" / "{{ inventory_hostname }}" / "reports"),
        "gpulab_validate_reports_dir": str(tmp_path / "reports"),
        "gpulab_validate_controller_cache": str(tmp_path / "cache"),
        # Both "nodes" share this machine's two cores and run at once: their CPU figures differ by more than any
        # sensible threshold, so only a collapse would count as a regression here.
        "gpulab_validate_threshold": "99%",
        **extra,
    }
    data = {"all": {"vars": common, "children": {"gpu_nodes": {"hosts": {h: dict(hostvars) for h in hosts}}}}}
    path = tmp_path / f"inventory-{len(list(tmp_path.glob('inventory-*')))}.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def reports_of(tmp_path: Path, host: str) -> list[Path]:
    return sorted((tmp_path / "reports" / host).glob("report-*.json"))


@pytest.mark.slow
def test_two_nodes_validated_fetched_rendered_and_compared(tmp_path):
    first = ansible_playbook(PLAYBOOK, inventory(tmp_path))
    assert first.rc == 0, first.explain()
    assert "No NVIDIA GPU on node-a" in first.output  # the pre-flight's one line: the GPU roles skip here
    for host in HOSTS:
        [path] = reports_of(tmp_path, host)
        report = load_report(path)  # schema-checked
        assert report.fingerprint["gpus"] == []
        statuses = {c.status for c in report.checks}
        assert "pass" in statuses and not statuses & {"fail", "error"}
        assert any(r.device == "cpu" for r in report.results)  # the CPU probes ran
        assert path.with_suffix(".md").is_file() and path.with_suffix(".html").is_file()
        # Found through the run's record, not pytest's output; the node rendered the views and they came back.
        record = json.loads((tmp_path / "node" / host / "reports" / "last-run.json").read_text())
        assert record["schema"] == "gpulab.run-record/1" and record["host"] and record["tier"] == "quick"
        assert Path(record["report"]["json"]).name == path.name and record["exit_status"] == 0
        assert Path(record["report"]["md"]).read_text() == path.with_suffix(".md").read_text()
        n_pass = sum(c.status == "pass" for c in report.checks)
        assert record["counts"]["pass"] == n_pass > 0
        assert f"{host}: {n_pass} pass" in first.output
        suites = list((tmp_path / "node" / host / "suites").glob("validate-*/validate/conftest.py"))
        assert len(suites) == 1
        assert f"{host}: " in first.output and f"(tier quick) - {path}" in first.output
    [fleet] = sorted((tmp_path / "reports").glob("fleet-*.txt"))
    text = fleet.read_text()
    assert "verdict:" in text and all(str(reports_of(tmp_path, h)[0].name)[:20] in text for h in HOSTS)
    # The validation is an action (tag gpulab_validation): run and fetch report changed; the report is rendered once,
    # on the node, so the controller renders nothing.
    node_changes = {task for task, host in first.changed_tasks() if host in HOSTS}
    assert node_changes >= {"gpulab_validate : Run the validation suite", "gpulab_validate : Fetch the report"}
    assert "gpulab_validate : Render the report as Markdown and HTML (on the controller)" not in node_changes

    # Without the validation action the play is configuration only, and re-applying it changes nothing.
    again = ansible_playbook(PLAYBOOK, inventory(tmp_path), "--skip-tags", "gpulab_validation")
    assert again.rc == 0, again.explain()
    print(again.recap_text())
    assert all(again.recap()[h]["changed"] == 0 for h in HOSTS), again.changed_tasks()
    assert all(len(reports_of(tmp_path, h)) == 1 for h in HOSTS)

    # A baseline goes first in the fleet comparison.
    baseline = reports_of(tmp_path, "node-b")[0]
    extra = {"gpulab_validate_baseline": str(baseline), "gpulab_validate_pytest_args": ["-k", "probes"]}
    third = ansible_playbook(PLAYBOOK, inventory(tmp_path, hosts=("node-a",), **extra))
    assert third.rc == 0, third.explain()
    newest = max((tmp_path / "reports").glob("fleet-*.txt"))
    assert f"baseline: {baseline}" in " ".join(newest.read_text().split())
    assert len(reports_of(tmp_path, "node-a")) == 2


@pytest.mark.slow
def test_a_failed_check_fails_the_play_after_the_report_is_fetched(tmp_path):
    inv = inventory(tmp_path, hosts=("node-a",), gpulab_validate_expect_gpus=2,
                    gpulab_validate_pytest_args=["-k", "gpu_count"])  # fmt: skip
    run = ansible_playbook(PLAYBOOK, inv)
    assert run.rc != 0
    assert "1 check(s) failed on node-a - health.gpu_count: expected 2 GPUs" in " ".join(run.output.split())
    [path] = reports_of(tmp_path, "node-a")
    checks = {c["name"]: c["status"] for c in json.loads(path.read_text())["checks"]}
    assert checks == {"health.gpu_count": "fail"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"gpulab_validate_tier": "superfast"}, "gpulab_validate_tier must be one of: quick, standard, full"),
        ({"gpulab_validate_baseline": "/no/report.json"}, "gpulab_validate_baseline /no/report.json: no such file"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(tmp_path, extra, message):
    run = ansible_playbook(PLAYBOOK, inventory(tmp_path, hosts=("node-a",), **extra))
    assert run.rc != 0
    assert message in " ".join(run.output.split())
    assert not (tmp_path / "node").exists() and not (tmp_path / "reports").exists()


@pytest.mark.slow
def test_a_node_without_gpulab_is_told_how_to_get_it(tmp_path):
    run = ansible_playbook(PLAYBOOK, inventory(tmp_path, hosts=("node-a",), gpulab_validate_venv="/nonexistent/venv"))
    assert run.rc != 0
    assert "No gpulab venv at /nonexistent/venv on node-a. Fix: install it with the dl_frameworks role" in " ".join(
        run.output.split()
    )
    assert not (tmp_path / "reports").exists()


@pytest.mark.slow
def test_a_run_that_leaves_no_record_fails_naming_the_record_and_showing_pytest(tmp_path):
    """A run that ends without the record the role asked for (here a later --record sends it elsewhere) fails the
    play naming the file, with pytest's last lines; an earlier run's record is never taken for this run's."""
    elsewhere = tmp_path / "elsewhere.json"
    args = ["-k", "gpu_count", "--record", str(elsewhere)]
    record = tmp_path / "node" / "node-a" / "reports" / "last-run.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"schema": "gpulab.run-record/1"}))
    run = ansible_playbook(PLAYBOOK, inventory(tmp_path, hosts=("node-a",), gpulab_validate_pytest_args=args))
    assert run.rc != 0
    text = " ".join(run.output.split())
    assert f"No readable run record at {record} on node-a" in text, run.explain()
    assert "pytest exited 0 without writing it" in text and "report: " in text  # pytest's last lines
    assert json.loads(elsewhere.read_text())["counts"]["pass"] == 1 and not record.exists()
    assert not (tmp_path / "reports").exists()
