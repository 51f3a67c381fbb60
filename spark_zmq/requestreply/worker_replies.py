"""What a worker answers to one request: the formats' encoders (``arrow``, ``json``, ``raw``,
``text``), the two-frame error reply, and the counters of what it answered (``WorkerStats``).

Why its own module: an answer is made the same way whichever socket the worker serves on (a
REQ behind the broker, a ROUTER as a REP server) and whether or not the handler runs in a
process of its own (``worker_process``), so it is apart from ``worker``'s loops; the requester
reads the same error reply.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa

from ..arrow.guard import MalformedArrowError, read_batches
from ..errors import SparkZmqError
from .broker_stats import PING, pong

__all__ = [
    "ERROR",
    "FORMATS",
    "DEFAULT_DECOMPRESSED_BYTES",
    "CALLS",
    "Handler",
    "WorkerStats",
    "answer_request",
    "call_arrow",
    "error_reply",
    "is_error_reply",
]

log = logging.getLogger("spark_zmq.requestreply.worker")

#: the first frame of an error reply (the second is the message)
ERROR = b"ERROR"
FORMATS = ("arrow", "json", "raw", "text")

#: what an arrow request may take once decompressed when ``max_message_bytes`` is not set
DEFAULT_DECOMPRESSED_BYTES = 256 << 20

Handler = Callable[[Any], Any]


class _BadRequest(SparkZmqError, ValueError):
    """The request itself is not valid for the format (not the handler's fault)."""


@dataclass
class WorkerStats:
    """What a worker did: requests received, normal replies, error replies (of them,
    ``oversize``: requests refused for more than ``max_frames`` frames or more than
    ``max_message_bytes`` in all), and how often it announced itself again after a
    reconnection (broker workers)."""

    requests: int = 0
    replies: int = 0
    errors: int = 0
    reannounced: int = 0
    oversize: int = 0
    #: handlers that did not return within ``handler_timeout`` (each answered with an error
    #: reply; the handler's process was replaced)
    timeouts: int = 0
    #: (REP servers) replies dropped: the client reads none of those queued for it, or is gone
    dropped_replies: int = 0
    #: (REP servers) requests dropped unanswered, having no empty delimiter frame (as a REP does)
    malformed: int = 0


def error_reply(message: str) -> list[bytes]:
    """The frames of an error reply: ``[b"ERROR", message]``."""
    return [ERROR, message.encode("utf-8", "replace")]


def is_error_reply(frames: Sequence[bytes]) -> bool:
    """Whether reply ``frames`` (after the envelope) are an error reply."""
    return len(frames) == 2 and frames[0] == ERROR


# -- formats ------------------------------------------------------------------------------


def _one_batch(body: bytes, max_body_bytes: int) -> pa.RecordBatch:
    """The request's batches, checked by the Arrow guard before anything is decompressed."""
    try:
        batches = read_batches(body, max_body_bytes=max_body_bytes)
        if not batches:  # a schema alone, already checked: an empty batch of it
            return pa.RecordBatch.from_pylist([], schema=pa.ipc.open_stream(body).schema)
    except MalformedArrowError as exc:
        raise _BadRequest(f"the request is not an Arrow IPC stream: {exc}") from None
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise _BadRequest(f"the request is not an Arrow IPC stream: {exc}") from None
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def call_arrow(handler: Handler, body: bytes, max_body_bytes: int = DEFAULT_DECOMPRESSED_BYTES) -> bytes:
    batch = _one_batch(body, max_body_bytes)
    result = handler(batch)
    if not isinstance(result, (pa.RecordBatch, pa.Table)):
        raise TypeError(
            f"the handler returned {type(result).__name__}, not a pyarrow.RecordBatch or Table (format 'arrow')"
        )
    if result.num_rows != batch.num_rows:
        raise ValueError(
            f"the handler returned {result.num_rows} rows for a request of {batch.num_rows} rows "
            "(format 'arrow' answers one row per request row)"
        )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, result.schema) as writer:
        writer.write(result)
    return cast(bytes, sink.getvalue().to_pybytes())


def _json(handler: Handler, body: bytes) -> bytes:
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _BadRequest(f"the request is not JSON: {exc}") from None
    if not isinstance(request, dict):
        raise _BadRequest(f"the request is JSON {type(request).__name__}, not an object (format 'json')")
    result = handler(request)
    if not isinstance(result, dict):
        raise TypeError(f"the handler returned {type(result).__name__}, not a dict (format 'json')")
    return json.dumps(result, separators=(",", ":")).encode("utf-8")


def _raw(handler: Handler, body: bytes) -> bytes:
    result = handler(body)
    if not isinstance(result, (bytes, bytearray, memoryview)):
        raise TypeError(f"the handler returned {type(result).__name__}, not bytes (format 'raw')")
    return bytes(result)


def _text(handler: Handler, body: bytes) -> bytes:
    try:
        request = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _BadRequest(f"the request is not UTF-8 text: {exc}") from None
    result = handler(request)
    if not isinstance(result, str):
        raise TypeError(f"the handler returned {type(result).__name__}, not str (format 'text')")
    return result.encode("utf-8")


CALLS: dict[str, Callable[[Handler, bytes], bytes]] = {"arrow": call_arrow, "json": _json, "raw": _raw, "text": _text}


def answer_request(
    call: Callable[[Handler, bytes], bytes],
    handler: Handler,
    body: list[bytes],
    stats: WorkerStats,
    max_reply_bytes: int | None = None,
) -> list[bytes]:
    """The reply frames for request ``body``: the handler's answer, or an error reply (or,
    for a probe, ``spark-zmq ping``, the worker's own answer without the handler)."""
    if len(body) == 1 and body[0] == PING:
        return pong(
            "worker",
            requests=stats.requests,
            replies=stats.replies,
            errors=stats.errors,
            dropped_replies=stats.dropped_replies,
        )
    try:
        if len(body) != 1:
            raise _BadRequest(f"the request has {len(body)} body frames; one is expected")
        reply = [call(handler, body[0])]
        if max_reply_bytes is not None and len(reply[0]) > max_reply_bytes:
            raise _BadRequest(
                f"the reply is {len(reply[0]):,} bytes, more than max_message_bytes "
                f"({max_reply_bytes:,}): the handler's answer is not sent"
            )
        stats.replies += 1
        return reply
    except Exception as exc:  # the handler's or the request's fault: answer, keep serving
        stats.errors += 1
        text = str(exc) if isinstance(exc, _BadRequest) else f"{type(exc).__name__}: {exc}"
        log.warning(
            "worker: request %d answered with an error: %s",
            stats.requests,
            text,
            exc_info=not isinstance(exc, _BadRequest),
        )
        return error_reply(text)
