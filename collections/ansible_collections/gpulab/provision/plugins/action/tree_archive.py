"""Pack a controller directory into a reproducible tar named by its content (see plugins/modules/tree_archive.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.gpulab.provision.plugins.plugin_utils.bundle import keyed_tar, tree_files

ARGS = {
    "src": {"type": "path", "required": True},
    "cache_dir": {"type": "path", "required": True},
    "prefix": {"type": "str", "required": True},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGS)
        src = Path(args["src"])
        files = tree_files(src) if src.is_dir() else []
        if not files:
            raise AnsibleActionFail(f"{src}: {'empty directory' if src.is_dir() else 'no such directory'}.")
        members = [(f"{src.name}/{rel}", src / rel) for rel in files]
        path, built = keyed_tar(Path(args["cache_dir"]), args["prefix"], members)
        result.update(changed=built, path=str(path), files=len(files))
        return result
