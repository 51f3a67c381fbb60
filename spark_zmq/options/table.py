"""The options table: every option of the source, the sink and ``spark_zmq.request``, one
``OptionSpec`` row each (name, kind, attribute, default, range, documentation), by side
(``TABLES``), and which queries read each source option (``QUERIES``).

Why one table: an option's name, type, range, default and documentation used to live in
four places and drifted apart; every other module of ``spark_zmq.options`` derives what
it does from these rows. Each side's rows are a module of their own (``source_table``,
``sink_table``, ``request_table``), made from what they share (``shared_rows``); this
module gathers them and re-exports their names.
"""

from __future__ import annotations

from .request_table import REQUEST_OPTIONS
from .shared_rows import (
    FORMATS,
    MAX_REQUEST_ROWS,
    MAX_SECONDS,
    MAX_TCP_KEEPALIVE_COUNT,
    MAX_TCP_KEEPALIVE_S,
    MODES,
    SINK_PATTERNS,
    SOURCE_PATTERNS,
    ZMQ_OPTION_RANGES,
    ZMQ_SOCKET_OPTIONS,
)
from .sink_table import SINK_OPTIONS
from .source_table import SOURCE_OPTIONS
from .spec import OptionSpec

__all__ = [
    "ZMQ_SOCKET_OPTIONS",
    "ZMQ_OPTION_RANGES",
    "SOURCE_OPTIONS",
    "SINK_OPTIONS",
    "REQUEST_OPTIONS",
    "TABLES",
    "SIDES",
    "QUERIES",
    "queries_of",
    "SOURCE_PATTERNS",
    "SINK_PATTERNS",
    "FORMATS",
    "MODES",
    "MAX_SECONDS",
    "MAX_REQUEST_ROWS",
    "MAX_TCP_KEEPALIVE_S",
    "MAX_TCP_KEEPALIVE_COUNT",
]

#: the three tables' names, in the order the docs show them
SIDES = ("source", "sink", "request")

#: each side's table by name
TABLES: dict[str, tuple[OptionSpec, ...]] = {"source": SOURCE_OPTIONS, "sink": SINK_OPTIONS, "request": REQUEST_OPTIONS}

#: Which queries read a source option: ``streaming`` (``readStream``) or ``batch``
#: (``read``); an option not named here applies to both. Every sink option applies to both
#: ``writeStream`` and ``write``; ``request`` takes any DataFrame.
QUERIES: dict[str, tuple[str, ...]] = {
    **{
        name: ("streaming",)
        for name in (
            "relays",
            "relayReader",
            "receivers",
            "receiverLingerSeconds",
            "relayTimeout",
            "fetchTimeout",
            "maxRowsPerTrigger",
            "maxBytesPerTrigger",
            "minRowsPerTrigger",
            "maxTriggerDelay",
            "startingOffsets",
            "startingTimestamp",
            "maxSpoolBytes",
            "spoolDir",
            "spoolFsync",
            "failOnDataLoss",
            "spoolAccess",
            "spoolServerHost",
            "spoolServerPort",
        )
    },
    "maxMessages": ("batch",),
}


def queries_of(spec: OptionSpec) -> tuple[str, ...]:
    """The queries that read ``spec``'s option: ``("streaming", "batch")``, or one of them."""
    return QUERIES.get(spec.name, ("streaming", "batch")) if spec.side == "source" else ("streaming", "batch")
