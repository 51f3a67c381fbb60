"""The fixed output schemas of the ``raw`` and ``text`` formats (the README's "Source options" and docs/architecture.md)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

__all__ = ["fixed_schema", "arrow_schema"]


def fixed_schema(fmt: str) -> StructType | None:
    """``raw``/``text`` schemas; ``None`` for formats whose schema the user declares."""
    if fmt not in ("raw", "text"):
        return None
    return StructType(
        [
            StructField("value", BinaryType() if fmt == "raw" else StringType(), True),
            StructField("topic", StringType(), True),
            StructField("partition", IntegerType(), True),
            StructField("offset", LongType(), True),
            StructField("timestamp", TimestampType(), True),
        ]
    )


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects batches from ``read()`` to have, exactly."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")
