"""The fixed row blocks in which bank state is checkpointed: block k of a state [N, ...] is
its rows ``[k b, (k + 1) b)``, ``b`` from the bytes of one row alone (`block_rows`), so the
blocks are the same whatever layout of shards or workers writes or reads them."""

#: Bytes of one block: a save holds at most this much of the bank's rows at a time (the
#: values and the int64 index it reads each row by), a restore one block and the stored
#: slice it is cut from. At 128 float32 a row, a block of embeddings is 129,055 rows.
BLOCK_BYTES = 64 << 20
#: Bytes of the int64 index of each row a save reads.
INDEX_BYTES = 8


def block_rows(row_bytes: int) -> int:
    """Rows b of a block of a state whose rows are ``row_bytes`` bytes each (at least 1)."""
    return max(1, BLOCK_BYTES // (row_bytes + INDEX_BYTES))


def block_slices(start: int, stop: int, rows: int) -> list[tuple[int, int]]:
    """The rows ``[start, stop)`` cut at the grid of blocks of ``rows`` rows: [(start, stop)]
    in order, each within one block."""
    edges = range((start // rows + 1) * rows, stop, rows)
    bounds = [start, *edges, stop]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
