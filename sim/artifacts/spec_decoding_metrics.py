"""vLLM's speculative-decoding log lines, in every layout released (VLLM_FORMATS.md §2).

* V0 ``Speculative metrics: Draft acceptance rate: …, System efficiency: …, Number of speculative
  tokens: k, Number of accepted tokens: …, Number of draft tokens: …, Number of emitted tokens: ….``
  Counters are cumulative since server start; ``emitted`` includes the bonus token.
* V1 dev (never released): ``Speculative metrics: Draft acceptance rate: 1.000, Number of accepted
  tokens: 66, Number of draft tokens: 66, `` (per interval).
* V1 0.8.3-0.8.4: ``SpecDecoding metrics: Draft acceptance rate: 100.0%, Accepted: 66 tokens,
  Drafted: 66 tokens``.
* V1 0.8.5 and 0.9.0-0.10.1: ``… Mean acceptance length: %.2f, Accepted: …, Drafted: …,
  Per-position acceptance rate: …``; the same string, but 0.8.5 printed accepted / drafts (bonus
  excluded) and 0.9.0 on prints 1 + accepted / drafts.
* V1 0.10.2+: ``Mean acceptance length, Accepted throughput, Drafted throughput, Accepted, Drafted,
  Per-position acceptance rate, Avg Draft acceptance rate`` (a pre-merge variant puts ``Draft
  acceptance rate`` first).

The 0.8.5 and 0.9.0 layouts are told apart from the numbers themselves: per-position rates are
unconditional survival probabilities, so Σ rates = E[accepted drafts per verify step] =
accepted / num_drafts. A printed length close to Σ rates lacks the bonus token; one close to
1 + Σ rates has it. The same identity recovers ``num_drafts = accepted / Σ rates``, which V1 lines
do not print.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from sim.artifacts.reading import Source, failure

_FIELD_SEPARATOR = re.compile(r",\s+(?=[A-Z])")
_LEADING_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)")


@dataclass(frozen=True)
class SpecLineRecord:
    """One speculative-decoding log line, normalised; ``mean_acceptance_length`` includes the bonus.

    ``cumulative`` is True for V0 lines, whose counters run since server start.
    """

    layout: str
    cumulative: bool
    num_draft_tokens: int
    num_accepted_tokens: int
    num_drafts: float | None = None
    num_emitted_tokens: int | None = None
    num_speculative_tokens: int | None = None
    mean_acceptance_length: float | None = None
    per_position_rates: tuple[float, ...] | None = None


def split_fields(body: str) -> dict[str, str]:
    """Split ``"Key: value, Other key: value"`` into a dict; a list value stays whole."""
    fields: dict[str, str] = {}
    for part in _FIELD_SEPARATOR.split(body.strip().rstrip(".").rstrip(", ").strip()):
        key, separator, value = part.partition(":")
        if separator:
            fields[key.strip()] = value.strip()
    return fields


def number(fields: dict[str, str], key: str, source: Source, line: int) -> float:
    """Return the leading number of ``fields[key]`` (``"66 tokens"`` → 66, ``"9.1%"`` → 9.1).

    Raise CalibrationError naming the key and line when it is missing or not a number.
    """
    text = fields.get(key)
    match = _LEADING_NUMBER.match(text) if text is not None else None
    if match is None:
        raise failure(source, f"a number after '{key}:'", line)
    return float(match.group(1))


def count(fields: dict[str, str], key: str, source: Source, line: int) -> int:
    """Return ``fields[key]`` as a non-negative whole count. Raise CalibrationError otherwise."""
    value = number(fields, key, source, line)
    if not math.isfinite(value) or value < 0 or value != round(value) or value > 2**62:
        raise failure(source, f"a whole non-negative count after '{key}:'", line)
    return round(value)


def _rates(fields: dict[str, str], source: Source, line: int) -> tuple[float, ...] | None:
    text = fields.get("Per-position acceptance rate")
    if text is None:
        return None
    try:
        rates = tuple(float(item) for item in text.split(",") if item.strip())
    except ValueError:
        raise failure(source, "a comma-separated list of per-position rates", line) from None
    if any(not 0.0 <= rate <= 1.0 for rate in rates):
        raise failure(source, "per-position acceptance rates between 0 and 1", line)
    return rates


def parse_specdecoding_body(body: str, source: Source, line: int) -> SpecLineRecord:
    """Parse the text after ``SpecDecoding metrics:`` (vLLM V1, any released layout).

    Raise CalibrationError if the Accepted/Drafted counts are missing or malformed.
    """
    fields = split_fields(body)
    accepted = count(fields, "Accepted", source, line)
    drafted = count(fields, "Drafted", source, line)
    rates = _rates(fields, source, line)
    rate_sum = sum(rates) if rates else None
    num_drafts = accepted / rate_sum if rate_sum and accepted else None
    printed = (
        number(fields, "Mean acceptance length", source, line)
        if "Mean acceptance length" in fields
        else None
    )
    if printed is None:
        layout, mean_length = "vllm-log-0.8.3", None
    elif "Accepted throughput" in fields:
        premerge = "Avg Draft acceptance rate" not in fields
        layout = "vllm-log-pr24127-premerge" if premerge else "vllm-log-0.10.2"
        mean_length = printed
    elif rate_sum is not None and abs(printed - rate_sum) < abs(printed - 1.0 - rate_sum):
        layout, mean_length = "vllm-log-0.8.5", printed + 1.0
    else:
        layout, mean_length = "vllm-log-0.9.0", printed
    return SpecLineRecord(
        layout=layout,
        cumulative=False,
        num_draft_tokens=drafted,
        num_accepted_tokens=accepted,
        num_drafts=num_drafts,
        num_speculative_tokens=len(rates) if rates else None,
        mean_acceptance_length=mean_length,
        per_position_rates=rates,
    )


def parse_speculative_metrics_body(body: str, source: Source, line: int) -> SpecLineRecord:
    """Parse the text after ``Speculative metrics:`` (vLLM V0, or the unreleased V1 dev layout).

    V0 lines are cumulative; ``num_drafts`` = draft tokens / k and the mean acceptance length is
    emitted / num_drafts (``vllm/spec_decode/metrics.py``). Raise CalibrationError if a counter is
    missing or malformed.
    """
    fields = split_fields(body)
    accepted = count(fields, "Number of accepted tokens", source, line)
    drafted = count(fields, "Number of draft tokens", source, line)
    if "Number of emitted tokens" not in fields and "System efficiency" not in fields:
        return SpecLineRecord("vllm-log-v1-dev", False, drafted, accepted)
    k = count(fields, "Number of speculative tokens", source, line)
    emitted = count(fields, "Number of emitted tokens", source, line)
    if k == 0:
        raise failure(source, "'Number of speculative tokens' of at least 1", line)
    num_drafts = drafted / k
    return SpecLineRecord(
        layout="vllm-log-v0",
        cumulative=True,
        num_draft_tokens=drafted,
        num_accepted_tokens=accepted,
        num_drafts=num_drafts,
        num_emitted_tokens=emitted,
        num_speculative_tokens=k,
        mean_acceptance_length=emitted / num_drafts if num_drafts else None,
    )
