"""The ``Batch`` stream to one node, which a client's concurrent calls share: each call carries
an id and is answered by it, and the calls queued while a message goes out travel together in
the next, so many threads cost the node one stream instead of a gRPC call each.

Why only concurrent calls: puts over TLS (``cluster/measure-python-batch.py``) ran 3.7x faster
on the stream from one process of 64 threads and 1.35x from four of 16, but 0.92x from
processes of one thread, where a unary call has nothing to share. So a call goes on the stream
while another of the client's calls to that node is under way, and alone as a unary call.

A call on the stream is answered as its unary call would be: the node's refusal carries the
same reason and facts, a stream that ends under a call loses its answer (a write may have been
applied), and a node that serves no ``Batch`` (an earlier version) gets unary calls.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
from typing import Callable, Dict, Optional

import grpc

from leasehold._errors import LeaseholdError, StreamFailure
from leasehold.v1 import leasehold_pb2 as pb

# The node's limits on one message of the stream (leasehold-client's limits.rs): calls, bytes.
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
    """Where a call's outcome lands: its ``BatchAnswer``, a failure, or ``None`` where it
    goes as a unary call instead."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.answer: Optional[pb.BatchAnswer] = None
        self.failure: Optional[StreamFailure] = None

    def settle(self, answer: Optional[pb.BatchAnswer] = None, failure: Optional[StreamFailure] = None) -> None:
        self.answer, self.failure = answer, failure
        self.done.set()


class Stream:
    """One open stream: the calls waiting for answers, and a thread reading them."""

    def __init__(self, stub, metadata, unsupported: Callable[[], None]) -> None:
        self.pid = os.getpid()
        self.queued: "queue.SimpleQueue[Optional[pb.BatchCall]]" = queue.SimpleQueue()
        self.waiting: Dict[int, Slot] = {}
        self.lock = threading.Lock()
        self.ended = False
        self.unsupported = unsupported
        self.answers = stub.Batch(self.messages(), metadata=metadata)
        threading.Thread(target=self.read, name="leasehold-batch", daemon=True).start()

    def is_open(self) -> bool:
        # A forked child has no reader thread: it opens a stream of its own.
        return not self.ended and self.pid == os.getpid()

    def send(self, call: pb.BatchCall, slot: Slot) -> bool:
        """Queues ``call``; False if the stream has ended (nothing was queued)."""
        with self.lock:
            if self.ended:
                return False
            self.waiting[call.id] = slot
        self.queued.put(call)
        return True

    def forget(self, call_id: int) -> None:
        with self.lock:
            self.waiting.pop(call_id, None)

    def close(self) -> None:
        self.queued.put(None)

    def messages(self):
        """The stream's messages: every call queued when one is sent, within the limits; the
        stream's side ends at ``close``."""
        held: Optional[pb.BatchCall] = None
        while True:
            first = held if held is not None else self.queued.get()
            held, closing = None, first is None
            if closing:
                return
            calls, size = [first], first.ByteSize() + CALL_OVERHEAD_BYTES
            while len(calls) < MAX_BATCH_CALLS:
                try:
                    call = self.queued.get_nowait()
                except queue.Empty:
                    break
                if call is None:
                    closing = True
                    break
                if size + call.ByteSize() + CALL_OVERHEAD_BYTES > MAX_BATCH_MESSAGE_BYTES:
                    held = call
                    break
                calls.append(call)
                size += call.ByteSize() + CALL_OVERHEAD_BYTES
            yield pb.BatchRequest(calls=calls)
            if closing:
                return

    def read(self) -> None:
        """Hands each answer to its call; when the stream ends, fails the calls left on it."""
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
        with self.lock:
            self.ended = True
            left, self.waiting = self.waiting, {}
        self.close()
        code = error.code() if error is not None else None
        if code == grpc.StatusCode.UNIMPLEMENTED:
            # The node serves no stream and handled none of them: they go as unary calls.
            self.unsupported()
            for slot in left.values():
                slot.settle()
            return
        for slot in left.values():
            slot.settle(failure=lost(error))


def lost(error: Optional[grpc.RpcError]) -> StreamFailure:
    """The failure of a call whose stream ended before its answer: lost, as a reset unary
    call's is (a write may have been applied), unless no connection was ever made."""
    why = "the node ended it" if error is None else LeaseholdError.of(error).message
    debug = error.debug_error_string() if error is not None and hasattr(error, "debug_error_string") else ""
    code = grpc.StatusCode.UNAVAILABLE
    if error is not None and error.code() not in (None, grpc.StatusCode.OK, grpc.StatusCode.CANCELLED):
        code = error.code()
    return StreamFailure(
        LeaseholdError(code, f"the batch stream to the node ended before the call was answered: {why}"), debug
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
        # Calls sent on the stream, for tests and curiosity.
        self.sent = 0

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
                if shared and request.ByteSize() + CALL_OVERHEAD_BYTES <= MAX_BATCH_MESSAGE_BYTES:
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
            self.stream = Stream(self.stub, self.metadata, self.mark_unsupported)
            return self.stream

    def mark_unsupported(self) -> None:
        with self.lock:
            self.unsupported_until = time.monotonic() + UNSUPPORTED_RETRY

    def on_stream(self, field: str, request, timeout: float) -> Optional[Slot]:
        """``request`` sent on the stream and its settled slot; None where it goes unary."""
        slot = Slot()
        call = pb.BatchCall(id=next(self.ids), timeout_ms=max(1, int(timeout * 1000)), **{field: request})
        # A stream found ended took nothing: once more on a new one.
        for _ in range(2):
            stream = self.open()
            if stream is None:
                return None
            if stream.send(call, slot):
                self.sent += 1
                break
        else:
            return None
        if not slot.done.wait(timeout):
            stream.forget(call.id)
            return settled_failure(
                LeaseholdError(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer on the node's batch stream within {timeout:.3g} s")
            )
        if slot.answer is None and slot.failure is None:
            return None
        return slot

    def close(self) -> None:
        with self.lock:
            if self.stream is not None:
                self.stream.close()


def settled_failure(failure: LeaseholdError) -> Slot:
    slot = Slot()
    slot.settle(failure=StreamFailure(failure))
    return slot


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
