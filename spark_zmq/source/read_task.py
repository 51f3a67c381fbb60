"""The body of a read task, shared by the streaming reader and the bounded batch reader.

Why one function: both readers hand Spark the same rows from the same spool batches
(``(first offset, batch)`` in offset order); only where the batches come from differs
(the spool or a fetch for a stream, the partition's inline messages for a bounded read).
Written once, a change to how rows are decoded (joining small batches, an Arrow message
decoded on its own) reaches both, and a test drives it without Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from ..ingest.spool_reader import coalesce
from .decoders import Decoder

__all__ = ["decoded_rows"]


def decoded_rows(
    decoder: Decoder, channel: int, batches: Iterable[tuple[int, pa.RecordBatch]]
) -> Iterator[pa.RecordBatch]:
    """The output batches of ``channel``'s spool batches, in order.

    One row per message: the spool's small batches are joined first (``coalesce``: a
    receiver appends whatever one receive returned, often a few rows), since decoding and
    handing each to Spark separately costs more than its rows; an Arrow message is decoded
    on its own anyway, so joining would only copy every message once more."""
    for first, batch in batches if decoder.fmt == "arrow" else coalesce(batches):
        yield from decoder.decode(batch, channel, first)
