"""``vllm bench serve``'s options on ``run``, ``compare`` and ``sweep``.

A user who benchmarks with ``vllm bench serve --request-rate 8 --max-concurrency 32
--num-prompts 500 --dataset-name random --random-input-len 1024 --random-output-len 128`` can
give specsim the same words. Each option rewrites the scenario document before validation, so the
resolved scenario records what it meant, and the usual ``key.path: message`` errors apply:

* ``--request-rate R``: Poisson arrivals at ``R`` req/s (gamma with ``--burstiness b``:
  ``cv = 1 / sqrt(b)``, the benchmark's gamma shape ``b``). ``inf`` sends every request at once
  (a closed loop of ``num_requests`` clients), or, with ``--max-concurrency N``, keeps ``N`` in
  flight (a closed loop of ``N`` clients with no think time), as the benchmark's semaphore does.
* ``--max-concurrency N`` with a finite rate: open-loop arrivals capped at ``N`` in flight
  (``workload.arrival.max_concurrency``).
* ``--num-prompts``: ``workload.num_requests``. ``--dataset-name``: ``workload.dataset`` (the
  dataset whose acceptance is replayed); ``random`` also fixes the lengths at
  ``--random-input-len`` / ``--random-output-len`` (the benchmark's defaults 1024 and 128), drawn
  uniformly within ``±--random-range-ratio`` when that is above 0, as the benchmark draws them.
* ``--goodput ttft:500 tpot:50``: ``measurement.goodput``; ``--percentile-metrics`` and
  ``--metric-percentiles``: the percentile block of ``vllm_bench.json``.

The options are applied after every ``--set``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import wraps
from typing import Annotated, Any, TypeVar

import typer

from reports.goodput import parse_goodput
from sim.errors import ScenarioError

#: ``vllm bench serve``'s defaults for the random dataset (``--random-input-len``/``-output-len``).
RANDOM_INPUT_LEN = 1024
RANDOM_OUTPUT_LEN = 128


@dataclass(frozen=True)
class BenchOptions:
    """The ``vllm bench serve`` options given on the command line (None: not given)."""

    request_rate: str | None = None
    max_concurrency: int | None = None
    burstiness: float | None = None
    num_prompts: int | None = None
    dataset_name: str | None = None
    random_input_len: int | None = None
    random_output_len: int | None = None
    random_range_ratio: float | None = None
    goodput: str | None = None
    percentile_metrics: str | None = None
    metric_percentiles: str | None = None

    @property
    def given(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))


def _rate(text: str) -> float:
    """The request rate of ``--request-rate`` (``inf`` allowed). Raise ScenarioError if bad."""
    try:
        rate = float(text)
    except ValueError:
        raise ScenarioError(f"--request-rate: expected a number or inf, got {text!r}") from None
    if math.isnan(rate) or rate <= 0:
        raise ScenarioError(f"--request-rate: must be > 0 (or inf), got {text!r}")
    return rate


def _arrival(workload: dict[str, Any], options: BenchOptions) -> dict[str, Any] | None:
    """The new ``workload.arrival`` mapping, or None when no arrival option is given."""
    rate_text, cap, burst = options.request_rate, options.max_concurrency, options.burstiness
    if rate_text is None and cap is None and burst is None:
        return None
    current = dict(workload.get("arrival") or {})
    process = current.get("process", "poisson")
    if rate_text is None:
        if process in ("trace", "closed_loop") and burst is not None:
            raise ScenarioError(
                f"--burstiness: the scenario's arrivals are {process}; give --request-rate too"
            )
        if process == "trace" and cap is not None:
            raise ScenarioError("--max-concurrency: a replayed trace cannot be capped")
        rate = math.inf if process == "closed_loop" else float(current.get("rate_per_s", 4.0))
        if burst is None and process == "gamma":
            burst = 1.0 / float(current.get("cv", 1.0)) ** 2
    else:
        rate = _rate(rate_text)
    if math.isinf(rate):
        num_requests = int(workload.get("num_requests", 1000))
        concurrency = cap if cap is not None else current.get("concurrency", num_requests)
        return {"process": "closed_loop", "concurrency": min(int(concurrency), num_requests)}
    arrival: dict[str, Any] = {"process": "poisson", "rate_per_s": rate}
    if burst is not None and burst != 1.0:
        if burst <= 0:
            raise ScenarioError(f"--burstiness: must be > 0, got {burst:g}")
        arrival = {"process": "gamma", "rate_per_s": rate, "cv": 1.0 / math.sqrt(burst)}
    if cap is None and rate_text is None:
        cap = current.get("max_concurrency")
    if cap is not None:
        arrival["max_concurrency"] = cap
    return arrival


def _lengths(length: int, ratio: float) -> dict[str, Any]:
    """``--random-*-len`` with ``--random-range-ratio``: fixed, or uniform in ``L(1 ± r)``."""
    if ratio == 0:
        return {"distribution": "fixed", "value": length}
    low, high = max(1, math.floor(length * (1 - ratio))), math.ceil(length * (1 + ratio))
    return {"distribution": "uniform", "low": low, "high": high}


def _csv(text: str, flag: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ScenarioError(f"{flag}: no value in {text!r}")
    return items


def apply_bench_options(document: dict[str, Any], options: BenchOptions) -> None:
    """Rewrite ``document`` in place for the given options (module docstring).

    Raise ScenarioError naming the option if a value is malformed or does not fit the scenario.
    """
    if not options.given:
        return
    workload = document.setdefault("workload", {})
    if not isinstance(workload, dict):
        raise ScenarioError("workload: must be a mapping to take --request-rate and the like")
    if options.num_prompts is not None:
        if options.num_prompts < 1:
            raise ScenarioError(f"--num-prompts: must be >= 1, got {options.num_prompts}")
        workload["num_requests"] = options.num_prompts
    arrival = _arrival(workload, options)
    if arrival is not None:
        workload["arrival"] = arrival
    if options.dataset_name is not None:
        workload["dataset"] = options.dataset_name
    ratio = options.random_range_ratio if options.random_range_ratio is not None else 0.0
    if not 0 <= ratio < 1:
        raise ScenarioError(f"--random-range-ratio: must be in [0, 1), got {ratio:g}")
    is_random = options.dataset_name == "random"
    for flag, key, given, default in (
        ("--random-input-len", "prompt_tokens", options.random_input_len, RANDOM_INPUT_LEN),
        ("--random-output-len", "output_tokens", options.random_output_len, RANDOM_OUTPUT_LEN),
    ):
        if given is not None and given < 1:
            raise ScenarioError(f"{flag}: must be >= 1, got {given}")
        if given is not None or is_random or options.random_range_ratio is not None:
            workload[key] = _lengths(given if given is not None else default, ratio)
    measurement = document.setdefault("measurement", {})
    if options.goodput is not None:
        measurement["goodput"] = parse_goodput(options.goodput).bounds_ms
    if options.percentile_metrics is not None:
        measurement["percentile_metrics"] = _csv(options.percentile_metrics, "--percentile-metrics")
    if options.metric_percentiles is not None:
        values = _csv(options.metric_percentiles, "--metric-percentiles")
        try:
            measurement["metric_percentiles"] = [float(v) for v in values]
        except ValueError:
            raise ScenarioError(
                "--metric-percentiles: expected numbers like 50,90,99, "
                f"got {options.metric_percentiles!r}"
            ) from None


_PANEL = "vllm bench serve options"
_BENCH_PARAMETERS: dict[str, Any] = {
    "request_rate": Annotated[
        str | None,
        typer.Option(
            "--request-rate",
            metavar="REQ/S",
            help="Requests per second (Poisson), or inf to send them all at once.",
            rich_help_panel=_PANEL,
        ),
    ],
    "max_concurrency": Annotated[
        int | None,
        typer.Option(
            "--max-concurrency",
            metavar="N",
            help="At most N requests in flight (with a rate: arrivals wait for a free slot).",
            rich_help_panel=_PANEL,
        ),
    ],
    "burstiness": Annotated[
        float | None,
        typer.Option(
            "--burstiness",
            metavar="SHAPE",
            help="Gamma shape of the gaps: 1 is Poisson, below 1 burstier, above 1 smoother.",
            rich_help_panel=_PANEL,
        ),
    ],
    "num_prompts": Annotated[
        int | None,
        typer.Option(
            "--num-prompts", metavar="N", help="Requests to send.", rich_help_panel=_PANEL
        ),
    ],
    "dataset_name": Annotated[
        str | None,
        typer.Option(
            "--dataset-name",
            metavar="NAME",
            help="Dataset whose acceptance is replayed (sharegpt, mt-bench, random...); "
            "random also fixes the lengths.",
            rich_help_panel=_PANEL,
        ),
    ],
    "random_input_len": Annotated[
        int | None,
        typer.Option(
            "--random-input-len",
            metavar="TOKENS",
            help="Prompt length (random dataset: 1024).",
            rich_help_panel=_PANEL,
        ),
    ],
    "random_output_len": Annotated[
        int | None,
        typer.Option(
            "--random-output-len",
            metavar="TOKENS",
            help="Output length (random dataset: 128).",
            rich_help_panel=_PANEL,
        ),
    ],
    "random_range_ratio": Annotated[
        float | None,
        typer.Option(
            "--random-range-ratio",
            metavar="R",
            help="Lengths uniform in L(1-R)..L(1+R) (0: fixed).",
            rich_help_panel=_PANEL,
        ),
    ],
    "goodput": Annotated[
        str | None,
        typer.Option(
            "--goodput",
            metavar="'ttft:MS tpot:MS'",
            help="Per-request SLO in ms (ttft, tpot, e2el) behind request_goodput.",
            rich_help_panel=_PANEL,
        ),
    ],
    "percentile_metrics": Annotated[
        str | None,
        typer.Option(
            "--percentile-metrics",
            metavar="ttft,tpot,itl",
            help="Metrics in vllm_bench.json's percentile block (ttft, tpot, itl, e2el).",
            rich_help_panel=_PANEL,
        ),
    ],
    "metric_percentiles": Annotated[
        str | None,
        typer.Option(
            "--metric-percentiles",
            metavar="99",
            help="Percentiles in vllm_bench.json, e.g. 50,90,99.",
            rich_help_panel=_PANEL,
        ),
    ],
}

F = TypeVar("F", bound=Callable[..., Any])


def with_bench_options(func: F) -> F:
    """Give a command the ``vllm bench serve`` options; it receives them as ``bench``.

    The command declares a keyword parameter ``bench: BenchOptions``; the options take its place
    in the command's signature, so every command spells them the same way.
    """
    # Annotations resolved now: a given __signature__ is taken as it is, strings included.
    signature = inspect.signature(func, eval_str=True)
    kept = [p for p in signature.parameters.values() if p.name != "bench"]
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind)
        for name, kind in _BENCH_PARAMETERS.items()
    ]
    positional = [p for p in kept if p.kind != inspect.Parameter.KEYWORD_ONLY]
    keyword = [p for p in kept if p.kind == inspect.Parameter.KEYWORD_ONLY]

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bench = BenchOptions(**{name: kwargs.pop(name, None) for name in _BENCH_PARAMETERS})
        return func(*args, bench=bench, **kwargs)

    annotations = {k: v for k, v in getattr(func, "__annotations__", {}).items() if k != "bench"}
    wrapper.__annotations__ = {**annotations, **_BENCH_PARAMETERS}
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*positional, *keyword, *added]
    )
    return wrapper  # type: ignore[return-value]
