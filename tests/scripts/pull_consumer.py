"""A plain pyzmq PULL consumer in its own process, for the sink's delivery tests.

usage: pull_consumer.py PORT RCVHWM RCVBUF IDLE_S

Binds tcp://127.0.0.1:PORT, prints ``ready``, then writes the first 8 bytes of every
message (the row's number) as one line, straight to the stdout pipe (no buffering in the
process: a line written before a ``kill -9`` is not lost with it). It prints ``IDLE`` each
time no message came for IDLE_S seconds: after a write finished, that is how a test knows
the consumer has read everything its host had received.
"""

import os
import sys

import zmq

port, rcvhwm, rcvbuf, idle_s = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
context = zmq.Context()
pull = context.socket(zmq.PULL)
pull.setsockopt(zmq.RCVHWM, rcvhwm)
pull.setsockopt(zmq.RCVBUF, rcvbuf)
pull.bind(f"tcp://127.0.0.1:{port}")
os.write(1, b"ready\n")
poller = zmq.Poller()
poller.register(pull, zmq.POLLIN)
while True:
    if not poller.poll(idle_s * 1000):
        os.write(1, b"IDLE\n")
        continue
    while True:
        try:
            message = pull.recv(zmq.NOBLOCK)
        except zmq.Again:
            break
        os.write(1, message[:8] + b"\n")
