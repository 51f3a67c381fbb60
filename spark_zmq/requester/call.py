"""The executor side of ``spark_zmq.request``: one task's rows through a service.

Each task owns one ``patterns.Client`` (a DEALER per endpoint, requests round-robined over
them): requests carry a random id in their envelope, so replies may come back in any order,
and a reply counts only from the connection its request went out on; the output keeps the input's order because a unit
(see ``codec``) is only emitted once every reply before it is in. At most
``maxInFlight`` requests are outstanding; the input is pulled from Spark only as fast as
replies come back, so a slow service slows the task instead of filling its memory.

A request unanswered for ``timeout`` is sent again with the same id (a late reply to the
first copy is dropped), ``retries`` times; then the task fails with ``ServiceCallError``
naming the endpoints, the request's rows and the wait, and Spark retries the task. Calls
are therefore at least once. A reply that does not fit fails the task (``FAILFAST``) or
gives its rows null reply columns (``PERMISSIVE``).

No Spark here: ``transform`` hands this class to ``mapInArrow``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from ..errors import SparkZmqError, transient
from ..options import RequestOptions
from ..requestreply.client import Client, RequestTimeoutError
from .codec import ReplyMismatch, RowCodec, Unit

__all__ = ["ServiceCall", "ServiceCallError"]


class ServiceCallError(SparkZmqError, RuntimeError):
    """A request went unanswered through every resend, or a reply did not fit (``FAILFAST``)."""


@dataclass
class ServiceCall:
    """``mapInArrow``'s function: input batches in, the same rows with reply columns out."""

    options: RequestOptions
    codec: RowCodec
    #: positions of the input columns the output keeps (``json``'s request column is dropped)
    passthrough: Sequence[int]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from self._joined(self._outputs(batches))

    def _outputs(self, batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[Unit, pa.RecordBatch]]:
        units = self._units(batches)
        waiting: deque[Unit] = deque()
        for unit in units:  # no socket for a task with nothing to send (an empty micro-batch)
            if unit.bodies:
                waiting.append(unit)
                break
            yield unit, self.codec.finish(unit, self.passthrough)
        if not waiting:
            return
        yield from self._exchange(waiting, units)

    @staticmethod
    def _joined(outputs: Iterator[tuple[Unit, pa.RecordBatch]]) -> Iterator[pa.RecordBatch]:
        """One output batch per input batch, as Spark's own ``mapInArrow`` plans give: an
        ``arrow`` input batch is sent as several requests of ``batchRows`` rows, and
        handing Spark each one's rows as a batch of its own cost it (writing to the JVM,
        reading there) more than the call: 1,000-row batches against Spark's 10,000."""
        held: list[pa.RecordBatch] = []
        for unit, out in outputs:
            if not unit.closes_batch:
                held.append(out)
                continue
            if held:
                held.append(out)
                out = pa.concat_batches(held)
                held.clear()
            yield out
        if held:  # (every input batch ends with a unit that closes it: only for safety)
            yield pa.concat_batches(held)

    def _units(self, batches: Iterator[pa.RecordBatch]) -> Iterator[Unit]:
        first_row = 0
        for batch in batches:
            yield from self.codec.units(batch, first_row)
            first_row += batch.num_rows

    def _client(self) -> Client:
        o = self.options
        return Client(
            o.endpoints,
            timeout=o.timeout,
            retries=o.retries,
            hwm=o.hwm,
            max_message_bytes=o.max_message_bytes,
            curve=o.curve,
            heartbeat=o.heartbeat,
            tuning=o.tuning,
        )

    def _exchange(self, waiting: deque, units: Iterator[Unit]) -> Iterator[tuple[Unit, pa.RecordBatch]]:
        # (unit, body index) of every request sent and not yet answered, in send order; the
        # client numbers requests from 1 in that order (its ids on the wire are random), so
        # request k is sent[k - 1 - answered]
        sent: deque[tuple[Unit, int]] = deque()
        answered = 0

        def bodies() -> Iterator[bytes]:
            unit = waiting[0]
            while True:
                for i, body in enumerate(unit.bodies):
                    sent.append((unit, i))
                    yield body
                try:
                    unit = next(units)
                except StopIteration:
                    return
                waiting.append(unit)

        with self._client() as client:
            replies = client.map(bodies(), max_in_flight=self.options.max_in_flight)
            while True:
                try:
                    frames = next(replies)
                except StopIteration:
                    break
                except RequestTimeoutError as exc:
                    index = exc.request_id - 1 - answered
                    raise self._unanswered(exc, sent[index] if 0 <= index < len(sent) else None) from None
                unit, body = sent.popleft()
                answered += 1
                unit.replies.append(self._decode(frames, unit, body))
                while waiting and waiting[0].complete:
                    done = waiting.popleft()
                    yield done, self.codec.finish(done, self.passthrough)
        while waiting:  # units without requests (all-null values) after the last reply
            done = waiting.popleft()
            yield done, self.codec.finish(done, self.passthrough)

    def _decode(self, frames: list[bytes], unit: Unit, body: int) -> object:
        try:
            return self.codec.reply(frames, unit)
        except ReplyMismatch as exc:
            if self.options.mode == "PERMISSIVE":
                return self.codec.misfit(str(exc), unit)
            raise ServiceCallError(
                f"spark_zmq.request: the reply to {unit.describe(body)} of this task (from "
                f"{self._where()}) does not fit: {exc}. mode=PERMISSIVE gives such rows null reply columns"
            ) from None

    def _unanswered(self, exc: RequestTimeoutError, request: tuple[Unit, int] | None) -> ServiceCallError:
        o = self.options
        rows = request[0].describe(request[1]) if request else f"request {exc.request_id}"
        if exc.attempts == 0:  # never sent: no worker connected at all
            return transient(ServiceCallError(f"spark_zmq.request: {exc}"))
        return transient(
            ServiceCallError(
                f"spark_zmq.request: no reply from {self._where()} to the request of {rows} of this task within "
                f"{o.timeout:g} s, sent {exc.attempts} times (timeout {o.timeout:g} s, retries {o.retries}): are the "
                f"workers (or the broker) running and reachable, and is each reply under maxMessageBytes "
                f"({o.max_message_bytes:,} bytes; ZeroMQ drops a connection that sends more)?"
            )
        )

    def _where(self) -> str:
        return ", ".join(str(e) for e in self.options.endpoints)
