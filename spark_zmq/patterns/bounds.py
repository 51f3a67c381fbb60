"""Whole-message bounds for a receiving libzmq socket: frames per message, bytes over all frames.

Why: libzmq's own limit (ZMQ_MAXMSGSIZE, ``max_message_bytes`` on a socket) is per frame.
A peer can send one message of 300,000 small frames, or many messages of thousands of
frames each, and a receiver that turns each into a list of ``bytes`` holds all of it, and
hands it on. The broker, the worker (``spark_zmq.worker.serve``) and the ``Client`` read
every message through ``MessageBounds.recv``: frame by frame, keeping at most
``max_frames`` frames and ``max_bytes`` bytes; past either the rest of the message is read
and let go at once, one frame at a time, and the message is refused: counted
(``oversize``) and logged once per peer.

What it cannot do: libzmq delivers no frame of a message before its last frame has
arrived (messages are atomic), so the check comes right after libzmq has read the whole
message, and a message is in libzmq's memory once before it is refused. What the bound
saves is the second copy (Python's), the handler or caller seeing it, and the time to
handle it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

import zmq

from .rcvmore import rcvmore_check

__all__ = ["MAX_FRAMES", "MessageBounds", "recv_bounded", "peer_address"]

#: frames a message may have by default (an envelope of a few hops, a delimiter, a body)
MAX_FRAMES = 64
#: peers whose refused message is logged (one line each); later ones are only counted
_LOGGED_PEERS = 1000
_NOBLOCK = int(zmq.NOBLOCK)


def recv_bounded(
    sock: zmq.Socket[Any],
    max_frames: int,
    max_bytes: int | None,
    flags: int = _NOBLOCK,
    more: Callable[[], int] | None = None,
) -> tuple[list[Any], zmq.Frame, str]:
    """One whole message, read frame by frame (``zmq.Again`` when none waits with
    ``NOBLOCK``): ``(frames, first, "")``, or ``(kept, first, why)`` when it has more than
    ``max_frames`` frames or more than ``max_bytes`` in all, ``kept`` then being the frames
    read before the limit was passed. ``first`` is the first frame (for ``peer_address``).
    Past a limit the rest is read and let go at once, never kept.

    Every frame is a ``zmq.Frame`` (the broker forwards them without a copy); with ``more``,
    the socket's RCVMORE check (``rcvmore``), the frames after the first are ``bytes``
    instead, which costs a caller that wants bytes one ``Frame`` per message, not per frame."""
    first = sock.recv(flags, copy=False)
    frames: list[Any] = [first]
    total, why = len(first), ""
    if max_bytes is not None and total > max_bytes:
        frames, why = [], f"more than {max_bytes:,} bytes in all"
    has_more = first.more
    frame: Any  # a Frame, or bytes with ``more``
    while has_more:
        # the rest of a message arrives with its first frame
        if more is None:
            frame = sock.recv(copy=False)
            has_more = frame.more
        else:
            frame = sock.recv()
            has_more = bool(more())
        total += len(frame)
        if why:
            continue
        if len(frames) >= max_frames:
            why = f"more than {max_frames} frames"
        elif max_bytes is not None and total > max_bytes:
            why = f"more than {max_bytes:,} bytes in all"
        else:
            frames.append(frame)
    return frames, first, why


def peer_address(frame: zmq.Frame) -> str:
    """The address of the peer a frame came from (``Peer-Address``), or ``"unknown"``."""
    try:
        return cast(str, frame.get("Peer-Address")) or "unknown"  # a str property
    except (zmq.ZMQError, ValueError, TypeError, AttributeError):
        return "unknown"


class MessageBounds:
    """``max_frames`` and ``max_bytes`` (``None``: no bound over all frames) of the messages one
    socket receives, and the refusals counted (``oversize``) and logged once per peer.

    ``owner`` names the receiver in log lines and errors (``"Client"``, ``"worker"``);
    ``frames_option``/``bytes_option`` name the options that set the bounds, for errors."""

    def __init__(
        self,
        owner: str,
        max_frames: int = MAX_FRAMES,
        max_bytes: int | None = None,
        *,
        frames_option: str = "max_frames",
        bytes_option: str = "max_message_bytes",
        logger: logging.Logger | None = None,
    ) -> None:
        if isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 1:
            raise ValueError(
                f"option {frames_option!r} of {owner} must be a positive integer (frames a received "
                f"message may have), got {max_frames!r}"
            )
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1):
            raise ValueError(
                f"option {bytes_option!r} of {owner} must be a positive integer (bytes a received "
                f"message may take over all its frames), got {max_bytes!r}"
            )
        self.owner = owner
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self.oversize = 0
        self._log = logger or logging.getLogger(__name__)
        self._logged: set[str] = set()
        self._more_sock: zmq.Socket[Any] | None = None
        self._more: Callable[[], int] = int

    def recv(self, sock: zmq.Socket[Any], flags: int = _NOBLOCK) -> tuple[list[bytes] | None, list[bytes], str]:
        """One message as ``bytes`` frames: ``(frames, [], "")``, or ``(None, kept, why)`` when it
        was refused (counted and logged; ``kept``: the frames read before the limit).
        ``zmq.Again`` when none waits.

        Only the first frame is read as a ``zmq.Frame`` (its ``Peer-Address`` names the peer
        of a refusal); the rest are read as ``bytes`` with the ctypes RCVMORE check (see
        ``rcvmore``): a ``Frame`` per frame and its ``.bytes`` copy cost a request-reply
        round trip a third of its time."""
        out, first, why = recv_bounded(sock, self.max_frames, self.max_bytes, flags, self._more_of(sock))
        if out:
            out[0] = first.bytes  # (the first frame is kept whenever anything is)
        if not why:
            return out, [], ""
        self.refused(peer_address(first), why)
        return None, out, why

    def _more_of(self, sock: zmq.Socket[Any]) -> Callable[[], int]:
        """The RCVMORE check of ``sock``, made once per socket (the bounds serve one socket)."""
        if self._more_sock is not sock:
            self._more_sock, self._more = sock, rcvmore_check(sock)
        return self._more

    def refused(self, peer: str, why: str) -> None:
        """Count a refused message of ``peer`` and log it, once per peer."""
        self.oversize += 1
        if peer not in self._logged and len(self._logged) < _LOGGED_PEERS:
            self._logged.add(peer)
            self._log.warning(
                "%s: dropped a message from peer %s: %s (further ones of this peer are counted, not logged)",
                self.owner,
                peer,
                why,
            )
