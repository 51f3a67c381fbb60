"""The spool fetch service: the CURVE-locked ROUTER that serves spool ranges to read tasks
(``SpoolServer``), where it may listen, what a read task needs to reach it (``FetchAccess``)
and its data-loss answer (``loss_reply``).

Why its own module: serving runs on the driver (or in a relay), on a thread of its own,
while the client side (``fetch``, which re-exports these names) runs in the read tasks; what
both must agree on (the access, the loss answer) is defined here, beside the one that makes it.

Why it is locked down: this port hands out the stream's messages. So it listens only on
the one address executors use (never a wildcard), it speaks only CURVE with a key pair
made for this query, and it accepts only the client key made with it, which travels to the
executors inside the read tasks (``FetchAccess``, protected in transit by Spark's own
``spark.authenticate``/``spark.network.crypto``). Each peer costs bounded memory: requests
are at most ``REQUEST_BYTES``, at most ``QUEUE`` replies wait for a peer that does not read
them (later ones are dropped, and that peer's task times out), and a reply is at most
``REPLY_BYTES`` plus one spool batch. Errors name the channel and offsets, never a path:
the driver's log has the details.
"""

from __future__ import annotations

import errno
import json
import logging
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import pyarrow as pa

from ..errors import SparkZmqError
from ..options import is_wildcard_address
from ..patterns import Router, SocketClosedError
from ..patterns.curve import Curve
from ..patterns.curve_keys import KeyPair
from ..patterns.deadlines import IDLE_SLICE_S
from ..patterns.router_reply import CLOSE_LINGER_MS, ReplyDrops
from .loss import DataLossError, LossPolicy
from .spool_format import SPOOL_SCHEMA
from .spool_reader import read_range

__all__ = [
    "SpoolServer",
    "FetchAccess",
    "BadRequest",
    "bind_address",
    "listen_candidates",
    "bind_first",
    "loss_reply",
    "UNREADABLE",
    "FREED",
    "REPLY_BYTES",
    "REQUEST_BYTES",
    "QUEUE",
]

#: the fetch service's log lines keep the name they always had (``fetch``'s)
log = logging.getLogger("spark_zmq.ingest.fetch")

#: a reply's Arrow payload stops growing past this (it may exceed it by one spool batch)
REPLY_BYTES = 8 << 20
#: the largest request the ROUTER accepts (a request is a small JSON object)
REQUEST_BYTES = 4096
#: replies queued for one peer (and requests queued from it) at most
QUEUE = 4
_INT64_MAX = (1 << 63) - 1

T = TypeVar("T")


#: how long the serving thread waits for a request before it looks around (the socket's
#: handshake monitor): a socket's idle slice, since ``close`` interrupts it, so an idle
#: service sleeps in the kernel
_IDLE_S = IDLE_SLICE_S


class BadRequest(SparkZmqError, ValueError):
    """A fetch request that is not one (answered with a short error, never served)."""


def bind_address(host: str) -> str:
    """``host`` as an address libzmq can bind (a name is resolved; a wildcard refused, by
    the address it resolves to: ``0`` or a name mapped to 0.0.0.0 is one too)."""
    name = host.strip().strip("[]")
    if not name or is_wildcard_address(name):
        raise ValueError(
            f"the spool fetch service never listens on a wildcard address ({host!r}); name the "
            "driver's address executors use (option spoolServerHost)"
        )
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in name else socket.AF_INET, name)
        return f"[{name}]" if ":" in name else name
    except OSError:
        pass
    try:
        address = socket.gethostbyname(name)
    except OSError as exc:
        raise ValueError(f"cannot resolve spoolServerHost {host!r}: {exc}") from None
    if is_wildcard_address(address):
        raise ValueError(
            f"the spool fetch service never listens on a wildcard address ({host!r} resolves to "
            f"{address}); name the driver's address executors use (option spoolServerHost)"
        )
    return address


