"""The documentation site in a real browser (headless Chromium, Debian's package, which ./dev installs where it
can): at 1280 px wide no page scrolls sideways, and no code block or table hides part of its content behind a
scroll bar. Each page's screenshot is kept in build/screenshots/ (a build artifact, not committed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]
WIDTH = 1280
# Run in the page once it has loaded: the page's own width against the window's, and every code block, table or
# scrolling wrapper whose content is wider than the box showing it. The answer goes into the title, which
# Chromium's --dump-dom prints.
PROBE = """<script>window.addEventListener('load', function () {
  var hidden = [];
  document.querySelectorAll('pre > code, table, .md-typeset__scrollwrap').forEach(function (el) {
    if (el.scrollWidth > el.clientWidth + 1) hidden.push(el.tagName + ' ' + el.scrollWidth + ' > ' +
      el.clientWidth + ': ' + el.textContent.slice(0, 60));
  });
  document.title = 'PROBE' + JSON.stringify({page: document.documentElement.scrollWidth,
    window: window.innerWidth, hidden: hidden});
});</script>"""


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("no chromium here: ./dev installs Debian's package where it runs as root with apt")
    return found


def _browse(chromium: str, page: Path, *args: str) -> str:
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={WIDTH},900",
                           "--hide-scrollbars", "--virtual-time-budget=3000", *args, page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    return done.stdout


def test_every_page_fits_1280_px_with_nothing_hidden_and_its_screenshot_is_kept(tmp_path):
    chromium = _chromium()
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    config = str(ROOT / "docs" / "mkdocs.yml")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", config, "-d", str(site)],
                           capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    shots = ROOT / "build" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    pages = sorted(p for p in site.glob("*.html") if p.name != "404.html")
    assert len(pages) > 10
    problems = []
    for page in pages:
        probed = page.with_name(f"probed-{page.name}")
        probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
        found = re.search(r"<title>PROBE(.*?)</title>", _browse(chromium, probed, "--dump-dom"), re.S)
        assert found is not None, f"{page.name}: the probe did not run"
        seen = json.loads(found.group(1).replace("&gt;", ">").replace("&lt;", "<").replace("&amp;", "&"))
        if seen["page"] > seen["window"]:
            problems.append(f"{page.name}: {seen['page']} px wide in a {seen['window']} px window")
        problems += [f"{page.name}: {hidden}" for hidden in seen["hidden"]]
        shot = shots / page.with_suffix(".png").name
        _browse(chromium, page, f"--screenshot={shot}")
        assert shot.is_file() and shot.stat().st_size > 10_000, f"{page.name}: no screenshot"
    assert not problems, "\n".join(problems)
