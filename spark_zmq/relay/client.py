"""The query's side of the relay protocol (``server``): one DEALER per relay.

A request that gets no answer within ``RESEND_S`` is sent again (every control request is
idempotent), so a relay that restarts, or a reconnect that lost a request, costs a resend
rather than the query; only a relay silent for the whole ``timeout`` is an error, and the
error says where and what to check.

``ask`` sends a request of ``messages`` and reads its answer into the request's answer
type, so callers use named fields; ``call`` sends any op with any fields and returns the
answer's JSON object as it came: what tests send as an adversary would.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import SparkZmqError, transient
from ..patterns import Dealer, SocketClosedError
from ..patterns.curve import Curve
from .messages import Envelope, LeaseRefused, ProtocolMismatch, Request
from .protocol import Op

__all__ = ["RelayClient", "RelayError", "RelayBusyError", "RESEND_S"]

#: a request unanswered for this long is sent again
RESEND_S = 1.0

A = TypeVar("A")


class RelayError(SparkZmqError, RuntimeError):
    """A relay did not answer, or answered with an error."""


class RelayBusyError(RelayError):
    """Another query holds the lease of this reader name (one query at a time reads a
    relay under one ``relayReader``)."""

    retriable = True  # the lease lapses ``lapses_in_s`` after its holder stops

    def __init__(self, message: str, idle_s: float, lapses_in_s: float) -> None:
        super().__init__(message)
        self.idle_s = idle_s
        self.lapses_in_s = lapses_in_s


class RelayClient:
    """Control requests to the relay at ``address`` as reader ``reader`` (option
    ``relayReader``), under ``session``'s lease of that name."""

    def __init__(
        self,
        address: str,
        session: str,
        *,
        curve: Curve | None = None,
        timeout_s: float = 30.0,
        label: str | None = None,
        watch: Callable[[], None] | None = None,
        reader: str = "default",
    ) -> None:
        self.address = address
        self.reader = reader
        #: called before each (re)send; raises when the relay is known to be gone (a receiver
        #: process that exited), so its silence is reported as what it is, at once
        self._watch = watch
        #: what the relay is, for messages ("relay at tcp://...", "receiver process of channel 0 ...")
        self.label = label or f"relay at {address}"
        self.session = session
        self.timeout_s = timeout_s
        self._ids = itertools.count(1)
        self._dealer = Dealer([f">{address}"], linger=0, hwm=64, curve=curve)

    def ask(self, request: Request[A], timeout_s: float | None = None) -> A:
        """Send ``request`` and return the relay's answer, read into its type (``RelayError``
        on an error reply, an answer it cannot read, or silence for ``timeout_s``;
        ``RelayBusyError`` when another query holds the lease)."""
        op = request.op.value
        answer = self._exchange(
            op, lambda request_id: Envelope(request, self.reader, self.session, request_id).to_wire(), timeout_s
        )
        try:
            return request.answer(answer)
        except ProtocolMismatch as exc:
            raise RelayError(f"the {self.label} {exc}") from None
        except ValueError as exc:
            raise RelayError(f"the {self.label} answered {op!r} with what this connector cannot read: {exc}") from None

    def call(self, op: Op | str, timeout_s: float | None = None, **fields: Any) -> dict[str, Any]:
        """Send one request of any ``op`` and ``fields`` and return the relay's answer as its
        JSON object (``RelayError`` on an error reply or silence for ``timeout_s``,
        ``RelayBusyError`` when another query holds the lease)."""
        name = Op(op).value
        return self._exchange(
            name,
            lambda request_id: {"op": name, "id": request_id, "session": self.session, "reader": self.reader, **fields},
            timeout_s,
        )

    def _exchange(self, op: str, request: Callable[[int], dict[str, Any]], timeout_s: float | None) -> dict[str, Any]:
        """Send ``request(id)`` until its answer comes (resending every ``RESEND_S``)."""
        request_id = next(self._ids)
        body = json.dumps(request(request_id)).encode()
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            if self._watch is not None:
                self._watch()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise transient(RelayError(self._silence(op)))
            try:
                self._dealer.send([b"", body], timeout=remaining)
            except TimeoutError:
                raise transient(RelayError(self._silence(op))) from None
            resend_at = time.monotonic() + min(RESEND_S, remaining)
            while True:
                wait = resend_at - time.monotonic()
                if wait <= 0:
                    break
                try:
                    frames = self._dealer.recv_multipart(timeout=wait)
                except TimeoutError:
                    break
                answer = self._parse(frames)
                if answer is None or answer.get("id") != request_id:
                    continue  # the answer to a request sent before (resent, or timed out)
                return self._result(op, frames[1], answer)

    def _parse(self, frames: list[bytes]) -> dict[str, Any] | None:
        if len(frames) != 3 or frames[0] != b"":
            return None
        try:
            answer = json.loads(frames[2])
        except (ValueError, UnicodeDecodeError):
            if frames[1] == b"error":  # a fetch-style error (e.g. "bad request: not JSON")
                raise RelayError(
                    f"the {self.label} refused a request: {frames[2][:200].decode('utf-8', 'replace')}"
                ) from None
            return None
        return answer if isinstance(answer, dict) else None

    def _result(self, op: str, status: bytes, answer: dict[str, Any]) -> dict[str, Any]:
        if status != b"ok":
            raise RelayError(f"the {self.label} failed {op!r}: {answer.get('error')}")
        if "refused" in answer:
            try:
                refused = LeaseRefused.from_wire(answer, self.reader)
            except ValueError as exc:
                raise RelayError(
                    f"the {self.label} refused {op!r} in words this connector cannot read: {exc}"
                ) from None
            idle, lapses, reader = float(refused.idle), float(refused.lapses), refused.reader
            raise RelayBusyError(
                f"the {self.label} is read by another query under relayReader {reader!r} (its reader renewed its "
                f"claim {idle:.1f} s ago; a claim nobody renews lapses after {idle + lapses:.0f} s): one query at a "
                "time reads a relay under one name. Stop the other query, or give this one another name (option "
                "'relayReader')",
                idle,
                lapses,
            )
        return answer

    def _silence(self, op: str) -> str:
        watch = self._dealer.handshakes
        note = watch.failure_note() if watch is not None else ""
        return (
            f"no answer from the {self.label} to {op!r} within {self.timeout_s:.0f} s (option "
            f"'relayTimeout'): is 'spark-zmq relay --listen {self.address}' running, and reachable from the "
            f"driver?{note}"
        )

    def close(self) -> None:
        try:
            self._dealer.close(linger=0)
        except SocketClosedError:
            pass
