"""Every kind of result folder renders to well-formed, self-contained HTML and to Markdown."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from reports.render import detect_kind, render_report
from reports.render.glossary import GLOSSARY_MARKDOWN
from sim.errors import ScenarioError

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
VOID = {"meta", "img", "br", "hr", "link", "input"}
EXPECTED_FIGURES = {
    "run": {"acceptance_histogram", "timeline", "tokens_per_step"},
    "compare": {"comparison", "acceptance_histogram", "timeline", "tokens_per_step"},
    "sweep": {"load_curves", "speedup", "acceptance_histogram", "tokens_per_step"},
    "plan": {"slo_frontier", "load_curves", "tokens_per_step"},
}


class TagChecker(HTMLParser):
    """Collects every problem with the nesting of tags, and the images' sources."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.sources: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        if tag == "img":
            self.sources.append(dict(attrs).get("src") or "")
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def check_html(text: str) -> TagChecker:
    checker = TagChecker()
    checker.feed(text)
    checker.close()
    assert not checker.problems, checker.problems[:5]
    assert not checker.stack, f"unclosed: {checker.stack}"
    return checker


@pytest.mark.parametrize("kind", sorted(EXPECTED_FIGURES))
def test_each_kind_renders_every_figure(
    kind: str, folders: dict[str, Path], tmp_path: Path
) -> None:
    assert detect_kind(folders[kind]) == kind
    written = render_report(folders[kind], tmp_path)
    names = {p.stem for p in written.figure_paths}
    assert names == EXPECTED_FIGURES[kind]
    for path in written.figure_paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = written.html_path.read_text(encoding="utf-8")
    checker = check_html(text)
    # Self-contained: every image inline, no script, stylesheet link or remote reference.
    assert len(checker.sources) == len(names)
    assert all(src.startswith("data:image/png;base64,") for src in checker.sources)
    assert not {"script", "link", "iframe"} & checker.tags
    assert not re.search(r"(src|href)=\"(?!data:)", text)
    assert "Metric glossary" in text and "<table>" in text
    markdown = written.markdown_path.read_text(encoding="utf-8")
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert {Path(link).stem for link in linked} == names
    assert all((tmp_path / link).is_file() for link in linked)


def test_glossary_is_the_docs_text() -> None:
    docs = ROOT / "docs" / "metrics.md"
    if not docs.is_file():
        pytest.skip("docs/ not present")
    assert docs.read_text(encoding="utf-8") == GLOSSARY_MARKDOWN


def test_a_folder_without_results_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="not a result folder"):
        detect_kind(tmp_path)
    with pytest.raises(ScenarioError, match="no such folder"):
        detect_kind(tmp_path / "missing")


def test_report_command_writes_both_files(
    cli: typer.Typer, runner: CliRunner, folders: dict[str, Path], tmp_path: Path
) -> None:
    result = runner.invoke(cli, ["report", str(folders["run"]), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.html").is_file() and (tmp_path / "report.md").is_file()
    bad = runner.invoke(cli, ["report", str(tmp_path / "report_files")])
    assert bad.exit_code == 2
    assert "not a result folder" in bad.output


@pytest.mark.skipif(
    not CHROMIUM.exists() and shutil.which("chromium") is None, reason="no Chromium"
)
def test_chromium_renders_the_report(folders: dict[str, Path], tmp_path: Path) -> None:
    written = render_report(folders["compare"], tmp_path)
    binary = str(CHROMIUM) if CHROMIUM.exists() else str(shutil.which("chromium"))
    done = subprocess.run(
        [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            written.html_path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("<img") == len(written.figure_paths)
    assert "Metric glossary" in done.stdout
