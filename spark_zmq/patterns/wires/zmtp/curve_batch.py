"""A batch of single-frame messages sealed in CURVE MESSAGE frames, into one buffer.

Why this exists: sealing one message at a time through PyNaCl's binding costs about 2 us
per 100-byte message here, of which the box itself is under half; the rest is Python
around it (the binding's checks, a new output buffer, slicing it back to ``bytes``, the
nonce and the frame header per message). Here everything but the box is computed over
the whole batch with numpy (frame headers, the MESSAGE name, the short nonces, the
24-byte nonces), the plaintexts are one joined buffer, and the loop left per message is
one call of libsodium's ``crypto_box_easy_afternm``, through the very cffi library PyNaCl
itself calls, writing the box in place in the output. The bytes are the same as
``CurveMechanism.encode`` gives one message at a time (tests check it).

A frame is ``header + "\\x07MESSAGE" + short nonce (8, big-endian) + box``, the box being
MAC (16) + the flags byte (0: one frame, no MORE) + payload, as libzmq sends it; the
header is ZMTP's short (2 bytes) or long (9 bytes) form by the body's size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

try:  # PyNaCl's compiled binding of libsodium: the box without the per-call wrapper
    from nacl._sodium import ffi as _ffi
    from nacl._sodium import lib as _lib

    _seal = _lib.crypto_box_easy_afternm
except (ImportError, AttributeError):  # pragma: no cover - another PyNaCl layout
    _ffi = _lib = _seal = None

__all__ = ["available", "seal_frames"]

_MAC = 16
_OVERHEAD = 8 + 8 + _MAC + 1  # name, short nonce, MAC, flags: a body is payload + 33
_NAME = np.frombuffer(b"\x07MESSAGE", np.uint8)
_NAME_AT = np.arange(8)
_NONCE_AT = np.arange(8, 16)
_LONG_SIZE_AT = np.arange(1, 9)
_MAX_NONCE = (1 << 64) - 1


def available() -> bool:
    """Whether libsodium's box is reachable here (else the caller seals one at a time)."""
    return _seal is not None


def seal_frames(
    payloads: Sequence[bytes], key: bytes, prefix: bytes, first_nonce: int
) -> tuple[bytes, list[int]] | None:
    """The MESSAGE frames of ``payloads`` (``bytes``, one frame each, no MORE) sealed with
    ``key`` (``crypto_box_beforenm``'s) under the nonces ``prefix`` (16 bytes) + short nonces
    ``first_nonce``, ``first_nonce + 1``, ...: ``(frames, ends)``, ``ends[i]`` the end of
    message ``i``'s frame in ``frames``. ``None`` when the batch would pass the last short
    nonce (the caller's one-at-a-time path reports that) or libsodium is not reachable."""
    n = len(payloads)
    if _seal is None or not n or first_nonce + n - 1 > _MAX_NONCE:
        return None
    lengths = np.fromiter(map(len, payloads), np.int64, n)
    body = lengths + _OVERHEAD
    long = body > 255
    head = np.where(long, 9, 2)
    ends = np.cumsum(head + body)
    starts = ends - (head + body)
    out = np.zeros(int(ends[-1]), np.uint8)  # a short header's flags byte is this zero
    short = ~long
    out[starts[short] + 1] = body[short]
    if long.any():
        long_starts = starts[long]
        out[long_starts] = 2  # LONG, no MORE
        out[long_starts[:, None] + _LONG_SIZE_AT] = body[long].astype(">u8").view(np.uint8).reshape(-1, 8)
    body_at = starts + head
    out[body_at[:, None] + _NAME_AT] = _NAME
    shorts = np.arange(first_nonce, first_nonce + n, dtype=np.uint64).astype(">u8").view(np.uint8).reshape(-1, 8)
    out[body_at[:, None] + _NONCE_AT] = shorts
    nonces = np.empty((n, 24), np.uint8)
    nonces[:, :16] = np.frombuffer(prefix, np.uint8)
    nonces[:, 16:] = shorts
    # each plaintext is the flags byte (0) + payload: joined on b"\0", they lie end to end
    plain = b"\x00" + b"\x00".join(payloads)
    plain_sizes = lengths + 1
    out_ptr = _ffi.from_buffer(out)
    plain_ptr = _ffi.cast("unsigned char *", _ffi.from_buffer(plain))
    nonce_ptr = _ffi.from_buffer(nonces)
    seal = _seal
    for box_at, plain_at, size, nonce_at in zip(
        (body_at + 16).tolist(),
        (np.cumsum(plain_sizes) - plain_sizes).tolist(),
        plain_sizes.tolist(),
        range(0, 24 * n, 24),
    ):
        if seal(out_ptr + box_at, plain_ptr + plain_at, size, nonce_ptr + nonce_at, key) != 0:
            raise RuntimeError("crypto_box_easy_afternm failed")  # libsodium: only for a too-long message
    return out.tobytes(), ends.tolist()
