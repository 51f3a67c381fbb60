"""CURVE keys: Z85 key checks, certificate files (read, and written by ``keygen``), key pairs.

Keys come from certificate files (the format CZMQ's ``zcert`` and pyzmq's ``zmq.auth``
write) or Z85 text, with errors (``CurveError``) that say which file or option and why.
Secret keys never appear in a ``repr`` or a log line.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass, field

import zmq
import zmq.auth
from zmq.utils import z85

from ..errors import SparkZmqError

__all__ = [
    "ANY_KEY",
    "CurveError",
    "KeyPair",
    "check_authorized",
    "load_authorized_keys",
    "load_public_key",
    "load_secret_certificate",
    "keygen",
]

#: ``curveAuthorizedKeys=*``: accept any client key (encryption without client authentication)
ANY_KEY = "*"

# A certificate is a few hundred bytes; anything much larger is not one.
_MAX_CERTIFICATE_BYTES = 64 << 10
_Z85_KEY_LEN = 40


class CurveError(SparkZmqError, ValueError):
    """A key, certificate or combination of them is unusable; ``option`` names the option."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


def _z85_key(text: bytes, what: str, option: str | None) -> bytes:
    """``text`` checked as a 40-character Z85 CURVE key (returned as bytes)."""
    if len(text) != _Z85_KEY_LEN:
        raise CurveError(f"{what} is not a CURVE key: expected 40 Z85 characters, got {len(text)}", option)
    try:
        if len(z85.decode(text)) != 32:
            raise ValueError
    except (ValueError, KeyError, IndexError, TypeError, UnicodeError, struct.error):
        # struct.error: Z85 characters whose 5-character group is above 2**32 - 1 ('#####')
        raise CurveError(f"{what} is not a CURVE key: it is not valid Z85 text", option) from None
    return bytes(text)


_AUTHORIZED_HELP = (
    "give a set of the clients' Z85 public keys (40 characters each, e.g. "
    f"frozenset({{keys.public_key}})) or {ANY_KEY!r} (ANY_KEY) to accept any client key; "
    "load_authorized_keys(directory) reads the certificates of a directory ('*.key', or CZMQ's)"
)


def _shown(text: bytes) -> str:
    """An entry of ``authorized`` safe to show: never a whole key (one could be a secret key
    put there by mistake), only enough to find it."""
    if len(text) <= 5:
        return repr(text.decode("ascii", "replace"))
    return f"{text[:5].decode('ascii', 'replace')!r}... ({len(text)} characters)"


def check_authorized(value: object) -> str | frozenset[bytes]:
    """``Curve.authorized`` checked: ``ANY_KEY`` itself, or a set of Z85 public keys, returned
    as a frozenset of 40-byte Z85 ``bytes`` (text given as ``str`` is encoded)."""
    option = "curveAuthorizedKeys"
    if isinstance(value, str):
        if value == ANY_KEY:
            return ANY_KEY
        # the text itself is not shown: it could be a key, even a secret one
        raise CurveError(
            f"Curve: authorized is a string other than {ANY_KEY!r} ({len(value)} characters, not "
            f"shown); the only string accepted is {ANY_KEY!r}. "
            f"{_AUTHORIZED_HELP[0].upper()}{_AUTHORIZED_HELP[1:]}",
            option,
        )
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise CurveError(
            f"Curve: authorized is a single {type(value).__name__} value, not a set of keys; {_AUTHORIZED_HELP}", option
        )
    if not isinstance(value, (set, frozenset, list, tuple)):
        raise CurveError(
            f"Curve: authorized must be a set of Z85 public keys or {ANY_KEY!r}, not of type "
            f"{type(value).__name__}; {_AUTHORIZED_HELP}",
            option,
        )
    keys = set()
    for entry in value:
        if isinstance(entry, str):
            text = entry.encode("ascii", "replace")
            if not entry.isascii():  # "?" for each other character could make valid Z85
                raise CurveError(
                    f"Curve: the authorized key {_shown(text)} is not a CURVE key: it is not ASCII (Z85 text)", option
                )
        elif isinstance(entry, (bytes, bytearray, memoryview)):
            text = bytes(entry)
        else:
            raise CurveError(
                f"Curve: authorized holds a value of type {type(entry).__name__}, not a Z85 public key "
                "(40 characters of text)",
                option,
            )
        keys.add(_z85_key(text, f"Curve: the authorized key {_shown(text)}", option))
    return frozenset(keys)


