"""Who gets the next message: round-robin over peers with room (sending) and fair queueing
over peers with messages (receiving), libzmq's ``lb`` and ``fq``.

Both are plain data structures: the engine calls them with its lock held and does what
they ask of the I/O thread (write a peer's queue, resume reading a peer) itself, so they
know nothing of connections, threads or the wire.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ...message_block import MessageRun

if TYPE_CHECKING:  # pragma: no cover
    from .codec import EngineMessage
    from .connection import Peer

__all__ = ["RoundRobin", "FairQueue"]


class RoundRobin:
    """The peers a message may be queued to, taken in turn (49/SCATTERGATHER, 30/PIPELINE:
    round-robin over the peers that are available), skipping those at the high-water mark."""

    __slots__ = ("peers", "_next")

    def __init__(self) -> None:
        self.peers: list[Peer] = []
        self._next = 0

    def __len__(self) -> int:
        return len(self.peers)

    def __contains__(self, peer: Peer) -> bool:
        return peer in self.peers

    def add(self, peer: Peer) -> None:
        """``peer`` takes its turn after the others (nothing if it already has one)."""
        if peer not in self.peers:
            self.peers.append(peer)

    def remove(self, peer: Peer) -> None:
        """No more messages for ``peer``; the turn stays with the peer that had it."""
        peers = self.peers
        if peer in peers:
            index = peers.index(peer)
            peers.remove(peer)
            if index < self._next:
                self._next -= 1
            self._next = self._next % len(peers) if peers else 0

    def next_with_room(self, hwm: int) -> Peer | None:
        """The next peer whose outbox holds fewer than ``hwm`` messages (0: no limit), or
        ``None`` when every one is full."""
        peers = self.peers
        n = len(peers)
        for step in range(n):
            index = (self._next + step) % n
            peer = peers[index]
            if hwm == 0 or len(peer.outbox) < hwm:
                self._next = (index + 1) % n
                return peer
        return None

    def take_turns(self, messages: Sequence[EngineMessage], start: int, hwm: int) -> tuple[int, list[Peer]]:
        """Queue ``messages[start:]`` in turn, as many as fit while every peer has room;
        returns how many were queued and the peers that got some. The same peers get the same messages in the
        same order as one ``next_with_room`` per message would give them: with ``room``
        free places on the fullest peer, ``room x peers`` messages never fill any of them,
        so no peer is skipped. Nothing is queued (``(0, [])``) when a peer is full: the
        caller then goes message by message."""
        peers = self.peers
        n = len(peers)
        left = len(messages) - start
        if n == 0 or left <= 0:
            return 0, []
        room = min(hwm - len(p.outbox) for p in peers) if hwm else left
        if room <= 0:
            return 0, []
        count = min(left, room * n)
        first = self._next
        touched: list[Peer] = []
        for k in range(min(n, count)):
            peer = peers[(first + k) % n]
            peer.outbox.extend(messages[start + k : start + count : n])
            touched.append(peer)
        self._next = (first + count) % n
        return count, touched


class FairQueue:
    """The peers with received messages, in turn (49/SCATTERGATHER: fair-queued input), and
    their inboxes' high-water mark: a peer whose inbox is full is *paused* (the engine stops
    reading it, so TCP holds its sender back) until a receiver drains it to half."""

    __slots__ = ("readable", "hwm")

    def __init__(self, hwm: int) -> None:
        #: peers with messages in their inbox, in the order they get their next share
        self.readable: collections.deque[Peer] = collections.deque()
        self.hwm = hwm

    def __bool__(self) -> bool:
        return bool(self.readable)

    def deliver(self, peer: Peer, messages: Sequence[EngineMessage], nbytes: int | None = None) -> bool:
        """Queue what ``peer`` sent (``bytes``; tuples of frames, whose bytes ``nbytes``
        then counts, on a socket that takes multipart messages); whether its inbox is now
        full (the engine stops reading it)."""
        if not peer.inbox:
            self.readable.append(peer)
        peer.inbox.extend(messages)
        peer.inbox_count += len(messages)
        peer.inbox_bytes += sum(map(len, messages)) if nbytes is None else nbytes
        return self._full(peer)

    def deliver_run(self, peer: Peer, run: MessageRun) -> bool:
        """As ``deliver``, for a run of single-part messages (one inbox item, ``run.count``
        messages against the high-water mark)."""
        if not peer.inbox:
            self.readable.append(peer)
        peer.inbox.append(run)
        peer.inbox_count += run.count
        peer.inbox_bytes += run.nbytes
        return self._full(peer)

    def _full(self, peer: Peer) -> bool:
        if self.hwm and peer.inbox_count >= self.hwm:
            peer.paused = True
            peer.resume_asked = False
        return peer.paused

    def take(
        self, max_messages: int, max_bytes: int | None, resume: Callable[[Peer], None]
    ) -> list[EngineMessage | MessageRun]:
        """Up to ``max_messages`` messages (and about ``max_bytes``: at least one), a share
        from each peer in turn; ``resume(peer)`` for each paused peer drained to half its
        high-water mark. Runs (``MessageRun``) come out as they are, split where a share or
        ``max_bytes`` ends inside one."""
        out: list[EngineMessage | MessageRun] = []
        readable = self.readable
        size = 0
        count = 0
        limit = max_bytes if max_bytes is not None else 1 << 62
        half = self.hwm // 2
        while readable and count < max_messages and size < limit:
            peer = readable.popleft()
            inbox = peer.inbox
            share = max(1, (max_messages - count) // (len(readable) + 1))
            if share >= peer.inbox_count and size + peer.inbox_bytes <= limit:
                out.extend(inbox)  # the whole queue fits: no per-message work
                inbox.clear()
                size += peer.inbox_bytes
                count += peer.inbox_count
                peer.inbox_bytes = peer.inbox_count = 0
            else:
                got = 0
                while inbox and got < share and size < limit:
                    message = inbox[0]
                    if type(message) is MessageRun:
                        k = min(message.count, share - got, message.fitting(limit - size))
                        if k < message.count:
                            message, inbox[0] = message.split(k)
                        else:
                            inbox.popleft()
                        n = message.nbytes
                    else:
                        inbox.popleft()
                        k = 1
                        n = len(message) if type(message) is not tuple else sum(map(len, message))
                    out.append(message)
                    got += k
                    size += n
                    peer.inbox_bytes -= n
                    peer.inbox_count -= k
                count += got
            if inbox:
                readable.append(peer)
            if peer.paused and not peer.resume_asked and peer.inbox_count <= half:
                peer.resume_asked = True
                resume(peer)
        return out
