"""A page as headless Chromium lays it out: positions of its parts on the first screen, what it fetched, a screenshot.

Chromium runs with the network shut (every host resolves to nothing, a dead proxy), so a page that needs anything
from outside shows it in the resources it tried to fetch. A copy of the page gets one probe script that writes what
it measured into the DOM, which `--dump-dom` prints; the page itself holds no script.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from guest import prereq

SCREEN = (1280, 900)  # the first screen: a laptop browser window

PROBE = """<script>
(function () {
  function sortColumn(id, heading) {  // click a sortable table's heading; its column as it then reads
    var table = document.getElementById(id); if (!table) return null;
    var ths = Array.prototype.slice.call(table.tHead.rows[0].cells);
    var col = ths.findIndex(function (th) { return th.textContent.trim() === heading; });
    if (col < 0) return null;
    ths[col].click();
    return Array.prototype.map.call(table.tBodies[0].rows, function (r) { return r.cells[col].textContent.trim(); });
  }
  function box(el) { if (!el) return null; var r = el.getBoundingClientRect();
    return {top: r.top + window.scrollY, bottom: r.bottom + window.scrollY, left: r.left, right: r.right}; }
  var out = {
    verdict: box(document.querySelector('.verdict')),
    headings: Array.prototype.map.call(document.querySelectorAll('h2'), function (h) {
      return [h.textContent, box(h).top]; }),
    figures: Array.prototype.map.call(document.querySelectorAll('figure'), function (f) {
      return [f.getAttribute('aria-label'), box(f)]; }),
    fetched: performance.getEntriesByType('resource').map(function (e) { return e.name; }),
    external: Array.prototype.map.call(document.querySelectorAll('[src],[href]'), function (e) {
      return e.getAttribute('src') || e.getAttribute('href'); }).filter(function (u) { return !/^(#|data:)/.test(u); }),
    sorted_by_final_loss: sortColumn('runs', 'final loss'),
    width: document.documentElement.scrollWidth,
    height: document.documentElement.scrollHeight
  };
  var pre = document.createElement('pre'); pre.id = 'gpulab-probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""

OFFLINE = ["--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]


def _chromium(*args: str, profile: Path, height: int = SCREEN[1]) -> str:
    exe = prereq.require_tool("chromium")
    cmd = [
        exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
        f"--user-data-dir={profile}", f"--window-size={SCREEN[0]},{height}", *OFFLINE, *args,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def layout(page: Path, work: Path) -> dict[str, Any]:
    """What the probe measured on `page` laid out at SCREEN (positions in CSS pixels from the page's top)."""
    probed = work / f"{page.stem}.probe.html"
    text = page.read_text()
    probed.write_text(text.replace("</body>", PROBE + "</body>", 1))
    dom = _chromium("--dump-dom", probed.as_uri(), profile=work / "profile")
    found = re.search(r'<pre id="gpulab-probe">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return json.loads(
        found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    )


def screenshot(page: Path, out: Path, height: int = SCREEN[1]) -> Path:
    """A PNG of the page's first `height` pixels at the screen's width."""
    _chromium(f"--screenshot={out}", page.as_uri(), profile=out.parent / "profile", height=height)
    return out


def printed_pages(page: Path, work: Path) -> int:
    """How many pages the page prints to (A4/Letter as Chromium's default, its print stylesheet applied)."""
    pdf = work / f"{page.stem}.pdf"
    _chromium("--no-pdf-header-footer", f"--print-to-pdf={pdf}", page.as_uri(), profile=work / "profile")
    return len(re.findall(rb"/Type\s*/Page[^s]", pdf.read_bytes()))
