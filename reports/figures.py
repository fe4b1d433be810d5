"""The report's figures, each built from a tidy table that the report prints beside it.

Every function returns a matplotlib ``Figure`` on the Agg canvas (no window, no display needed)
and leaves rasterising to the caller. The tables come from the result folders: ``requests.csv``
and ``steps.csv`` of a run, ``sweep.csv`` of a sweep, ``probes.csv`` and ``plan.json`` of a plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sim.errors import SpecsimError

#: Most points a time series keeps; longer runs are averaged into this many time bins.
MAX_TIMELINE_POINTS = 600
BASELINE = "none"


def _figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def acceptance_lengths(requests: pd.DataFrame) -> np.ndarray:
    """Each request's acceptance length, ``1 + num_accepted / num_decode_steps``.

    Requests that took no decode step (one output token) have none and are left out. Raise
    SpecsimError if the table lacks either column.
    """
    for column in ("num_accepted", "num_decode_steps"):
        if column not in requests.columns:
            raise SpecsimError(f"requests table: column {column!r} is missing")
    steps = requests["num_decode_steps"].to_numpy(dtype=float)
    accepted = requests["num_accepted"].to_numpy(dtype=float)
    kept = steps > 0
    return np.asarray(1.0 + accepted[kept] / steps[kept])


#: One colour per drafting method in every figure, so a method looks the same throughout a report.
METHOD_COLORS = {
    "none": "C0", "eagle3": "C1", "eagle": "C2", "eagle2": "C3", "ngram": "C4",
    "draft_model": "C5", "medusa": "C6", "mtp": "C7", "lookahead": "C8",
}  # fmt: skip


def series_color(name: str, index: int) -> str:
    """A method's own colour; any other series by its position."""
    return METHOD_COLORS.get(name, f"C{index % 10}")


#: Markers and dash patterns by series position: lines that overlap stay distinguishable.
SERIES_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
SERIES_DASHES = ("-", "--", "-.", ":")
#: Metric names in words, for axis labels built from table columns (``ttft_p99_ms``).
METRIC_WORDS = {
    "ttft": "TTFT",
    "tpot": "TPOT",
    "itl": "ITL",
    "e2e_latency": "end-to-end latency",
    "e2el": "end-to-end latency",
}


def series_marker(index: int) -> str:
    """The marker of the ``index``-th series."""
    return SERIES_MARKERS[index % len(SERIES_MARKERS)]


def metric_label(key: str) -> str:
    """A column name in words with its unit: ``ttft_p99_ms`` is ``TTFT p99 (ms)``,
    ``good_request_fraction`` is ``share of requests within the goodput SLO``."""
    if key == "good_request_fraction":
        return "share of requests within the goodput SLO"
    if key.endswith("_ms"):
        name, _, stat = key.removesuffix("_ms").rpartition("_")
        if name in METRIC_WORDS:
            return f"{METRIC_WORDS[name]} {stat} (ms)"
    units = {"_tok_s": " (tok/s)", "_req_s": " (req/s)", "_per_s": " (per s)", "_s": " (s)"}
    for suffix, unit in units.items():
        if key.endswith(suffix):
            return key.removesuffix(suffix).replace("_", " ") + unit
    return key.replace("_", " ")


