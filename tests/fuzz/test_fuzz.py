"""The fuzz suite: hostile and careless input to scenarios, ``--set``, scenario files and every
artifact parser.

Every generated case runs in this process under a time limit (SIGALRM) and a memory limit
(RLIMIT_AS, the address space in use plus :data:`MEMORY_HEADROOM_BYTES`), and must end in a run
whose metrics are finite and possible, or in one SpecsimError (what the command line prints as one
message with exit 2) whose first words say where: the file (and line), the ``--set`` or the key
path. A traceback, a hang, a memory blow-up or an exit-0 run with a non-finite or
impossible metric fails the suite. A scenario the pre-run estimate (sim/scale.py) says would
take longer than :data:`RUN_IF_ESTIMATE_BELOW_S` is not run: its estimate is what is checked. A
small sample of cases also runs as ``python -m specsim run`` subprocesses. Under CI hypothesis is
derandomized (tests/conftest.py). Outcome counts are printed at the end of the session.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from sim.artifacts import KINDS, parse_runs
from sim.artifacts.replay import read_replay_requests
from sim.catalogue import gpu_names, model_names
from sim.errors import SpecsimError
from sim.run import run_scenario
from sim.scale import preflight
from sim.scenario import METHODS, load_scenario, read_document, validate_document

#: Per-case wall-time limit; a case past it is a hang.
TIME_LIMIT_S = 20.0
#: Address space a case may add to what the process already maps.
MEMORY_HEADROOM_BYTES = 3 * 1024**3
#: Valid scenarios estimated to run longer than this are estimated, not run, by the suite.
RUN_IF_ESTIMATE_BELOW_S = 4.0
ROOT = Path(__file__).resolve().parents[2]


def fuzz(examples: int) -> settings:
    """The loaded profile (derandomized under CI) with ``examples`` cases and no example
    database, so the counts are the same every run."""
    return settings(
        settings.default,
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


#: A refusal's first words say where: a file (path, maybe with its line), a ``--set``, the
#: scenario's source, a key path, or the run the pre-run estimate refused.
_WHERE = re.compile(
    r"^(?:--set |--out |fuzz|default scenario|/|[A-Za-z0-9_.-]+\.(?:yaml|txt|jsonl|json|csv)|"
    r"[a-z_]+(?:\.[a-z0-9_]+)*: |nothing to fit|[0-9][0-9,]* requests)"
)


class Hang(BaseException):
    """Raised by SIGALRM inside a case that ran past TIME_LIMIT_S."""


def _address_space_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[0]) * resource.getpagesize()


@contextlib.contextmanager
def _limits() -> Iterator[None]:
    def on_alarm(signum: int, frame: object) -> None:
        raise Hang

    previous = signal.signal(signal.SIGALRM, on_alarm)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _address_space_bytes() + MEMORY_HEADROOM_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard < 0 else min(limit, hard), hard))
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _outcome(call: Callable[[], str]) -> tuple[str, str]:
    """Run one case under the limits; return its outcome and, for a failure, the details."""
    try:
        with _limits():
            return call(), ""
    except Hang:
        return "hang", f"past {TIME_LIMIT_S} s"
    except MemoryError:
        return "memory", traceback.format_exc(limit=-3)
    except SpecsimError as error:
        message = str(error)
        if "Traceback" in message or not _WHERE.match(message):
            return "traceback", f"a message that does not say where: {message!r}"
        return "refused", ""
    except Exception:
        return "traceback", traceback.format_exc()


def _record(counts: dict[str, Counter[str]], area: str, outcome: str, details: str) -> None:
    counts.setdefault(area, Counter())[outcome] += 1
    assert outcome not in ("traceback", "hang", "memory", "bad_metrics"), details


# --- checking an exit-0 run -----------------------------------------------------------------


def _finite_stats(summary: dict[str, Any], key: str) -> list[float]:
    stats = summary.get(key) or {}
    return [float(v) for v in stats.values() if v is not None]


def metric_problems(summary: dict[str, Any], requests: dict[str, np.ndarray], n: int) -> list[str]:
    """What is non-finite or impossible in a finished run's summary (empty when all is well)."""
    problems = []
    # Every request must finish; the summary counts the measured ones (warm-up requests and a
    # steady window's trimmed ends are left out), and every measured request must be completed.
    finished = np.isfinite(np.asarray(requests["finished_at_s"], dtype=np.float64))
    if len(finished) != n or not finished.all():
        problems.append(f"{int(finished.sum())} of {n} requests finished")
    if summary.get("num_completed") != summary.get("num_requests"):
        problems.append(
            f"{summary.get('num_completed')} of {summary.get('num_requests')} measured requests "
            "completed"
        )
    for key in ("sim_duration_s", "output_throughput_tok_s", "request_throughput_req_s"):
        value = summary.get(key)
        if value is None or not math.isfinite(value) or value <= 0:
            problems.append(f"{key} = {value}")
    for key in ("ttft_ms", "e2e_latency_ms"):
        values = _finite_stats(summary, key)
        if len(values) != len(summary.get(key) or {}) or not values:
            problems.append(f"{key} has no finite statistics: {summary.get(key)}")
        elif any(not math.isfinite(v) or v < 0 for v in values):
            problems.append(f"{key} = {summary[key]}")
    ttft, e2e = summary.get("ttft_ms"), summary.get("e2e_latency_ms")
    if ttft and e2e and e2e["mean"] < ttft["mean"] * (1 - 1e-9):
        problems.append("mean end-to-end latency below mean TTFT")
    several_tokens = bool(np.any(np.asarray(requests["output_tokens"]) >= 2))
    for key in ("tpot_ms", "itl_ms"):
        for value in (summary.get(key) or {}).values():
            if value is None or not math.isfinite(value):
                if several_tokens:
                    problems.append(f"{key} = {summary[key]} with multi-token outputs")
            elif value < 0:
                problems.append(f"{key} = {summary[key]}")
    tau = summary.get("mean_acceptance_length")
    if tau is not None and math.isfinite(tau) and tau < 1 - 1e-9:
        problems.append(f"mean_acceptance_length = {tau}")
    for key in ("draft_acceptance_rate", "kv_cache_peak_usage", "prefix_cache_hit_rate"):
        value = summary.get(key)
        if value is not None and math.isfinite(value) and not -1e-9 <= value <= 1 + 1e-9:
            problems.append(f"{key} = {value}")
    return problems


