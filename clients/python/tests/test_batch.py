"""Calls made at once share the node's Batch stream, and are answered as unary calls are; a
client shared by many threads keeps every write's request id within its session's answers."""

import concurrent.futures
import threading
import time

import grpc
import pytest

import leasehold
from leasehold.v1 import leasehold_pb2 as pb
from leasehold.v1 import leasehold_pb2_grpc as stubs


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
    with leasehold.Client(cluster.endpoints) as client:
        assert isinstance(client.put("batch/alone", b"v"), leasehold.Written)
        assert sent_on_streams(client) == 0, "a lone call goes as a unary call"

        def work(i):
            written = [client.put(f"batch/{i}/{n}", f"{i}.{n}".encode()) for n in range(20)]
            return written, [client.get(f"batch/{i}/{n}") for n in range(20)]

        for i, (written, read) in enumerate(on_threads(16, work)):
            assert all(isinstance(w, leasehold.Written) for w in written)
            assert read == [f"{i}.{n}".encode() for n in range(20)]
        assert sent_on_streams(client) > 0, "calls under way together went on the stream"

        # A refusal on the stream says what the unary call's status says.
        refusals = on_threads(8, lambda i: refused(lambda: client.acquire(f"batch/bad/{i}", holder="h", ttl=0)))
        assert {(r.code, r.reason, r.metadata.get("field"), r.indeterminate) for r in refusals} == {
            (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_INPUT", "ttl_ms", False)
        }


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

        def held_up(name):
            rpc = real(name)

            def node(i):
                call = rpc(i)

                def maybe_late(request, **options):
                    if getattr(request, "key", "") == "window/late":
                        time.sleep(2)
                    return call(request, **options)

                return maybe_late

            return node

        monkeypatch.setattr(client, "_lease_call", held_up)
        results: list = []
        late = threading.Thread(target=lambda: results.append(client.put("window/late", b"late")))
        late.start()
        time.sleep(0.2)
        for n in range(300):
            assert isinstance(client.put(f"window/{n}", b"v"), leasehold.Written)
        late.join()
        assert len(results) == 1 and isinstance(results[0], leasehold.Written), results
        assert client.get("window/late") == b"late"


def test_calls_on_a_stream_whose_node_dies_are_answered_by_another(fresh_cluster):
    """The stream ends under its calls: each is lost as a reset unary call is, and retried on
    another node under its request id, so every write lands once."""
    endpoints = fresh_cluster.endpoints
    with leasehold.Client(endpoints) as client:
        first = endpoints.index(endpoints[0]) + 1
        started = threading.Event()

        def work(i):
            written = []
            for n in range(40):
                written.append(client.put(f"dies/{i}/{n}", f"{n}".encode()))
                if n == 10:
                    started.set()
            return written

        with concurrent.futures.ThreadPoolExecutor(1) as killer:
            killed = killer.submit(lambda: (started.wait(30), fresh_cluster.kill(first)))
            runs = on_threads(16, work)
            killed.result()
        assert all(isinstance(w, leasehold.Written) for run in runs for w in run)
        assert sent_on_streams(client) > 0
        assert [client.get(f"dies/{i}/39") for i in range(16)] == [b"39"] * 16


class UnaryOnly(stubs.LeaseStoreServicer):
    """A node of an earlier version, as far as a client sees: unary calls, no Batch."""

    def __init__(self):
        self.rows = {}
        self.lock = threading.Lock()

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
        assert all(isinstance(w, leasehold.Written) for run in answers for w in run)
        assert len(servicer.rows) == 80
    finally:
        server.stop(None)
