"""`Watch`: lease events in log order, resumed on another node where the serving one fails.

Every node reports the same events at the same log indexes, so a stream cut between two
responses resumes exactly at the last ``watched_to`` + 1, on whichever node answers."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Deque, Dict, Iterator, List, Optional, Protocol, Sequence, Set, Tuple

import grpc

from leasehold._answers import LeaseEvent
from leasehold._backoff import round_pauses
from leasehold._errors import LeaseholdError
from leasehold.v1 import leasehold_pb2 as pb


class Nodes(Protocol):
    """What a watch needs of the client that starts it (a :class:`leasehold.Client`): the nodes'
    stubs and metadata, which node answered last, and how long to keep trying. A protocol, so
    that this module does not import the client's, which imports it."""

    @property
    def endpoints(self) -> List[str]: ...

    @property
    def deadline(self) -> float: ...

    @property
    def _metadata(self) -> Sequence[Tuple[str, str]]: ...

    @property
    def _lease(self) -> Sequence[Any]: ...

    @property
    def _preferred(self) -> int: ...

# Refusals another node would repeat: the watch ends with them. (OUT_OF_RANGE ends it only once
# every node has said it: see `_receive`.)
FINAL = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.FAILED_PRECONDITION,
    }
)


class Watch(Iterator[LeaseEvent]):
    """An iterator of :class:`LeaseEvent`; ``watched_to`` is the log index every event up to
    which was delivered to the buffer. Raises :class:`LeaseholdError` when a node refuses it for
    good, or when no node serves it for the client's deadline."""

    def __init__(self, client: Nodes, select: Dict[str, str], from_index: int) -> None:
        self._client = client
        self._select = select
        self._next_index = from_index
        self.watched_to: Optional[int] = None
        self._node = client._preferred
        self._stream = None
        self._events: Deque[LeaseEvent] = collections.deque()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._failing_since: Optional[float] = None
        # The pauses between this streak's failed opens (see _backoff).
        self._pauses: Iterator[float] = round_pauses()
        self._compacted: Set[int] = set()

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> LeaseEvent:
        while not self._events:
            if self._closed.is_set():
                raise StopIteration
            self._receive()
        return self._events.popleft()

    def _receive(self) -> None:
        try:
            stream = self._open()
            response = next(stream)
        except StopIteration:
            # The node ended the stream (shutting down): resume elsewhere.
            self._lost(LeaseholdError(grpc.StatusCode.UNAVAILABLE, "the node ended the watch"))
            return
        except grpc.RpcError as error:
            if self._closed.is_set():
                return
            failure = LeaseholdError.of(error)
            if failure.code == grpc.StatusCode.OUT_OF_RANGE:
                # One node may keep fewer events than another: given up only once every node
                # has said it no longer keeps the start.
                self._compacted.add(self._node)
                if len(self._compacted) == len(self._client.endpoints):
                    raise failure from error
            elif failure.code in FINAL:
                raise failure from error
            self._lost(failure)
            return
        # A response's events are taken all or none, so a resume never skips one.
        events = [LeaseEvent.of(e) for e in response.events]
        self._failing_since = None
        self._pauses = round_pauses()
        self._compacted.clear()
        self.watched_to = response.watched_to
        self._next_index = response.watched_to + 1
        self._events.extend(events)

    def _open(self):
        with self._lock:
            if self._stream is None:
                if self._closed.is_set():
                    raise StopIteration
                request = pb.WatchRequest(from_index=self._next_index, **self._select)
                stub = self._client._lease[self._node]
                self._stream = stub.Watch(request, metadata=self._client._metadata)
            return self._stream

    def _lost(self, failure: LeaseholdError) -> None:
        """Drops the stream and moves to the next node, giving up after the client's deadline
        without any node serving."""
        with self._lock:
            self._stream = None
            self._node = (self._node + 1) % len(self._client.endpoints)
        now = time.monotonic()
        self._failing_since = self._failing_since or now
        if now - self._failing_since >= self._client.deadline:
            raise LeaseholdError(
                failure.code,
                f"no node served the watch within {self._client.deadline:.3g} s; last: {failure.message}",
                reason=failure.reason,
                metadata=failure.metadata,
            )
        self._closed.wait(next(self._pauses))

    def close(self) -> None:
        """Ends the watch; an iteration blocked in it stops."""
        self._closed.set()
        with self._lock:
            if self._stream is not None:
                self._stream.cancel()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
