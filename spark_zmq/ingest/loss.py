"""Data loss: offsets a query should read that the spool cannot give it, and what to do.

Offsets go missing in several places: spool recovery finds records it cannot read, a read
task finds a segment torn or of another spool, the driver finds a checkpoint behind the
spool's earliest offset or a batch planned on a recreated spool, a relay reports the
losses of its own spool. All of them are a ``LostRange`` (which offsets of which channel,
and why, in words that name them and the file) handed to one ``LossPolicy``, the option
``failOnDataLoss``: a ``DataLossError`` at once, or skipped, logged and counted. A silent
loss is never an option.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from ..errors import SparkZmqError

__all__ = ["LostRange", "LossPolicy", "DataLossError"]

log = logging.getLogger(__name__)


class DataLossError(SparkZmqError, RuntimeError):
    """Offsets Spark asks for are not (or no longer) in the spool, or are unreadable."""


@dataclass(frozen=True)
class LostRange:
    """Offsets ``[first, end)`` of ``channel`` that cannot be delivered.

    ``describe()`` is ``offsets <first>..<end> of channel <channel>[ in <path>] (<reason>)``,
    unless the words were made elsewhere (``text``: a relay's own description of its
    spool's loss, or a reader's message that says more than a file and a reason); then
    they are used as they are."""

    channel: int
    first: int
    end: int
    reason: str = ""
    #: the spool file the offsets were lost in, when one is known
    path: str | None = None
    #: the whole description, when it is not the standard one
    text: str | None = None
    #: the messages lost, when fewer than the offsets (a foreign spool's, counted in its index)
    messages: int | None = None

    @property
    def count(self) -> int:
        """How many messages are lost (0 for a loss whose extent shows elsewhere)."""
        return self.messages if self.messages is not None else max(0, self.end - self.first)

    def within(self, start: int, end: int) -> LostRange:
        """The part of this loss in ``[start, end)`` (what a batch asks for)."""
        return replace(self, first=max(start, self.first), end=min(end, self.end), messages=None)

    def describe(self) -> str:
        if self.text is not None:
            return self.text
        place = f" in {self.path}" if self.path else ""
        return f"offsets {self.first}..{self.end} of channel {self.channel}{place} ({self.reason})"


class LossPolicy:
    """``failOnDataLoss``: raise a ``DataLossError`` naming the loss, or skip it, log it
    and count it (``lost``: the offsets skipped so far through this policy).

    ``counted`` says whether the skipped offsets are reported somewhere the user sees
    (the query progress's ``dataLoss``, which only the driver's policy feeds); the error
    and the log line say so."""

    __slots__ = ("fail", "counted", "lost")

    def __init__(self, fail: bool, *, counted: bool = False) -> None:
        self.fail = fail
        self.counted = counted
        self.lost = 0

    @classmethod
    def from_option(cls, fail_on_data_loss: bool, *, counted: bool = False) -> LossPolicy:
        return cls(bool(fail_on_data_loss), counted=counted)

    def __call__(self, loss: LostRange) -> None:
        self.lose(loss)

    def lose(self, loss: LostRange) -> None:
        """Fail on ``loss``, or log it, count it and return (the caller then reads on
        past it)."""
        message = loss.describe()
        if self.fail:
            if self.counted:
                raise DataLossError(message + ". Set failOnDataLoss=false to skip them (they are logged and counted).")
            raise DataLossError(message + ". Set failOnDataLoss=false to skip such offsets (they are logged).")
        self.lost += loss.count
        if self.counted:
            log.warning("skipping %d messages (failOnDataLoss=false): %s", loss.count, message)
        else:
            log.warning("skipping unreadable spool data (failOnDataLoss=false): %s", message)

    def __repr__(self) -> str:
        return f"LossPolicy(fail={self.fail}, counted={self.counted}, lost={self.lost})"