def _plain_log_ticks(axes: Any, which: str) -> None:
    """Label a log axis with plain numbers (20, 50, 100), never powers of ten and never bare.

    Call it after plotting: the ticks depend on the range. Within a factor of about 4 (8.5 to
    17 ms) the ticks are evenly spaced round numbers (10, 12, 14, 16), as on a linear axis, since
    the 1..9 multiples of a decade would leave only 9 and 10 there; up to 1.2 decades every 1..9
    multiple is a labelled tick, over up to three decades 1, 2 and 5, above that the decades.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    axis = axes.xaxis if which == "x" else axes.yaxis
    low, high = axes.get_xlim() if which == "x" else axes.get_ylim()
    decades = np.log10(max(high, 1e-300) / max(low, 1e-300)) if low > 0 else 3.0
    subs: tuple[float, ...] = (1.0,)
    if decades < 0.6:
        axis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.set_minor_formatter(NullFormatter())
        return
    if decades < 1.2:
        subs = tuple(float(s) for s in range(1, 10))
    elif decades <= 3.0:
        subs = (1.0, 2.0, 5.0)
    axis.set_major_locator(LogLocator(base=10.0, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def acceptance_histogram_figure(lengths: Mapping[str, np.ndarray]) -> Figure:
    """Histograms of per-request acceptance length, one outline per method, bins of 0.1 token.

    Raise SpecsimError if no method has a sample.
    """
    kept = {name: values for name, values in lengths.items() if len(values)}
    if not kept:
        raise SpecsimError("acceptance histogram: no request took a decode step")
    top = max(float(np.max(values)) for values in kept.values())
    bins = [float(b) for b in np.arange(1.0, max(top, 1.1) + 0.1, 0.1)]
    figure = _figure(6.4, 3.8)
    axes = figure.add_subplot()
    for index, (name, values) in enumerate(kept.items()):
        axes.hist(
            values,
            bins=bins,
            histtype="step",
            lw=1.6,
            color=series_color(name, index),
            label=f"{name} (mean {values.mean():.2f})",
        )
    axes.set_xlabel("acceptance length per request (tokens per verify step, bonus included)")
    axes.set_ylabel("requests")
    axes.legend(fontsize="small")
    axes.grid(alpha=0.3)
    return figure


def steps_timeline(steps: pd.DataFrame, num_blocks: float | None, max_points: int) -> pd.DataFrame:
    """The step records averaged into at most ``max_points`` equal time bins.

    Columns: ``time_s`` (bin centre), ``batch_size`` (mean ``num_seqs`` over the bin's steps, each
    weighted by its duration, i.e. the time average), ``kv_blocks_used`` (the bin's maximum, so a
    short peak survives the averaging), ``kv_usage`` (that over ``num_blocks``, when known) and
    ``num_waiting`` (time average).
    """
    if steps.empty:
        return pd.DataFrame(columns=["time_s", "batch_size", "kv_blocks_used", "num_waiting"])
    start = steps["start_at_s"].to_numpy(dtype=float)
    duration = steps["duration_s"].to_numpy(dtype=float)
    span = float(start[-1] + duration[-1] - start[0]) or 1.0
    num_bins = max(1, min(max_points, len(steps)))
    edges = start[0] + span * np.arange(num_bins + 1) / num_bins
    index = np.clip(np.searchsorted(edges, start, side="right") - 1, 0, num_bins - 1)
    weight = np.maximum(duration, 1e-12)
    frame = pd.DataFrame(
        {
            "bin": index,
            "w": weight,
            "wseq": weight * steps["num_seqs"].to_numpy(dtype=float),
            "wwait": weight * steps["num_waiting"].to_numpy(dtype=float),
            "kv_blocks_used": steps["kv_blocks_used"].to_numpy(dtype=float),
        }
    )
    grouped = frame.groupby("bin").agg(
        w=("w", "sum"), wseq=("wseq", "sum"), wwait=("wwait", "sum"), kv=("kv_blocks_used", "max")
    )
    out = pd.DataFrame(
        {
            "time_s": 0.5 * (edges[grouped.index] + edges[grouped.index + 1]),
            "batch_size": grouped["wseq"] / grouped["w"],
            "kv_blocks_used": grouped["kv"],
            "num_waiting": grouped["wwait"] / grouped["w"],
        }
    ).reset_index(drop=True)
    if num_blocks:
        out["kv_usage"] = out["kv_blocks_used"] / num_blocks
    if "spec_k" in steps.columns:
        # The k chosen per step (the most drafts a sequence carried), time average over the
        # steps that verify (a prefill-only step carries none).
        verifying = weight * (steps["num_decode_seqs"].to_numpy() > 0)
        k_sums = (
            pd.DataFrame({"w": verifying, "wk": verifying * steps["spec_k"].to_numpy(dtype=float)})
            .groupby(index)[["w", "wk"]]
            .sum()
        )
        out["spec_k"] = (k_sums["wk"] / k_sums["w"].where(k_sums["w"] > 0)).to_numpy()
    return out


def timeline_figure(timelines: Mapping[str, pd.DataFrame]) -> Figure:
    """KV-cache usage (fraction of the pool, or blocks) and batch size over time, per method.

    Raise SpecsimError if there is no timeline.
    """
    if not timelines:
        raise SpecsimError("timeline figure: no step records")
    # A third panel shows the k chosen over time when a run's steps carry it and it varies.
    varying = any("spec_k" in t.columns and t["spec_k"].nunique() > 1 for t in timelines.values())
    figure = _figure(13.0 if varying else 9.0, 3.8)
    panels = list(figure.subplots(1, 3 if varying else 2))
    left, right = panels[0], panels[1]
    fractional = all("kv_usage" in t.columns for t in timelines.values())
    for index, (name, timeline) in enumerate(timelines.items()):
        kv = timeline["kv_usage"] * 100.0 if fractional else timeline["kv_blocks_used"]
        style = {
            "color": series_color(name, index),
            "ls": SERIES_DASHES[index % len(SERIES_DASHES)],
            "lw": 1.1,
            "alpha": 0.85,
            "label": name,
        }
        left.plot(timeline["time_s"], kv, **style)
        right.plot(timeline["time_s"], timeline["batch_size"], **style)
        if varying and "spec_k" in timeline.columns:
            panels[2].plot(timeline["time_s"], timeline["spec_k"], **style)
    left.set_ylabel("KV cache used (% of pool)" if fractional else "KV blocks used")
    right.set_ylabel("batch size (running sequences)")
    if varying:
        panels[2].set_ylabel("drafts per step k (time average)")
    for axes in panels:
        axes.set_xlabel("simulated time (s)")
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    return figure


def _line_groups(frame: pd.DataFrame, x: str, group: str) -> list[tuple[str, pd.DataFrame]]:
    return [(str(name), part.sort_values(x)) for name, part in frame.groupby(group, sort=False)]


def load_curves_figure(frame: pd.DataFrame, x: str, group: str, x_label: str) -> Figure:
    """Output throughput, TTFT and TPOT (p50 solid, p99 dashed) against ``x``, one line per group.

    Panels whose columns the table lacks are left out. Raise SpecsimError if ``x`` is missing.
    """
    if x not in frame.columns:
        raise SpecsimError(f"load curves: column {x!r} is missing")
    panels: list[tuple[str, Sequence[tuple[str, str]]]] = [
        ("output throughput (tok/s)", [("output_throughput_tok_s", "-")]),
        ("TTFT (ms)", [("ttft_p50_ms", "-"), ("ttft_p99_ms", "--")]),
        ("TPOT (ms)", [("tpot_p50_ms", "-"), ("tpot_p99_ms", "--")]),
    ]
    panels = [
        (label, [(c, s) for c, s in columns if c in frame.columns])
        for label, columns in panels
        if any(c in frame.columns for c, _ in columns)
    ]
    figure = _figure(4.0 * len(panels), 3.8)
    axes_list = np.atleast_1d(figure.subplots(1, len(panels)))
    groups = _line_groups(frame, x, group)
    for axes, (label, columns) in zip(axes_list, panels, strict=True):
        for index, (name, part) in enumerate(groups):
            color = series_color(name, index)
            for column, style in columns:
                stat = column.rsplit("_", 2)[-2] if column.endswith("_ms") else ""
                axes.plot(
                    part[x],
                    part[column],
                    style,
                    marker=series_marker(index),
                    ms=4,
                    mfc="none" if style != "-" else color,
                    color=color,
                    alpha=0.9,
                    label=f"{name} {stat}".strip(),
                )
        axes.set_xlabel(x_label)
        axes.set_ylabel(label)
        axes.grid(alpha=0.3)
        if "ms" in label:
            axes.set_yscale("log")
            _plain_log_ticks(axes, "y")
    # One legend for the series (colour and marker), one for the statistics (line style).
    axes_list[0].legend(fontsize="small")
    latency_axes = [a for a, (label, _) in zip(axes_list, panels, strict=True) if "ms" in label]
    if latency_axes:
        from matplotlib.lines import Line2D

        latency_axes[0].legend(
            handles=[
                Line2D([], [], color="k", ls="-", label="p50"),
                Line2D([], [], color="k", ls="--", label="p99"),
            ],
            fontsize="small",
            loc="upper left",
        )
    return figure


def speedup_table(frame: pd.DataFrame, x: str, group: str, keys: Sequence[str]) -> pd.DataFrame:
    """Each method's speed-up over ``none`` at the same point: ``none``'s TPOT p50 over its own.

    ``keys`` are the columns (besides the method) that identify a point, ``x`` among them; the
    baseline's mean batch size at the point is kept as ``batch_size_none``. Returns an empty
    table when there is no ``none`` row to compare with.
    """
    base = frame[frame[group] == BASELINE]
    if base.empty:
        return pd.DataFrame(columns=[*keys, group, "speedup_vs_none", "batch_size_none"])
    joined = frame[frame[group] != BASELINE].merge(
        base[[*keys, "tpot_p50_ms", "mean_batch_size"]], on=list(keys), suffixes=("", "_none")
    )
    joined["speedup_vs_none"] = joined["tpot_p50_ms_none"] / joined["tpot_p50_ms"]
    joined["batch_size_none"] = joined["mean_batch_size_none"]
    return joined[[*keys, group, "speedup_vs_none", "batch_size_none"]].reset_index(drop=True)


def speedup_figure(table: pd.DataFrame, x: str, group: str, x_label: str) -> Figure:
    """Speed-up over ``none`` against load (left) and against ``none``'s batch size (right).

    The dotted line at 1 is break-even: below it speculation makes decoding slower. Raise
    SpecsimError if the table is empty.
    """
    if table.empty:
        raise SpecsimError("speed-up figure: no method to compare with none")
    figure = _figure(9.0, 3.8)
    left, right = figure.subplots(1, 2)
    for index, (name, part) in enumerate(_line_groups(table, x, group)):
        style = {
            "color": series_color(name, index),
            "marker": series_marker(index),
            "ls": SERIES_DASHES[index % len(SERIES_DASHES)],
            "ms": 4,
        }
        left.plot(part[x], part["speedup_vs_none"], label=name, **style)
        ordered = part.sort_values("batch_size_none")
        right.plot(ordered["batch_size_none"], ordered["speedup_vs_none"], **style)
    left.set_xlabel(x_label)
    right.set_xlabel("mean batch size without speculation")
    for axes in (left, right):
        axes.axhline(1.0, color="k", ls=":", lw=1.0)
        axes.set_ylabel("speed-up (TPOT p50 of none / method)")
        axes.grid(alpha=0.3)
    left.legend(fontsize="small")
    return figure


def measured_tokens_per_step(figure: Figure, points: Sequence[tuple[str, int, float]]) -> Figure:
    """Mark measured (method, k, acceptance length) points on the tokens-per-step figure."""
    axes = figure.axes[0]
    for name, k, tau in points:
        axes.plot([k], [tau], marker="*", ms=12, color="k", ls="none")
        axes.annotate(name, (k, tau), textcoords="offset points", xytext=(6, -10), fontsize=8)
    return figure


def slo_frontier_figure(
    probes: pd.DataFrame, rows: Sequence[Mapping[str, Any]], bounds: Mapping[str, float]
) -> Figure:
    """Each SLO metric against the probed rate per method, with its bound and each max rate.

    Seeds are faint dots, their mean a line; the horizontal line is the bound and the vertical
    one each method's highest rate that held. Raise SpecsimError if there are no probes.
    """
    if probes.empty or not bounds:
        raise SpecsimError("SLO frontier: the plan has no probes")
    figure = _figure(4.2 * len(bounds), 3.8)
    axes_list = np.atleast_1d(figure.subplots(1, len(bounds)))
    max_rates = {str(r["method"]): r.get("max_rate_per_s") for r in rows}
    for axes, (key, bound) in zip(axes_list, bounds.items(), strict=True):
        for index, (name, part) in enumerate(probes.groupby("method", sort=False)):
            color = series_color(str(name), index)
            axes.plot(part["rate_per_s"], part[key], ".", color=color, alpha=0.35)
            mean = part.groupby("rate_per_s")[key].mean()
            axes.plot(
                mean.index,
                mean.to_numpy(),
                "-",
                marker=series_marker(index),
                ms=4,
                color=color,
                label=f"{name} (mean of seeds)",
            )
            rate = max_rates.get(str(name))
            if rate:
                axes.axvline(float(rate), color=color, ls="--", lw=0.9)
        unit = " ms" if key.endswith("_ms") else ""
        axes.axhline(bound, color="k", ls=":", lw=1.2, label=f"SLO bound {bound:g}{unit}")
        axes.set_xscale("log")
        if key.endswith("_ms"):
            axes.set_yscale("log")
            _plain_log_ticks(axes, "y")
        _plain_log_ticks(axes, "x")
        axes.set_xlabel("offered request rate (req/s, Poisson)")
        axes.set_ylabel(metric_label(key))
        axes.set_title(f"{metric_label(key)}: SLO {bound:g}{unit}", fontsize="medium")
        axes.grid(alpha=0.3)
    axes_list[0].legend(fontsize="small")
    return figure
