#!/usr/bin/python
"""Enable archive components (Debian's contrib, non-free, non-free-firmware) on the sources that point at the
distribution's archive, in the format each file already uses: deb822 (.sources) or one-line (sources.list, .list)."""

from __future__ import annotations

import glob
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: apt_components
short_description: Enable components on the apt sources of the distribution's archive (deb822 or one-line)
description:
  - Adds I(components) to every enabled C(deb) source whose URI is the distribution's archive (its path ends in
    C(/debian) or C(/debian-security), as Debian's and its mirrors' do) and whose suite is the release's (C(bookworm),
    C(bookworm-updates), C(bookworm-security)) and whose components include C(main) (Docker's
    C(.../linux/debian) is not the archive). deb822 files (C(/etc/apt/sources.list.d/*.sources)) get their
    C(Components) field extended, one-line files (C(/etc/apt/sources.list), C(*.list)) their lines; comments,
    other fields and other repositories stay as they are. Files are rewritten atomically.
  - Fails, changing nothing, when no such source exists (the host's archive is configured some other way).
version_added: "0.2.0"
author: gpulab
options:
  components:
    description: The components to enable.
    type: list
    elements: str
    required: true
  suite:
    description: The release's codename (C(bookworm), C(trixie)).
    type: str
    required: true
  root:
    description: Directory holding C(etc/apt) (C(/) on a real host).
    type: path
    default: /
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Enable Debian's non-free components
  gpulab.provision.apt_components:
    components: [contrib, non-free, non-free-firmware]
    suite: bookworm
"""

RETURN = r"""
files:
  description: The files changed (or, in check mode, that would be).
  returned: always
  type: list
  elements: str
"""

_ARCHIVE_URI = re.compile(r"/debian(-security)?/?$")


def _archive_suite(suite: str, wanted: str) -> bool:
    return suite.split("/")[0] in (wanted, f"{wanted}-updates", f"{wanted}-security", f"{wanted}-backports")


def _add(existing: list[str], components: list[str]) -> list[str]:
    return existing + [c for c in components if c not in existing]


def deb822(text: str, components: list[str], suite: str) -> tuple[str, bool]:
    """(new text, whether an archive stanza was found). Stanzas are blank-line separated."""
    found = False
    out = []
    for stanza in re.split(r"(\n\s*\n)", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            match = re.match(r"^([A-Za-z-]+):\s*(.*)$", line)
            if match:
                fields[match.group(1).lower()] = match.group(2)
        if (
            "deb" in fields.get("types", "").split()
            and fields.get("enabled", "yes").lower() != "no"
            and any(_ARCHIVE_URI.search(u) for u in fields.get("uris", "").split())
            and any(_archive_suite(s, suite) for s in fields.get("suites", "").split())
            and "main" in fields.get("components", "").split()  # the archive itself, not e.g. Docker's .../debian
        ):
            found = True
            wanted = " ".join(_add(fields["components"].split(), components))
            stanza = re.sub(r"(?mi)^(Components:)\s*.*$", lambda m, w=wanted: f"{m.group(1)} {w}", stanza)
        out.append(stanza)
    return "".join(out), found


def one_line(text: str, components: list[str], suite: str) -> tuple[str, bool]:
    found = False
    lines = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        match = re.match(r"^(\s*deb\s+(?:\[[^\]]*\]\s+)?)(\S+)\s+(\S+)((?:\s+[^\s#]+)*)(\s*(?:#.*)?)$", body)
        if (
            match
            and _ARCHIVE_URI.search(match.group(2))
            and _archive_suite(match.group(3), suite)
            and "main" in match.group(4).split()
        ):
            found = True
            have = match.group(4).split()
            body = (
                f"{match.group(1)}{match.group(2)} {match.group(3)} {' '.join(_add(have, components))}{match.group(5)}"
            )
            line = body + ("\n" if line.endswith("\n") else "")
        lines.append(line)
    return "".join(lines), found


def _write(path: str, text: str) -> None:
    st = os.stat(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".gpulab-")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, st.st_mode & 0o7777)
    os.replace(tmp, path)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "components": {"type": "list", "elements": "str", "required": True},
            "suite": {"type": "str", "required": True},
            "root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    root, components, suite = module.params["root"], module.params["components"], module.params["suite"]
    apt = os.path.join(root, "etc/apt")
    candidates = [os.path.join(apt, "sources.list"), *sorted(glob.glob(os.path.join(apt, "sources.list.d/*")))]
    found_any = False
    changes: dict[str, str] = {}
    for path in candidates:
        if not os.path.isfile(path) or not path.endswith((".list", ".sources")):
            continue
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        new, found = (deb822 if path.endswith(".sources") else one_line)(text, components, suite)
        found_any = found_any or found
        if new != text:
            changes[path] = new
    if not found_any:
        module.fail_json(
            msg=f"no apt source of the {suite} archive (a deb entry whose URI ends in /debian or /debian-security) in "
            f"{apt}/sources.list or sources.list.d: cannot enable {' '.join(components)}. Add the archive's sources "
            f"with these components (Components: main {' '.join(components)}), then run again.",
            files=[],
        )
    if not module.check_mode:
        for path, text in changes.items():
            _write(path, text)
    module.exit_json(changed=bool(changes), files=sorted(changes))


if __name__ == "__main__":
    main()
