"""Fetching spool ranges for executors that cannot see the driver's spool directory.

Read tasks normally open the spool's files directly (local and local-cluster mode, or a
shared filesystem). On a cluster whose executors run on other hosts, they ask the driver
instead, over ZeroMQ request-reply (the Guide's asynchronous client-server): each read
task's DEALER sends ``[b"", request]`` to the driver's ROUTER, which answers with one reply
per request. A request asks for ``[start, end)`` of a channel; a reply carries at most
``REPLY_BYTES`` of spool batches as one Arrow IPC stream and the offset it reached, so a
large range is fetched in several round trips and neither side holds it all in memory.

This module is the read task's side (``fetch_range``). The serving side, and why it is
locked down, is ``spool_server``; its names (``SpoolServer``, ``FetchAccess``, the addresses
it binds, ``loss_reply``) are importable from here too.
"""

from __future__ import annotations

import itertools
import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import zmq

from ..errors import SparkZmqError, transient
from ..patterns import Dealer
from .loss import DataLossError, LossPolicy
from .spool_reader import gone_from_relay

# the serving side's names, defined here before it had a module of its own (``X as X`` and
# ``__all__`` re-export them)
from .spool_server import FREED as FREED
from .spool_server import QUEUE as QUEUE
from .spool_server import REPLY_BYTES as REPLY_BYTES
from .spool_server import REQUEST_BYTES as REQUEST_BYTES
from .spool_server import UNREADABLE, FetchAccess, SpoolServer, bind_address, bind_first, listen_candidates
from .spool_server import BadRequest as BadRequest
from .spool_server import loss_reply as loss_reply

__all__ = [
    "SpoolServer",
    "FetchAccess",
    "fetch_range",
    "FetchError",
    "bind_address",
    "listen_candidates",
    "bind_first",
    "CONNECT_S",
]

#: a fetch request unanswered this long is sent again: past the default heartbeats'
#: interval plus timeout, so a connection that went silent has been replaced by then
RESEND_S = 15.0
#: how long a read task waits for its connection to the spool server to complete its
#: handshake before it fails: a wrong address or a closed port is then an error within
#: seconds that names the address and the options to set, not ``fetchTimeout``'s silence
CONNECT_S = 10.0


class FetchError(SparkZmqError, RuntimeError):
    """The driver could not serve a spool range (or could not be reached)."""


def _exchange(
    dealer: Dealer,
    request: dict[str, Any],
    request_id: int,
    timeout: float,
    resend_s: float,
    silence: Callable[[], str],
) -> list[bytes]:
    """Send ``request`` and return its answer, sending it again every ``resend_s`` meanwhile:
    a DEALER does not resend what a connection that died took with it, and heartbeats have
    replaced a silent connection by then. Answers to earlier requests are skipped."""
    body = json.dumps({**request, "id": request_id}).encode()
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise transient(FetchError(silence()))
        try:
            dealer.send([b"", body], timeout=remaining)
        except TimeoutError:
            raise transient(FetchError(silence())) from None
        resend_at = time.monotonic() + min(resend_s, remaining)
        while (wait := resend_at - time.monotonic()) > 0:
            try:
                reply = dealer.recv_multipart(timeout=wait)
            except TimeoutError:
                break
            # the id frame: after (error, text[, loss]) or (ok, reached, firsts, ipc); an id is digits
            echoed = (
                reply[-1]
                if (len(reply) == 6 if reply[1:2] == [b"ok"] else len(reply) in (4, 5) and reply[-1].isdigit())
                else None
            )
            if echoed is not None and echoed != str(request_id).encode():
                continue  # a late answer to a request resent or abandoned before
            return reply[:-1] if echoed is not None else reply


def _loss_of(frames: list[bytes]) -> dict[str, Any] | None:
    """The data-loss object of an error answer's frames after the status, if it is one."""
    if len(frames) < 2:
        return None
    try:
        loss = json.loads(frames[1])
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if (
        not isinstance(loss, dict)
        or loss.get("kind") != "data-loss"
        or not isinstance(loss.get("words"), str)
        or not all(isinstance(loss.get(k), int) and not isinstance(loss.get(k), bool) for k in ("start", "end"))
    ):
        return None
    return loss


