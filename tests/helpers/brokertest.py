"""A ``Broker`` run on a thread of the test process, closed when the test ends (a fixture
the broker tests import by name)."""

from __future__ import annotations

import threading

import pytest

from spark_zmq.requestreply import Broker

#: both broker sockets on any free loopback port
ANY = "@tcp://127.0.0.1:*"


@pytest.fixture
def running():
    """``running(**options)`` starts a ``Broker`` whose loop runs on a thread."""
    started = []

    def start(**options) -> Broker:
        broker = Broker(ANY, ANY, **options)
        thread = threading.Thread(target=broker.run, daemon=True, name="broker")
        thread.start()
        started.append((broker, thread))
        return broker

    yield start
    for broker, thread in started:
        broker.close()
        thread.join(10)
