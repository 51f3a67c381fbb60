"""Prometheus metrics of the long-running services: ``spark-zmq relay --metrics``,
``spark-zmq broker --metrics`` and ``spark_zmq.worker.serve(metrics=...)``.

Why a scrape endpoint: each service counts what it does (the broker's status line, the
worker's ``WorkerStats``, the relay's spool and readers); a team watches services through
Prometheus, not by parsing logs. Each service's facts are read at scrape time from what it
already keeps (a collector, read-only: nothing is counted twice and a service without
``--metrics`` pays nothing). Off by default; needs the optional extra ``metrics``
(``pip install 'spark-zmq[metrics]'``, which brings ``prometheus-client``).

Names: ``spark_zmq_<service>_...``, counters ending ``_total``, bytes in ``_bytes``, one
series per channel (``channel``) or reader (``reader``) as labels; served at ``/metrics``
on ``HOST:PORT`` (``docs/metrics.md`` lists every name and a scrape configuration).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import fields
from typing import Any

__all__ = [
    "MetricsServer",
    "serve_metrics",
    "parse_address",
    "broker_metrics",
    "relay_metrics",
    "worker_metrics",
    "source_metrics",
    "MISSING",
]

#: what a service says when ``--metrics`` is given without the extra installed
MISSING = "metrics need prometheus-client: pip install 'spark-zmq[metrics]'"

#: the broker's ``BrokerStats`` fields: (metric name after ``spark_zmq_broker_``, counter?, help).
#: Counters are totals since the start; the others are gauges (what it holds now).
BROKER_FIELDS: dict[str, tuple[str, bool, str]] = {
    "workers_idle": ("workers_idle", False, "Workers waiting for a request."),
    "workers_known": ("workers", False, "Workers connected (idle or holding a request)."),
    "requests_waiting": ("requests_waiting", False, "Requests received and not yet given to a worker."),
    "requests_in_flight": ("requests_in_flight", False, "Requests a worker holds (its reply not yet back)."),
    "requests_forwarded": ("requests_forwarded", True, "Requests sent to a worker."),
    "replies_returned": ("replies_returned", True, "Replies sent back to their client."),
    "malformed": ("messages_malformed", True, "Messages dropped: not what a client or worker may send."),
    "replies_undeliverable": (
        "replies_undeliverable",
        True,
        "Replies dropped: their client was gone or did not read for reply_timeout.",
    ),
    "requests_lost": (
        "requests_lost",
        True,
        "Requests a worker took with it when it disconnected or overran hold_limit (clients resend them).",
    ),
    "workers_gone": ("workers_gone", True, "Workers that disconnected or could no longer be reached."),
    "handshakes_rejected": ("handshakes_rejected", True, "CURVE handshakes refused on either side."),
    "replies_held": ("replies_held", False, "Replies kept for clients that are not reading now."),
    "replies_unexpected": ("replies_unexpected", True, "Replies dropped: not from the worker holding that request."),
    "requests_refused": (
        "requests_refused",
        True,
        "Requests dropped: their client had client_hwm waiting while it read no reply.",
    ),
    "held_bytes": ("held_bytes", False, "Bytes of the replies held."),
    "messages_oversize": ("messages_oversize", True, "Messages dropped whole for max_frames or max_message_bytes."),
    "workers_reconnected": ("workers_reconnected", True, "Workers that came back on a new connection."),
    "requests_expired": ("requests_expired", True, "Requests dropped after waiting request_ttl for a worker."),
    "workers_overdue": ("workers_overdue", False, "Workers holding a request longer than hold_limit."),
    "waiting_bytes": ("waiting_bytes", False, "Bytes of the requests waiting."),
}

#: ``WorkerStats`` fields: (metric name after ``spark_zmq_worker_``, help); all counters
WORKER_FIELDS: dict[str, tuple[str, str]] = {
    "requests": ("requests", "Requests received (probes included)."),
    "replies": ("replies", "Normal replies sent."),
    "errors": ("errors", "Error replies sent (the handler's or the request's fault, oversize, timeouts)."),
    "reannounced": ("reannounced", "READY sent again after a reconnection to the broker."),
    "oversize": ("requests_oversize", "Requests refused for max_frames or max_message_bytes."),
    "timeouts": ("handler_timeouts", "Handlers that did not return within handler_timeout."),
    "dropped_replies": ("dropped_replies", "Replies dropped: the client read none queued for it, or was gone."),
    "malformed": ("requests_malformed", "Requests dropped unanswered for having no empty delimiter frame."),
}


def parse_address(address: str, flag: str = "--metrics") -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9100`` for IPv6) as ``(host, port)``; ``ValueError`` naming
    ``flag`` and what is valid."""
    host, sep, port = address.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(
            f"{flag} {address!r}: expected HOST:PORT, e.g. '0.0.0.0:9108' or '127.0.0.1:9108' (port 0: any free port)"
        )
    return host, int(port)


