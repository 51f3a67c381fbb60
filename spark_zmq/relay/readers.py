"""Who reads a relay, by name: each reader's lease and committed position (option ``relayReader``).

Several queries read one relay, each under a name of its own. A name is registered when a
query first claims it; from then on the relay keeps what that reader has not committed:
a segment is freed once every registered reader has committed past it (or the relay's
retention forces it, ``server``). Each name has its own lease (``lease``), so one query
at a time reads under a name, and queries under different names do not wait for each
other.

A name is bound to whoever registered it: under CURVE to the client key of the query that
first claimed it (a query with another key is refused, so one authorised reader cannot
take over, commit past or remove another's name); without CURVE there is no identity to
bind to, so a name belongs to whoever holds its lease. Removing a name needs its lease,
its key, or the relay's operator (``operator``).

The registrations and their positions live in the spool directory (``readers.json``,
replaced whole: a temporary file, fsync, rename), so a relay killed with ``kill -9`` and
restarted keeps its readers and what they committed. Leases are not persisted: a reader
renews its claim every few seconds, so after a restart its next request claims it again.

Pure bookkeeping (no sockets), so the rules are tested without a relay.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import SparkZmqError
from ..ingest.spool_files import write_atomically
from .lease import Lease, Refusal

__all__ = ["Readers", "Reader", "ReaderBoundError", "READERS_FILE", "DEFAULT_READER"]

log = logging.getLogger(__name__)

#: the file in the spool directory that holds the registered readers and their positions
READERS_FILE = "readers.json"
#: the name of a reader whose requests name none (a query without ``relayReader``, or an
#: older connector)
DEFAULT_READER = "default"


@dataclass
class Reader:
    """One registered name: what it has committed per channel, and when it registered."""

    name: str
    committed: list[int]
    #: wall-clock milliseconds since the epoch
    registered_ms: int
    lease: Lease = field(repr=False, default=None)  # type: ignore[assignment]  # always given (Readers)
    #: the CURVE public key (Z85) of the query that registered it, or first claimed it
    #: under CURVE; ``None`` while only claimed without CURVE
    key: str | None = None


class ReaderBoundError(SparkZmqError, ValueError):
    """A request for a reader name made with a CURVE key other than the one it is bound to."""


def _short(key: str) -> str:
    """Enough of a Z85 key to tell keys apart in a message."""
    return key[:8] + "..."


class Readers:
    """The registered readers of a relay with ``channels`` channels, kept in ``spool_dir``.

    ``earliest()`` says where each channel's spool starts now: a name registers there, so
    it holds everything the relay still has until its query commits."""

    def __init__(
        self,
        spool_dir: str,
        channels: int,
        earliest: Callable[[], list[int]],
        *,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spool_dir = spool_dir
        self.channels = channels
        self._earliest = earliest
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._created = clock()
        self.readers: dict[str, Reader] = {}
        for name, committed, registered, key in self._load():
            self.readers[name] = Reader(name, committed, registered, Lease(ttl_s, clock), key)

    # -- the file ---------------------------------------------------------------------------

    @property
    def path(self) -> str:
        return os.path.join(self.spool_dir, READERS_FILE)

    def _load(self) -> list[tuple[str, list[int], int, str | None]]:
        try:
            with open(self.path, "rb") as f:
                kept = json.loads(f.read(16 << 20))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            # Without the file no reader is registered, so commits free nothing until the
            # readers attach again: what is lost is only what retention would have kept.
            log.warning("relay: ignoring %s (%s): no reader is registered until one attaches", self.path, exc)
            return []
        out = []
        readers = kept.get("readers") if isinstance(kept, dict) else None
        for name, state in readers.items() if isinstance(readers, dict) else ():
            committed = state.get("committed") if isinstance(state, dict) else None
            if not (isinstance(committed, list) and all(isinstance(v, int) and v >= 0 for v in committed)):
                log.warning("relay: ignoring reader %r in %s: no committed offsets", name, self.path)
                continue
            # a spool's channels do not change; pad with 0 (holds everything) if they did
            committed = (committed + [0] * self.channels)[: self.channels]
            registered = state.get("registered")
            key = state.get("key")
            out.append(
                (
                    str(name),
                    committed,
                    registered if isinstance(registered, int) else 0,
                    key if isinstance(key, str) and len(key) == 40 else None,
                )
            )
        return out

    def _save(self) -> None:
        """Replace ``readers.json`` whole (caller holds ``_lock``)."""
        body = {
            "readers": {
                r.name: {
                    "committed": r.committed,
                    "registered": r.registered_ms,
                    **({"key": r.key} if r.key is not None else {}),
                }
                for r in self.readers.values()
            }
        }
        write_atomically(self.spool_dir, READERS_FILE, json.dumps(body, sort_keys=True).encode(), fsync=True)

    # -- leases -----------------------------------------------------------------------------

    def claim(self, name: str, session: str, key: str | None = None) -> Refusal | None:
        """Take or renew ``name``'s lease for ``session`` (registering ``name`` at the
        spool's earliest offsets the first time); ``None`` when granted, else why not.
        ``key``: the claimant's CURVE key (``None`` without CURVE); a name is bound to the
        first key that claims it, and ``ReaderBoundError`` refuses any other."""
        with self._lock:
            reader = self.readers.get(name)
            if reader is None:
                reader = Reader(
                    name, list(self._earliest()), int(time.time() * 1000), Lease(self._ttl_s, self._clock), key
                )
                self.readers[name] = reader
                self._save()
                log.info(
                    "relay: reader %r registered at offsets %s%s",
                    name,
                    reader.committed,
                    "" if key is None else f" by CURVE key {key}",
                )
            elif key is not None and reader.key is None:
                reader.key = key  # registered without CURVE: the first key to claim it keeps it
                self._save()
                log.info("relay: reader %r bound to CURVE key %s", name, key)
            elif key is not None and reader.key != key:
                raise ReaderBoundError(
                    f"refused: reader {name!r} of this relay is bound to the CURVE key that registered it "
                    f"({_short(reader.key or '')}), not this query's ({_short(key)}): read under a relayReader name "
                    "of this key's own, or have the relay's operator remove the reader (spark-zmq relay-readers "
                    "--remove)"
                )
            return reader.lease.claim(session)

    def release_lease(self, name: str, session: str) -> None:
        """``session`` gives ``name``'s lease up (a stranger's release changes nothing)."""
        with self._lock:
            reader = self.readers.get(name)
            if reader is not None:
                reader.lease.release(session)

    def held_by(self, name: str, session: str) -> bool:
        """Whether ``session`` holds ``name``'s lease now."""
        with self._lock:
            reader = self.readers.get(name)
            return reader is not None and reader.lease.holds(session)

    def may_fetch(self, session: object, key: str | None = None) -> bool:
        """Whether ``session`` holds some reader's lease, or held it last and nobody has
        claimed it since (``Lease.last_held_by``), and (under CURVE, ``key``) the reader is
        bound to ``key``: a fetch's check."""
        with self._lock:
            return any(
                r.lease.last_held_by(session) and (key is None or r.key is None or r.key == key)
                for r in self.readers.values()
            )

    def held(self, name: str) -> bool:
        with self._lock:
            reader = self.readers.get(name)
            return reader is not None and reader.lease.unheld_for() is None

    def unheld_for(self) -> float | None:
        """``None`` while some reader holds its lease, else the seconds since the last one
        was given up or lapsed (since this relay started, when none ever was)."""
        with self._lock:
            times = [r.lease.unheld_for() for r in self.readers.values()]
        if any(t is None for t in times):
            return None
        return min([t for t in times if t is not None], default=self._clock() - self._created)

    # -- positions --------------------------------------------------------------------------

    def commit(self, name: str, offsets: dict[int, int]) -> None:
        """``name`` has committed ``offsets`` (channel -> offset); persisted before anything
        is freed by them."""
        with self._lock:
            reader = self.readers[name]
            changed = False
            for channel, offset in offsets.items():
                if reader.committed[channel] != offset:
                    reader.committed[channel] = offset
                    changed = True
            if changed:
                self._save()

    def minimum(self) -> list[int] | None:
        """Per channel, the lowest committed offset of the registered readers: what
        commits may free below (``None``: no reader registered, commits free nothing)."""
        with self._lock:
            if not self.readers:
                return None
            return [min(r.committed[c] for r in self.readers.values()) for c in range(self.channels)]

    def behind(self, name: str, channel: int, offset: int) -> tuple[str, int] | None:
        """Another registered reader that has not read ``channel`` up to ``offset``, and where
        it stands (the lowest such): what an ``advance`` by ``name`` to ``offset`` must not
        skip. ``None`` when every other reader is at or past it."""
        with self._lock:
            others = [
                (r.committed[channel], r.name)
                for r in self.readers.values()
                if r.name != name and r.committed[channel] < offset
            ]
        if not others:
            return None
        committed, other = min(others)
        return other, committed

    def remove(
        self, name: str, session: str | None = None, key: str | None = None, operator: bool = False
    ) -> str | None:
        """Unregister ``name``; why not, when it cannot be (unknown, held by another query,
        or asked by someone without the right). The right to: the relay's operator
        (``operator``), the session holding ``name``'s lease, or (under CURVE) the key it is
        bound to."""
        with self._lock:
            reader = self.readers.get(name)
            if reader is None:
                known = ", ".join(repr(n) for n in sorted(self.readers)) or "none"
                return f"this relay has no reader {name!r} (its readers: {known})"
            holder = (
                session is not None
                and reader.lease.holds(session)
                and (key is None or reader.key is None or reader.key == key)
            )
            owner = key is not None and reader.key == key
            if not (operator or holder or owner):
                return (
                    f"removing reader {name!r} needs its lease (the query reading under it)"
                    f"{', its CURVE key' if reader.key is not None else ''} or the relay's operator: run "
                    f"spark-zmq relay-readers --remove {name} --relay-spool-dir DIR with DIR the relay's spool "
                    "directory, on the relay's host"
                )
            if not holder and reader.lease.unheld_for() is None:
                idle = self._clock() - reader.lease.renewed_at
                return (
                    f"reader {name!r} is held by a running query (it renewed its claim {idle:.1f} s ago): stop "
                    f"that query first; a claim nobody renews lapses after {self._ttl_s:.0f} s"
                )
            del self.readers[name]
            self._save()
            log.info("relay: reader %r removed", name)
            return None

    def describe(self) -> list[dict]:
        """Each registered reader, by name: its committed offsets, whether a query holds
        it and how long ago that query renewed its claim."""
        with self._lock:
            now = self._clock()
            out = []
            for name in sorted(self.readers):
                reader = self.readers[name]
                held = reader.lease.unheld_for() is None
                out.append(
                    {
                        "name": name,
                        "committed": list(reader.committed),
                        "registered": reader.registered_ms,
                        "held": held,
                        "idle": now - reader.lease.renewed_at if held else None,
                    }
                )
            return out

    def committed(self, name: str) -> list[int] | None:
        with self._lock:
            reader = self.readers.get(name)
            return None if reader is None else list(reader.committed)
