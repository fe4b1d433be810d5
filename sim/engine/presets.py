"""Engine presets: what distinguishes one serving engine, at one version, for the simulator.

Each preset carries the engine's fixed per-step overhead (calibrated, with the measurement it was
calibrated on), its scheduling defaults as that version shipped them, its serving front end
(:mod:`sim.engine.frontend`), and two explicit pointers: which calibrated preset's drafting
overheads it uses (``draft_overheads_from``, a key of ``sim/data/draft_overheads.yaml``) and which
engine's table of supported drafting methods applies (``draft_support_from``). Short names
(``vllm``, ``sglang``) are aliases of the newest preset of each engine. A scenario's ``engine``
keys override any setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from sim.engine.frontend import FRONTEND_FIELDS, FrontEnd
from sim.engine.memory import KV_SIZING_RULES
from sim.errors import ScenarioError
from sim.package_data import packaged_yaml

#: Preset fields a scenario's ``engine`` section can set (the rest describe the preset itself).
SETTINGS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "block_size",
    "gpu_memory_utilization",
    "chunked_prefill",
    "kv_rollback",
    "step_overhead_s",
    "per_sequence_overhead_s",
    "enable_prefix_caching",
    "async_scheduling",
)

#: The packaged file, relative to the ``sim`` package.
PRESETS_FILE = "data/engine_presets.yaml"


@dataclass(frozen=True)
class EnginePreset:
    """Defaults, overheads and front end of one serving engine version."""

    name: str
    display_name: str
    versions: str
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    gpu_memory_utilization: float
    chunked_prefill: bool
    kv_rollback: str
    step_overhead_s: float
    per_sequence_overhead_s: float
    reserved_memory_bytes: float
    draft_overheads_from: str
    draft_support_from: str
    frontend: FrontEnd
    calibration: dict[str, Any]
    enable_prefix_caching: bool = True
    #: The scheduler works one step ahead (vLLM's async scheduling): a request that arrives while
    #: step n runs joins step n+2 at the earliest (:meth:`EngineCore.arrivals_seen_until_s`).
    async_scheduling: bool = False
    #: A hidden-state head (EAGLE-3) that ships its own token embedding keeps it resident beside
    #: the target's (vLLM's EAGLE proposer); False: the head shares the target's embedding.
    draft_keeps_own_embedding: bool = False
    #: A token tree's verify runs an attention kernel with a custom mask (SGLang 0.4's FlashInfer
    #: path, :mod:`sim.drafting.tree_verify`); False: the causal pricing.
    tree_verify_custom_mask: bool = False
    #: A tree's later draft levels read each node's prefix KV on its own (SGLang 0.4's draft
    #: decode, :mod:`sim.drafting.tree_verify`); False: once per sequence.
    tree_draft_per_node_prefix_reads: bool = False
    #: Drafting methods for which every running request reserves k KV slots beyond the step's
    #: tokens for the next proposal (vLLM V1's ``num_lookahead_tokens``;
    #: :attr:`sim.engine.queues.SchedulerConfig.lookahead_slots`); empty: none.
    lookahead_slot_methods: tuple[str, ...] = ()
    #: With a drafter that reads the target's hidden states, a prefix-cache hit gives back its
    #: last block for recomputation (vLLM V1's ``find_longest_cache_hit`` with ``use_eagle``;
    #: :attr:`sim.engine.queues.SchedulerConfig.drop_last_cached_block`).
    hidden_state_drafter_drops_last_cached_block: bool = False
    #: Chunked-local attention layers (Llama 4) keep every token's KV in the one pool like a full
    #: layer (vLLM turns its hybrid KV manager off for them); False: a window reserve per slot.
    chunked_local_as_full_attention: bool = False
    #: SGLang's hybrid sliding-window KV pool: the window layers' pool holds this fraction of the
    #: full-attention pool's tokens (``--swa-full-tokens-ratio``; :mod:`sim.engine.memory`).
    #: ``None``: the window layers keep a fixed reserve per sequence slot instead (vLLM's rule,
    #: :func:`sim.parallel.window_kv_reserve_bytes`).
    swa_full_tokens_ratio: float | None = None
    #: How the KV pool is sized (:data:`sim.engine.memory.KV_SIZING_RULES`): ``budget`` subtracts
    #: a fixed activation estimate and the reserve from the published memory; ``vllm-v1-profile``
    #: follows vLLM V1's profile run (the sampler's peak over ``max_num_seqs`` rows, the memory
    #: the driver reports).
    kv_sizing: str = "budget"


def _document() -> dict[str, Any]:
    return packaged_yaml(PRESETS_FILE, section="presets", error=ScenarioError)


def _frontend(name: str, entry: Any) -> FrontEnd:
    if not isinstance(entry, dict):
        raise ScenarioError(f"sim/{PRESETS_FILE}: presets.{name}.frontend must be a mapping")
    try:
        return FrontEnd(
            enabled=bool(entry["enabled"]),
            **{key: float(entry[key]) for key in FRONTEND_FIELDS},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ScenarioError(f"sim/{PRESETS_FILE}: presets.{name}.frontend: {exc}") from None


def _window_ratio(name: str, entry: dict[str, Any]) -> float | None:
    value = entry.get("swa_full_tokens_ratio")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ScenarioError(
            f"sim/{PRESETS_FILE}: presets.{name}.swa_full_tokens_ratio: expected a number in "
            f"(0, 1], got {value!r}"
        )
    if not entry.get("swa_full_tokens_ratio_source"):
        raise ScenarioError(
            f"sim/{PRESETS_FILE}: presets.{name}.swa_full_tokens_ratio_source: missing (say "
            "where the ratio comes from)"
        )
    return float(value)


def _kv_sizing(name: str, entry: dict[str, Any]) -> str:
    value = entry.get("kv_sizing", "budget")
    if value not in KV_SIZING_RULES:
        raise ScenarioError(
            f"sim/{PRESETS_FILE}: presets.{name}.kv_sizing: expected one of "
            f"{', '.join(KV_SIZING_RULES)}, got {value!r}"
        )
    return str(value)


def _methods(name: str, entry: dict[str, Any], key: str) -> tuple[str, ...]:
    from sim.method_table import METHODS

    value = entry.get(key)
    if not isinstance(value, list) or any(m not in METHODS for m in value):
        raise ScenarioError(
            f"sim/{PRESETS_FILE}: presets.{name}.{key}: expected a list of drafting methods "
            f"({', '.join(METHODS)}), got {value!r}"
        )
    return tuple(value)


def _flag(name: str, entry: dict[str, Any], key: str) -> bool:
    value = entry.get(key)
    if not isinstance(value, bool):
        raise ScenarioError(f"sim/{PRESETS_FILE}: presets.{name}.{key}: expected true or false")
    return value


@cache
def _presets() -> dict[str, EnginePreset]:
    out: dict[str, EnginePreset] = {}
    for name, entry in _document()["presets"].items():
        out[name] = EnginePreset(
            name=name,
            display_name=entry["display_name"],
            versions=str(entry["versions"]),
            max_num_seqs=int(entry["max_num_seqs"]),
            max_num_batched_tokens=int(entry["max_num_batched_tokens"]),
            block_size=int(entry["block_size"]),
            gpu_memory_utilization=float(entry["gpu_memory_utilization"]),
            chunked_prefill=bool(entry["chunked_prefill"]),
            kv_rollback=str(entry["kv_rollback"]),
            step_overhead_s=float(entry["step_overhead_s"]),
            per_sequence_overhead_s=float(entry["per_sequence_overhead_s"]),
            reserved_memory_bytes=float(entry["reserved_memory_bytes"]),
            draft_overheads_from=str(entry["draft_overheads_from"]),
            draft_support_from=str(entry["draft_support_from"]),
            frontend=_frontend(name, entry["frontend"]),
            calibration=dict(entry["calibration"]),
            enable_prefix_caching=bool(entry["enable_prefix_caching"]),
            async_scheduling=_flag(name, entry, "async_scheduling"),
            draft_keeps_own_embedding=_flag(name, entry, "draft_keeps_own_embedding"),
            tree_verify_custom_mask=_flag(name, entry, "tree_verify_custom_mask"),
            tree_draft_per_node_prefix_reads=_flag(name, entry, "tree_draft_per_node_prefix_reads"),
            lookahead_slot_methods=_methods(name, entry, "lookahead_slot_methods"),
            hidden_state_drafter_drops_last_cached_block=_flag(
                name, entry, "hidden_state_drafter_drops_last_cached_block"
            ),
            chunked_local_as_full_attention=_flag(name, entry, "chunked_local_as_full_attention"),
            swa_full_tokens_ratio=_window_ratio(name, entry),
            kv_sizing=_kv_sizing(name, entry),
        )
    return out


def aliases() -> dict[str, str]:
    """Short names and the preset each one stands for."""
    return {str(k): str(v) for k, v in (_document().get("aliases") or {}).items()}


def preset_names() -> tuple[str, ...]:
    """Every preset's own name, in file order."""
    return tuple(_presets())


def known_names() -> tuple[str, ...]:
    """Every name ``engine.preset`` accepts: presets, then aliases."""
    return preset_names() + tuple(aliases())


def canonical_name(name: str) -> str:
    """The preset ``name`` stands for (itself unless it is an alias).

    Raise ScenarioError listing the known presets and aliases if ``name`` is neither.
    """
    if name in _presets():
        return name
    target = aliases().get(name)
    if target is None:
        described = ", ".join(f"{alias} (= {real})" for alias, real in aliases().items())
        raise ScenarioError(
            f"engine.preset: unknown preset {name!r}; presets: {', '.join(preset_names())}; "
            f"aliases: {described}"
        )
    return target


def get_preset(name: str) -> EnginePreset:
    """The preset called ``name``, or the one the alias ``name`` stands for.

    Raise ScenarioError naming the known presets and aliases if there is none.
    """
    return _presets()[canonical_name(name)]


def reload_presets() -> None:
    """Read the preset file again (after a calibration script rewrote it)."""
    packaged_yaml.cache_clear()
    _presets.cache_clear()
