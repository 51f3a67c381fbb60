"""Serving spool ranges to executors that cannot see the driver's spool directory.

Read tasks normally open the spool's files directly (local and local-cluster mode, or a
shared filesystem). On a cluster whose executors run on other hosts, they ask the driver
instead, over ZeroMQ request-reply (the Guide's asynchronous client-server): each read
task's DEALER sends ``[b"", request]`` to the driver's ROUTER, which answers with one reply
per request. A request asks for ``[start, end)`` of a channel; a reply carries at most
``_REPLY_BYTES`` of spool batches as one Arrow IPC stream and the offset it reached, so a
large range is fetched in several round trips and neither side holds it all in memory.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from typing import Callable, Iterator, Optional

import pyarrow as pa

from ..patterns import Dealer, Router, SocketClosedError
from .spool_format import SPOOL_SCHEMA, DataLossError
from .spool_reader import raise_loss, read_range

__all__ = ["SpoolServer", "fetch_range", "FetchError"]

log = logging.getLogger(__name__)

_REPLY_BYTES = 32 << 20


class FetchError(RuntimeError):
    """The driver could not serve a spool range (or could not be reached)."""


def advertised_host() -> str:
    """The address executors should use to reach this host: SPARK_LOCAL_IP if set (Spark's
    own override), else the host's resolved name."""
    if os.environ.get("SPARK_LOCAL_IP"):
        return os.environ["SPARK_LOCAL_IP"]
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class SpoolServer:
    """A ROUTER on the driver that serves spool ranges, on its own thread."""

    def __init__(
        self,
        spool_dir: str,
        bind: str = "tcp://*:*",
        host: Optional[str] = None,
        locate: Optional[Callable[[int, int], Optional[tuple[str, int]]]] = None,
        spool_id: Optional[str] = None,
    ) -> None:
        self.spool_dir = spool_dir
        self.spool_id = spool_id
        #: ``locate(channel, offset)``: where an offset is in the spool (``ChannelLog.locate``)
        self._locate = locate or (lambda channel, offset: None)
        self._router = Router("@" + bind.lstrip("@"), linger=0)
        port = self._router.last_endpoint.rsplit(":", 1)[1]
        self.endpoint = f"tcp://{host or advertised_host()}:{port}"
        self._thread = threading.Thread(target=self._serve, name="zmq-spool-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                frames = self._router.recv_multipart()
            except SocketClosedError:
                return
            identity, body = frames[0], frames[-1]
            try:
                request = json.loads(body)
                reply = self._answer(int(request["channel"]), int(request["start"]), int(request["end"]),
                                     request.get("spool") or self.spool_id, bool(request.get("skipLoss")))
            except Exception as exc:  # the read task reports it
                reply = [b"error", f"{type(exc).__name__}: {exc}".encode()]
            try:
                self._router.send([identity, b""] + reply)
            except SocketClosedError:
                return

    def _answer(self, channel: int, start: int, end: int, spool_id: Optional[str], skip_loss: bool) -> list[bytes]:
        """Up to ``_REPLY_BYTES`` of ``[start, end)``: ``[ok, reached, first offsets, ipc]``."""
        sink = pa.BufferOutputStream()
        reached = start
        firsts: list[int] = []
        skipped: list[str] = []
        on_loss = skipped.append if skip_loss else raise_loss
        with pa.ipc.new_stream(sink, SPOOL_SCHEMA) as writer:
            for first, batch in read_range(self.spool_dir, channel, start, end, self._locate(channel, start),
                                           spool_id=spool_id, on_loss=on_loss):
                writer.write_batch(batch)
                firsts.append(first)
                reached = first + batch.num_rows
                if sink.tell() >= _REPLY_BYTES:
                    break
            else:
                reached = end
        for message in skipped:
            log.warning("spool server skipped unreadable data (failOnDataLoss=false): %s", message)
        return [b"ok", str(reached).encode(), json.dumps(firsts).encode(), sink.getvalue().to_pybytes()]

    def close(self) -> None:
        self._router.close(linger=0)
        self._thread.join(5)


def fetch_range(
    endpoint: str, channel: int, start: int, end: int, *, spool_id: Optional[str] = None, skip_loss: bool = False,
    timeout: float = 120.0,
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(first offset, spool batch)`` covering ``[start, end)`` of a channel, fetched from
    the driver (skipped offsets, with ``skip_loss``, are logged by the driver)."""
    with Dealer(endpoint, linger=0) as dealer:
        position = start
        while position < end:
            request = json.dumps({"channel": channel, "start": position, "end": end, "spool": spool_id,
                                  "skipLoss": skip_loss}).encode()
            dealer.send([b"", request], timeout=timeout)
            try:
                reply = dealer.recv_multipart(timeout=timeout)
            except TimeoutError:
                raise FetchError(
                    f"no answer from the driver's spool server at {endpoint} within {timeout:.0f}s "
                    f"(channel {channel}, offsets {position}..{end}); is the driver reachable from this executor?"
                ) from None
            status = reply[1]
            if status != b"ok":
                message = reply[2].decode("utf-8", "replace")
                if message.startswith("DataLossError"):
                    raise DataLossError(message)
                raise FetchError(f"the driver's spool server at {endpoint} failed: {message}")
            reached = int(reply[2])
            if reached <= position:
                raise FetchError(f"the spool server at {endpoint} made no progress at offset {position} of channel {channel}")
            firsts = json.loads(reply[3])
            for first, batch in zip(firsts, pa.ipc.open_stream(pa.py_buffer(reply[4]))):
                yield int(first), batch
            position = reached
