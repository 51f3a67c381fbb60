"""Conversion of checked Arrow batches to the query's declared schema (step 3 of ``guard``).

Columns are matched by name and cast; before each cast, an upper bound of the bytes it
allocates is computed from the validated arrays, and every cast's output is validated.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .ipc import MalformedArrowError, error_reason

__all__ = ["column_plan", "conform", "is_view", "is_list_like"]

#: bytes a number, date, time or decimal may take as text (decimal256 has 76 digits)
_TEXT_WIDTH = 96


def column_plan(source: pa.Schema, target: pa.Schema) -> list[int]:
    """The message column each target field is read from, by name."""
    names = source.names
    positions: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        positions.setdefault(name, []).append(i)
    missing = [name for name in target.names if name not in positions]
    if missing:
        raise MalformedArrowError(f"columns {missing} of the declared schema are missing (message has {names})")
    plan = []
    for name in target.names:
        found = positions[name]
        if len(found) > 1:
            raise MalformedArrowError(f"column {name!r} appears {len(found)} times in the message")
        plan.append(found[0])
    return plan


def conform(batch: pa.RecordBatch, plan: list[int], schema: pa.Schema, budget: list[int]) -> pa.RecordBatch:
    """``batch`` as ``schema`` (columns taken by ``plan``), casts charged to ``budget[0]``,
    the bytes all casts of one message may still allocate."""
    columns = []
    for index, field in zip(plan, schema):
        column = batch.column(index)
        if column.type != field.type:
            cost = _cast_cost(column, field.type)
            budget[0] -= cost
            if budget[0] < 0:
                raise MalformedArrowError(
                    f"converting column {field.name!r} from {column.type} to {field.type} would take about "
                    f"{cost:,} bytes, more than the message may (its rows or values expand when cast)"
                )
            source = column.type
            if pa.types.is_list_view(source) or pa.types.is_large_list_view(source):
                column = _list_view_as_list(column)
            column = column.cast(field.type)
            try:  # casts are Arrow code on hostile data too: check what they made
                column.validate(full=True)
            except pa.ArrowException as exc:
                raise MalformedArrowError(
                    f"converting column {field.name!r} from {source} to {field.type} gave an invalid array: {error_reason(exc)}"
                ) from None
        if not field.nullable and column.null_count:
            raise MalformedArrowError(f"column {field.name!r} is declared NOT NULL but has {column.null_count} nulls")
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _list_view_as_list(array: pa.Array) -> pa.Array:
    """A list_view column as a list column (the same values, gathered in row order).
    pyarrow 26's cast from list_view to list leaves the offsets buffer one entry short,
    an invalid array; nested list views still go through the cast, and its output check."""
    n = len(array)
    large = pa.types.is_large_list_view(array.type)
    sizes = array.sizes.to_numpy(zero_copy_only=False).astype(np.int64)
    starts = array.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    valid = None
    if array.null_count:
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        sizes[~valid] = 0
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    index = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1] - starts, sizes)
    values = array.values.take(pa.array(index))
    field = array.type.value_field
    cls, list_type, offset_type = (
        (pa.LargeListArray, pa.large_list(field), pa.int64()) if large else (pa.ListArray, pa.list_(field), pa.int32())
    )
    mask = None if valid is None else pa.array(~valid)
    return cls.from_arrays(pa.array(offsets, offset_type), values, type=list_type, mask=mask)


def _is_binary_like(t: pa.DataType) -> bool:
    answer: bool = (
        pa.types.is_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_string_view(t)
        or pa.types.is_fixed_size_binary(t)
    )
    return answer


def is_view(t: pa.DataType) -> bool:
    """A string or binary view type."""
    answer: bool = pa.types.is_binary_view(t) or pa.types.is_string_view(t)
    return answer


def is_list_like(t: pa.DataType) -> bool:
    """A list, list view, fixed-size list or map type (types with one values child)."""
    answer: bool = (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
        or pa.types.is_map(t)
    )
    return answer


def _width(t: pa.DataType) -> int:
    """Bytes per element of a new array of type ``t`` (offsets, validity; not string data)."""
    if pa.types.is_null(t):
        return 0
    if pa.types.is_struct(t):
        return 1 + sum(_width(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_fixed_size_list(t):
        list_size: int = t.list_size
        return 1 + list_size * _width(t.value_type)
    if pa.types.is_dictionary(t):
        return 1 + _width(t.index_type)
    if pa.types.is_fixed_size_binary(t):
        byte_width: int = t.byte_width
        return 1 + byte_width
    if pa.types.is_boolean(t):
        return 1
    try:
        bit_width: int = t.bit_width
        return 1 + max(1, bit_width // 8)
    except (ValueError, TypeError, AttributeError):
        return 17  # offsets (and sizes, for views) of variable-size types


def _value_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_map(t):
        return pa.struct([t.key_field, t.item_field])
    return t.value_type


def _list_values(array: pa.Array) -> pa.Array:
    if pa.types.is_map(array.type):
        return pa.StructArray.from_arrays(
            [array.keys, array.items], fields=[array.type.key_field, array.type.item_field]
        )
    return array.values


def _view_lengths(array: pa.Array) -> np.ndarray:
    views = array.buffers()[1]
    if views is None or not len(array):
        return np.zeros(0, dtype=np.int64)
    lengths = np.frombuffer(views, dtype="<i4", count=4 * (array.offset + len(array)))[0::4][array.offset :]
    return lengths.astype(np.int64)


def _data_bytes(array: pa.Array) -> int:
    """Bytes of string/binary data the array references (views: counted per view)."""
    if not len(array):
        return 0
    if is_view(array.type):
        return int(_view_lengths(array).sum())
    if pa.types.is_fixed_size_binary(array.type):
        byte_width: int = array.type.byte_width
        return len(array) * byte_width
    import pyarrow.compute as pc  # here, not at the top: about 40 ms that a receiver of raw messages never needs

    total = pc.sum(pc.binary_length(array)).as_py()
    return int(total or 0)


def _max_entry(values: pa.Array, target: pa.DataType) -> int:
    """Upper bound of the bytes one entry of ``values`` takes once cast to ``target``."""
    if not len(values):
        return 0
    source = values.type
    if _is_binary_like(source):
        if is_view(source):
            longest = int(_view_lengths(values).max(initial=0))
        elif pa.types.is_fixed_size_binary(source):
            longest = source.byte_width
        else:
            import pyarrow.compute as pc  # (see _data_bytes)

            longest = int(pc.max(pc.binary_length(values)).as_py() or 0)
        return _width(target) + (longest if _is_binary_like(target) else 0)
    if pa.types.is_null(source) or source.num_fields == 0:
        return _width(target) + (_TEXT_WIDTH if _is_binary_like(target) else 0)
    # nested entries: the whole array bounds any one entry of it
    whole: int = values.get_total_buffer_size()
    return _width(target) + _cast_cost(values, target) + whole


def _cast_cost(array: pa.Array, target: pa.DataType) -> int:
    """Upper bound of the bytes ``array.cast(target)`` allocates, computed without
    materialising anything. 0 when nothing is converted."""
    source = array.type
    n = len(array)
    if source == target:
        return 0
    if pa.types.is_null(source):
        return n * _width(target)
    if pa.types.is_dictionary(source):
        return n * _max_entry(array.dictionary, target)
    if pa.types.is_run_end_encoded(source):
        return n * _max_entry(array.values, target)
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        total = n
        for i in range(target.num_fields):
            field = target.field(i)
            index = source.get_field_index(field.name)
            total += _cast_cost(array.field(index), field.type) if index >= 0 else n * _width(field.type)
        return total
    if is_list_like(source) and is_list_like(target):
        values = _list_values(array)
        value_type = _value_type(target)
        if pa.types.is_list_view(source) or pa.types.is_large_list_view(source):
            sizes = array.sizes.to_numpy(zero_copy_only=False).astype(np.int64)
            if array.null_count:
                sizes[~array.is_valid().to_numpy(zero_copy_only=False)] = 0
            elements = int(np.clip(sizes, 0, None).sum())
            return n * _width(target) + elements * _max_entry(values, value_type)
        return n * _width(target) + _cast_cost(values, value_type)
    if _is_binary_like(source):
        if _is_binary_like(target):
            return n * _width(target) + _data_bytes(array)
        return n * _width(target)
    if _is_binary_like(target):
        return n * (_width(target) + _TEXT_WIDTH)
    return n * _width(target)
