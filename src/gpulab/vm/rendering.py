"""Render the libvirt and cloud-init templates shipped in gpulab/vm/templates (the repository's libvirt/)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from gpulab.errors import GpulabError

if TYPE_CHECKING:
    import jinja2


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    try:
        import jinja2
    except ImportError as err:
        raise GpulabError("Jinja2 is not installed: pip install -c constraints.txt -e '.[vm]'.") from err
    return jinja2.Environment(
        loader=jinja2.PackageLoader("gpulab.vm", "templates"),
        # XML templates escape every value; cloud-init ones quote through `tojson` instead.
        autoescape=jinja2.select_autoescape(enabled_extensions=("xml.j2",), default_for_string=False),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)
