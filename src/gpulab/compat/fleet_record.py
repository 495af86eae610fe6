"""The fleet's driver branch, written down: the pre-flight of a play over two or more GPU nodes chooses one branch
for them all (gpulab.compat.lifecycle.fleet_branch) and writes it beside the inventory. The next run, a node added
later (`--limit`) and `gpulab matrix resolve --fleet` take it from there instead of choosing again from today's
date and whichever hosts that run has; moving the fleet to another branch is the operator's decision, made by
changing the file (or removing it to choose again).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from pathlib import Path

from gpulab.errors import GpulabError
from gpulab.names import driver_version

FILE_NAME = "gpulab-fleet.txt"  # beside the inventory; .txt, so Ansible never reads it as an inventory source
LIMIT = 64 << 10
FIX = 'write it as the pre-flight does (driver_branch: "580"), or remove it to choose the branch again'


@dataclass(frozen=True)
class FleetRecord:
    driver_branch: str  # "580"
    chosen: str  # the date it was chosen, YYYY-MM-DD
    hosts: tuple[str, ...]  # the nodes of the play that chose it


def parse(text: str, where: str) -> FleetRecord:
    """The record in `text` (read from `where`), or a GpulabError naming what is wrong and the fix."""
    import yaml

    from gpulab.compat import rules
    from gpulab.paths import load_yaml

    try:
        data = load_yaml(text)
    except yaml.YAMLError:
        raise GpulabError(f"{where}: not valid YAML; {FIX}") from None
    if not isinstance(data, dict) or "driver_branch" not in data:
        raise GpulabError(f"{where}: no driver_branch; {FIX}")
    try:
        branch = driver_version(data["driver_branch"])
    except GpulabError:
        branch = ""
    if not re.fullmatch(r"[0-9]{3}", branch):  # a branch, not a driver version: the record names a branch only
        raise GpulabError(f"{where}: driver_branch {data['driver_branch']!r} is not a branch like 580; {FIX}")
    try:
        rules.branch_record(branch)
    except GpulabError as err:
        raise GpulabError(f"{where}: {str(err).rstrip('.')}; {FIX}") from None
    chosen = str(data.get("chosen") or "")
    if chosen:
        try:
            datetime.date.fromisoformat(chosen)
        except ValueError:
            raise GpulabError(f"{where}: chosen {chosen!r} is not a date like 2026-11-28; {FIX}") from None
    hosts = data.get("hosts") or []
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise GpulabError(f"{where}: hosts is not a list of node names; {FIX}")
    return FleetRecord(branch, chosen, tuple(hosts))


def read(path: Path | str) -> FleetRecord | None:
    """The record at `path`; None where there is none yet."""
    from gpulab.paths import read_input_text

    if not Path(path).exists():
        return None
    return parse(read_input_text(path, "the fleet record", FIX, limit=LIMIT), str(path))


def render(record: FleetRecord) -> str:
    """The file's text: what the pre-flight writes, and what `parse` reads back."""
    hosts = ", ".join(record.hosts)
    return (
        "# The NVIDIA driver branch of this inventory's GPU nodes, chosen by gpulab's pre-flight. The next run,\n"
        "# a node added later (--limit) and `gpulab matrix resolve --fleet` take it. Moving the fleet to another\n"
        "# branch is your decision: change driver_branch, or remove this file to choose again.\n"
        f'driver_branch: "{record.driver_branch}"\n'
        f'chosen: "{record.chosen}"\n'
        f"hosts: [{hosts}]\n"
    )
