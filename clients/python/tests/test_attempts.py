"""How the client reads failed attempts, against a stand-in node that answers as nodes do
(the statuses of crates/leasehold-node's error.rs): which writes may have been applied, the
session re-opened, no attempt past a caller's deadline. The Rust client's attempts.rs tests
the same rules against its fake node."""

import itertools
import multiprocessing
import threading
import time
from concurrent import futures

import grpc
import pytest

import leasehold
from leasehold.v1 import leasehold_pb2 as pb
from leasehold.v1 import leasehold_pb2_grpc as stubs


def node_says(code, indeterminate=False, session_unknown=False):
    def answer(request, context):
        trailers = [("leasehold-origin", "node")]
        if indeterminate:
            trailers.append(("leasehold-indeterminate", "true"))
        if session_unknown:
            trailers.append(("leasehold-session", "unknown"))
        context.set_trailing_metadata(trailers)
        context.abort(code, f"the node says {code.name}")
    return answer


def refused(code, reason, message):
    """A node's refusal for ``reason``, as its ErrorInfo carries it."""
    def answer(request, context):
        from google.protobuf import any_pb2
        from google.rpc import error_details_pb2, status_pb2

        info = any_pb2.Any()
        info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="leasehold"))
        details = status_pb2.Status(code=code.value[0], message=message, details=[info])
        context.set_trailing_metadata(
            [("leasehold-origin", "node"), ("grpc-status-details-bin", details.SerializeToString())]
        )
        context.abort(code, message)
    return answer


# What a node the cluster removed answers: UNAVAILABLE, with the REMOVED reason.
removed = refused(grpc.StatusCode.UNAVAILABLE, "REMOVED", "node 3 was removed from the cluster")


def hangs(seconds):
    def answer(request, context):
        time.sleep(seconds)
        return pb.PutResponse(written=pb.Written())
    return answer


def written(request, context):
    return pb.PutResponse(written=pb.Written())


class StandIn(stubs.LeaseStoreServicer):
    """Answers each Put with the next of ``script`` (the last one again once it runs out)."""

    def __init__(self, script):
        self.script = list(script)
        self.registered = 0
        self.puts = []
        self.lock = threading.Lock()

    def Register(self, request, context):
        with self.lock:
            self.registered += 1
            return pb.RegisterResponse(client_id=self.registered)

    def Put(self, request, context):
        with self.lock:
            self.puts.append(request)
            answer = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        return answer(request, context)

    def Get(self, request, context):
        time.sleep(1.0)
        return pb.GetResponse()


class SessionsExhausted(StandIn):
    """A node whose cluster has no room for another session."""

    def Register(self, request, context):
        with self.lock:
            self.registered += 1
        message = 'identity "team-a" has 2 open sessions, the most per identity'
        refused(grpc.StatusCode.RESOURCE_EXHAUSTED, "SESSIONS_EXHAUSTED", message)(request, context)


