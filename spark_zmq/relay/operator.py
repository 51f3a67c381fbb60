"""The relay's operator: whoever can read the relay's spool directory on its host.

Some acts on a relay belong to nobody who merely reaches ``--listen``: removing a reader
that another query registered (``spark-zmq relay-readers --remove``) frees what that
reader has not read. Such a request carries the operator token, a random secret the relay
writes into its spool directory (created ``0700``) each time it starts, readable only by
the account the relay runs as: holding it proves the same access to the relay's host and
files as stopping the relay would, under CURVE or without it.
"""

from __future__ import annotations

import hmac
import os
import secrets

from ..ingest.spool_files import read_small_private, write_atomically

__all__ = ["OPERATOR_TOKEN_FILE", "create_token", "read_token", "token_matches", "token_problem"]

#: the file in the spool directory that holds the operator token (32 hex digits)
OPERATOR_TOKEN_FILE = "operator.token"


def create_token(spool_dir: str) -> str:
    """A new token, written to ``spool_dir`` (a private file, replaced whole)."""
    token = secrets.token_hex(16)
    write_atomically(spool_dir, OPERATOR_TOKEN_FILE, token.encode(), fsync=False)
    return token


def read_token(spool_dir: str) -> str:
    """The token of the relay whose spool directory is ``spool_dir``; ``ValueError`` naming
    the file and why when there is none to read."""
    path = os.path.join(spool_dir, OPERATOR_TOKEN_FILE)
    try:
        token = read_small_private(path)
    except OSError as exc:
        raise ValueError(
            f"cannot read the relay's operator token {path} ({exc.strerror or exc}): give the "
            "spool directory of a running relay (its --spool-dir), as the account it runs as"
        ) from None
    if token_problem(token) is not None:
        raise ValueError(f"{path} holds no operator token (32 hex digits): is the relay running?")
    return token


def token_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a token's text, ``None`` when nothing is."""
    if isinstance(value, str) and len(value) == 32 and all(c in "0123456789abcdef" for c in value):
        return None
    return "the operator token must be 32 hexadecimal digits"


def token_matches(expected: str, given: str | None) -> bool:
    """Whether ``given`` is the token (compared in constant time)."""
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())
