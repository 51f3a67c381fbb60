"""The messages the benchmarks send: the same bytes for the connector and its baselines."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

#: The Arrow scenario's columns: mixed types, as an event table would have.
ARROW_DDL = "id long, sensor string, reading double, flag boolean, ts timestamp"


def raw(size: int) -> bytes:
    return b"x" * size


def arrow_batch(rows: int) -> pa.RecordBatch:
    rng = np.random.default_rng(7)
    return pa.record_batch(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "sensor": pa.array([f"sensor-{i % 64:02d}" for i in range(rows)]),
            "reading": pa.array(rng.normal(20, 5, rows)),
            "flag": pa.array(rng.integers(0, 2, rows).astype(bool)),
            "ts": pa.array(
                np.datetime64("2026-01-01", "us") + np.arange(rows) * np.timedelta64(1, "ms"),
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )


def arrow_message(rows: int) -> bytes:
    """One Arrow IPC stream holding one batch of ``rows`` rows."""
    batch = arrow_batch(rows)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()