def _run_valid(scenario: Any, base_dir: Path) -> str:
    estimate = preflight(scenario, yes=False, warn=lambda _: None, base_dir=base_dir)
    if estimate.wall_s is None or estimate.wall_s > RUN_IF_ESTIMATE_BELOW_S:
        return "estimated"
    result = run_scenario(scenario, base_dir)
    problems = metric_problems(
        result.summary.to_dict(), result.requests, scenario.workload.num_requests
    )
    if problems:
        raise AssertionError(f"exit-0 run with impossible metrics: {problems}")
    return "ran"


def _check_run(document: dict[str, Any], base_dir: Path) -> str:
    return _run_valid(validate_document(document, "fuzz"), base_dir)


def _outcome_of_run(call: Callable[[], str]) -> tuple[str, str]:
    outcome, details = _outcome(call)
    if outcome == "traceback" and "impossible metrics" in details:
        return "bad_metrics", details
    return outcome, details


# --- strategies ------------------------------------------------------------------------------

EXTREMES = [0, -1, 1e308, -1e308, 1e-300, 5e-324, 2**63, 10**12, 1e400, float("nan"), "yes", ""]
hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(-5, 100), max_size=6),
    st.dictionaries(st.text(max_size=6), st.integers(-3, 9), max_size=3),
    st.sampled_from(EXTREMES),
)
small_float = st.floats(1e-4, 50.0)
length = st.one_of(
    st.fixed_dictionaries({"distribution": st.just("fixed"), "value": st.integers(-2, 3000)}),
    st.fixed_dictionaries(
        {
            "distribution": st.just("uniform"),
            "low": st.integers(0, 500),
            "high": st.integers(0, 900),
        }
    ),
    st.fixed_dictionaries(
        {
            "distribution": st.just("lognormal"),
            "mean": st.one_of(st.floats(0.5, 2000.0), st.sampled_from([1e308, 0.0, -5.0])),
            "sigma": st.one_of(st.floats(0.0, 2.0), st.sampled_from([1e308, 50.0, -1.0])),
        }
    ),
    st.fixed_dictionaries({"distribution": st.sampled_from(["trace", "empirical", "zipf"])}),
    hostile,
)
TYPED: dict[str, Any] = {
    "name": st.one_of(st.text(max_size=40), st.sampled_from(["../../x", "/abs", "a\x00b"])),
    "seed": st.integers(-3, 2**64),
    "hardware.gpu": st.sampled_from([*gpu_names(), "tpu-v5"]),
    "hardware.num_gpus": st.integers(0, 9),
    "model": st.sampled_from([*model_names(), "gpt-5"]),
    "precision.weights": st.sampled_from(["bf16", "fp8", "int4"]),
    "precision.kv_cache": st.sampled_from(["bf16", "fp8"]),
    "engine.preset": st.sampled_from(["vllm-v1", "vllm", "sglang", "sglang-0.5", "trt"]),
    "engine.max_num_seqs": st.integers(0, 2048),
    "engine.max_num_batched_tokens": st.integers(0, 70000),
    "engine.block_size": st.sampled_from([0, 1, 16, 32, 4096, 10**6]),
    "engine.gpu_memory_utilization": st.floats(-0.5, 1.5),
    "engine.chunked_prefill": st.booleans(),
    "engine.kv_rollback": st.sampled_from(["in_place", "scratch", "never"]),
    "engine.step_overhead_s": st.one_of(small_float.map(lambda v: v / 1000), st.just(1e308)),
    "engine.per_sequence_overhead_s": st.floats(0, 0.01),
    "engine.enable_prefix_caching": st.booleans(),
    "engine.max_prefills_per_step": st.integers(0, 8),
    "engine.frontend.enabled": st.booleans(),
    "engine.frontend.ingress_fixed_s": st.floats(0, 0.5),
    "speculation.method": st.sampled_from([*METHODS, "magic"]),
    "speculation.num_speculative_tokens": st.integers(0, 40),
    "speculation.acceptance.alpha": st.floats(-0.5, 1.5),
    "speculation.acceptance.mean_acceptance_length": st.floats(0.0, 50.0),
    "speculation.acceptance.per_position": st.lists(st.floats(-0.2, 1.2), max_size=6),
    "speculation.tree.shape": st.lists(st.integers(0, 70), max_size=5),
    "speculation.draft_model": st.sampled_from([*model_names(), "nano"]),
    "workload.num_requests": st.one_of(st.integers(1, 60), st.sampled_from([0, 10**7, 10**9])),
    "workload.arrival.process": st.sampled_from(["poisson", "gamma", "closed_loop", "trace", "x"]),
    "workload.arrival.rate_per_s": st.one_of(small_float, st.sampled_from([1e-300, 1e-6, 1e12])),
    "workload.arrival.cv": st.floats(0.0, 200.0),
    "workload.arrival.concurrency": st.integers(0, 80),
    "workload.arrival.think_time_s": st.floats(0, 5.0),
    "workload.prompt_tokens": length,
    "workload.output_tokens": length,
    "workload.max_prompt_tokens": st.integers(0, 5000),
    "workload.max_output_tokens": st.integers(0, 5000),
    "workload.temperature": st.floats(-1.0, 3.0),
    "workload.prefix": st.fixed_dictionaries(
        {"num_shared_prefixes": st.integers(0, 5), "shared_prefix_tokens": st.integers(0, 900)}
    ),
    "workload.sessions": st.fixed_dictionaries(
        {"num_turns": st.integers(0, 6), "think_time_s": st.floats(0, 3.0)}
    ),
    "slo.ttft_p99_ms": st.floats(-10.0, 1e6),
    "measurement.warmup_requests": st.integers(0, 70),
    "measurement.window": st.sampled_from(["full", "steady", "half"]),
    "measurement.goodput": st.dictionaries(
        st.sampled_from(["ttft", "tpot", "e2el", "x"]), st.floats(-1.0, 1e4), max_size=2
    ),
    "fleet.replicas": st.integers(0, 3),
    "fleet.router": st.sampled_from(["round_robin", "least_kv", "fastest"]),
}
PATHS = sorted(TYPED)


