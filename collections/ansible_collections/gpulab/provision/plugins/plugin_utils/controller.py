"""The controller-side plugins are adapters of the gpulab package (gpulab.compat: the compatibility matrix, stack
resolution, framework wheels). They run in the Python that runs Ansible, which is gpulab's virtual environment."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ansible.errors import AnsibleError


@contextlib.contextmanager
def gpulab_required(error: type[AnsibleError] = AnsibleError) -> Iterator[None]:
    """Around the plugin's `import gpulab...`: without gpulab, one line saying where to run Ansible from."""
    try:
        yield
    except ImportError as err:
        raise error(
            f"cannot import gpulab on the controller ({err}): run ansible-playbook from gpulab's virtual "
            "environment (pip install gpulab; ./bootstrap.sh sets it up)."
        ) from None  # one line: Ansible would repeat a chained error's text after it
