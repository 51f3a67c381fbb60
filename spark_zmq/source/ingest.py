"""A query's own ingest (option ``endpoints`` with ``receivers=threads``), as the reader sees it.

``LocalIngest`` is ``spark_zmq.ingest.runtime.IngestRuntime`` created inside the
long-running Python process that hosts the ``DataSourceStreamReader``, lazily by the first
offset call (never in a constructor: Spark also builds readers in short-lived planning
processes, where a bind would only steal the port), plus what only Spark needs: whether
executors need the fetch service, and the read task for a range.
"""

from __future__ import annotations

from ..ingest.runtime import IngestRuntime
from ..options import SourceOptions
from .locality import executors_share_host
from .partitions import SpoolRange

__all__ = ["LocalIngest", "needs_fetch_service"]


def needs_fetch_service(spool_access: str) -> bool:
    """Whether the driver must serve the spool over the network: always for
    ``spoolAccess=fetch``, never for ``local``, and for ``auto`` unless Spark's master is
    known to run every executor on this host (``locality``)."""
    if spool_access == "auto":
        return not executors_share_host()
    return spool_access == "fetch"


class LocalIngest(IngestRuntime):
    """The driver's spool and receivers, serving read tasks."""

    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options, serve_fetch=needs_fetch_service(options.spool_access))

    def spool_range(self, channel: int, start: int, end: int) -> SpoolRange:
        """The read task for ``[start, end)`` of ``channel``."""
        return SpoolRange(
            self.options.spool_dir, channel, start, end, self.spool.owner_id,
            self.server.access if self.server is not None else None,
            self.spool.channels[channel].locate(start) or (), self.spool.spool_id,
        )