@pytest.fixture
def stand_in():
    servers = []

    def start(script, kind=StandIn):
        node = kind(script)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        stubs.add_LeaseStoreServicer_to_server(node, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return node, f"127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(0)


def test_a_write_whose_attempt_timed_out_is_indeterminate_though_later_ones_were_refused(stand_in):
    node, endpoint = stand_in([hangs(2.0), node_says(grpc.StatusCode.UNAVAILABLE)])
    with leasehold.Client([endpoint], deadline=0.6) as client:
        with pytest.raises(leasehold.IndeterminateError) as failed:
            client.put("k", b"v")
    assert failed.value.indeterminate and "may have been applied" in failed.value.message
    assert len({p.request_id.sequence for p in node.puts}) == 1, "every attempt under one request id"


def test_a_write_only_refused_by_nodes_is_not_indeterminate(stand_in):
    node, endpoint = stand_in([node_says(grpc.StatusCode.UNAVAILABLE)])
    with leasehold.Client([endpoint], deadline=0.4) as client:
        with pytest.raises(leasehold.LeaseholdError) as failed:
            client.put("k", b"v")
    assert not isinstance(failed.value, leasehold.IndeterminateError)
    assert failed.value.code == grpc.StatusCode.UNAVAILABLE and len(node.puts) > 1


def test_an_attempt_the_node_marks_indeterminate_is_retried_under_its_id_and_settled(stand_in):
    node, endpoint = stand_in([node_says(grpc.StatusCode.UNAVAILABLE, indeterminate=True), written])
    with leasehold.Client([endpoint]) as client:
        assert isinstance(client.put("k", b"v"), leasehold.Written)
    assert [p.request_id for p in node.puts] == [node.puts[0].request_id] * 2


def test_a_refused_session_is_opened_anew_and_the_write_sent_as_new(stand_in):
    unknown = node_says(grpc.StatusCode.ABORTED, indeterminate=True, session_unknown=True)
    node, endpoint = stand_in([unknown, written])
    with leasehold.Client([endpoint]) as client:
        assert isinstance(client.put("k", b"v"), leasehold.Written)
    assert node.registered == 2
    assert [p.request_id.client_id for p in node.puts] == [1, 2]


def test_a_refused_session_after_an_attempt_that_may_have_applied_is_indeterminate(stand_in):
    unknown = node_says(grpc.StatusCode.ABORTED, indeterminate=True, session_unknown=True)
    node, endpoint = stand_in([hangs(2.0), unknown])
    with leasehold.Client([endpoint], deadline=0.6) as client:
        with pytest.raises(leasehold.IndeterminateError):
            client.put("k", b"v")
    assert node.registered == 1, "not sent again as new: the first attempt may have applied it"


def test_a_read_is_never_indeterminate(stand_in):
    _, endpoint = stand_in([written])
    with leasehold.Client([endpoint], deadline=0.4) as client:
        with pytest.raises(leasehold.LeaseholdError) as failed:
            client.get("k")
    assert not failed.value.indeterminate


def test_no_attempt_outlives_a_callers_deadline(stand_in):
    _, endpoint = stand_in([written, hangs(2.0)])
    with leasehold.Client([endpoint]) as client:
        client.put("warm", b"up", deadline=3.0)  # the session is open
        started = time.monotonic()
        with pytest.raises(leasehold.IndeterminateError):
            client.put("k", b"v", deadline=0.3)
        assert time.monotonic() - started < 0.3 + 0.15


def _holder_name_in_child(client_endpoint, names):
    client = leasehold.Client([client_endpoint])
    names.put(leasehold.Holder(client, "l", holder="w").holder)


def test_a_forked_child_names_its_holders_apart_from_its_parents():
    client = leasehold.Client(["127.0.0.1:1"])
    parent = leasehold.Holder(client, "l", holder="w").holder
    names = multiprocessing.get_context("fork").Queue()
    child = multiprocessing.get_context("fork").Process(target=_holder_name_in_child, args=("127.0.0.1:1", names))
    child.start()
    child_name = names.get(timeout=10)
    child.join(10)
    assert parent.split("~")[0] == child_name.split("~")[0] == "w"
    assert parent.split("~")[1].split(".")[0] != child_name.split("~")[1].split(".")[0]


def test_a_node_that_says_it_was_removed_is_asked_no_more(stand_in):
    gone, gone_at = stand_in([removed])
    # The other node is unavailable once: the call's next round skips the removed node.
    node, endpoint = stand_in([node_says(grpc.StatusCode.UNAVAILABLE), written])
    with leasehold.Client([gone_at, endpoint], deadline=5.0) as client:
        client.put("k", b"v")
    assert len(node.puts) == 2 and len(gone.puts) == 1, (len(gone.puts), len(node.puts))
    # Alone, it ends the call at once: no other node is left to ask.
    started = time.monotonic()
    with leasehold.Client([gone_at], deadline=5.0) as client:
        with pytest.raises(leasehold.LeaseholdError) as failed:
            client.put("k", b"v")
    assert time.monotonic() - started < 1.0, failed.value
    assert "was removed from its cluster" in failed.value.message, failed.value


def put_refused_at_once(endpoint):
    """The error of a put through ``endpoint``, asserted to be RESOURCE_EXHAUSTED within 1 s."""
    started = time.monotonic()
    with leasehold.Client([endpoint], deadline=5.0) as client:
        with pytest.raises(leasehold.LeaseholdError) as failed:
            client.put("k", b"v")
    assert time.monotonic() - started < 1.0, failed.value
    assert failed.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED, failed.value
    return failed.value


def test_a_registration_past_the_session_caps_fails_at_once_without_a_retry(stand_in):
    node, endpoint = stand_in([written], kind=SessionsExhausted)
    failed = put_refused_at_once(endpoint)
    assert "2 open sessions" in failed.message and node.registered == 1, node.registered


def test_a_put_past_the_rows_cap_fails_at_once_without_a_retry(stand_in):
    message = 'identity "team-a" has 2 rows it created, the most per identity'
    node, endpoint = stand_in([refused(grpc.StatusCode.RESOURCE_EXHAUSTED, "ROWS_EXHAUSTED", message)])
    failed = put_refused_at_once(endpoint)
    assert "2 rows it created" in failed.message and len(node.puts) == 1, node.puts


def test_round_pauses_double_to_a_ceiling_each_with_its_own_jitter():
    from leasehold._backoff import round_pauses

    floors = [0.025, 0.05, 0.1, 0.2, 0.2, 0.2]
    drawn = [list(itertools.islice(round_pauses(), 6)) for _ in range(2)]
    for pauses in drawn:
        for pause, floor in zip(pauses, floors):
            assert floor <= pause < 2 * floor, pauses
    assert drawn[0] != drawn[1], "two calls drew the same pauses"