def listen_candidates(host: str, ports: tuple[int, int] | None = None) -> list[str]:
    """The endpoints a fetch service may bind, in order: any free port of ``host``, or each
    port of the inclusive range ``ports`` (option ``spoolServerPort``)."""
    address = bind_address(host)
    if ports is None:
        return [f"tcp://{address}:*"]
    return [f"tcp://{address}:{port}" for port in range(ports[0], ports[1] + 1)]


def bind_first(candidates: list[str], bind: Callable[[str], T], *, what: str = "the spool fetch service") -> T:
    """``bind(endpoint)`` of the first candidate whose port is free. Why not pyzmq's
    ``bind_to_random_port``: it tries ports at random, so a range exactly as large as the
    receivers that share it may be reported full; in order, it always fits."""
    for i, endpoint in enumerate(candidates):
        try:
            return bind(endpoint)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or len(candidates) == 1:
                raise
            if i == len(candidates) - 1:
                host, first = candidates[0].split("://", 1)[1].rsplit(":", 1)
                last = candidates[-1].rsplit(":", 1)[1]
                raise OSError(
                    errno.EADDRINUSE,
                    f"{what} cannot listen: every port of option spoolServerPort "
                    f"({first}-{last}) is in use on {host}; give a larger range (one port per receiver "
                    "process) or free them",
                ) from None
    raise ValueError("no endpoint to bind")


@dataclass(frozen=True)
class FetchAccess:
    """What a read task needs to reach the fetch service: its endpoint, its public key and
    the client key pair made for this query (the secret stays out of ``repr``)."""

    endpoint: str
    #: ``None`` for a relay that runs without CURVE (the driver's own service always has keys)
    server_key: bytes | None
    client_public: bytes | None = None
    client_secret: bytes | None = field(default=None, repr=False)
    #: who answers, for error messages: "the driver" or "the relay at <address>"
    server_name: str = "the driver"
    #: a relay's fetches name the reader's lease (its session); the driver's service has none
    session: str | None = None
    #: whether a relay (or a query's receiver process) serves, not the driver's own fetch
    #: service: its errors then name it, and say why a relay loses data
    is_relay: bool = False

    def curve(self) -> Curve | None:
        if self.server_key is None or self.client_public is None or self.client_secret is None:
            return None
        return Curve.client(KeyPair(self.client_public, self.client_secret), self.server_key)


