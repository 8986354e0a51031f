"""The ``Batch`` stream to one node, which a client's concurrent calls share: each call carries
an id and is answered by it, and the calls queued while a message goes out travel together in
the next, so many threads cost the node one stream instead of a gRPC call each.

Why only concurrent calls: puts over TLS (``cluster/measure-python-batch.py``, two runs) ran
2.75-2.80x as many a second on the stream from one process of 64 threads, 1.14-1.15x from four
of 16, and 0.97-0.98x from processes of one thread, where a unary call has nothing to share.
So a call goes on the stream while another of the client's calls to that node is under way,
and alone as a unary call.

A call on the stream is answered as its unary call would be: the node's refusal carries the
same reason and facts, a stream that ends under a call loses its answer (UNAVAILABLE: a write
may have been applied), and a node that serves no ``Batch`` (an earlier version) gets unary
calls.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
import weakref
from typing import Callable, Dict, List, Optional, Tuple

import grpc

from leasehold._errors import LeaseholdError, StreamFailure
from leasehold.v1 import leasehold_pb2 as pb

# The node's limits on one message of the stream (leasehold-client's limits.rs, checked by the
# tests): calls, bytes.
MAX_BATCH_CALLS = 256
MAX_BATCH_MESSAGE_BYTES = 256 * 1024
# Room for a message's own framing beside a call.
CALL_OVERHEAD_BYTES = 16
# How long a node that served no stream is sent unary calls before it is asked again.
UNSUPPORTED_RETRY = 30.0


def batch_fields() -> Dict[str, str]:
    """Each unary method's field in ``BatchCall``, from the proto itself: ``Put`` (whose
    request is a ``PutRequest``) is ``put``."""
    fields = {}
    for field in pb.BatchCall.DESCRIPTOR.oneofs_by_name["request"].fields:
        request = field.message_type.name if field.message_type is not None else ""
        fields[request[: -len("Request")]] = field.name
    return fields


FIELDS = batch_fields()


class Slot:
    """Where a call's outcome lands: its ``BatchAnswer``, a failure, or neither where it goes
    as a unary call instead."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.answer: Optional[pb.BatchAnswer] = None
        self.failure: Optional[StreamFailure] = None

    def settle(self, answer: Optional[pb.BatchAnswer] = None, failure: Optional[StreamFailure] = None) -> None:
        self.answer, self.failure = answer, failure
        self.done.set()


class Stream:
    """One open stream: the calls waiting for answers, and a thread reading them."""

    def __init__(self, owner: "Batches") -> None:
        self.owner = owner
        # Each call with its size in a message, measured once, when it was queued.
        self.queued: "queue.SimpleQueue[Optional[Tuple[pb.BatchCall, int]]]" = queue.SimpleQueue()
        self.waiting: Dict[int, Slot] = {}
        self.lock = threading.Lock()
        self.ended = False
        self.answers = owner.stub.Batch(self.messages(), metadata=owner.metadata)
        threading.Thread(target=self.read, name="leasehold-batch", daemon=True).start()

    def is_open(self) -> bool:
        return not self.ended

    def send(self, call: pb.BatchCall, size: int, slot: Slot) -> bool:
        """Queues ``call``, ``size`` bytes in a message; False if the stream has ended (nothing
        was queued)."""
        with self.lock:
            if self.ended:
                return False
            self.waiting[call.id] = slot
        self.queued.put((call, size))
        return True

    def forget(self, call_id: int) -> None:
        with self.lock:
            self.waiting.pop(call_id, None)

    def close(self) -> None:
        self.queued.put(None)

    def messages(self):
        """The stream's messages: every call queued when one is sent, within the limits; the
        stream's side ends at ``close``."""
        held: Optional[Tuple[pb.BatchCall, int]] = None
        while True:
            first = held if held is not None else self.queued.get()
            if first is None:
                return
            held, closing = None, False
            calls, size = [first[0]], first[1]
            while len(calls) < MAX_BATCH_CALLS:
                try:
                    queued = self.queued.get_nowait()
                except queue.Empty:
                    break
                if queued is None:
                    closing = True
                    break
                if size + queued[1] > MAX_BATCH_MESSAGE_BYTES:
                    held = queued
                    break
                calls.append(queued[0])
                size += queued[1]
            yield pb.BatchRequest(calls=calls)
            if closing:
                return

    def read(self) -> None:
        """Hands each answer to its call; when the stream ends, however it ends, settles the
        calls left on it."""
        error: Optional[grpc.RpcError] = None
        try:
            for response in self.answers:
                for answer in response.answers:
                    with self.lock:
                        slot = self.waiting.pop(answer.id, None)
                    if slot is not None:
                        slot.settle(answer=answer)
        except grpc.RpcError as e:
            error = e
        finally:
            self.end(error)

    def end(self, error: Optional[grpc.RpcError]) -> None:
        unsupported = error is not None and error.code() == grpc.StatusCode.UNIMPLEMENTED
        if unsupported:
            # Before the stream is seen ended, so that no call opens another in between.
            self.owner.mark_unsupported()
        with self.lock:
            self.ended = True
            left: List[Slot] = list(self.waiting.values())
            self.waiting = {}
        self.close()
        if unsupported:
            # The node handled none of them: they go as unary calls.
            for slot in left:
                slot.settle()
            return
        self.owner.count_lost(len(left))
        failure = lost(error)
        for slot in left:
            slot.settle(failure=failure)