def _assign(document: dict[str, Any], path: str, value: Any) -> None:
    node = document
    keys = path.split(".")
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[keys[-1]] = value


@st.composite
def scenario_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A scenario mapping: a short workload, then a few keys with typed or hostile values."""
    document: dict[str, Any] = {"workload": {"num_requests": draw(st.integers(1, 40))}}
    for path in draw(st.lists(st.sampled_from(PATHS), max_size=4, unique=True)):
        value = draw(st.one_of(TYPED[path], TYPED[path], TYPED[path], hostile))
        _assign(document, path, value)
    if draw(st.integers(0, 9)) == 0:
        _assign(document, draw(st.sampled_from(PATHS)) + "x", 1)  # an unknown key
    return document


def _typo(path: str, at: int) -> str:
    at %= len(path)
    return path[:at] + path[at + 1 :]


YAML_FRAGMENTS = st.one_of(
    st.integers(-(10**15), 10**15).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(
        [
            "yes",
            "no",
            "on",
            "true",
            "~",
            "",
            "1e400",
            "-1e308",
            ".nan",
            ".inf",
            "0x1F",
            "[1, 2",
            "{a: 1",
            ": :",
            "&a [*a]",
            "[" * 400,
            "{a: " * 300,
            "'\x00'",
            "!!python/none",
            "{a: &a [x, x, x, x, x, x, x, x], b: &b [*a, *a, *a, *a, *a, *a, *a, *a], "
            "c: &c [*b, *b, *b, *b, *b, *b, *b, *b], d: &d [*c, *c, *c, *c, *c, *c, *c, *c], "
            "e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d]}",
        ]
    ),
    st.text(max_size=20),
    TYPED["workload.prompt_tokens"].map(lambda v: yaml.safe_dump(v, default_flow_style=True)),
)


@st.composite
def set_overrides(draw: st.DrawFn) -> str:
    """One ``--set`` assignment: a schema path (sometimes misspelt) and a YAML fragment."""
    path = draw(st.sampled_from(PATHS))
    if draw(st.integers(0, 7)) == 0:
        path = _typo(path, draw(st.integers(0, 99)))
    value = draw(YAML_FRAGMENTS)
    separator = draw(st.sampled_from(["=", "=", "=", " ", ""]))
    return f"{path}{separator}{value}"


def _billion_laughs(levels: int) -> str:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@st.composite
def scenario_files(draw: st.DrawFn) -> bytes:
    """The bytes of a scenario file: a dumped document, damaged, re-encoded or made hostile."""
    text = yaml.safe_dump(draw(scenario_documents()), allow_unicode=True)
    kind = draw(st.sampled_from(["plain", "mutate", "encode", "bomb", "deep", "dup", "random"]))
    if kind == "mutate":
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.text(alphabet=":-[]{}&*!|>'\"\n #", max_size=3)) + text[at:]
    elif kind == "encode":
        encoding = draw(st.sampled_from(["utf-16", "utf-32", "latin-1", "cp1252"]))
        return (text + "name: café\n").encode(encoding, errors="replace")
    elif kind == "bomb":
        text = _billion_laughs(draw(st.integers(2, 12)))
    elif kind == "deep":
        depth = draw(st.integers(10, 5000))
        text = "workload: " + "[" * depth + "]" * draw(st.integers(0, depth))
    elif kind == "dup":
        text = text + text.splitlines()[0] + "\n"
    elif kind == "random":
        return draw(st.binary(max_size=200))
    return text.encode("utf-8")


# --- the tests -------------------------------------------------------------------------------


@fuzz(150)
@given(document=scenario_documents())
def test_scenario_documents(document: dict[str, Any], fuzz_counts: dict[str, Counter[str]]) -> None:
    outcome, details = _outcome_of_run(lambda: _check_run(document, ROOT))
    _record(fuzz_counts, "scenario", outcome, f"{document}\n{details}")


@fuzz(200)
@given(override=set_overrides())
# Found by an unseeded run: the memory plan's refusals did not lead with the key to change.
@example(override="engine.gpu_memory_utilization=1.0e-300")
@example(override="engine.gpu_memory_utilization=0.19")
def test_set_overrides(override: str, fuzz_counts: dict[str, Counter[str]]) -> None:
    def case() -> str:
        scenario, base_dir = load_scenario(None, ["workload.num_requests=30", override])
        return _run_valid(scenario, base_dir)

    outcome, details = _outcome_of_run(case)
    _record(fuzz_counts, "set", outcome, f"--set {override!r}\n{details}")


@fuzz(100)
@given(raw=scenario_files())
def test_scenario_files(raw: bytes, fuzz_counts: dict[str, Counter[str]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "scenario.yaml"
        path.write_bytes(raw)

        def case() -> str:
            document, base_dir, source = read_document(path)
            return _run_valid(validate_document(document, source), base_dir)

        outcome, details = _outcome_of_run(case)
    _record(fuzz_counts, "yaml", outcome, f"{raw[:300]!r}\n{details}")


def _samples() -> tuple[dict[str, str], Callable[[Path, str, str], Path]]:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "parser_samples", ROOT / "tests" / "calibration" / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SAMPLES, module.write_artifact


SAMPLES, WRITE_ARTIFACT = _samples()
NUMBER_SWAPS = ["-1", "0", "1e400", "-1e308", "NaN", "1e-320", "99999999999999999999", "true"]


@st.composite
def damaged_artifacts(draw: st.DrawFn, kind: str) -> bytes:
    """A sample of ``kind`` with numbers swapped for extremes, characters damaged, truncated,
    re-encoded, nested deeply, or replaced by random bytes."""
    text = SAMPLES[kind]
    mode = draw(st.sampled_from(["numbers", "numbers", "mutate", "truncate", "encode", "deep",
                                 "bytes"]))  # fmt: skip
    if mode == "numbers":
        spans = [m.span() for m in re.finditer(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text)]
        for _ in range(draw(st.integers(1, 4))):
            if not spans:
                break
            start, end = spans[draw(st.integers(0, len(spans) - 1))]
            text = text[:start] + draw(st.sampled_from(NUMBER_SWAPS)) + text[end:]
            spans = [m.span() for m in re.finditer(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text)]
    elif mode == "mutate":
        for _ in range(draw(st.integers(1, 5))):
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.text(alphabet='{}[]",:.0-9eE \n#', max_size=4)) + text[at:]
    elif mode == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif mode == "encode":
        return text.encode(draw(st.sampled_from(["utf-16", "utf-32", "latin-1"])), "replace")
    elif mode == "deep":
        text = "[" * draw(st.integers(100, 100_000)) + text
    else:
        return draw(st.binary(max_size=300))
    return text.encode("utf-8")


def _parse_everything(path: Path, kind: str) -> str:
    parsed = 0
    for call in (
        lambda: parse_runs(path, kind),
        lambda: parse_runs(path),
        lambda: read_replay_requests(path),
    ):
        with contextlib.suppress(SpecsimError):
            call()
            parsed += 1
    return "parsed" if parsed else "refused"


@pytest.mark.parametrize("kind", KINDS)
@fuzz(14)
@given(data=st.data())
def test_every_artifact_parser(
    kind: str, data: st.DataObject, fuzz_counts: dict[str, Counter[str]]
) -> None:
    raw = data.draw(damaged_artifacts(kind))
    with tempfile.TemporaryDirectory() as folder:
        path = WRITE_ARTIFACT(Path(folder), kind, "")
        path.write_bytes(raw)
        outcome, details = _outcome(lambda: _parse_everything(path, kind))
    _record(fuzz_counts, "parser", outcome, f"{kind}: {raw[:300]!r}\n{details}")


def _limit_child() -> None:
    limit = 4 * 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@fuzz(6)
@given(override=set_overrides())
def test_a_sample_through_the_command_line(
    override: str, fuzz_counts: dict[str, Counter[str]]
) -> None:
    # An argument of a POSIX command line ends at its first NUL byte: no user can type one, and
    # the operating system refuses to start the process (the in-process --set cases cover it).
    assume("\x00" not in override)
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "specsim", "run", "--set", "workload.num_requests=20",
                   "--set", override, "--out", str(Path(folder) / "out")]  # fmt: skip
        try:
            done = subprocess.run(
                command,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=90,
                preexec_fn=_limit_child,
                env={**os.environ, "COLUMNS": "200"},
            )
        except subprocess.TimeoutExpired:
            _record(fuzz_counts, "subprocess", "hang", f"--set {override!r}")
            return
    if "Traceback" in done.stderr or done.returncode not in (0, 2):
        outcome = "memory" if "MemoryError" in done.stderr else "traceback"
    else:
        outcome = "ran" if done.returncode == 0 else "refused"
    _record(fuzz_counts, "subprocess", outcome, f"--set {override!r}: {done.stderr[-2000:]}")
