"""ZMTP 3.1 (RFCs 23/37, with CURVE from RFC 26) in Python, for the socket types pyzmq's
bundled libzmq lacks: SCATTER and GATHER (49/SCATTERGATHER are draft sockets in libzmq).

Layers, each usable and testable on its own:

* ``codec``: frames as bytes, the one parser and the one encoder (no I/O);
* ``wire``: greeting, commands and metadata as bytes (no I/O);
* ``null`` and ``curve``: the security mechanisms as sans-I/O state machines, each
  satisfying ``mechanism.Mechanism`` (what a connection asks of one, libzmq's ``mechanism_t``);
* ``policies``: round-robin and fair queueing over peers (no I/O);
* ``engine``: one I/O thread per socket that accepts, connects, reconnects, handshakes and
  moves frames between TCP/IPC streams and per-peer queues, built from ``connection``
  (one connection's state), ``stream`` (the protocol on it: one object per connection, its greeting and
  handshake in ``handshake``),
  ``owner`` (the narrow interface between that object and its owner), ``sessions``
  (connectors and connections coming and going: the owner, an object the engine holds,
  with its bound endpoints in ``listeners`` and its timers in ``clocks``), ``security`` (each connection's mechanism), ``state`` (what the
  application's calls and the I/O thread share) and ``poller`` (the thread's loop); they
  import one way, with no cycle.

Nothing here imports Spark.
"""
