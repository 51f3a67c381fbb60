"""The ZAP handler of ``patterns.curve``'s server sockets: pyzmq's thread authenticator,
which names the peer of the request it answers and releases its inproc names at once.

Why a module of its own: ``zmq.auth.thread`` imports asyncio and ssl (about 40 ms), and
``patterns.curve`` loads this only when a process's first CURVE server socket registers,
so a receiver, relay or planning process without CURVE never pays for it.
"""

from __future__ import annotations

import itertools
import logging
import os
from typing import Any

import zmq
from zmq.auth.base import Authenticator
from zmq.auth.thread import ThreadAuthenticator

__all__ = ["ZAP_ENDPOINT", "ZapHandler"]

ZAP_ENDPOINT = "inproc://zeromq.zap.01"


class _ReleasingZapEndpoint(Authenticator):
    """Unbinds the ZAP endpoint before pyzmq closes the handler's socket.

    Why: libzmq releases a closed socket's inproc names later, on its reaper thread, so a
    handler started on the same context right after the last one stopped could find
    ``inproc://zeromq.zap.01`` still taken (EADDRINUSE). ``unbind`` releases it at once.
    pyzmq's ``ThreadAuthenticator.stop`` calls this after joining its thread, so the
    socket is ours alone here."""

    def stop(self) -> None:
        if self.zap_socket is not None:
            try:
                self.zap_socket.unbind(ZAP_ENDPOINT)
            except zmq.ZMQError:
                pass  # never bound (start failed): nothing to release
        super().stop()


_pipe_ids = itertools.count(1)


class ZapHandler(ThreadAuthenticator, _ReleasingZapEndpoint):
    """pyzmq's ZAP handler, remembering the peer address of the request it is answering
    (so a refusal can be logged with it).

    Its control pipe gets a name never used before: pyzmq names it after ``id(self)``, and
    a new handler at the address of one just stopped found the old pipe's inproc name not
    yet released by libzmq's reaper thread (EADDRINUSE, seen in the 200-cycle test)."""

    peer_address = "?"

    def __init__(self, context: zmq.Context[Any], log: logging.Logger) -> None:
        super().__init__(context, log=log)
        self.pipe_endpoint = f"inproc://spark-zmq-zap-pipe-{os.getpid()}-{next(_pipe_ids)}"

    async def handle_zap_message(self, msg: list[bytes]) -> None:
        self.peer_address = msg[3].decode("utf-8", "replace") if len(msg) > 3 else "?"
        await super().handle_zap_message(msg)
