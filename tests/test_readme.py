"""The README stays one a newcomer finishes, and every relative link in it and in docs/ leads somewhere."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 140
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(path: Path) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[str]:
    return [m.group(1) for line in prose(path) for m in LINK.finditer(line)]


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_the_readme_gives_the_set_up_the_flow_and_the_test_command():
    text = README.read_text(encoding="utf-8")
    for command in ("./bootstrap.sh", "./bootstrap.sh validate", "ansible-playbook site.yml", "gpulab validate"):
        assert command in text, command
    assert "gpulab compare" in text and "verdict: PASS" in text
    development = text[text.index("## Development") :]
    assert "`./bootstrap.sh test`" in development  # CI (.ci/run) runs exactly that


def test_the_readme_links_every_docs_page():
    linked = {(README.parent / target.split("#")[0]).resolve() for target in links(README)}
    assert sorted(p.name for p in PAGES[1:] if p.resolve() not in linked) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{target}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert broken == []


def test_the_anchor_of_a_heading_is_githubs():
    heading = "`./bootstrap.sh`: this machine, from a fresh checkout"
    assert slug(heading) == "bootstrapsh-this-machine-from-a-fresh-checkout"
    assert slug("A command stopped with `gpulab: error:`") == "a-command-stopped-with-gpulab-error"
    assert slug("Data, weights and stand-ins") == "data-weights-and-stand-ins"


def _layout_rows() -> list[tuple[list[str], list[str]]]:
    """README's layout table: (the row's modules or packages, the names its face column gives)."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Layout") :]
    section = section[: section.index("\n## ", 1)]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            rows.append((re.findall(r"`([^`]+)`", cells[0]), re.findall(r"`([^`]+)`", cells[1])))
    return rows


def test_the_readme_layout_names_every_package_and_only_real_faces():
    import importlib

    from test_import_graph import LAYERS, doors

    rows = _layout_rows()
    named = [m for modules, _ in rows for m in modules]
    assert named == [m for layer in LAYERS for m in layer if m not in ("gpulab", "__main__")]  # every one, in order
    wrong = []
    for modules, faces in rows:
        found = [importlib.import_module(f"gpulab.{m}") for m in modules]
        for name in faces:
            in_face = any(name in (getattr(mod, "__all__", None) or vars(mod)) for mod in found)
            if not in_face and not any(name in (doors(m) or ()) for m in modules):
                wrong.append(f"{'/'.join(modules)}: {name}")
    assert wrong == []
    assert all(faces for _, faces in rows)  # each row names its face
