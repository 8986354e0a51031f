"""The client against a real cluster: the seed scenario, typed answers, ErrorInfo, request ids."""

import asyncio
import subprocess
import sys
import pathlib

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

import leasehold
import leasehold.aio
from conftest import LocalCluster
from leasehold.v1 import leasehold_pb2 as pb
from leasehold.v1 import leasehold_pb2_grpc as stubs

HERE = pathlib.Path(__file__).resolve().parent


def test_the_stubs_match_the_proto():
    check = subprocess.run([sys.executable, str(HERE.parent / "gen_stubs.py"), "--check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_the_package_type_checks():
    """py.typed promises type hints: mypy holds the package to them."""
    check = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(HERE.parent / "pyproject.toml"), "-p", "leasehold"],
        capture_output=True, text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_seed_scenario_a_frozen_holders_late_write_is_refused(manual_cluster):
    """../shared/seeds/000: A holds, freezes past its expiry, B takes over and writes; A's late
    write with its old token is refused and B's value stands."""
    with leasehold.Client(manual_cluster.endpoints) as client:
        a = client.acquire("seed/lease", holder="a", ttl=10)
        assert isinstance(a, leasehold.Granted) and not a.renewed
        assert isinstance(client.put("seed/file", b"a1", lease="seed/lease", token=a.token), leasehold.Written)
        held = client.acquire("seed/lease", holder="b", ttl=10)
        assert isinstance(held, leasehold.HeldBy) and held.holder == "a" and held.token == a.token

        client.advance(11)  # A is frozen past its TTL
        b = client.acquire("seed/lease", holder="b", ttl=10)
        assert isinstance(b, leasehold.Granted) and b.token > a.token
        assert isinstance(client.put("seed/file", b"b1", lease="seed/lease", token=b.token), leasehold.Written)

        late = client.put("seed/file", b"a2", lease="seed/lease", token=a.token)
        assert late == leasehold.StaleToken(b.token, late.applied)
        assert client.get("seed/file") == b"b1"
        assert isinstance(client.check_token("seed/lease", a.token), leasehold.TokenStale)
        current = client.check_token("seed/lease", b.token)
        assert isinstance(current, leasehold.TokenCurrent) and current.holder == "b"
        state = client.get_lease("seed/lease")
        assert (state.holder, state.token, state.fence) == ("b", b.token, b.token)
        assert isinstance(client.release("seed/lease", holder="a", token=a.token), leasehold.HeldBy)
        released = client.release("seed/lease", holder="b", token=b.token)
        assert isinstance(released, leasehold.Released) and released.token == b.token
        assert client.get_lease("seed/lease").holder == ""


def test_every_answer_is_typed(client):
    assert client.get("typed/never") is None
    assert isinstance(client.delete("typed/never"), leasehold.Deleted)
    assert isinstance(client.put("typed/row", b"\x00\xff"), leasehold.Written)
    assert client.get("typed/row") == b"\x00\xff"
    deleted = client.delete("typed/row")
    assert isinstance(deleted, leasehold.Deleted) and deleted.existed
    granted = client.acquire("typed/lease", holder="h", ttl=5)
    assert isinstance(client.release("typed/lease", holder="h", token=granted.token + 1), leasehold.WrongToken)
    assert isinstance(client.release("typed/lease", holder="h", token=granted.token), leasehold.Released)
    assert isinstance(client.release("typed/lease", holder="h", token=granted.token), leasehold.NotHeld)
    nodes = client.status()
    assert sorted(n.id for n in nodes) == [1, 2, 3]
    assert sum(n.role == pb.ROLE_LEADER for n in nodes) == 1


def test_leases_and_keys_list_by_prefix_across_pages(client):
    for i in range(1_005):
        client.acquire(f"list/{i:04}", holder="w", ttl=60)
    client.put("list/0001", b"one")
    client.put("listx", b"no")
    leases = list(client.list_leases("list/"))
    assert [name for name, _ in leases] == [f"list/{i:04}" for i in range(1_005)]
    name, state = leases[3]
    assert (name, state.holder, state.token) == ("list/0003", "w", 1)
    assert [name for name, _ in client.list_leases("list/", limit=2)] == ["list/0000", "list/0001"]
    assert list(client.list_keys("list")) == [("list/0001", b"one"), ("listx", b"no")]


def test_the_asyncio_client_answers_as_the_blocking_one(cluster):
    async def main():
        async with leasehold.aio.Client(cluster.endpoints) as client:
            granted = await client.acquire("aio/a", holder="w", ttl=30)
            assert isinstance(granted, leasehold.Granted)
            assert isinstance(await client.put("aio/a", b"v", lease="aio/a", token=granted.token), leasehold.Written)
            assert await client.get("aio/a") == b"v"
            assert (await client.get_lease("aio/a")).holder == "w"
            names = [name async for name, _ in client.list_leases("aio/")]
            keys = [key async for key, _ in client.list_keys("aio/")]
            assert (names, keys) == (["aio/a"], ["aio/a"])
            released = await client.release("aio/a", holder="w", token=granted.token)
            assert isinstance(released, leasehold.Released)
            async with leasehold.aio.AsyncHolder(client.sync, "aio/b", holder="w", ttl=5) as held:
                assert held.is_safe()

    asyncio.run(main())


def test_one_renewal_renews_the_leases_held_and_refuses_the_rest_each_typed(client):
    a = client.acquire("renew/a", holder="h", ttl=5)
    client.acquire("renew/b", holder="other", ttl=5)
    renewal = lambda lease, token: leasehold.Renewal(lease, "h", token, 20)
    answers = client.renew([renewal("renew/a", a.token), renewal("renew/b", 1), renewal("renew/c", 1)])
    renewed, held_by, not_held = answers
    assert isinstance(renewed, leasehold.Renewed)
    # The store holds every grant its grant margin (150 ms) longer than asked.
    assert renewed.expires_at_ms == renewed.applied.store_time_ms + 20_000 + 150
    assert isinstance(held_by, leasehold.HeldBy) and held_by.holder == "other"
    assert isinstance(not_held, leasehold.NotHeld)
    assert client.get_lease("renew/c").token == 0, "a renewal never grants"
    with pytest.raises(leasehold.LeaseholdError) as refused:
        client.renew([renewal("renew/a", a.token)] * 2)
    assert refused.value.metadata["field"] == "leases" and "named twice" in refused.value.message


def test_bad_input_is_a_clear_error_that_names_the_field(client):
    with pytest.raises(leasehold.LeaseholdError) as refused:
        client.acquire("bad/lease", holder="h", ttl=0)
    e = refused.value
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.reason == "INVALID_INPUT" and e.metadata["field"] == "ttl_ms"
    assert "ttl_ms" in e.message and not e.indeterminate
    assert not isinstance(e, leasehold.IndeterminateError)
    assert client.get_lease("bad/lease").token == 0


def test_a_plain_grpc_client_reads_the_error_info(cluster):
    """Any gRPC client, without this package's helpers: google.rpc.Status in the trailers."""
    with grpc.insecure_channel(cluster.endpoints[0]) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            stubs.LeaseStoreStub(channel).Acquire(pb.AcquireRequest(lease="x", holder="h", ttl_ms=0), timeout=10)
    trailers = dict(refused.value.trailing_metadata())
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert (info.domain, info.reason) == ("leasehold", "INVALID_INPUT")
    assert dict(info.metadata) == {"field": "ttl_ms", "indeterminate": "false"}


def test_one_request_id_retried_on_another_node_is_applied_once(cluster):
    """A retry under the same request id gets the first answer, even after the state moved on."""
    channels = [grpc.insecure_channel(e) for e in cluster.endpoints]
    try:
        node = [stubs.LeaseStoreStub(ch) for ch in channels]
        session = node[0].Register(pb.RegisterRequest(), timeout=10).client_id
        first_id = pb.RequestId(client_id=session, sequence=1)
        acquire = pb.AcquireRequest(lease="once/lease", holder="h", ttl_ms=60_000, request_id=first_id)
        first = node[0].Acquire(acquire, timeout=10)
        assert first.WhichOneof("outcome") == "granted"
        release = pb.ReleaseRequest(lease="once/lease", holder="h", token=first.granted.token, request_id=pb.RequestId(client_id=session, sequence=2))
        assert node[1].Release(release, timeout=10).WhichOneof("outcome") == "released"

        retry = node[2].Acquire(acquire, timeout=10)
        # The first answer (the grant, token and expiry as they were), not a new grant; its
        # `applied` says where the retry was answered.
        assert retry.granted == first.granted and retry.applied.log_index > first.applied.log_index
        lease = node[2].GetLease(pb.GetLeaseRequest(lease="once/lease"), timeout=10)
        assert (lease.holder, lease.token) == ("", first.granted.token)
        with pytest.raises(grpc.RpcError) as reused:
            node[1].Put(pb.PutRequest(key="once/k", value=b"v", request_id=first_id), timeout=10)
        assert reused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        for ch in channels:
            ch.close()


def test_a_call_no_node_answers_says_so_and_a_write_sent_nowhere_is_not_indeterminate():
    with leasehold.Client(["127.0.0.1:1"], deadline=0.5) as nowhere:
        with pytest.raises(leasehold.LeaseholdError) as failed:
            nowhere.put("k", b"v")
    assert failed.value.code == grpc.StatusCode.UNAVAILABLE
    assert "no node of 127.0.0.1:1 answered within" in failed.value.message
    assert not failed.value.indeterminate


def test_a_client_that_called_before_its_nodes_listen_reaches_them_once_they_do(tmp_path):
    """A service started beside its cluster (one boot, one deploy) calls before the nodes listen.
    Under grpcio 1.75.1 to 1.78.2 such a client could fail to connect for 20 s and more after the
    nodes served ("Timeout occurred: FD Shutdown"); from 1.80.0 it reaches them within a few
    seconds (an election's), which is why the package needs grpcio>=1.80. Three clusters, as the
    failure did not come every time."""
    for attempt in range(3):
        root = tmp_path / f"cluster-{attempt}"
        root.mkdir()
        cluster = LocalCluster(root)
        try:
            with leasehold.Client(cluster.endpoints, deadline=0.5) as client:
                with pytest.raises(leasehold.LeaseholdError):
                    client.status()
                for i in cluster.ids:
                    cluster.start(i)
                cluster.leader(client, within=10.0)
        finally:
            cluster.stop()


def test_watch_reports_events_in_log_order_and_resumes_on_another_node(fresh_cluster):
    endpoints = fresh_cluster.endpoints
    with leasehold.Client(endpoints) as client:
        first = client.acquire("w/lease", holder="h", ttl=30)
        with client.watch(lease="w/lease", from_index=first.applied.log_index) as watch:
            granted = next(watch)
            assert (granted.kind, granted.token, granted.log_index) == (leasehold.EventKind.GRANTED, first.token, first.applied.log_index)
            # Kill the node serving the watch: the next event comes from another.
            serving = watch._node + 1
            fresh_cluster.kill(serving)
            released = client.release("w/lease", holder="h", token=first.token)
            event = next(watch)
            assert (event.kind, event.log_index) == (leasehold.EventKind.RELEASED, released.applied.log_index)
            assert watch._node + 1 != serving