def lost(error: Optional[grpc.RpcError]) -> StreamFailure:
    """The failure of a call whose stream ended before its answer: UNAVAILABLE, lost as a reset
    unary call's is (a write may have been applied, unless no connection was ever made, which
    the stream's own words say), whatever ended the stream."""
    if error is None:
        why = "the node ended it"
    else:
        ended = LeaseholdError.of(error)
        why = f"{ended.code.name}: {ended.message}"
    debug = error.debug_error_string() if error is not None and hasattr(error, "debug_error_string") else ""
    return StreamFailure(
        LeaseholdError(grpc.StatusCode.UNAVAILABLE, f"the batch stream to the node ended before the call was answered ({why})"),
        debug,
    )


class Batches:
    """The stream to one node, opened on the first call that shares it and again after it
    ends; and the count of the client's calls under way to that node."""

    def __init__(self, stub, metadata, shared: bool = True) -> None:
        self.stub = stub
        self.metadata = metadata
        # False: every call a unary call of its own (``Client(batch=False)``).
        self.shared = shared
        self.methods: Dict[str, Callable] = {}
        self.lock = threading.Lock()
        self.stream: Optional[Stream] = None
        self.unsupported_until = 0.0
        self.under_way = 0
        self.ids = itertools.count(1)
        # Calls sent on the stream, and calls lost with a stream that ended under them: for
        # tests and curiosity.
        self.sent = 0
        self.lost = 0
        _ALL.add(self)

    def method(self, name: str) -> Callable:
        """Node's ``name`` call, as the stub's method is called: ``(request, timeout=, metadata=)``."""
        known = self.methods.get(name)
        if known is not None:
            return known
        unary = getattr(self.stub, name)
        field = FIELDS[name]

        def call(request, timeout: float, metadata=()):
            with self.lock:
                self.under_way += 1
                shared = self.shared and self.under_way > 1
            try:
                if shared:
                    slot = self.on_stream(field, request, timeout)
                    if slot is not None:
                        return answered(slot, field)
                return unary(request, timeout=timeout, metadata=metadata)
            finally:
                with self.lock:
                    self.under_way -= 1

        self.methods[name] = call
        return call

    def open(self) -> Optional[Stream]:
        """The open stream, opened if none is; None while the node serves none."""
        with self.lock:
            if self.stream is not None and self.stream.is_open():
                return self.stream
            if time.monotonic() < self.unsupported_until:
                return None
            self.stream = Stream(self)
            return self.stream

    def mark_unsupported(self) -> None:
        with self.lock:
            self.unsupported_until = time.monotonic() + UNSUPPORTED_RETRY

    def count_lost(self, calls: int) -> None:
        with self.lock:
            self.lost += calls

    def on_stream(self, field: str, request, timeout: float) -> Optional[Slot]:
        """``request`` sent on the stream and its settled slot; None where it goes unary: a
        node that serves no stream, or a call too big for a message of its own."""
        call = pb.BatchCall(id=next(self.ids), timeout_ms=max(1, int(timeout * 1000)), **{field: request})
        size = call.ByteSize() + CALL_OVERHEAD_BYTES
        if size > MAX_BATCH_MESSAGE_BYTES:
            return None
        slot = Slot()
        # A stream found ended took nothing: once more on a new one.
        for _ in range(2):
            stream = self.open()
            if stream is None:
                return None
            if stream.send(call, size, slot):
                with self.lock:
                    self.sent += 1
                break
        else:
            return None
        if not slot.done.wait(timeout):
            stream.forget(call.id)
            failure = LeaseholdError(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer on the node's batch stream within {timeout:.3g} s")
            slot.settle(failure=StreamFailure(failure))
        if slot.answer is None and slot.failure is None:
            return None
        return slot

    def close(self) -> None:
        with self.lock:
            if self.stream is not None:
                self.stream.close()

    def after_fork(self) -> None:
        """In a forked child: nothing of the parent's stream, its lock or its count is kept."""
        self.lock = threading.Lock()
        self.stream = None
        self.under_way = 0


# Every Batches of this process, so that a forked child starts each afresh: it has no reader
# thread, so it opens a stream of its own.
_ALL: "weakref.WeakSet[Batches]" = weakref.WeakSet()


def _after_fork() -> None:
    for batches in list(_ALL):
        batches.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def close_all(every: List[Batches]) -> None:
    """Ends a client's streams, so their threads end: at ``close``, or once the client is
    dropped without it."""
    for batches in every:
        batches.close()


def answered(slot: Slot, field: str):
    """The call's answer as its unary call's: the response, or raises its refusal."""
    if slot.failure is not None:
        raise slot.failure
    answer = slot.answer
    which = answer.WhichOneof("answer") if answer is not None else None
    if which == field:
        return getattr(answer, field)
    if which == "error" and answer is not None:
        raise StreamFailure(LeaseholdError.refused(answer.error))
    raise StreamFailure(LeaseholdError(grpc.StatusCode.INTERNAL, "the node answered the call with another call's answer"))
