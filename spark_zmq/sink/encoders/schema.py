"""What the DataFrame must hold for the sink's options, checked on the driver.

The writer checks the schema when Spark makes it, before any task runs, so a missing
``value`` column or a non-string ``topic`` column fails the query with a message naming
the column and the fix before any data moves. The encoders can then take the columns as
given. The source's side of the same contract is ``source/schema_contract.py``.
"""

from __future__ import annotations

from pyspark.sql.types import BinaryType, StringType, StructType

from ...options import SinkOptions

__all__ = ["check_schema"]


def check_schema(options: SinkOptions, schema: StructType) -> None:
    """Fail early, naming the column and what is valid."""
    fields = {f.name: f.dataType for f in schema.fields}
    if options.format in ("raw", "text"):
        if "value" not in fields:
            raise ValueError(
                f"format {options.format!r} sends the 'value' column, but the DataFrame has none "
                f"(columns: {', '.join(fields) or 'none'}); select or alias one, e.g. df.selectExpr('to_json(struct(*)) AS value')"
            )
        if not isinstance(fields["value"], (BinaryType, StringType)):
            raise ValueError(
                f"column 'value' must be binary or string for format {options.format!r}, not {fields['value'].simpleString()}; "
                "cast it, e.g. .selectExpr('CAST(value AS STRING) AS value')"
            )
    if options.pattern == "pub" and options.topic is None:
        if "topic" not in fields:
            raise ValueError(
                "pattern 'pub' needs a topic: set option 'topic' or give the DataFrame a string 'topic' column"
            )
        if not isinstance(fields["topic"], StringType):
            raise ValueError(f"column 'topic' must be a string for pattern 'pub', not {fields['topic'].simpleString()}")
