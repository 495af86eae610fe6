"""The HTML pages' one template system: Jinja2 templates in gpulab/report/templates, autoescaped, one stylesheet.

Every page (the validation report, the comparison, the study) extends `base.html.j2`, which inlines `page.css`
(screen and print styles) so that a page is one self-contained file. Text from a report is escaped by Jinja2's
autoescaping; markup made here (matplotlib's SVG plots) enters a template only as `markupsafe.Markup`.
"""

from __future__ import annotations

import functools
import hashlib
import io
import re
from typing import Any

import jinja2
from markupsafe import Markup

__all__ = ["Markup", "environment", "render", "svg_figure"]


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("gpulab.report", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2", "svg.j2"), default_for_string=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)


_PROLOGUE = re.compile(r"^.*?(?=<svg\b)", re.S)
_XMLNS = re.compile(r'\s+xmlns(:\w+)?="[^"]*"')
_METADATA = re.compile(r"\s*<metadata>.*?</metadata>", re.S)
_SVG_ID = re.compile(r'\bid="([^"]+)"')


def svg_figure(fig: Any, tight: bool = True) -> Markup:
    """A matplotlib figure as inline SVG markup: text kept as text (it zooms, prints and can be searched), no
    date, no XML prologue, and its ids made unique on the page (several plots share one document)."""
    import matplotlib

    buf = io.StringIO()
    if tight:
        fig.tight_layout()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "gpulab"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = _PROLOGUE.sub("", buf.getvalue(), count=1).strip()
    # inline in HTML: no namespace declarations (their URIs read as links), SVG 2's plain href, no metadata
    text = _METADATA.sub("", _XMLNS.sub("", text)).replace("xlink:href=", "href=")
    prefix = "f" + hashlib.sha1(text.encode()).hexdigest()[:8] + "-"
    ids = set(_SVG_ID.findall(text))
    for old in sorted(ids, key=len, reverse=True):
        text = text.replace(f'id="{old}"', f'id="{prefix}{old}"').replace(f"#{old})", f"#{prefix}{old})")
        text = text.replace(f'href="#{old}"', f'href="#{prefix}{old}"')
    text = re.sub(
        r'<svg\b([^>]*?)\swidth="([^"]*)"\sheight="[^"]*"', r'<svg\1 class="plot" style="max-width:\2"', text, count=1
    )
    return Markup(text)
