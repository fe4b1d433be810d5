# ruff: noqa: E501
"""The metric glossary shipped inside the package, so a report carries it wherever it is read.

The text is ``docs/metrics.md`` of this project, copied verbatim (a test keeps the two equal).
"""

from __future__ import annotations

GLOSSARY_MARKDOWN = """# Metric glossary

Every figure specsim reports is computed from two flat tables: one row per request
(`requests.csv`) and one row per engine step (`steps.parquet`, or `steps.csv` without pyarrow). Definitions follow `vllm bench serve`
wherever the benchmark defines the metric. Times are in seconds in the tables and in milliseconds in
`summary.json`.

## Per request (`requests.csv`)

| column | meaning |
|---|---|
| `arrival_at_s` | when the client sent the request (what TTFT and latency are measured from) |
| `engine_arrival_at_s` | when it left the serving front end and reached the engine: `arrival_at_s` plus its ingress service and any front-end queueing (docs/serving-path.md); equal to `arrival_at_s` with `engine.frontend.enabled: false` |
| `scheduled_at_s` | the start of the first step that computed any of its tokens |
| `first_token_at_s` | when the client received its first output token: the end of the step that emitted it, plus the front end's `egress_per_chunk_s` |
| `finished_at_s` | when the client received its last output token: the end of the step that emitted it, plus the same egress |
| `prompt_tokens`, `output_tokens` | lengths |
| `num_preemptions` | times it was preempted (recompute: its KV freed, prefilled again later) |
| `num_decode_steps` | verify/decode steps it took part in |
| `num_drafted`, `num_accepted` | draft tokens proposed to it and accepted |
| `num_cached_tokens` | prompt tokens its first admission found in the prefix cache (vLLM's `Request.num_cached_tokens`; 0 with caching off) |
| `prefix_id`, `session_id` | the shared prefix and the multi-turn session it belongs to (-1: none; docs/prefix-caching.md) |
| `ttft_s`, `e2e_latency_s` | derived, as below |

## Per step (`steps.parquet`)

| column | meaning |
|---|---|
| `start_at_s`, `duration_s` | the step's start and length (steps run back to back while there is work) |
| `fixed_s`, `linear_s`, `attention_s`, `allreduce_s`, `sampling_s`, `draft_s` | the duration's breakdown by operator class (docs/cost-model.md); they sum to `duration_s` |
| `num_seqs`, `num_decode_seqs`, `num_prefill_seqs` | sequences in the step |
| `num_tokens`, `num_prefill_tokens` | tokens computed (draft and tree tokens included) |
| `num_emitted_tokens` | output tokens emitted by the step |
| `num_draft_tokens`, `num_accepted_tokens` | draft tokens verified and accepted |
| `kv_blocks_used` | KV blocks held during the step (lookahead and scratch slots included) |
| `num_waiting` | requests waiting (arrived, not running) at the step's start |
| `num_regular_itl` | sequences whose emission in this step followed their emission in the previous step |

## Summary (`summary.json`)

Let *M* be the measured requests: those with index ≥ `measurement.warmup_requests` that finished.
The **measurement window** runs from the first arrival in *M* to the last finish in *M*; its length
is *D*. The run always drains: it ends when every request has finished.

| key | formula |
|---|---|
| `ttft_ms` | `first_token_at − arrival` over *M* |
| `tpot_ms` | `(e2e − ttft) / (output_tokens − 1)` over requests of *M* with more than one output token |
| `itl_ms` | gaps between consecutive emissions of one request, from steps starting inside the window; a step emits all of a sequence's accepted tokens at once, as one streamed chunk in the benchmark. A gap equals the step's duration when the sequence also emitted in the previous step, and `end − previous emission` otherwise (after a preemption) |
| `e2e_latency_ms` | `finished_at − arrival` over *M* |
| `output_throughput_tok_s` | Σ output tokens of *M* / *D* |
| `request_throughput_req_s` | \\|*M*\\| / *D* |
| `total_token_throughput_tok_s` | Σ (prompt + output tokens) of *M* / *D* |
| `mean_acceptance_length` | `1 + Σ accepted / Σ verify steps` over *M*: tokens per sequence per verify step, bonus included (vLLM ≥ 0.9 and the EAGLE papers' τ); 1.0 without speculation |
| `draft_acceptance_rate` | `Σ accepted / Σ drafted` over *M*; null without speculation |
| `prefix_cache_hit_rate` | `Σ num_cached_tokens / Σ prompt_tokens` over *M*: prompt tokens served from the prefix cache per prompt token, vLLM's `vllm:prefix_cache_hits / vllm:prefix_cache_queries` (both counted in `get_computed_blocks`, vllm/v1/core/kv_cache_manager.py: `queries += request.num_tokens`, `hits += num_new_computed_tokens`), counted once per request: vLLM also counts a preempted request's readmission; null with caching off |
| `mean_batch_size` | mean of `num_seqs` over steps starting inside the window |
| `mean_tokens_per_step` | mean of `num_tokens` over the same steps |
| `kv_cache_peak_usage` | max `kv_blocks_used` / blocks in the pool |
| `num_preemptions` | total preemptions |
| `num_steps`, `sim_duration_s` | steps, and the end of the last step |
| `wall_time_s` | the simulator's own run time |

Each latency is reported as `{mean, p50, p90, p99}`. Percentiles interpolate linearly between
order statistics (`numpy.percentile`'s default, as the benchmark uses); ITL percentiles weight each
step's duration by the number of sequences it served, exactly as if every gap were listed.

## In `vllm bench serve`'s keys (`vllm_bench.json`)

Every run folder also holds the run in the flat keys of a `vllm bench serve --save-result` file,
over the same measured requests and window: `duration` is *D*, `completed` is \\|*M*\\|,
`request_throughput`, `output_throughput` and `total_token_throughput` are the summary's,
`request_goodput` is `request_goodput_req_s` (null without a goodput SLO), and for each metric of
`measurement.percentile_metrics` (`ttft`, `tpot`, `itl`, `e2el`) and each `P` of
`measurement.metric_percentiles` (default 99) `mean_/median_/std_/pP_<metric>_ms`, with `median` =
`p50` and `std` the population standard deviation. `max_concurrent_requests` is the most measured
requests in flight at once; `max_output_tokens_per_s` the most tokens emitted in one second of the
window (tokens counted at their step's end). With speculation, `spec_decode_acceptance_length` is
`mean_acceptance_length`, `spec_decode_acceptance_rate` is `100 · draft_acceptance_rate`, and
`spec_decode_num_drafts`, `_draft_tokens`, `_accepted_tokens` are the sums over *M* of verify
steps, drafted and accepted tokens.

## Steady window and goodput (`measurement:`)

By default (`measurement.window: full`) the window is the one above, as `vllm bench serve`
measures, so summaries compare with the benchmark's. `measurement.window: steady` measures the
node under load instead: requests are ranked by arrival, the first `warmup_fraction` (default 0.1,
or `warmup_requests` if more) and the last `cooldown_fraction` (default 0.1) are dropped, and the
window runs from the first kept arrival to the first dropped arrival at the end. The kept
requests are *M*; their latencies are measured in full even when they finish after the window,
while the dropped requests keep the node loaded. Throughput then counts what the node served
inside the window, whoever the work belonged to: `request_throughput_req_s` = finishes in the
window / *D*, `output_throughput_tok_s` = tokens emitted by steps ending in it / *D*,
`total_token_throughput_tok_s` adds the prefill tokens those steps computed. The summary also
gives `measurement_window: "steady"`, `num_arrivals_in_window` and `offered_rate_req_s`
(arrivals in the window / *D*).

`measurement.goodput` takes per-request bounds in ms on `ttft`, `tpot` and `e2el`, as
`vllm bench serve --goodput ttft:500 tpot:50` does. A request of *M* is good when every bounded
metric is at most its bound, its TPOT counting as 0 when it has one output token (vLLM,
`vllm/benchmarks/serve.py`, `calculate_metrics`, commit 009e6d4a). The summary then gives
`goodput_ms` (the bounds), `num_good_requests`, `good_request_fraction` (good / \\|*M*\\|) and
`request_goodput_req_s` = `request_throughput_req_s` × `good_request_fraction`, which in the full
window is the benchmark's good requests / *D*.

## Same-time order and the clock

A step that starts at time *t* sees every arrival at or before *t*. The engine never idles while a
request is running or waiting; an idle node jumps to the next arrival. Simulated time is float
seconds from 0.
"""
