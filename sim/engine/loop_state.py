"""The compiled loop's state layout: what it returns, its integer state and configuration slots,
its record columns, and the working arrays of one step.

:mod:`sim.engine.loop_kernel` runs the loop; :mod:`sim.engine.compiled_loop` (a lone node) and
:mod:`sim.fleet.compiled_fleet` (the replicas of a fleet) hold its state in these layouts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from sim.engine.recorder import STEP_COLUMNS

if TYPE_CHECKING:
    from sim.engine.kv_cache import BlockManager
    from sim.engine.requests import RequestTable

#: What the loop returns: every arrival served; the step records buffer is full; the
#: next step needs the Python path; the next step's cost needs table entries priced first.
DONE, FULL, PYTHON, MISSING = 0, 1, 2, 3

#: Request states (as :mod:`sim.engine.requests` numbers them).
WAITING, RUNNING, FINISHED = 1, 2, 3

#: The float record columns, in the order of the loop's float output rows.
FLOAT_COLUMNS = (
    "start_at_s",
    "duration_s",
    "fixed_s",
    "linear_s",
    "attention_s",
    "allreduce_s",
    "sampling_s",
    "draft_s",
)
#: The integer record columns, in the order of the loop's integer output rows.
INT_COLUMNS = (
    "num_seqs",
    "num_decode_seqs",
    "num_prefill_seqs",
    "num_tokens",
    "num_prefill_tokens",
    "num_emitted_tokens",
    "num_draft_tokens",
    "spec_k",
    "num_accepted_tokens",
    "kv_blocks_used",
    "num_waiting",
    "num_regular_itl",
)
assert set(FLOAT_COLUMNS + INT_COLUMNS) == set(STEP_COLUMNS)

#: The request columns the loop takes first, in the order of its arguments: each as its owner
#: (``requests``: the request table, ``kv``: the block manager) and attribute names it, with its
#: dtype's kind (``i``: int64, ``f``: float64, ``s``: the int8 request state). The lone node's
#: driver passes the node's own columns (:func:`request_columns`); the fleet's keeps each kind
#: as rows of one array per replica, in this order (``sim.fleet.compiled_fleet``).
REQUEST_COLUMNS = (
    ("requests", "prompt_tokens", "i"),
    ("requests", "output_tokens", "i"),
    ("requests", "num_emitted", "i"),
    ("requests", "num_computed_tokens", "i"),
    ("requests", "num_decode_steps", "i"),
    ("requests", "last_emit_step", "i"),
    ("requests", "last_emit_at_s", "f"),
    ("requests", "first_token_at_s", "f"),
    ("requests", "finished_at_s", "f"),
    ("requests", "scheduled_at_s", "f"),
    ("requests", "num_cached_tokens", "i"),
    ("requests", "state", "s"),
    ("requests", "arrival_at_s", "f"),
    ("requests", "engine_arrival_at_s", "f"),
    ("requests", "num_drafted", "i"),
    ("requests", "num_accepted", "i"),
    ("requests", "num_preemptions", "i"),
    ("kv", "held", "i"),
    ("kv", "logical_tokens", "i"),
)


def request_columns(requests: RequestTable, kv: BlockManager) -> tuple[Any, ...]:
    """The arrays of :data:`REQUEST_COLUMNS` from ``requests`` and ``kv``, in the loop's order."""
    owners = {"requests": requests, "kv": kv}
    return tuple(getattr(owners[owner], name) for owner, name, _ in REQUEST_COLUMNS)


def replica_columns(req_i: Any, req_f: Any, state: Any, c: int) -> tuple[Any, ...]:
    """Replica ``c``'s request columns as the fleet keeps them (the int64 ones as rows of
    ``req_i[c]``, the float ones of ``req_f[c]``, each kind in :data:`REQUEST_COLUMNS`'s order,
    the states ``state[c]``), in the loop's order; compiled inline into the fleet's driver."""
    i, f = req_i[c], req_f[c]
    return (i[0], i[1], i[2], i[3], i[4], i[5], f[0], f[1], f[2], f[3], i[6], state[c], f[4],
            f[5], i[7], i[8], i[9], i[10], i[11])  # fmt: skip


# Slots of the loop's integer state.
(
    _FREE,
    _STEPS,
    _NEXT,
    _QHEAD,
    _QTAIL,
    _RUNNING_N,
    _FINISHED_N,
    _RECORDS,
    _ITL,
    _MISSING,
    _HEAP_N,
    _STARTED,
) = range(12)
#: Slots of the integer state.
NUM_INTS = 12
# Slots of its configuration.
_MAX_SEQS, _BUDGET, _CHUNKED, _EXTRA, _BLOCK, _BLOCKS = range(6)
_PLAN, _SPECULATIVE, _MAX_STEPS, _CLOSED, _LOOKAHEAD = range(6, 11)


def config(cfg: Any) -> tuple[int, int, bool, int, int, int, bool, bool, int, bool, int]:
    """The configuration's slots: the most sequences, the token budget, chunked prefill, the
    extra tokens of a decode, the block size, the pool's blocks, whether a plan, whether
    speculative, the most steps a call, whether a closed loop, the lookahead slots a running
    request holds (SchedulerConfig.lookahead_slots)."""
    return (cfg[_MAX_SEQS], cfg[_BUDGET], cfg[_CHUNKED] != 0, cfg[_EXTRA], cfg[_BLOCK],
            cfg[_BLOCKS], cfg[_PLAN] != 0, cfg[_SPECULATIVE] != 0, cfg[_MAX_STEPS],
            cfg[_CLOSED] != 0, cfg[_LOOKAHEAD])  # fmt: skip


# Rows of a step's integer buffer (step_buffers): the request, the tokens it takes, drafts
# proposed and accepted, computed tokens, blocks needed, its place in running, the preemption
# victims, tokens emitted, computed tokens after the step, acc_len - 1 read at its position
# (-1: not read).
(
    ROW_ID,
    ROW_TAKE,
    ROW_PROPOSED,
    ROW_ACCEPTED,
    ROW_COMPUTED,
    ROW_NEED,
    ROW_POSITION,
    ROW_VICTIM,
    ROW_EMIT,
    ROW_NEW_COMPUTED,
    ROW_HERE,
) = range(11)


def step_buffers(max_num_seqs: int) -> tuple[Any, ...]:
    """The loop's working arrays for one step of up to ``max_num_seqs`` running rows and one
    admission (the ``buffers`` it takes, so that it allocates nothing): the rows' integers (the
    ``ROW_*`` rows), whether each decodes and whether it drafts, and the evaluator's inputs and
    output for one step."""
    rows = max_num_seqs + 1
    return (
        np.zeros((ROW_HERE + 1, rows), dtype=np.int64),
        np.zeros(rows, dtype=np.bool_),
        np.zeros(rows, dtype=np.bool_),
        np.zeros((9, 1), dtype=np.int64),
        np.zeros(1, dtype=np.float64),
        np.zeros((7, 1), dtype=np.float64),
    )