class MetricsServer:
    """``/metrics`` of one service on ``HOST:PORT``, in a thread; ``close()`` stops it."""

    def __init__(self, address: str, collect: Callable[[], Iterable[Any]], flag: str = "--metrics") -> None:
        host, port = parse_address(address, flag)
        try:
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError:
            raise RuntimeError(MISSING) from None

        from prometheus_client.registry import Collector

        class _Collector(Collector):
            def collect(self) -> Iterable[Any]:
                return collect()

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector())
        try:
            self._server, self._thread = start_http_server(port, host, registry=registry)
        except OSError as exc:
            raise OSError(exc.errno, f"{flag} {address}: {exc.strerror or exc}") from None
        #: where it serves, ``host:port`` (port 0 resolved)
        self.address = f"{host}:{self._server.server_port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_metrics(address: str, collect: Callable[[], Iterable[Any]], flag: str = "--metrics") -> MetricsServer:
    """Serve ``collect()``'s metric families at ``http://address/metrics`` (see ``MetricsServer``)."""
    return MetricsServer(address, collect, flag)


def broker_metrics(stats: Callable[[], Any]) -> Callable[[], Iterator[Any]]:
    """The broker's metrics, from ``stats()`` (``Broker.stats``: a thread-safe snapshot, a
    ``BrokerStats``; typed loosely here because every service imports this module, which
    imports none of them)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    def collect() -> Iterator[Any]:
        now = stats()
        for field in fields(now):
            name, counter, help_ = BROKER_FIELDS[field.name]
            kind = CounterMetricFamily if counter else GaugeMetricFamily
            yield kind(f"spark_zmq_broker_{name}", help_, value=getattr(now, field.name))

    return collect


def worker_metrics(stats: Any) -> Callable[[], Iterator[Any]]:
    """A worker's metrics, read from its ``WorkerStats`` (plain integers it updates)."""
    from prometheus_client.core import CounterMetricFamily

    def collect() -> Iterator[Any]:
        for field, (name, help_) in WORKER_FIELDS.items():
            yield CounterMetricFamily(f"spark_zmq_worker_{name}", help_, value=getattr(stats, field))

    return collect