class SpoolServer:
    """A CURVE-authenticated ROUTER on the driver that serves spool ranges, on its own thread.

    A relay (``spark_zmq.relay``) runs the same service on the ROUTER it listens on
    (``router``) and answers its control requests, JSON objects with an ``"op"``, through
    ``control``: one port, one thread, for both the query's driver and its executors."""

    def __init__(
        self,
        spool_dir: str,
        host: str | None = None,
        ports: tuple[int, int] | None = None,
        locate: Callable[[int, int], tuple[str, int] | None] | None = None,
        spool_id: str | None = None,
        channels: int = 1,
        *,
        router: Router | None = None,
        control: Callable[[dict[str, Any], str | None], list[bytes]] | None = None,
        authorize: Callable[[dict[str, Any], str | None], str | list[bytes] | None] | None = None,
        peer_keys: bool = True,
    ) -> None:
        self.spool_dir = spool_dir
        self.spool_id = spool_id
        self.channels = channels
        #: ``locate(channel, offset)``: where an offset is in the spool (``ChannelLog.locate``)
        self._locate = locate or (lambda channel, offset: None)
        #: replies are tried once each; those dropped (their peer did not read, or had gone) are counted
        self._drops = ReplyDrops("spool fetch service", log)
        self._control = control
        #: whose spool this serves, for errors: a relay passes its ROUTER (``router``)
        self.owner = "the relay" if router is not None else "the driver"
        #: ``authorize(request, peer_key)``: why a fetch request is refused (words, or the
        #: whole answer: ``loss_reply``), or None (a relay's lease check); ``peer_key`` (also
        #: given to ``control``) is the client's CURVE public key in Z85 as ZAP
        #: authenticated it, or ``None`` without CURVE, or when ``peer_keys`` is off (a
        #: relay that binds no reader names to keys)
        self._authorize = authorize
        self._peer_keys = peer_keys
        if router is not None:
            self._router = router
            self.access: FetchAccess | None = None
            self.endpoint = router.last_endpoint
        else:
            server_keys, client_keys = KeyPair.generate(), KeyPair.generate()
            if host is None:
                raise ValueError("the spool fetch service needs the address executors use (spoolServerHost)")
            self._router = bind_first(
                listen_candidates(host, ports),
                lambda endpoint: Router(
                    "@" + endpoint,
                    hwm=QUEUE,
                    linger=0,
                    mandatory=True,
                    max_request_bytes=REQUEST_BYTES,
                    curve=Curve.server(server_keys, frozenset({client_keys.public_key})),
                ),
            )
            self.access = FetchAccess(
                self._router.last_endpoint, server_keys.public_key, client_keys.public_key, client_keys.secret_key
            )
            self.endpoint = self.access.endpoint
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="zmq-spool-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        """The serving loop; the socket is closed here, on the thread that uses it (its
        monitor is read without the wire's lock, so closing it from another thread while
        this one reads could abort libzmq)."""
        try:
            self._serve_until_stopped()
        finally:
            self._router.close(linger=CLOSE_LINGER_MS)

    def _serve_until_stopped(self) -> None:
        watch = self._router.handshakes
        while not self._stopping.is_set():
            try:
                frames, peer_key = self._router.recv_request(timeout=_IDLE_S)
            except TimeoutError:
                frames, peer_key = None, None
            except SocketClosedError:
                return
            if watch is not None:
                # count strangers' failed handshakes, and keep the monitor's queue from
                # filling: a full one would stall libzmq's I/O thread (HandshakeWatch)
                watch.poll()
            if frames is None:
                continue
            if not self._peer_keys:
                peer_key = None
            if len(frames) != 3 or frames[1] != b"":
                continue  # not a DEALER request envelope: nothing to answer
            reply = self._reply(frames[2], peer_key)
            try:
                # one try, no wait: a peer that reads nothing must not hold the one thread
                # every other reader is served by
                self._drops.send(self._router, [frames[0], b""] + reply)
            except SocketClosedError:
                return
            except Exception:  # never let one reply end the service
                log.exception("spool fetch service: could not send a reply")

    @property
    def dropped_replies(self) -> int:
        """Replies dropped because their peer did not read (or had gone)."""
        return self._drops.count

    def _parse(self, request: object) -> tuple[int, int, int, str | None, bool]:
        if not isinstance(request, dict):
            raise BadRequest("bad request: not a JSON object")
        numbers = [request.get(key) for key in ("channel", "start", "end")]
        if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= _INT64_MAX for n in numbers):
            raise BadRequest("bad request: channel, start and end must be integers from 0 to 2^63-1")
        channel, start, end = cast("list[int]", numbers)  # checked just above
        if channel >= self.channels or start >= end:
            raise BadRequest(
                f"bad request: channel {channel} offsets {start}..{end} (the spool has "
                f"{self.channels} channels; start must be below end)"
            )
        spool_id = request.get("spool")
        if spool_id is not None and (not isinstance(spool_id, str) or len(spool_id) > 64):
            raise BadRequest("bad request: spool must be a spool id")
        return channel, start, end, spool_id or self.spool_id, bool(request.get("skipLoss"))

    def _reply(self, body: bytes, peer_key: str | None = None) -> list[bytes]:
        """The answer to one request from the client whose CURVE key is ``peer_key``; a fetch
        answer ends with the request's id frame."""
        try:
            request = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return [b"error", b"bad request: not JSON"]
        if self._control is not None and isinstance(request, dict) and "op" in request:
            return self._control(request, peer_key)
        return self._fetch_reply(request, peer_key) + _id_frame(request)

    def _fetch_reply(self, request: object, peer_key: str | None = None) -> list[bytes]:
        """The answer to a fetch request; an error reply names offsets, never a file or path."""
        try:
            channel, start, end, spool_id, skip_loss = self._parse(request)
        except BadRequest as exc:
            return [b"error", str(exc).encode()]
        # ``_parse`` accepted it: a JSON object
        refusal = self._authorize(cast("dict[str, Any]", request), peer_key) if self._authorize is not None else None
        if refusal is not None:  # words, or a whole answer (a relay's ``loss_reply``)
            return [b"error", refusal.encode()] if isinstance(refusal, str) else refusal
        try:
            return self._answer(channel, start, end, spool_id, skip_loss)
        except DataLossError as exc:
            log.error("spool fetch of channel %d offsets %d..%d: %s", channel, start, end, exc)
            return loss_reply(
                channel,
                start,
                end,
                UNREADABLE,
                f"cannot be read from {self.owner}'s spool ({self.owner}'s log says why)",
            )
        except Exception:
            reference = uuid.uuid4().hex[:8]
            log.exception(
                "spool fetch of channel %d offsets %d..%d failed (reference %s)", channel, start, end, reference
            )
            return [
                b"error",
                (
                    f"the driver could not read offsets {start}..{end} of channel {channel} "
                    f"(reference {reference} in the driver's log)"
                ).encode(),
            ]

    def _answer(self, channel: int, start: int, end: int, spool_id: str | None, skip_loss: bool) -> list[bytes]:
        """Up to ``REPLY_BYTES`` of ``[start, end)``: ``[ok, reached, first offsets, ipc]``."""
        sink = pa.BufferOutputStream()
        reached = start
        firsts: list[int] = []
        # the read task's failOnDataLoss; skipped offsets are logged here, on the driver,
        # where the files are (the task's error names offsets, never a path)
        on_loss = LossPolicy(fail=not skip_loss)
        with pa.ipc.new_stream(sink, SPOOL_SCHEMA) as writer:
            for first, batch in read_range(
                self.spool_dir, channel, start, end, self._locate(channel, start), spool_id=spool_id, on_loss=on_loss
            ):
                writer.write_batch(batch)
                firsts.append(first)
                reached = first + batch.num_rows
                if sink.tell() >= REPLY_BYTES:
                    break
            else:
                reached = end
        return [b"ok", str(reached).encode(), json.dumps(firsts).encode(), sink.getvalue().to_pybytes()]

    def close(self) -> None:
        """Stop the serving thread, which closes its socket as it ends (closing it from here
        raced that thread's read of the monitor); one still busy after 5 s closes it later."""
        self._stopping.set()
        if not self._router.closed:
            self._router.interrupt()  # the thread waits in a receive
        self._thread.join(5)
        if self._thread.is_alive():
            log.warning("spool fetch service: its thread is still busy after 5 s; it closes the socket when done")


