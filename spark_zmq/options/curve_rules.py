"""The CURVE options together: which combinations make a client or a server, and the
``Curve`` they describe.

Why apart: the three option classes, the option parser and the command line's
``--curve-*`` flags (``spark_zmq.cli``) apply the same rules and build the same ``Curve``.
"""

from __future__ import annotations

from typing import Any

from ..patterns.curve import Curve
from ..patterns.curve_keys import KeyPair
from .spec import OptionError

__all__ = ["check_curve", "curve_of"]


def check_curve(parsed: dict[str, Any]) -> None:
    """The CURVE options make sense together: a client needs its certificate and the
    server's key; a server needs its certificate and the keys it accepts."""
    certificate, server_key, authorized = (
        parsed["curve_certificate"],
        parsed["curve_server_key"],
        parsed["curve_authorized_keys"],
    )
    if certificate is None:
        if server_key is not None:
            raise OptionError(
                "option 'curveServerKey' needs 'curveCertificate' (this side's secret certificate file): a CURVE "
                "client has a key pair of its own; make one with 'spark-zmq keygen NAME'",
                "curveCertificate",
            )
        if authorized is not None:
            raise OptionError(
                "option 'curveAuthorizedKeys' needs 'curveCertificate' (this side's secret certificate file): only "
                "a CURVE server authorizes clients",
                "curveCertificate",
            )
        return
    if server_key is not None and authorized is not None:
        raise OptionError(
            "options 'curveServerKey' and 'curveAuthorizedKeys' exclude each other: with 'curveServerKey' this "
            "side is a CURVE client (the server authorizes it); without it, a CURVE server that accepts "
            "'curveAuthorizedKeys'",
            "curveAuthorizedKeys",
        )
    if server_key is None and authorized is None:
        raise OptionError(
            "option 'curveCertificate' without 'curveServerKey' makes this side a CURVE server, which needs "
            "'curveAuthorizedKeys': a directory of the clients' public certificate files ('*.key', or CZMQ's certificates), or '*' to "
            "accept any client key (encryption without client authentication)",
            "curveAuthorizedKeys",
        )


def curve_of(certificate: KeyPair | None, server_key: bytes | None, authorized: Any) -> Curve | None:
    """The ``Curve`` of checked CURVE options: a client with a server key, else a server."""
    if certificate is None:
        return None
    if server_key is not None:
        return Curve.client(certificate, server_key)
    return Curve.server(certificate, authorized)