def _loss_message(access: FetchAccess, message: str, loss: dict[str, Any] | None, channel: int) -> str:
    """A server's data-loss answer as the task's error. The driver's words stand as they
    are. A relay's name the relay (its address) and its channel: its own reasons (a reader
    that lagged past its retention) with the relay named in them, and for offsets it could
    not read, why a relay loses what a batch planned on it needs and what to do (its log
    names the files). Said here, where the address the query uses is known. ``loss``: the
    answer's data (``loss_reply``), None from a server that sends only the text."""
    if not access.is_relay:
        return message
    if loss is None:
        return f"{message.removeprefix('DataLossError: ')} ({access.server_name}, its channel {channel})"
    start, end = loss["start"], loss["end"]
    if loss.get("reason") == UNREADABLE:
        return (
            gone_from_relay(access.server_name, channel, start, end, "cannot be read from its spool (its log says why)")
            + ". Set failOnDataLoss=false to skip such offsets (they are logged there)."
        )
    return f"offsets {start}..{end} of channel {channel} of {access.server_name} {loss['words']}"


def _await_handshake(dealer: Dealer, access: FetchAccess, within: float, what: str) -> None:
    """Return once the connection to the spool server has completed its ZeroMQ handshake;
    fail within ``within`` seconds naming the address and what to set when it does not
    (a wrong advertised address, a firewall, a server that is gone), or at once when the
    server refused our key."""
    watch = dealer.handshakes
    assert watch is not None  # the Dealer is made with a monitor
    deadline = time.monotonic() + within
    while (remaining := deadline - time.monotonic()) > 0:
        for event, _, _ in watch.poll(min(remaining, 0.5)):
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                return
        if watch.rejected:
            raise FetchError(
                f"{access.server_name}'s spool server at {access.endpoint} refused this executor "
                f"({what}){watch.failure_note()}"
            )
    if not access.is_relay:
        hint = (
            "the driver advertises this address: set option spoolServerHost to the driver's address that "
            "executors reach (Spark's spark.driver.host is used when set), and let this port through any "
            "firewall from the executors to the driver (option spoolServerPort fixes it)"
        )
    else:
        hint = "is the relay running, and is its --listen address reachable from the executors?"
    raise transient(
        FetchError(
            f"cannot reach {access.server_name}'s spool server at {access.endpoint} from this "
            f"executor ({socket.gethostname()}) within {within:.0f} s: no connection completed its "
            f"handshake ({what}); {hint}"
        )
    )


def fetch_range(
    access: FetchAccess,
    channel: int,
    start: int,
    end: int,
    *,
    spool_id: str | None = None,
    loss: LossPolicy | None = None,
    timeout: float = 120.0,
    resend_s: float = RESEND_S,
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(first offset, spool batch)`` covering ``[start, end)`` of a channel, fetched from
    the driver. The server applies ``loss`` (default: fail) and logs what it skips: the
    request carries only whether to skip (``skipLoss``), so it reads the same for any
    server version. A server
    silent for ``timeout`` seconds (option ``fetchTimeout``) fails the task, naming it and
    the offsets; Spark retries the task."""
    endpoint = access.endpoint
    skip_loss = loss is not None and not loss.fail
    ids = itertools.count(1)
    with Dealer(endpoint, linger=0, curve=access.curve(), monitor=zmq.EVENT_HANDSHAKE_SUCCEEDED) as dealer:
        position = start
        _await_handshake(dealer, access, min(CONNECT_S, timeout), f"channel {channel}, offsets {start}..{end}")

        def silence() -> str:
            note = dealer.handshakes.failure_note() if dealer.handshakes is not None else ""
            return (
                f"no answer from {access.server_name}'s spool server at {endpoint} within {timeout:.0f} s "
                f"(option 'fetchTimeout'; channel {channel}, offsets {position}..{end}); is it reachable from "
                "this executor?" + note
            )

        while position < end:
            request = {"channel": channel, "start": position, "end": end, "spool": spool_id, "skipLoss": skip_loss}
            if access.session is not None:
                request["session"] = access.session
            reply = _exchange(dealer, request, next(ids), timeout, resend_s, silence)
            status = reply[1]
            if status != b"ok":
                message = reply[2].decode("utf-8", "replace")
                if message.startswith("DataLossError"):
                    raise DataLossError(_loss_message(access, message, _loss_of(reply[2:]), channel))
                raise FetchError(f"{access.server_name}'s spool server at {endpoint} failed: {message}")
            reached = int(reply[2])
            if reached <= position:
                raise FetchError(
                    f"the spool server at {endpoint} made no progress at offset {position} of channel {channel}"
                )
            firsts = json.loads(reply[3])
            for first, batch in zip(firsts, pa.ipc.open_stream(pa.py_buffer(reply[4]))):
                yield int(first), batch
            position = reached