def _id_frame(request: object) -> list[bytes]:
    """The request's ``id`` as a last reply frame, so a client that resent a request can
    tell the answer to this one from a late answer to an earlier one (none without an id)."""
    if not isinstance(request, dict) or "op" in request:
        return []  # a relay's control request: its answer carries its id in its body
    request_id = request.get("id")
    if isinstance(request_id, int) and not isinstance(request_id, bool) and 0 <= request_id <= _INT64_MAX:
        return [str(request_id).encode()]
    return []


#: ``reason`` of a data-loss answer: the server's spool could not give the offsets (files
#: gone or damaged: its log says which)
UNREADABLE = "unreadable"
#: ``reason`` of a data-loss answer: a relay freed the offsets before this reader read them
FREED = "freed"


def loss_reply(channel: int, start: int, end: int, reason: str, words: str) -> list[bytes]:
    """A spool server's data-loss answer: ``[b"error", text, loss]``. ``text`` names no place
    (``"DataLossError: offsets S..E of channel C " + words``), what any client shows; ``loss``
    is the same as data, a JSON object ``{"kind": "data-loss", "channel", "start", "end",
    "reason", "words"}``, from which a client names the server it knows (its address)."""
    loss = {"kind": "data-loss", "channel": channel, "start": start, "end": end, "reason": reason, "words": words}
    return [
        b"error",
        f"DataLossError: offsets {start}..{end} of channel {channel} {words}".encode(),
        json.dumps(loss, separators=(",", ":")).encode(),
    ]
