"""includeHeaders: an Arrow message's custom metadata as the ``headers map<string,string>``
column of each of its rows, built per output batch with pyarrow ``take`` (no Python per
row); ``spark_zmq.row`` is each row's position in its message, so a reading query can
drop a retried write's copies."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["ROW_KEY", "Headers", "headers_template", "headers_column"]

#: the key the source adds to every row's headers: the row's position in its message
ROW_KEY = "spark_zmq.row"
# bytes the row key's entry takes in one row: its text, the longest position (a 64-bit
# integer), their two int32 offsets, and the map's own offset
_ROW_ENTRY_BYTES = len(ROW_KEY) + 20 + 2 * 4 + 4


class Headers:
    """One message's headers, decoded once: the metadata keys and values (without the
    row key) as string arrays; the bytes its metadata adds to each row (text and two
    int32 offsets per entry; 0 without metadata), and the bytes one row's map takes."""

    __slots__ = ("keys", "values", "metadata_bytes", "row_bytes")

    def __init__(self, keys: pa.Array, values: pa.Array) -> None:
        self.keys = keys
        self.values = values
        text = pc.sum(pc.binary_length(keys)).as_py() or 0
        text += pc.sum(pc.binary_length(values)).as_py() or 0
        self.metadata_bytes = int(text) + len(keys) * 2 * 4
        self.row_bytes = self.metadata_bytes + _ROW_ENTRY_BYTES


def headers_template(metadata: Mapping[bytes, bytes] | None) -> Headers:
    """A message's custom metadata as the keys and values every row's ``headers`` map
    starts with: decoded as UTF-8 with invalid bytes replaced (U+FFFD), never an error; a
    key the decoding makes equal to an earlier one keeps the later value; ``spark_zmq.row``
    is left out (the source sets it on each row, a sender cannot)."""
    entries: dict[str, str] = {}
    for key, value in (metadata or {}).items():
        entries[bytes(key).decode("utf-8", "replace")] = bytes(value).decode("utf-8", "replace")
    entries.pop(ROW_KEY, None)
    keys = pa.array(list(entries), pa.string())
    values = pa.array(list(entries.values()), pa.string())
    return Headers(keys, values)


def headers_column(headers: Headers, first_row: int, rows: int, map_type: pa.DataType) -> pa.MapArray:
    """The ``headers`` column of ``rows`` consecutive rows of one message, the first at
    position ``first_row``: each row's map is the metadata then ``spark_zmq.row``."""
    k = len(headers.keys)
    width = k + 1
    keys = pa.concat_arrays([headers.keys, pa.array([ROW_KEY], pa.string())])
    positions = pc.cast(pa.array(np.arange(first_row, first_row + rows, dtype=np.int64)), pa.string())
    texts = pa.concat_arrays([headers.values, positions])
    # row r, entry j: metadata entry j (j < k), else the row's position (texts[k + r])
    key_index = np.tile(np.arange(width, dtype=np.int64), rows)
    value_index = np.empty((rows, width), dtype=np.int64)
    value_index[:, :k] = np.arange(k, dtype=np.int64)
    value_index[:, k] = np.arange(k, k + rows, dtype=np.int64)
    offsets = pa.array(np.arange(0, (rows + 1) * width, width, dtype=np.int32), pa.int32())
    return pa.MapArray.from_arrays(
        offsets, keys.take(pa.array(key_index)), texts.take(pa.array(value_index.ravel())), type=map_type
    )
