"""A query's receiver process (option ``receivers=processes``): a relay for one channel.

Started by ``processes`` with ``python -m spark_zmq.relay.child``; its configuration
comes on stdin as one line of JSON (``ChildConfig``: the ingest's ``IngestConfig`` for its
one endpoint, and the key pairs of its listening port), never on the command line, where
other users could read the keys, and never as a pickle of the source's options: the child
is handed what it runs with, checked field by field before it touches anything (a bad one
exits 1 naming the field). The parent keeps stdin open for as long as it lives, so its end
(even by ``kill -9``) reaches the child as end of file at once. It prints the relay's
``ready`` line once its socket is bound, starts receiving when the query has checked its
checkpoint (the ``start`` request), and serves until its parent, the query's reader
process, stops it or dies.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from typing import Any

from ..ingest.config import IngestConfig, IngestConfigError, parse_fields, positive_int, str_list
from ..patterns.curve import Curve
from ..patterns.curve_keys import KeyPair
from .run import serve

__all__ = ["ChildConfig", "main"]


@dataclass(frozen=True)
class ChildConfig:
    """What a receiver process is started with."""

    ingest: IngestConfig
    #: the endpoints its listening (control and fetch) port may bind, the first free one
    listen: list[str]
    #: its listening port's CURVE key pair
    server_keys: KeyPair
    #: the one client key that port accepts: the query's
    client_public: bytes
    #: the query's reader process
    parent: int
    #: ``receiverLingerSeconds``
    linger_s: float

    def to_json(self) -> bytes:
        """One line of JSON (secret keys included: it goes down a pipe, never on a command line)."""
        return (
            json.dumps(
                {
                    "ingest": self.ingest.to_dict(),
                    "listen": self.listen,
                    "server_keys": [
                        self.server_keys.public_key.decode("ascii"),
                        self.server_keys.secret_key.decode("ascii"),
                    ],
                    "client_public": self.client_public.decode("ascii"),
                    "parent": self.parent,
                    "linger_s": self.linger_s,
                }
            ).encode()
            + b"\n"
        )

    @classmethod
    def from_json(cls, line: bytes) -> ChildConfig:
        """The config ``to_json`` wrote, checked (``IngestConfigError`` names the field)."""
        try:
            data = json.loads(line)
        except ValueError as exc:  # UnicodeDecodeError included
            raise IngestConfigError(f"the receiver process's configuration is not JSON: {exc}") from None
        return cls(**parse_fields(data, _FIELDS, "receiver process configuration"))


def _key(value: Any) -> bytes:
    if not isinstance(value, str) or len(value) != 40:
        raise ValueError(f"expected a Z85 key of 40 characters, got {value!r}")
    return value.encode("ascii")


def _key_pair(value: Any) -> KeyPair:
    if not isinstance(value, list) or len(value) != 2:
        raise TypeError("expected [public key, secret key]")
    return KeyPair(_key(value[0]), _key(value[1]))


def _endpoints(value: Any) -> list[str]:
    endpoints = str_list(value)
    if not endpoints:
        raise ValueError("expected at least one endpoint")
    return endpoints


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"expected seconds, got {value!r}")
    return float(value)


_FIELDS = {
    "ingest": IngestConfig.from_dict,
    "listen": _endpoints,
    "server_keys": _key_pair,
    "client_public": _key,
    "parent": positive_int,
    "linger_s": _seconds,
}


def main() -> int:
    try:
        # one line: stdin stays open after it, and its end of file is the parent's end
        config = ChildConfig.from_json(sys.stdin.buffer.readline())
        listen_curve = Curve.server(config.server_keys, frozenset({config.client_public}))
        return serve(
            config.ingest,
            config.listen,
            listen_curve,
            parent_pid=config.parent,
            start_receivers=False,
            linger_s=config.linger_s,
            parent_pipe=sys.stdin.buffer,
        )
    except Exception as exc:  # a bad config, a bind error, a locked spool: the reason, for the parent  # noqa: BLE001
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
