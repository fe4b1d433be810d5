"""Model names as users write them: catalogue names and Hugging Face model ids.

Wherever a model is named (a scenario's ``model`` and ``speculation.draft_model``, ``recommend
--model``, ``calibrate --model``), the catalogue name (``llama-3.1-8b``) and the Hugging Face id
that ``vllm serve`` and ``vllm bench serve --model`` take (``meta-llama/Llama-3.1-8B-Instruct``)
name the same entry. The simulator models an architecture, so a base model and its instruction-
tuned variant share one entry. Ids are matched without regard to case, with or without the
organisation (``Llama-3.1-8B-Instruct``) when that leaves one candidate.

The ids are the models' repositories on huggingface.co; each catalogue entry's ``source`` says
which config.json its shapes were read from.

A quantized checkpoint's id (``Qwen/Qwen3-235B-A22B-FP8``) names the same architecture stored in
another weight format: it resolves to the catalogue model, and the format it states becomes the
scenario's ``precision.weights`` (:data:`QUANTIZED_CHECKPOINTS`, each with the
``quantization_config`` of its config.json). A scenario that sets another ``precision.weights``
beside such an id is refused, as is a quantized id given as a draft model (a draft runs in bf16).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.catalogue import ModelSpec, get_model, model_names

#: Hugging Face ids per catalogue model; the first is the one written into result files.
HF_MODEL_IDS: dict[str, tuple[str, ...]] = {
    "llama-3.1-8b": (
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Meta-Llama-3.1-8B-Instruct",
        "meta-llama/Meta-Llama-3.1-8B",
    ),
    "llama-3.1-70b": (
        "meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Llama-3.1-70B",
        "meta-llama/Meta-Llama-3.1-70B-Instruct",
        "meta-llama/Meta-Llama-3.1-70B",
    ),
    "llama-3.3-70b": ("meta-llama/Llama-3.3-70B-Instruct",),
    "llama-3.2-1b": ("meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-1B"),
    "llama-2-7b": (
        "meta-llama/Llama-2-7b-hf",
        "meta-llama/Llama-2-7b-chat-hf",
        "lmsys/vicuna-7b-v1.3",
        "lmsys/vicuna-7b-v1.5",
    ),
    "llama-2-70b": ("meta-llama/Llama-2-70b-hf", "meta-llama/Llama-2-70b-chat-hf"),
    "vicuna-13b": ("lmsys/vicuna-13b-v1.3",),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B"),
    "qwen2.5-0.5b": ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B"),
    "qwen3-8b": ("Qwen/Qwen3-8B",),
    "qwen3-32b": ("Qwen/Qwen3-32B",),
    "mixtral-8x7b": ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mistralai/Mixtral-8x7B-v0.1"),
    "tinyllama-1.1b": ("TinyLlama/TinyLlama-1.1B-Chat-v1.0",),
    "codellama-34b": ("codellama/CodeLlama-34b-Instruct-hf", "codellama/CodeLlama-34b-hf"),
    "mistral-nemo-12b": (
        "mistralai/Mistral-Nemo-Instruct-2407",
        "mistralai/Mistral-Nemo-Base-2407",
    ),
}


@dataclass(frozen=True)
class QuantizedCheckpoint:
    """A checkpoint of a catalogue model stored in another weight format.

    ``weights``: the ``precision.weights`` format it is priced in; ``fp8_block_size``: the square
    block its FP8 weight scales cover (None: per output channel), which must agree with the
    catalogue entry's ``fp8_weight_block_size`` since that picks the expert kernel
    (:func:`sim.moe.moe_kernel_dtype`); ``scheme``: its ``quantization_config`` in words.
    """

    model: str
    weights: str
    fp8_block_size: int | None
    scheme: str


#: Quantized checkpoints by Hugging Face id, each read from its config.json.
QUANTIZED_CHECKPOINTS: dict[str, QuantizedCheckpoint] = {
    "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic": QuantizedCheckpoint(
        "llama-4-scout",
        "fp8",
        None,
        "compressed-tensors float-quantized: FP8 weights with one scale per output channel, "
        "activations quantized to FP8 per token at run time (input_activations dynamic, strategy "
        "token); the attention projections, routers and lm_head stay bf16 (its ignore list), "
        "which one weight format per model prices as FP8 (config.json as kept in "
        "inference-sim/inference-sim @ f90a1e3a, model_configs/"
        "llama-4-scout-17b-16e-instruct-fp8-dynamic)",
    ),
    "Qwen/Qwen3-235B-A22B-FP8": QuantizedCheckpoint(
        "qwen3-235b-a22b",
        "fp8",
        128,
        "fine-grained FP8: e4m3 weights scaled per 128x128 block, activations quantized at run "
        "time (config.json quantization_config: quant_method fp8, activation_scheme dynamic, "
        "weight_block_size [128, 128]; the model card's 'block size of 128')",
    ),
}


def quantized_checkpoint(name: str) -> QuantizedCheckpoint | None:
    """The quantized checkpoint ``name`` denotes (its id, case aside, with or without the
    organisation when that leaves one), or None for any other name."""
    wanted = name.strip().lower()
    bare = [c for i, c in QUANTIZED_CHECKPOINTS.items() if i.lower().split("/", 1)[1] == wanted]
    for model_id, checkpoint in QUANTIZED_CHECKPOINTS.items():
        if model_id.lower() == wanted:
            return checkpoint
    return bare[0] if "/" not in wanted and len(bare) == 1 else None


def stated_weights(name: str) -> str | None:
    """The weight format a model name states (a quantized checkpoint's id), or None."""
    checkpoint = quantized_checkpoint(name)
    return checkpoint.weights if checkpoint else None


def model_ids(name: str) -> tuple[str, ...]:
    """Every Hugging Face id of catalogue model ``name``: the table's, then the entry's own."""
    ids = HF_MODEL_IDS.get(name, ())
    own = get_model(name).spec.hf_id if name in model_names() else None
    return ids + ((own,) if own and own not in ids else ())


def resolve_model_name(name: str) -> str | None:
    """The catalogue name that ``name`` (a catalogue name or a Hugging Face id) denotes, or None.

    A bare repository name (no organisation) resolves only when exactly one entry has it. A
    quantized checkpoint's id resolves to the model it quantizes (:data:`QUANTIZED_CHECKPOINTS`).
    """
    checkpoint = quantized_checkpoint(name)
    if checkpoint is not None:
        return checkpoint.model
    known = model_names()
    wanted = name.strip().lower()
    by_lower = {n.lower(): n for n in known}
    if wanted in by_lower:
        return by_lower[wanted]
    bare_matches: set[str] = set()
    for catalogue_name in known:
        for model_id in model_ids(catalogue_name):
            if model_id.lower() == wanted:
                return catalogue_name
            if "/" not in wanted and model_id.lower().split("/", 1)[1] == wanted:
                bare_matches.add(catalogue_name)
    return bare_matches.pop() if len(bare_matches) == 1 else None


def hf_model_id(name: str) -> str:
    """The Hugging Face id of catalogue model ``name`` (``name`` itself when none is known)."""
    ids = model_ids(name) if name in model_names() else HF_MODEL_IDS.get(name, ())
    return ids[0] if ids else name


def unknown_model_message(name: str) -> str:
    """The message for a model name that resolves to nothing."""
    return (
        f"unknown model {name!r}; known: {', '.join(model_names())} "
        "(or their Hugging Face ids: see `specsim catalogue`)"
    )


def checkpoint_precision_conflict(model: str, weights: str) -> str:
    """Why ``precision.weights: weights`` cannot go with model name ``model``, or ``""``: a
    quantized checkpoint's id fixes the format its weights are stored in."""
    checkpoint = quantized_checkpoint(model)
    if checkpoint is None or checkpoint.weights == weights:
        return ""
    return (
        f"precision.weights: {weights} conflicts with model {model!r}, a checkpoint of "
        f"{checkpoint.model} in {checkpoint.weights}; drop precision.weights or set it to "
        f"{checkpoint.weights}, or name the unquantized model {hf_model_id(checkpoint.model)!r}"
    )


def draft_catalogue_model(value: str | ModelSpec | None) -> str | ModelSpec | None:
    """:func:`catalogue_model` for ``speculation.draft_model``, which runs in bf16.

    Raise ValueError if ``value`` is a quantized checkpoint's id, or as :func:`catalogue_model`.
    """
    if isinstance(value, str) and (checkpoint := quantized_checkpoint(value)) is not None:
        raise ValueError(
            f"{value!r} is a checkpoint of {checkpoint.model} in {checkpoint.weights}; a draft "
            f"model runs in bf16 here (no draft precision is modelled): name {checkpoint.model} or "
            f"{hf_model_id(checkpoint.model)!r}"
        )
    return catalogue_model(value)


def catalogue_model(value: str | ModelSpec | None) -> str | ModelSpec | None:
    """A model name resolved to its catalogue entry (Hugging Face ids accepted).

    Raise ValueError naming the known models if a name resolves to nothing.
    """
    if not isinstance(value, str):
        return value
    resolved = resolve_model_name(value)
    if resolved is None:
        raise ValueError(
            f"unknown model; known: {', '.join(model_names())} (or their Hugging Face ids, "
            "e.g. meta-llama/Llama-3.1-8B-Instruct, or the path of a Hugging Face config.json)"
        )
    return resolved