def relay_metrics(relay: Any) -> Callable[[], Iterator[Any]]:
    """A relay's metrics: per channel its offsets, spool bytes, broken connections and
    refused handshakes; per reader its committed offsets and lag; the spool's budget and the
    disk's free bytes. Offsets count messages, rows for ``format=arrow``. (``relay``: a
    ``relay.server.Relay``.)"""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    def collect() -> Iterator[Any]:
        channels = relay.ingest.spool.channels
        receivers = {r.log.channel: r for r in relay.ingest.receivers}
        latest = GaugeMetricFamily(
            "spark_zmq_relay_latest_offset",
            "The next offset the channel's spool writes "
            "(messages received, rows for format=arrow, since the spool began).",
            labels=["channel"],
        )
        earliest = GaugeMetricFamily(
            "spark_zmq_relay_earliest_offset", "The first offset the channel's spool still holds.", labels=["channel"]
        )
        held = GaugeMetricFamily(
            "spark_zmq_relay_spool_bytes", "Bytes the channel's spool takes on disk.", labels=["channel"]
        )
        broken = CounterMetricFamily(
            "spark_zmq_relay_broken_connections",
            "Producer connections that broke with data possibly in flight.",
            labels=["channel"],
        )
        refused = CounterMetricFamily(
            "spark_zmq_relay_handshakes_rejected",
            "Handshakes the channel's socket refused (CURVE).",
            labels=["channel"],
        )
        for log_ in channels:
            label = [str(log_.channel)]
            latest.add_metric(label, log_.next_offset)
            earliest.add_metric(label, log_.earliest)
            held.add_metric(label, log_.size_bytes)
            receiver = receivers.get(log_.channel)
            broken.add_metric(label, receiver.broken_connections if receiver is not None else 0)
            refused.add_metric(label, receiver.rejected_handshakes if receiver is not None else 0)
        yield from (latest, earliest, held, broken, refused)
        committed = GaugeMetricFamily(
            "spark_zmq_relay_reader_committed_offset",
            "The offset up to which the reader (a query's relayReader) has committed.",
            labels=["reader", "channel"],
        )
        lag = GaugeMetricFamily(
            "spark_zmq_relay_reader_lag",
            "Offsets between what the reader committed and the channel's latest (messages, rows for format=arrow).",
            labels=["reader", "channel"],
        )
        holding = GaugeMetricFamily(
            "spark_zmq_relay_reader_held", "1 while a query holds the reader's lease.", labels=["reader"]
        )
        for reader in relay.readers.describe():
            holding.add_metric([reader["name"]], 1 if reader["held"] else 0)
            for c, offset in enumerate(reader["committed"]):
                if c < len(channels):
                    committed.add_metric([reader["name"], str(c)], offset)
                    lag.add_metric([reader["name"], str(c)], max(0, channels[c].next_offset - offset))
        yield from (committed, lag, holding)
        yield GaugeMetricFamily(
            "spark_zmq_relay_spool_limit_bytes",
            "What the spool may take before the relay stops reading (maxSpoolBytes).",
            value=relay.config.max_spool_bytes,
        )
        try:
            free = shutil.disk_usage(relay.ingest.spool.spool_dir).free
        except OSError:
            free = 0
        yield GaugeMetricFamily(
            "spark_zmq_relay_disk_free_bytes", "Free bytes on the spool directory's file system.", value=free
        )
        yield CounterMetricFamily(
            "spark_zmq_relay_control_requests", "Control requests answered on --listen.", value=relay.control_requests
        )

    return collect


def source_metrics(
    ingest: Callable[[], Any], planned: Callable[[], Mapping[int, int] | None]
) -> Callable[[], Iterator[Any]]:
    """A query's receivers on the driver host (option ``metricsAddress``), from the stream
    reader's ingest (``ingest()``: ``None`` until it is opened, or once stopped) and the end
    of the batch Spark planned last (``planned()``): per channel the latest and earliest
    offsets and the offsets not yet in a planned batch, and the broken connections and
    refused handshakes of all channels. With ``receivers=threads`` the values are live; with
    receiver processes or relays they are what the reader last learnt of them (each trigger
    asks): the scrape never talks to a relay itself, whose socket is the reader's. The
    query's progress keeps reporting what it did."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    def collect() -> Iterator[Any]:
        runtime = ingest()
        if runtime is None:
            return
        ends = planned() or {}
        newest = GaugeMetricFamily(
            "spark_zmq_source_latest_offset",
            "The next offset the channel's spool writes (messages received, rows for format=arrow).",
            labels=["channel"],
        )
        oldest = GaugeMetricFamily(
            "spark_zmq_source_earliest_offset", "The first offset the channel's spool still holds.", labels=["channel"]
        )
        lag = GaugeMetricFamily(
            "spark_zmq_source_lag", "Offsets received and not yet in a batch Spark planned.", labels=["channel"]
        )
        for channel in runtime.channels:
            label = [str(channel.channel)]
            end = channel.next_offset  # (never ``runtime.latest()``: a relay's is a round trip on the reader's socket)
            newest.add_metric(label, end)
            oldest.add_metric(label, channel.earliest)
            lag.add_metric(label, max(0, end - ends.get(channel.channel, channel.earliest)))
        yield from (newest, oldest, lag)
        yield CounterMetricFamily(
            "spark_zmq_source_broken_connections",
            "Producer connections that broke with data possibly in flight (all channels).",
            value=runtime.broken_connections(),
        )
        yield CounterMetricFamily(
            "spark_zmq_source_handshakes_rejected",
            "Handshakes the channels' sockets refused (CURVE, all channels).",
            value=runtime.rejected_handshakes(),
        )

    return collect
