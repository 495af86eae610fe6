"""Controller side of the dl_frameworks role: choose the node's framework wheels from the compatibility matrix,
build gpulab's wheel, and pack what the node installs (requirements, constraints, wheels) into one archive.
The choice is gpulab.compat.wheels.plan_frameworks; documented in plugins/modules/framework_bundle.py."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.gpulab.provision.plugins.plugin_utils import gpulab_wheel
from ansible_collections.gpulab.provision.plugins.plugin_utils.bundle import keyed_tar
from ansible_collections.gpulab.provision.plugins.plugin_utils.controller import gpulab_required

ARGS = {
    "frameworks": {"type": "list", "elements": "str", "required": True},
    "extras": {"type": "list", "elements": "str", "default": []},
    "gpu_pci_ids": {"type": "list", "elements": "str", "default": []},
    "driver": {"type": "str", "default": ""},
    "python": {"type": "str", "required": True},
    "torch": {"type": "str", "default": ""},
    "tensorflow": {"type": "str", "default": ""},
    "gpulab_source": {"type": "path"},
    "gpulab_wheel": {"type": "path"},
    "constraints": {"type": "str", "default": ""},
    "wheelhouse": {"type": "str", "default": ""},
    "index_url": {"type": "str", "default": ""},
    "torch_index_base": {"type": "str", "default": ""},
    "stage": {"type": "str"},
    "cache_dir": {"type": "path"},
    "plan_only": {"type": "bool", "default": False},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(
            argument_spec=ARGS,
            mutually_exclusive=[("gpulab_source", "gpulab_wheel")],
            required_one_of=[("gpulab_source", "gpulab_wheel")],
            required_if=[("plan_only", False, ("stage", "cache_dir"))],
        )
        with gpulab_required(AnsibleActionFail):
            from gpulab.compat.wheels import plan_frameworks, requirements_text
            from gpulab.errors import GpulabError

        constraints = self._constraints(args["constraints"])
        wheels = self._wheelhouse(args["wheelhouse"])
        try:
            plan = plan_frameworks(
                frameworks=args["frameworks"],
                gpu_pci_ids=args["gpu_pci_ids"],
                python=args["python"],
                driver=args["driver"],
                torch=args["torch"],
                tensorflow=args["tensorflow"],
                constraints=constraints or "",
                extras=args["extras"],
            )
            if args["plan_only"]:
                if not args["gpulab_wheel"]:
                    gpulab_wheel.source_files(Path(args["gpulab_source"]))  # a checkout, or the error says so
                wheel, built = self._given_wheel(args["gpulab_wheel"]), False
            elif args["gpulab_wheel"]:
                wheel, built = self._given_wheel(args["gpulab_wheel"]), False
            else:
                wheel, built = gpulab_wheel.build_wheel(Path(args["gpulab_source"]), Path(args["cache_dir"]) / "wheels")
        except (GpulabError, gpulab_wheel.WheelError) as err:
            raise AnsibleActionFail(f"dl_frameworks: {err}") from err
        result.update(changed=False, summary=plan.summary(), dropped_pins=plan.dropped_pins)
        if args["plan_only"]:
            return result

        assert wheel is not None
        version = gpulab_wheel.wheel_version(wheel)
        stage = args["stage"].rstrip("/")
        requirements = requirements_text(
            plan,
            gpulab_version=version,
            find_links=f"{stage}/wheels",
            constraints_path=f"{stage}/constraints.txt" if constraints is not None else None,
            offline=bool(wheels),
            index_url=args["index_url"],
            torch_index_base=args["torch_index_base"],
        )
        cache = Path(args["cache_dir"])
        members = [(f"wheels/{w.name}", w) for w in [wheel, *wheels]]
        members.append(("requirements.txt", self._text(cache / "texts", requirements)))
        if constraints is not None:
            members.append(("constraints.txt", self._text(cache / "texts", plan.constraints(constraints))))
        bundle, packed = keyed_tar(cache / "bundles", "bundle", members)
        result.update(changed=built or packed, bundle=str(bundle), requirements=requirements, gpulab_version=version)
        return result

    @staticmethod
    def _given_wheel(path: str | None) -> Path | None:
        if not path:
            return None
        wheel = Path(path)
        if not wheel.is_file():
            raise gpulab_wheel.WheelError(f"dl_frameworks_gpulab_wheel {wheel}: no such file.")
        gpulab_wheel.wheel_version(wheel)  # named like a gpulab wheel, or the error says so
        return wheel

    @staticmethod
    def _constraints(path: str) -> str | None:
        if not path:
            return None
        file = Path(path).expanduser()
        if not file.is_file():
            raise AnsibleActionFail(
                f"dl_frameworks_constraints {path}: no such file. Fix: point it at gpulab's constraints.txt, "
                "or set it to '' to install without constraints."
            )
        return file.read_text()

    @staticmethod
    def _wheelhouse(path: str) -> list[Path]:
        if not path:
            return []
        directory = Path(path).expanduser()
        wheels = sorted(directory.glob("*.whl")) if directory.is_dir() else []
        if not wheels:
            raise AnsibleActionFail(
                f"dl_frameworks_wheelhouse {path}: {'no wheels in it' if directory.is_dir() else 'no such directory'}. "
                "Fix: fill it on a machine with internet access and the nodes' Python (roles/dl_frameworks/README.md: "
                "`pip wheel -w WHEELHOUSE -c constraints.txt ...`), or set it to '' to install from the indexes."
            )
        return wheels

    @staticmethod
    def _text(directory: Path, text: str) -> Path:
        """Write text under a name keyed by its content, so parallel hosts never overwrite each other's."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.txt"
        if not path.is_file():
            tmp = path.with_name(f".{path.name}.{id(text)}.tmp")
            tmp.write_text(text)
            tmp.replace(path)
        return path
