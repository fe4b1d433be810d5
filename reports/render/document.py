"""A report as data (sections of prose, figures and tables) and its two renderings.

The HTML file is self-contained: the style sheet is inline, every figure is a base64 PNG in a
``data:`` URI, and there is no script and no external link, so it opens offline and can be mailed.
The Markdown file refers to PNG files written beside it. Both are written from the same PNG bytes,
each figure rasterised once.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pandas as pd
from matplotlib.figure import Figure

from sim.output import atomic_write

FIGURE_DPI = 100
#: Rows a table shows; the rest are counted in a note (the CSV beside it holds them all).
MAX_TABLE_ROWS = 200

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 84rem; margin: 2rem auto; padding: 0 1rem;
       color: #1b1b1b; line-height: 1.45; }
h1, h2, h3 { line-height: 1.2; }
.table-wrap { max-width: 100%; overflow-x: auto; margin: 0.5rem 0 1.5rem; }
table { border-collapse: collapse; font-size: 0.82rem; }
caption { text-align: left; font-weight: 600; padding-bottom: 0.3rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: right; }
th { background: #f2f2f2; white-space: normal; overflow-wrap: break-word; min-width: 4rem;
     max-width: 10rem; vertical-align: bottom; }
td { white-space: nowrap; }
td.text, th.text { text-align: left; }
td.text { white-space: normal; overflow-wrap: break-word; min-width: 5rem; max-width: 32rem; }
figure { margin: 1rem 0; }
figure img { max-width: 100%; height: auto; }
figcaption { font-size: 0.9rem; color: #444; }
code { background: #f5f5f5; padding: 0 0.2rem; }
.note { color: #555; font-size: 0.9rem; }
"""


@dataclass
class ReportFigure:
    """One figure: a file stem, a caption, and the PNG bytes it was rasterised to."""

    name: str
    caption: str
    png: bytes

    @staticmethod
    def from_figure(name: str, caption: str, figure: Figure) -> ReportFigure:
        """Rasterise ``figure`` to PNG at :data:`FIGURE_DPI`."""
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=FIGURE_DPI)
        return ReportFigure(name, caption, buffer.getvalue())


@dataclass
class ReportTable:
    """One table and its caption."""

    caption: str
    frame: pd.DataFrame


@dataclass
class Section:
    """A titled section: paragraphs (Markdown inline syntax), then figures, then tables."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    figures: list[ReportFigure] = field(default_factory=list)
    tables: list[ReportTable] = field(default_factory=list)
    markdown: str | None = None  # a block of Markdown (the glossary), rendered after the rest


@dataclass
class Report:
    """A whole report: title, the kind of folder it describes, and its sections."""

    title: str
    kind: str
    source: str
    sections: list[Section] = field(default_factory=list)

    @property
    def figures(self) -> list[ReportFigure]:
        return [figure for section in self.sections for figure in section.figures]


def format_cell(value: object) -> str:
    """A table cell as a plain number a reader takes in at a glance, never in scientific
    notation: thousands grouped and whole (16,710), tens with one decimal (45.3), smaller
    values with three decimals (7.536, 0.075), tiny ones with the first two significant digits
    (-0.0000012); missing values as a dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return plain_number(value)
    return str(value)


def plain_number(value: float) -> str:
    """``value`` as in :func:`format_cell`."""
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 0.01 or value == 0:
        return f"{value:.3f}"
    digits = 1 - math.floor(math.log10(size))
    return f"{value:.{digits}f}"


def column_words(name: str) -> str:
    """A table column's name as words with its unit (``ttft_p99_ms``: ``TTFT p99 (ms)``)."""
    from reports.figures import metric_label

    return metric_label(name)


def _inline_html(text: str) -> str:
    """Markdown inline syntax (code, bold, italic) to HTML, everything else escaped."""
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"<em>\1</em>", out)


def _is_numeric(series: pd.Series) -> bool:
    return bool(pd.api.types.is_numeric_dtype(series)) and not pd.api.types.is_bool_dtype(series)


def table_html(table: ReportTable) -> str:
    """A table as HTML; numbers right-aligned, text left-aligned."""
    frame = table.frame
    shown = frame.head(MAX_TABLE_ROWS)
    kinds = ["" if _is_numeric(frame[c]) else ' class="text"' for c in frame.columns]
    head = "".join(
        f"<th{kind}>{html.escape(column_words(str(c)))}</th>"
        for c, kind in zip(frame.columns, kinds, strict=True)
    )
    rows = []
    for values in shown.itertuples(index=False):
        cells = "".join(
            f"<td{kind}>{html.escape(format_cell(v))}</td>"
            for v, kind in zip(values, kinds, strict=True)
        )
        rows.append(f"<tr>{cells}</tr>")
    more = len(frame) - len(shown)
    note = f'<p class="note">{more} more rows not shown.</p>' if more > 0 else ""
    return (
        f'<div class="table-wrap"><table><caption>{_inline_html(table.caption)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{note}"
    )


