"""``SparkZmqError.retriable``: whether the same call made again later can succeed, said by
every error the package raises, and by the raising site where one class covers both kinds.
Real sockets and spools, no Spark."""

from __future__ import annotations

import importlib
import os
import pkgutil
import re

import pytest
import zmq
from zmqtest import free_ports

import spark_zmq
from spark_zmq import errors
from spark_zmq.errors import SparkZmqError
from spark_zmq.ingest import fetch
from spark_zmq.ingest.fetch import FetchAccess, FetchError, SpoolServer, fetch_range
from spark_zmq.ingest.loss import DataLossError
from spark_zmq.ingest.receiver import messages_to_batch
from spark_zmq.ingest.spool import Spool
from spark_zmq.ingest.spool_files import SpoolLockedError
from spark_zmq.ingest.spool_layout import channel_dir, list_segments
from spark_zmq.patterns import Push
from spark_zmq.patterns.curve_keys import KeyPair
from spark_zmq.patterns.deadlines import SendTimeoutError

pytestmark = pytest.mark.timeout(60)


def _every_error_class() -> set[type[SparkZmqError]]:
    for module in pkgutil.walk_packages(spark_zmq.__path__, "spark_zmq."):
        if module.name.endswith("__main__"):
            continue
        importlib.import_module(module.name)
    found, todo = set(), [SparkZmqError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("spark_zmq.") and sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def test_the_classes_retriable_by_default_are_the_ones_the_errors_module_lists():
    classes = _every_error_class()
    assert all(isinstance(cls.retriable, bool) for cls in classes)
    documented = errors.__doc__.split("Retriable by class")[1].split("; and,")[0]
    listed = set(re.findall(r"``(\w+)``", documented)) - {"SparkZmqError.retriable"}
    assert {cls.__name__ for cls in classes if cls.retriable} == listed


@pytest.fixture
def spool(tmp_path):
    spool = Spool(str(tmp_path / "spool"), 1, max_bytes=1 << 30)
    spool.channels[0].append(messages_to_batch([b"m-%d" % i for i in range(10)], None, "raw", 0))
    yield spool
    spool.close()


@pytest.fixture
def server(spool):
    server = SpoolServer(
        spool.spool_dir,
        host="127.0.0.1",
        spool_id=spool.spool_id,
        locate=lambda channel, offset: spool.channels[0].locate(offset),
    )
    yield server
    server.close()


def test_a_fetch_nobody_answers_is_retriable_and_one_refused_is_not(spool, server, monkeypatch):
    monkeypatch.setattr(fetch, "CONNECT_S", 1.0)
    (closed_port,) = free_ports(1)
    access = server.access
    away = FetchAccess(f"tcp://127.0.0.1:{closed_port}", access.server_key, access.client_public, access.client_secret)
    with pytest.raises(FetchError) as unreached:
        list(fetch_range(away, 0, 0, 10, spool_id=spool.spool_id, timeout=5))
    assert unreached.value.retriable, str(unreached.value)

    stranger = KeyPair.generate()  # a client key the server does not know: the handshake is refused
    refused = FetchAccess(access.endpoint, access.server_key, stranger.public_key, stranger.secret_key)
    with pytest.raises(FetchError, match="refused") as failure:
        list(fetch_range(refused, 0, 0, 10, spool_id=spool.spool_id, timeout=5))
    assert not failure.value.retriable, str(failure.value)


def test_lost_offsets_are_not_retriable(spool, server):
    directory = channel_dir(spool.spool_dir, 0)
    for _, _, name in list_segments(directory):
        os.unlink(os.path.join(directory, name))
    with pytest.raises(DataLossError) as lost:
        list(fetch_range(server.access, 0, 0, 10, spool_id=spool.spool_id, timeout=5))
    assert not lost.value.retriable


def test_a_send_with_no_room_is_retriable_and_goes_through_once_a_peer_connects(tmp_path):
    endpoint = f"ipc://{tmp_path}/push"
    push = Push("@" + endpoint, hwm=1, linger=0)
    try:
        with pytest.raises(SendTimeoutError) as full:  # no peer: no queue to take a message
            push.send_many([b"one", b"two"], timeout=0.2)
        assert full.value.retriable and full.value.sent == 0
        pull = zmq.Context.instance().socket(zmq.PULL)
        pull.linger = 0
        pull.connect(endpoint)
        try:
            push.send_many([b"one", b"two"], timeout=10)  # the same call, made again
            assert pull.poll(10_000) and pull.recv() == b"one"
            assert pull.poll(10_000) and pull.recv() == b"two"
        finally:
            pull.close()
    finally:
        push.close()


def test_a_spool_another_owner_holds_is_retriable(spool, monkeypatch):
    monkeypatch.setattr(Spool, "lock_wait_s", 0.2)
    with pytest.raises(SpoolLockedError) as locked:
        Spool(spool.spool_dir, 1, max_bytes=1 << 30)
    assert locked.value.retriable
