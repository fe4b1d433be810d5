"""The compiled loop's request columns, listed once (:data:`loop_state.REQUEST_COLUMNS`).

The lone node's driver passes them as :func:`loop_state.request_columns` reads them from the
request table and the block manager; the fleet keeps each kind as rows of one array per replica
and passes them as :func:`loop_state.replica_columns` picks them. Both must give the loop the same
column at each place, with the dtype its kind names (the loop is compiled for those types), or
the loop would read one column as another.
"""

from __future__ import annotations

import numpy as np

from sim.engine import loop_state
from sim.engine.kv_cache import BlockManager
from sim.engine.requests import RequestTable
from sim.fleet import compiled_fleet

DTYPES = {"i": np.int64, "f": np.float64, "s": np.int8}


def test_request_columns_are_the_named_arrays_with_their_kinds_dtype() -> None:
    requests = RequestTable(prompt_tokens=np.array([64, 80, 64]), output_tokens=np.array([4, 4, 4]))
    kv = BlockManager(num_blocks=10, block_size=4, num_requests=3)
    columns = loop_state.request_columns(requests, kv)
    owners = {"requests": requests, "kv": kv}
    assert len(columns) == len(loop_state.REQUEST_COLUMNS)
    for array, (owner, name, kind) in zip(columns, loop_state.REQUEST_COLUMNS, strict=True):
        assert array is getattr(owners[owner], name), name
        assert array.dtype == DTYPES[kind], name


def test_replica_columns_pick_the_fleets_rows_in_the_loops_order() -> None:
    # Every row of two replicas holds its own value, so each array handed to the loop says
    # which replica and which row it is.
    num_replicas, n = 2, 3
    ints = compiled_fleet.INT_ROWS
    floats = compiled_fleet.FLOAT_ROWS
    req_i = np.zeros((num_replicas, len(ints), n), dtype=np.int64)
    req_f = np.zeros((num_replicas, len(floats), n))
    state = np.zeros((num_replicas, n), dtype=np.int8)
    for c in range(num_replicas):
        req_i[c] = (100 * c + np.arange(len(ints)))[:, None]
        req_f[c] = (100 * c + np.arange(len(floats)))[:, None]
        state[c] = -1 - c
    for c in range(num_replicas):
        columns = loop_state.replica_columns(req_i, req_f, state, c)
        assert len(columns) == len(loop_state.REQUEST_COLUMNS)
        for array, (owner, name, kind) in zip(columns, loop_state.REQUEST_COLUMNS, strict=True):
            if kind == "s":
                assert (array == -1 - c).all(), name
                continue
            rows = ints if kind == "i" else floats
            assert array.dtype == DTYPES[kind], name
            assert (array == 100 * c + rows.index((owner, name))).all(), name
