"""``specsim report``: one result folder in, a self-contained HTML file and a Markdown file out.

:func:`detect_kind` tells a plan folder (``plan.json``), a sweep (``sweep.csv``), a comparison
(``comparison.csv``) and a single run (``summary.json``) apart, in that order; :func:`build_report`
reads the folder into a :class:`~reports.render.document.Report`, and :func:`render_report` writes
it. Figures are drawn with matplotlib's Agg canvas, so no display is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from reports.render.document import Report, WrittenReport, write_report
from sim.errors import ScenarioError

__all__ = ["KINDS", "Report", "WrittenReport", "build_report", "detect_kind", "render_report"]

#: Folder kinds and the file that marks each, in the order they are tried.
KINDS = (
    ("plan", "plan.json"),
    ("sweep", "sweep.csv"),
    ("compare", "comparison.csv"),
    ("run", "summary.json"),
)


def detect_kind(folder: Path) -> str:
    """``plan``, ``sweep``, ``compare`` or ``run``.

    Raise ScenarioError if ``folder`` does not exist or holds none of the marker files.
    """
    if not folder.is_dir():
        raise ScenarioError(f"{folder}: no such folder")
    for kind, marker in KINDS:
        if (folder / marker).is_file():
            return kind
    markers = ", ".join(marker for _, marker in KINDS)
    raise ScenarioError(f"{folder}: not a result folder (none of {markers} found)")


def _builder(kind: str) -> Callable[[Path], Report]:
    from reports.render.grids import plan_report, sweep_report
    from reports.render.runs import compare_report, run_report

    return {
        "plan": plan_report,
        "sweep": sweep_report,
        "compare": compare_report,
        "run": run_report,
    }[kind]


def build_report(folder: Path) -> Report:
    """The report of a result folder, of whatever kind it is.

    Raise ScenarioError if the folder is not a result folder or its files are unreadable.
    """
    return _builder(detect_kind(folder))(folder)


def render_report(folder: Path, out_dir: Path | None = None, stem: str = "report") -> WrittenReport:
    """Build the report of ``folder`` and write it into ``out_dir`` (default: the folder itself).

    Raise ScenarioError as :func:`build_report` does.
    """
    import matplotlib

    matplotlib.use("Agg")
    report = build_report(folder)
    return write_report(report, folder if out_dir is None else out_dir, stem)