def table_markdown(table: ReportTable) -> str:
    """A table as a Markdown pipe table under its caption."""
    frame = table.frame
    shown = frame.head(MAX_TABLE_ROWS)

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = [f"*{table.caption}*", ""]
    lines.append("| " + " | ".join(cell(str(c)) for c in frame.columns) + " |")
    lines.append(
        "|" + "|".join("---:" if _is_numeric(frame[c]) else "---" for c in frame.columns) + "|"
    )
    for values in shown.itertuples(index=False):
        lines.append("| " + " | ".join(cell(format_cell(v)) for v in values) + " |")
    if len(frame) > len(shown):
        lines.append(f"\n{len(frame) - len(shown)} more rows not shown.")
    return "\n".join(lines)


def markdown_block_html(text: str) -> str:
    """The subset of Markdown the glossary uses, as HTML: headings, paragraphs, pipe tables.

    A heading level is shifted down by one so the block nests under its section.
    """
    blocks: list[str] = []
    paragraph: list[str] = []
    table: list[list[str]] = []

    def flush() -> None:
        if paragraph:
            blocks.append(f"<p>{_inline_html(' '.join(paragraph))}</p>")
            paragraph.clear()
        if table:
            head, *body = table
            cells = "".join(f'<th class="text">{_inline_html(c)}</th>' for c in head)
            rows = "".join(
                "<tr>" + "".join(f'<td class="text">{_inline_html(c)}</td>' for c in row) + "</tr>"
                for row in body
            )
            blocks.append(f"<table><thead><tr>{cells}</tr></thead><tbody>{rows}</tbody></table>")
            table.clear()

    for raw in text.splitlines():
        line = raw.strip()
        heading = re.match(r"^(#{1,5})\s+(.*)$", line)
        if not line:
            flush()
        elif heading:
            flush()
            level = min(len(heading.group(1)) + 1, 6)
            blocks.append(f"<h{level}>{_inline_html(heading.group(2))}</h{level}>")
        elif line.startswith("|"):
            if paragraph:
                flush()
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                table.append([c.replace("\\|", "|") for c in cells])
        else:
            if table:
                flush()
            paragraph.append(line)
    flush()
    return "\n".join(blocks)


def render_html(report: Report) -> str:
    """The report as one self-contained HTML document."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head><meta charset="utf-8">',
        f"<title>{html.escape(report.title)}</title>",
        f"<style>{_STYLE}</style></head>",
        "<body>",
        f"<h1>{html.escape(report.title)}</h1>",
        f'<p class="note">{html.escape(report.kind)} folder <code>{html.escape(report.source)}'
        "</code></p>",
    ]
    for section in report.sections:
        parts.append(f"<section><h2>{html.escape(section.title)}</h2>")
        parts.extend(f"<p>{_inline_html(p)}</p>" for p in section.paragraphs)
        for item in section.figures:
            data = base64.b64encode(item.png).decode("ascii")
            parts.append(
                f'<figure id="fig-{html.escape(item.name)}"><img alt="{html.escape(item.caption)}" '
                f'src="data:image/png;base64,{data}"><figcaption>{_inline_html(item.caption)}'
                "</figcaption></figure>"
            )
        parts.extend(table_html(t) for t in section.tables)
        if section.markdown:
            parts.append(markdown_block_html(section.markdown))
        parts.append("</section>")
    parts.extend(["</body>", "</html>", ""])
    return "\n".join(parts)


def render_markdown(report: Report, images_dir: str) -> str:
    """The report as Markdown whose images are ``images_dir/<name>.png`` beside it."""
    parts = [f"# {report.title}", "", f"{report.kind} folder `{report.source}`", ""]
    for section in report.sections:
        parts.extend([f"## {section.title}", ""])
        for paragraph in section.paragraphs:
            parts.extend([paragraph, ""])
        for item in section.figures:
            parts.extend(
                [f"![{item.caption}]({images_dir}/{item.name}.png)", "", f"*{item.caption}*", ""]
            )
        for table in section.tables:
            parts.extend([table_markdown(table), ""])
        if section.markdown:
            shifted = re.sub(r"^(#{1,5}) ", r"#\1 ", section.markdown, flags=re.MULTILINE)
            parts.extend([shifted.strip(), ""])
    return "\n".join(parts)


def _write_text(handle: IO[Any], text: str) -> None:
    handle.write(text)


@dataclass(frozen=True)
class WrittenReport:
    """Where a report was written."""

    html_path: Path
    markdown_path: Path
    figure_paths: tuple[Path, ...]


def write_report(report: Report, out_dir: Path, stem: str = "report") -> WrittenReport:
    """Write ``<stem>.html``, ``<stem>.md`` and ``<stem>_files/<figure>.png`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = f"{stem}_files"
    (out_dir / images).mkdir(exist_ok=True)
    figure_paths = []
    for item in report.figures:
        path = out_dir / images / f"{item.name}.png"
        path.write_bytes(item.png)
        figure_paths.append(path)
    html_path = out_dir / f"{stem}.html"
    markdown_path = out_dir / f"{stem}.md"
    html_text, markdown_text = render_html(report), render_markdown(report, images)
    atomic_write(html_path, lambda f: _write_text(f, html_text))
    atomic_write(markdown_path, lambda f: _write_text(f, markdown_text))
    return WrittenReport(html_path, markdown_path, tuple(figure_paths))