def _read_certificate(path: str, option: str | None) -> tuple[bytes, bytes | None]:
    """``(public, secret or None)`` from a ZPL certificate file (pyzmq's reader)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise CurveError(f"cannot read the certificate file {path!r}: {exc.strerror}", option) from None
    if not stat.S_ISREG(info.st_mode):
        raise CurveError(f"the certificate file {path!r} is not a regular file", option)
    if info.st_size > _MAX_CERTIFICATE_BYTES:
        raise CurveError(
            f"{path!r} is {info.st_size} bytes, too large for a certificate file (a ZeroMQ certificate is a few "
            "hundred bytes: make one with 'spark-zmq keygen NAME')",
            option,
        )
    try:
        public, secret = zmq.auth.load_certificate(path)
    except OSError as exc:
        raise CurveError(f"cannot read the certificate file {path!r}: {exc}", option) from None
    except (ValueError, IndexError):
        raise CurveError(
            f"{path!r} is not a ZeroMQ certificate file (no 'public-key = \"...\"' line); make one with "
            "'spark-zmq keygen NAME', pyzmq's zmq.auth.create_certificates or CZMQ's zcert",
            option,
        ) from None
    public = _z85_key(public, f"the public key in {path!r}", option)
    if secret is not None:
        secret = _z85_key(secret, f"the secret key in {path!r}", option)
    return public, secret


def load_secret_certificate(path: str, option: str | None = "curveCertificate") -> tuple[bytes, bytes]:
    """``(public, secret)`` Z85 keys from a secret certificate file (``NAME.key_secret``)."""
    public, secret = _read_certificate(path, option)
    if secret is None:
        raise CurveError(
            f"{path!r} holds only a public key; this option needs the secret certificate "
            f"(the '.key_secret' file of the pair, e.g. {os.path.basename(path) + '_secret'!r})",
            option,
        )
    if zmq.curve_public(secret) != public:
        raise CurveError(
            f"the secret certificate {path!r} is inconsistent: its public key does not match its secret key", option
        )
    return public, secret


def load_public_key(value: str, option: str | None = "curveServerKey") -> bytes:
    """A public key given as its 40-character Z85 text or as a certificate file."""
    text = value.strip()
    if len(text) == _Z85_KEY_LEN and not os.path.exists(text):
        return _z85_key(text.encode("ascii", "replace"), f"{text!r}", option)
    if not os.path.exists(text):
        raise CurveError(f"{value!r} is neither a 40-character Z85 public key nor an existing certificate file", option)
    return _read_certificate(text, option)[0]


def _certificate_store(directory: str) -> tuple[list[str], list[str]]:
    """The certificate files of a directory: ``(pyzmq's, CZMQ's)``. pyzmq's ``zmq.auth``
    reads ``*.key``; CZMQ's ``zcertstore`` reads every file not ending ``_secret`` (its
    ``zcert_save`` writes ``NAME`` and ``NAME_secret``, usually ``client.cert`` and
    ``client.cert_secret``). Hidden files, ``*_secret`` files and all but regular files are
    neither."""
    pyzmq: list[str] = []
    czmq: list[str] = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.startswith(".") or name.endswith("_secret") or not os.path.isfile(path):
            continue
        (pyzmq if name.endswith(".key") else czmq).append(path)
    return pyzmq, czmq


def load_authorized_keys(value: str, option: str | None = "curveAuthorizedKeys") -> str | frozenset[bytes]:
    """``*`` (any key), or the public keys of the certificates in a directory: every
    ``*.key`` file (pyzmq's ``zmq.auth`` convention; one that is not a certificate is an
    error), and every other file not ending ``_secret`` that is a certificate (CZMQ's
    ``zcertstore`` convention, which skips the files it cannot load, as this does)."""
    text = value.strip()
    if text == ANY_KEY:
        return ANY_KEY
    if not os.path.isdir(text):
        raise CurveError(
            f"{value!r} is not a directory; give a directory of public certificate files ('*.key', or CZMQ's "
            "certificates) or '*' to accept any client key",
            option,
        )
    try:
        pyzmq, czmq = _certificate_store(text)
    except OSError as exc:
        raise CurveError(f"cannot list the certificate directory {value!r}: {exc.strerror}", option) from None
    keys = {_read_certificate(path, option)[0] for path in pyzmq}
    for path in czmq:
        try:
            keys.add(_read_certificate(path, option)[0])
        except CurveError:
            continue  # not a certificate: zcertstore skips it too
    if not keys:
        raise CurveError(
            f"the directory {value!r} holds no public certificate file ('*.key', as 'spark-zmq keygen' and pyzmq "
            "write them, or a CZMQ certificate such as 'client.cert'), so no client could connect; copy the "
            "clients' public certificates there, or give '*' to accept any client key",
            option,
        )
    return frozenset(keys)


def keygen(directory: str, name: str) -> tuple[str, str]:
    """Write a new key pair as ``NAME.key`` (public) and ``NAME.key_secret`` (mode 0600);
    returns both paths. Refuses to overwrite an existing pair."""
    if not name or os.sep in name or name in (".", ".."):
        raise ValueError(f"certificate name {name!r} must be a plain file name, without '{os.sep}'")
    base = os.path.join(directory, name)
    for path in (base + ".key", base + ".key_secret"):
        if os.path.lexists(path):
            raise FileExistsError(f"{path!r} exists; refusing to overwrite a key (delete it first)")
    os.makedirs(directory, exist_ok=True)
    old = os.umask(0o077)
    try:
        public_file, secret_file = zmq.auth.create_certificates(directory, name)
    finally:
        os.umask(old)
    os.chmod(public_file, 0o644)
    os.chmod(secret_file, 0o600)
    return public_file, secret_file


@dataclass(frozen=True)
class KeyPair:
    """A Z85 key pair (the secret is left out of ``repr``)."""

    public_key: bytes
    secret_key: bytes = field(repr=False)

    @classmethod
    def generate(cls) -> KeyPair:
        return cls(*zmq.curve_keypair())

    @classmethod
    def from_certificate(cls, path: str, option: str | None = "curveCertificate") -> KeyPair:
        return cls(*load_secret_certificate(path, option))
