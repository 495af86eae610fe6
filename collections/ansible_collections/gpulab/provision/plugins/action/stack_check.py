"""Controller side of the pre-flight: resolve the stack the host's sources deliver and check it
(gpulab.compat.resolve); refuse with every reason."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible_collections.gpulab.provision.plugins.plugin_utils.controller import gpulab_required

ARGUMENT_SPEC: dict[str, Any] = {
    "gpus": {"type": "list", "elements": "dict", "required": True},
    "nvswitches": {"type": "list", "elements": "str", "default": []},
    "profile": {"type": "str", "default": "auto"},
    "stack": {"type": "dict", "default": {}},
    "host_python": {"type": "str"},
    "distribution": {"type": "str"},
    "distribution_version": {"type": "str"},
    "secure_boot": {"type": "str", "default": "unsupported", "choices": ["enabled", "disabled", "unsupported"]},
    "secure_boot_signing": {"type": "bool", "default": False},
    "precompiled_modules": {"type": "bool", "default": False},
    "sources": {
        "type": "dict",
        "default": {},
        "options": {
            "driver": {"type": "str", "default": "auto"},
            "cuda": {"type": "str", "default": "distro"},
            "cudnn": {"type": "str", "default": "wheel"},
        },
    },
    "cudnn_wheels": {"type": "dict", "default": {}},
    "cudnn_archives": {"type": "dict", "default": {}},
}


class ActionModule(ActionBase):
    """Runs on the controller only: the matrix lives there, the host needs nothing installed."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        validation = ArgumentSpecValidator(ARGUMENT_SPEC).validate(self._task.args)
        if validation.error_messages:
            raise AnsibleActionFail("; ".join(validation.error_messages))
        args = validation.validated_parameters
        with gpulab_required(AnsibleActionFail):
            from gpulab.compat.resolve import Request, resolve, summary

        target, problems = resolve(Request(**args))
        result["changed"] = False
        if problems:
            result["failed"] = True
            result["msg"] = (
                f"pre-flight refused this host's stack ({len(problems)} problem(s)); nothing was changed:\n"
                + "\n".join(f"- {p}" for p in problems)
            )
            return result
        line = summary(target)
        import datetime

        from gpulab.compat.lifecycle import eol_warning

        warning = eol_warning(target.get("driver"), datetime.date.today())
        if warning:
            result["warnings"] = [warning]
        result["ansible_facts"] = {"gpulab_target_stack": {**target, "summary": line}}
        result["msg"] = line + (f"\n{target['driver_source_note']}" if target.get("driver_source_note") else "")
        return result
