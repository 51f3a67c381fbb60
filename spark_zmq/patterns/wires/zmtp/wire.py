"""ZMTP 3.1 on the wire: the greeting, commands and metadata, as bytes (no I/O); frames
are ``codec``'s (its flags, ``frame_header`` and ``ZmtpError`` are re-exported here).

Everything a peer sends is parsed here or in ``codec`` first, so every parser raises
``ZmtpError`` (and nothing else) on any input, and never allocates more than the input's
size.
"""

from __future__ import annotations

import struct

import zmq

from .codec import COMMAND, LONG, MORE, ZmtpError, frame_header

__all__ = [
    "ZmtpError",
    "GREETING_SIZE",
    "MORE",
    "LONG",
    "COMMAND",
    "greeting",
    "parse_greeting",
    "command",
    "parse_command",
    "encode_metadata",
    "parse_metadata",
    "error_command",
    "error_from_command",
    "frame_header",
    "socket_type_of",
]

GREETING_SIZE = 64
_MECHANISMS = (b"NULL", b"PLAIN", b"CURVE")
_U32 = struct.Struct(">I")


def _protocol(text: str, value: int = zmq.PROTOCOL_ERROR_ZMTP_UNSPECIFIED) -> ZmtpError:
    return ZmtpError(text, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, value)


# -- greeting ---------------------------------------------------------------------------------


def greeting(mechanism: bytes, as_server: bool) -> bytes:
    """Our 64-byte greeting: signature, version 3.1, mechanism, as-server, filler."""
    return (
        b"\xff"
        + b"\x00" * 8
        + b"\x7f"
        + b"\x03\x01"
        + mechanism.ljust(20, b"\x00")
        + (b"\x01" if as_server else b"\x00")
        + b"\x00" * 31
    )


def parse_greeting(data: bytes) -> tuple[tuple[int, int], bytes, bool]:
    """``(version, mechanism, as_server)`` of a peer's 64-byte greeting."""
    if len(data) != GREETING_SIZE:
        raise _protocol(f"greeting of {len(data)} bytes, expected {GREETING_SIZE}")
    if data[0] != 0xFF or data[9] & 0x01 != 0x01:
        raise _protocol("not a ZMTP 3 peer (bad greeting signature)")
    version = (data[10], data[11])
    if version[0] < 3:
        raise _protocol(f"ZMTP {version[0]}.{version[1]} peer; this socket speaks ZMTP 3.x only")
    mechanism = data[12:32].rstrip(b"\x00")
    if mechanism not in _MECHANISMS:
        raise _protocol(f"unknown security mechanism {mechanism[:20]!r}", zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
    return version, mechanism, data[32] == 1


# -- commands ---------------------------------------------------------------------------------


def command(name: bytes, data: bytes = b"") -> bytes:
    """A command body: name-size, name, data. Send it in a frame with the COMMAND flag."""
    return bytes((len(name),)) + name + data


def parse_command(body: bytes) -> tuple[bytes, bytes]:
    """``(name, data)`` of a command frame's body."""
    if not body or len(body) < 1 + body[0] or body[0] == 0:
        raise _protocol("malformed command frame", zmq.PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_UNSPECIFIED)
    size = body[0]
    return bytes(body[1 : 1 + size]), bytes(body[1 + size :])


def encode_metadata(properties: dict[str, bytes]) -> bytes:
    """ZMTP metadata: for each property, name-size (1 byte), name, value-size (4 bytes), value."""
    out = bytearray()
    for name, value in properties.items():
        raw = name.encode("ascii")
        out += bytes((len(raw),)) + raw + _U32.pack(len(value)) + value
    return bytes(out)


def parse_metadata(data: bytes) -> dict[str, bytes]:
    """Metadata properties; names are compared case-insensitively, so they come back
    lower-cased (``socket-type``, ``identity``)."""
    properties: dict[str, bytes] = {}
    i, n = 0, len(data)
    while i < n:
        size = data[i]
        if size == 0 or i + 1 + size + 4 > n:
            raise _protocol("malformed metadata in a READY/INITIATE command", zmq.PROTOCOL_ERROR_ZMTP_INVALID_METADATA)
        name = bytes(data[i + 1 : i + 1 + size])
        i += 1 + size
        (length,) = _U32.unpack_from(data, i)
        i += 4
        if i + length > n:
            raise _protocol("metadata value runs past the end of its command", zmq.PROTOCOL_ERROR_ZMTP_INVALID_METADATA)
        try:
            key = name.decode("ascii").lower()
        except UnicodeDecodeError:
            raise _protocol("metadata property name is not ASCII", zmq.PROTOCOL_ERROR_ZMTP_INVALID_METADATA) from None
        properties[key] = bytes(data[i : i + length])
        i += length
    return properties


def error_command(reason: str) -> bytes:
    """An ERROR command body (the reason is at most 255 bytes)."""
    raw = reason.encode("utf-8", "replace")[:255]
    return command(b"ERROR", bytes((len(raw),)) + raw)


def error_from_command(data: bytes, is_server: bool) -> ZmtpError:
    """What a peer's ERROR command (its data part) means, as libzmq reads it: a three-digit
    reason is a ZAP status code (the server refused our credentials), anything else a
    protocol error."""
    reason = bytes(data[1 : 1 + data[0]]) if data and len(data) >= 1 + data[0] else b""
    text = reason.decode("utf-8", "replace")
    if reason in (b"300", b"400", b"500"):  # the ZAP status codes libzmq reports as such
        return ZmtpError(
            f"the peer refused the handshake (ZAP status {text})", zmq.EVENT_HANDSHAKE_FAILED_AUTH, int(text)
        )
    return _protocol(f"the peer sent ERROR {text[:80]!r}", zmq.PROTOCOL_ERROR_ZMTP_UNSPECIFIED)


def socket_type_of(metadata: dict[str, bytes]) -> bytes:
    """The peer's ``Socket-Type`` property (upper-cased), or a ``ZmtpError`` if it has none."""
    value = metadata.get("socket-type")
    if not value:
        raise _protocol("the peer's READY has no Socket-Type", zmq.PROTOCOL_ERROR_ZMTP_INVALID_METADATA)
    return value.upper()
