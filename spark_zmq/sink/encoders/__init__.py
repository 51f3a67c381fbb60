"""Turn a write task's Arrow record batches into ZeroMQ messages (executor side).

One encoder per format, each in its own module, mirroring the source's decoders:
``raw`` and ``text`` (``raw.py``), ``json`` (``json.py``), ``arrow`` (``arrow.py``, which
also numbers a task's messages and marks its last); what they share is ``base.py``, and
``pub``'s topic frames for the one-row-per-message formats are ``topics.py``. What the
DataFrame must hold is checked on the driver before any task runs (``schema.py``).
``encoder_for`` is the one place that picks an encoder from the options, so the write
task and the sender never branch on a format.
"""

from __future__ import annotations

from ...options import SinkOptions
from .arrow import ArrowEncoder, ArrowMessages, ArrowTopicEncoder, TaskHeader, arrow_message
from .base import AnyEncoder, Encoder, Message, PayloadEncoder, TopicEncoder
from .json import JsonEncoder
from .raw import RawEncoder, TextEncoder
from .schema import check_schema
from .topics import RowTopics

__all__ = [
    "Encoder",
    "PayloadEncoder",
    "TopicEncoder",
    "AnyEncoder",
    "Message",
    "RawEncoder",
    "TextEncoder",
    "JsonEncoder",
    "ArrowEncoder",
    "ArrowTopicEncoder",
    "ArrowMessages",
    "RowTopics",
    "TaskHeader",
    "arrow_message",
    "check_schema",
    "encoder_for",
]


def _rows(options: SinkOptions) -> PayloadEncoder:
    """The payload encoder of a one-row-per-message format."""
    if options.format == "raw":
        return RawEncoder()
    if options.format == "text":
        return TextEncoder()
    if options.format == "json":
        return JsonEncoder(options)
    raise ValueError(f"no encoder for format {options.format!r}; formats are raw, text, json, arrow")


def encoder_for(options: SinkOptions, header: TaskHeader) -> AnyEncoder:
    """The encoder of one write task: its format's, in the shape its pattern sends
    (``pub``: with topic frames; ``push``/``scatter``: bare payloads). ``header`` is what
    the task's Arrow messages carry."""
    pub = options.pattern == "pub"
    if options.format == "arrow":
        return ArrowTopicEncoder(options, header) if pub else ArrowEncoder(options, header)
    rows = _rows(options)
    return RowTopics(rows, options) if pub else rows
