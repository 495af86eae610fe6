"""Controller-side access to gpulab's compatibility matrix (src/gpulab/compat/matrix.yml).

The matrix is the one source of versions: the pre-flight resolves what a host is to get from it, and the
`gpulab.provision.matrix` lookup answers single questions. gpulab is imported from the Python running Ansible;
when that Python lacks it (Ansible installed apart from gpulab), the checkout this collection lives in is used.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

# collections/ansible_collections/gpulab/provision/plugins/plugin_utils/matrix.py -> the checkout's src/
_CHECKOUT_SRC = Path(__file__).resolve().parents[6] / "src"


def gpulab_module(name: str) -> ModuleType:
    """Import `gpulab.<name>`, falling back to the checkout's src/ directory."""
    try:
        return importlib.import_module(f"gpulab.{name}")
    except ImportError:
        if not (_CHECKOUT_SRC / "gpulab").is_dir():
            raise
        sys.path.insert(0, str(_CHECKOUT_SRC))
        sys.modules.pop("gpulab", None)
        return importlib.import_module(f"gpulab.{name}")
