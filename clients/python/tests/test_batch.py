"""Calls made at once share the node's Batch stream, and are answered as unary calls are; a
client shared by many threads keeps every write's request id within its session's answers."""

import concurrent.futures
import math
import re
import threading
import time

import grpc
import pytest

import leasehold
from leasehold.v1 import leasehold_pb2 as pb
from leasehold.v1 import leasehold_pb2_grpc as stubs

from conftest import REPO


def on_threads(count, work):
    """``work(i)`` for i in range(count), each on a thread of its own, all at once: the results."""
    start = threading.Barrier(count)

    def run(i):
        start.wait()
        return work(i)

    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


def sent_on_streams(client) -> int:
    return sum(batches.sent for batches in client._batches)


def test_calls_made_at_once_share_the_stream_and_are_answered_as_unary_calls(cluster):
    with leasehold.Client(cluster.endpoints) as client, leasehold.Client(cluster.endpoints, batch=False) as unary:
        assert isinstance(client.put("batch/alone", b"v"), leasehold.Written)
        assert sent_on_streams(client) == 0, "a lone call goes as a unary call"

        def work(i):
            written = [client.put(f"batch/{i}/{n}", f"{i}.{n}".encode()) for n in range(20)]
            return written, [client.get(f"batch/{i}/{n}") for n in range(20)]

        for i, (written, read) in enumerate(on_threads(16, work)):
            assert all(isinstance(w, leasehold.Written) for w in written)
            assert read == [f"{i}.{n}".encode() for n in range(20)]
        assert sent_on_streams(client) > 0, "calls under way together went on the stream"

        # A refusal on the stream says what the unary call's status says, field for field.
        before = sent_on_streams(client)
        refusals = on_threads(8, lambda i: refused(lambda: client.acquire("batch/bad", holder="h", ttl=0)))
        assert sent_on_streams(client) > before, "some refusals came on the stream"
        alone = refused(lambda: unary.acquire("batch/bad", holder="h", ttl=0))
        assert sent_on_streams(unary) == 0
        fields = lambda e: (type(e), e.code, e.message, e.reason, tuple(sorted(e.metadata.items())), e.indeterminate, e.from_node, e.session_unknown)  # noqa: E731
        assert {fields(r) for r in refusals} == {fields(alone)}, (refusals, alone)
        assert alone.code == grpc.StatusCode.INVALID_ARGUMENT and alone.metadata["field"] == "ttl_ms"


def refused(call) -> leasehold.LeaseholdError:
    with pytest.raises(leasehold.LeaseholdError) as error:
        call()
    return error.value


def test_a_write_held_up_while_the_client_writes_on_keeps_its_request_id(cluster, monkeypatch):
    """A session keeps the answers of its 128 latest requests, and refuses one older than all of
    them as forgotten. A thread whose write is held up between taking its request id and
    sending it (the GIL, a slow host) must not be overtaken by that many writes of the same
    client: they wait for it."""
    with leasehold.Client(cluster.endpoints) as client:
        client.put("window/warm", b"v")
        real = client._lease_call
        others_done = threading.Event()

        def held_up(name):
            rpc = real(name)

            def node(i):
                call = rpc(i)

                def maybe_late(request, **options):
                    if getattr(request, "key", "") == "window/late":
                        # Sent once the other writes wait for it, or (without the window) once
                        # they are all done.
                        deadline = time.monotonic() + 20
                        while client._sequences.waits == 0 and not others_done.is_set():
                            assert time.monotonic() < deadline, "the other writes neither waited nor ended"
                            time.sleep(0.01)
                    return call(request, **options)

                return maybe_late

            return node

        monkeypatch.setattr(client, "_lease_call", held_up)
        results: list = []
        late = threading.Thread(target=lambda: results.append(client.put("window/late", b"late")))
        late.start()
        for n in range(300):
            assert isinstance(client.put(f"window/{n}", b"v"), leasehold.Written)
        others_done.set()
        late.join()
        assert len(results) == 1 and isinstance(results[0], leasehold.Written), results
        assert client.get("window/late") == b"late"
        assert client._sequences.waits > 0, "the writes after the late one waited for it"


def test_the_limits_are_the_nodes_and_the_rust_clients():
    """The stream's limits and the span of sequences, as the Rust crates define them."""
    from leasehold import _batch, _sequences

    def constant(path, name):
        text = (REPO / path).read_text()
        match = re.search(rf"const {name}: \w+ = ([^;]+);", text)
        assert match, f"{name} in {path}"
        return math.prod(int(factor.strip().replace("_", "")) for factor in match.group(1).split("*"))

    assert _batch.MAX_BATCH_CALLS == constant("crates/leasehold-client/src/limits.rs", "MAX_BATCH_CALLS")
    assert _batch.MAX_BATCH_MESSAGE_BYTES == constant("crates/leasehold-proto/src/lane.rs", "MAX_REQUEST_BYTES")
    assert _sequences.SEQUENCE_SPAN == constant("crates/leasehold-client/src/limits.rs", "SEQUENCE_SPAN")
    assert _sequences.SEQUENCE_SPAN < constant("crates/leasehold-core/src/limits.rs", "SESSION_ANSWERS")


def test_calls_on_a_stream_whose_node_dies_are_answered_by_another(fresh_cluster):
    """The stream ends under its calls: each is lost as a reset unary call is, and retried on
    another node under its request id, so every write lands once."""
    with leasehold.Client(fresh_cluster.endpoints) as client:
        started = threading.Event()

        def work(i):
            written = []
            for n in range(40):
                written.append(client.put(f"dies/{i}/{n}", f"{n}".encode()))
                if n == 10:
                    started.set()
            return written

        with concurrent.futures.ThreadPoolExecutor(1) as killer:
            # Node 1: the one the client asks first.
            killed = killer.submit(lambda: (started.wait(30), fresh_cluster.kill(1)))
            runs = on_threads(16, work)
            killed.result()
        assert all(isinstance(w, leasehold.Written) for run in runs for w in run)
        assert sum(batches.lost for batches in client._batches) > 0, "calls were lost with the stream"
        assert [client.get(f"dies/{i}/39") for i in range(16)] == [b"39"] * 16


class UnaryOnly(stubs.LeaseStoreServicer):
    """A node of an earlier version, as far as a client sees: unary calls, no Batch."""

    def __init__(self):
        self.rows = {}
        self.streams = 0
        self.lock = threading.Lock()

    def Batch(self, request_iterator, context):
        with self.lock:
            self.streams += 1
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")

    def Register(self, request, context):
        return pb.RegisterResponse(client_id=7)

    def Put(self, request, context):
        with self.lock:
            self.rows[request.key] = request.value
        return pb.PutResponse(written=pb.Written())


def test_a_node_that_serves_no_stream_gets_unary_calls():
    servicer = UnaryOnly()
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(16))
    stubs.add_LeaseStoreServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with leasehold.Client([f"127.0.0.1:{port}"], deadline=5) as client:
            answers = on_threads(8, lambda i: [client.put(f"old/{i}/{n}", b"v") for n in range(10)])
            assert sent_on_streams(client) > 0, "calls made at once tried the stream"
        assert all(isinstance(w, leasehold.Written) for run in answers for w in run)
        assert len(servicer.rows) == 80
        assert servicer.streams == 1, "the node that refused a stream was not asked for another"
    finally:
        server.stop(None)
