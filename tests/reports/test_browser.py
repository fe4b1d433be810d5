"""The HTML report in a real headless browser: it renders, every image loads, nothing logs an
error, no table pushes the page wider than the window, and a 1400 px screenshot is kept.

The browser is Debian's Chromium (``.ci/run`` installs it); where none is installed the test
skips and says so. Screenshots go to ``$SPECSIM_TEST_ARTIFACTS`` (default: ``test-artifacts/``
at the repository root).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from reports.render import render_report

ROOT = Path(__file__).resolve().parents[2]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH_PX = 1400
#: Collects script errors, failed resources and console.error calls; on load, writes what it
#: found (images, broken ones, errors, page and window widths) into the page as JSON.
PROBE = """<script>
window.__specsimErrors = [];
window.addEventListener("error", function (e) {
  var what = e.message || (e.target && (e.target.src || e.target.href)) || "error";
  window.__specsimErrors.push(String(what).slice(0, 200));
}, true);
var __consoleError = console.error;
console.error = function () {
  window.__specsimErrors.push(Array.prototype.join.call(arguments, " "));
  __consoleError.apply(console, arguments);
};
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var broken = images.filter(function (i) { return !i.complete || i.naturalWidth === 0; });
  var probe = document.createElement("pre");
  probe.id = "specsim-probe";
  probe.textContent = JSON.stringify({
    images: images.length,
    broken: broken.map(function (i) { return i.alt; }),
    errors: window.__specsimErrors,
    page_width: document.documentElement.scrollWidth,
    window_width: window.innerWidth,
    headings: document.querySelectorAll("h2").length
  });
  document.body.appendChild(probe);
});
</script>"""


def _browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


def _headless(browser: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={WIDTH_PX},1000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("kind", ["compare", "plan", "sweep"])
def test_the_report_renders_in_a_browser(
    kind: str, folders: dict[str, Path], tmp_path: Path
) -> None:
    browser = _browser()
    if browser is None:
        pytest.skip(
            "no headless browser: install Debian's chromium (.ci/run does) to check the "
            "HTML report in a real browser"
        )
    written = render_report(folders[kind], tmp_path / kind)
    html = written.html_path.read_text(encoding="utf-8")
    probe_page = tmp_path / kind / "probe.html"
    probe_page.write_text(html.replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    dumped = _headless(browser, "--virtual-time-budget=10000", "--dump-dom", probe_page.as_uri())
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    start = dumped.stdout.find('<pre id="specsim-probe">')
    assert start >= 0, "the page never finished loading: " + dumped.stderr[-2000:]
    body = dumped.stdout[start:].split(">", 1)[1].split("</pre>", 1)[0]
    found = json.loads(body.replace("&quot;", '"').replace("&amp;", "&"))
    assert found["images"] == len(written.figure_paths) > 0
    assert found["broken"] == []
    assert found["errors"] == []
    assert found["headings"] >= 2
    # Wide tables scroll inside their own box; the page itself never scrolls sideways.
    assert found["page_width"] <= found["window_width"], found
    artifacts = Path(os.environ.get("SPECSIM_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    screenshot = artifacts / f"report-{kind}-{WIDTH_PX}px.png"
    shot = _headless(
        browser, f"--screenshot={screenshot}", "--window-size=1400,2400", written.html_path.as_uri()
    )
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert screenshot.stat().st_size > 10_000  # a blank page compresses to a few hundred bytes
