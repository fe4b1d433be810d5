"""The compiled cost evaluator's grids (:class:`sim.engine.cost_kernel.LoweredCost`): every
whole (row, column) key up to two bounds, stored block column by block column
(``grid[column // COLUMNS_PER_FILL, row, column % COLUMNS_PER_FILL]``), starting as zero pages
(an entry not priced yet reads 0.0) and priced a block at a time by the Python cost model.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from sim.engine.cost_eval import COLUMNS_PER_FILL, ROWS_PER_FILL

FloatArray = NDArray[np.float64]


def zero_grid(num_rows: int, num_columns: int) -> FloatArray:
    """A grid of at least ``num_columns`` columns, stored block column by block column, every
    entry 0.0 (not priced); ``np.zeros`` leaves its pages unmapped until a block is written, so
    it takes memory only where it is priced."""
    num_blocks = (num_columns + COLUMNS_PER_FILL - 1) // COLUMNS_PER_FILL
    return np.zeros((num_blocks, num_rows, COLUMNS_PER_FILL), dtype=np.float64)


def no_grid() -> FloatArray:
    """A grid with no entries (the evaluator then reads every key from its table)."""
    return np.zeros((0, 0, COLUMNS_PER_FILL), dtype=np.float64)


def within(grid: FloatArray, keys: FloatArray) -> NDArray[np.bool_]:
    """Which keys (rows: grid row, grid column) fall inside ``grid`` (see :func:`zero_grid`)."""
    return np.asarray((keys[0] < grid.shape[1]) & (keys[1] < grid.shape[0] * COLUMNS_PER_FILL))


def fill_blocks(
    grid: FloatArray, cells: FloatArray, price: Callable[[FloatArray, FloatArray], FloatArray]
) -> NDArray[np.bool_]:
    """Price every block of ``grid`` (:data:`ROWS_PER_FILL` rows by :data:`COLUMNS_PER_FILL`
    columns; row: the first argument of ``price``, column: the second) that holds one of
    ``cells`` (rows of whole row and column indices), all in one contiguous call as the
    Python model prices a block, so each value is the one it gives. Return which cells
    priced to 0.0 (an entry the evaluator reads as not priced)."""
    rows_of = cells[0].astype(np.int64)
    columns_of = cells[1].astype(np.int64)
    num_rows = grid.shape[1]
    blocks = np.unique((rows_of // ROWS_PER_FILL) * grid.shape[0] + columns_of // COLUMNS_PER_FILL)
    spans = [
        (
            column_block,
            row_block * ROWS_PER_FILL,
            min((row_block + 1) * ROWS_PER_FILL, num_rows),
        )
        for row_block, column_block in (divmod(b, grid.shape[0]) for b in blocks.tolist())
    ]
    within = np.arange(COLUMNS_PER_FILL, dtype=np.float64)
    rows = np.concatenate([
        np.repeat(np.arange(r0, r1, dtype=np.float64), COLUMNS_PER_FILL) for _, r0, r1 in spans
    ])  # fmt: skip
    columns = np.concatenate([
        np.tile(block * COLUMNS_PER_FILL + within, r1 - r0) for block, r0, r1 in spans
    ])  # fmt: skip
    values = price(rows, columns)
    start = 0
    for block, r0, r1 in spans:
        stop = start + (r1 - r0) * COLUMNS_PER_FILL
        grid[block, r0:r1] = values[start:stop].reshape(r1 - r0, COLUMNS_PER_FILL)
        start = stop
    return np.asarray(
        grid[columns_of // COLUMNS_PER_FILL, rows_of, columns_of % COLUMNS_PER_FILL] == 0.0
    )
