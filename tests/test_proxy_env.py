"""Behind a proxy: every play that touches a host carries `gpulab_proxy_env` as its environment, so apt, the
downloads and pip of every role go through it (the inventory sets it once)."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def test_every_play_on_a_host_takes_the_inventory_s_proxy_environment() -> None:
    plays = 0
    for path in sorted((REPO / "playbooks").glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            if "hosts" not in play or play["hosts"] == "localhost":
                continue
            plays += 1
            assert play.get("environment") == "{{ gpulab_proxy_env | default({}) }}", (path.name, play["name"])
    assert plays >= 5
    defaults = yaml.safe_load((REPO / "inventory/group_vars/all.yml").read_text())
    assert defaults["gpulab_proxy_env"] == {}
