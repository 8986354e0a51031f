"""The sequences of one client's request ids, handed out so that the store never takes a write
for a forgotten one.

A session keeps the answers of its latest 128 requests (leasehold-core's ``SESSION_ANSWERS``)
and refuses a request older than all of them as forgotten, applied or not. A write held up
between taking its sequence and reaching the store (the GIL, a paused host) could be overtaken
by that many writes of a client shared by many threads. So a sequence is handed out only within
``SEQUENCE_SPAN`` of the oldest still under way; a write past it waits for the oldest to end.
A renewal is a write too: it waits behind a write of the same client held up that long.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Protocol, Set

import grpc

from leasehold._errors import LeaseholdError

# How far apart the sequences of one client's writes under way may be: fewer than the 128
# answers a session keeps, with room to spare (leasehold-client's limits.rs; the tests check
# that they agree).
SEQUENCE_SPAN = 100


class Deadline(Protocol):
    def left(self) -> float: ...


class Sequences:
    """One client's sequences: the next, and those under way."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._next = 1
        self._under_way: Set[int] = set()
        # How many times a sequence waited for room: for tests and curiosity.
        self.waits = 0

    def _room(self) -> bool:
        return not self._under_way or self._next - min(self._under_way) < SEQUENCE_SPAN

    @contextlib.contextmanager
    def take(self, until: Deadline) -> Iterator[int]:
        """The next sequence, under way until the block ends; waits for room up to ``until``
        (past it, a failure that says nothing was sent)."""
        with self._changed:
            if not self._room():
                self.waits += 1
                if not self._changed.wait_for(self._room, timeout=max(until.left(), 0)):
                    raise LeaseholdError(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"the call's deadline passed before it was sent: {len(self._under_way)} writes of this "
                        f"client were under way, the oldest {self._next - min(self._under_way)} requests back",
                    )
            sequence = self._next
            self._next += 1
            self._under_way.add(sequence)
        try:
            yield sequence
        finally:
            with self._changed:
                oldest = min(self._under_way)
                self._under_way.discard(sequence)
                # Only the oldest's end makes room.
                if sequence == oldest:
                    self._changed.notify_all()
