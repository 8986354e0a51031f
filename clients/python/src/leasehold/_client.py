"""`Client`: talks to any node of a cluster, as the Rust client does. Every node forwards to the
leader, so the client only has to find a live node: it tries the endpoints in turn, sticks with
one that answers, and retries while the cluster is electing, up to a deadline.

Every write carries a request id under a session opened through the log (``Register``), the
same on every retry, so a retry whose first attempt was applied gets that first answer instead
of applying twice. When a write gives up, :class:`IndeterminateError` says it may have applied.
"""

from __future__ import annotations

import enum
import itertools
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

import grpc

from leasehold import _answers as a
from leasehold._backoff import round_pauses
from leasehold._batch import Batches, close_all
from leasehold._errors import CAPS_REACHED, REMOVED_REASON, IndeterminateError, LeaseholdError
from leasehold._sequences import Sequences
from leasehold._watch import Watch
from leasehold.v1 import leasehold_pb2 as pb
from leasehold.v1 import leasehold_pb2_grpc as stubs

# The Rust client's limits (leasehold-client's limits.rs), in seconds.
DEFAULT_DEADLINE = 10.0
ATTEMPT_TIMEOUT = 9.0
MIN_ATTEMPT = 0.2

# How long ``close`` waits for the session's close before it closes the channels anyway.
SESSION_CLOSE_WAIT = 1.0
# The most entries a page of a listing holds (the node refuses more).
MAX_LIST_PAGE = 1000

# Worth another node: it did not answer in time, had no leader or quorum, or the connection
# failed. Safe for writes too, under their one request id. Anything else is final.
RETRYABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)

# A stopped or cut-off node is noticed within seconds, on an idle watch stream too.
CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 1000),
    ("grpc.keepalive_timeout_ms", 2000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # A node back after an outage is dialled again within a second, not after gRPC's default
    # backoff of up to two minutes: a renewal window is a third of a TTL.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # A message of the Batch stream carries up to 256 answers, each as big as its unary
    # answer: past gRPC's default 4 MiB the stream would end under every call on it.
    ("grpc.max_receive_message_length", -1),
]


class Effect(enum.Enum):
    READ = "read"
    WRITE = "write"


@dataclass(frozen=True)
class TLS:
    """How to talk TLS to the nodes: the CA that signed their certificates (PEM), and this
    client's certificate and key when it shows one."""

    ca: bytes
    cert: Optional[bytes] = None
    key: Optional[bytes] = None

    @classmethod
    def from_files(cls, ca: str, cert: Optional[str] = None, key: Optional[str] = None) -> "TLS":
        def read(path: Optional[str]) -> Optional[bytes]:
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()

        if (cert is None) != (key is None):
            raise ValueError("cert and key: give both, or neither")
        return cls(read(ca) or b"", read(cert), read(key))


@dataclass(frozen=True)
class Until:
    """When a call must have ended: ``at`` on ``time.monotonic()``, ``span`` seconds after it
    started. A ``hard`` deadline (the caller's own) is never outlived by an attempt; the
    client's default gives every attempt at least MIN_ATTEMPT, as the Rust client does."""

    at: float
    span: float
    hard: bool

    @classmethod
    def after(cls, seconds: float, hard: bool) -> "Until":
        return cls(time.monotonic() + seconds, seconds, hard)

    def left(self) -> float:
        return self.at - time.monotonic()

    def attempt_timeout(self) -> float:
        """Half the span at most, so a node that hangs leaves time to ask another."""
        cap = max(min(self.span / 2, ATTEMPT_TIMEOUT), min(self.span, MIN_ATTEMPT))
        left = self.left()
        return min(cap, left) if self.hard else min(cap, max(left, MIN_ATTEMPT))


def applied_maybe(failure: LeaseholdError, details: str) -> Optional[str]:
    """Why the attempt that failed so may have applied its write; None if it certainly did not."""
    if failure.indeterminate and not failure.session_unknown:
        return failure.message
    if failure.from_node or never_sent(details):
        # A node's own determinate answer (no leader, bad input), or no connection at all.
        return None
    if failure.code in (grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.UNIMPLEMENTED):
        # Refused by the server before any handler ran (size limit, unknown method).
        return None
    return f"its answer was lost ({failure.code.name}: {failure.message})"


def never_sent(details: str) -> bool:
    """Only a connection that was never made proves the request was not sent."""
    return "failed to connect to all addresses" in details.lower()


class Client:
    """A client of a Leasehold cluster: give it some or all of the nodes' client addresses.

    >>> client = Client(["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"])  # doctest: +SKIP
    >>> answer = client.acquire("jobs/nightly", holder="worker-1", ttl=5.0)     # doctest: +SKIP
    >>> if isinstance(answer, Granted):                                         # doctest: +SKIP
    ...     client.put("report", b"done", lease="jobs/nightly", token=answer.token)

    Safe to share between threads: calls made at once to a node share one ``Batch`` stream
    to it (2.8x the puts a second of unary calls from 64 threads); ``batch=False`` makes every
    call a unary call of its own.
    """

    def __init__(
        self,
        endpoints: Union[str, Sequence[str]],
        *,
        tls: Optional[TLS] = None,
        bearer_token: Optional[str] = None,
        deadline: float = DEFAULT_DEADLINE,
        batch: bool = True,
    ) -> None:
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        self.endpoints: List[str] = [e.strip() for e in endpoints if e.strip()]
        if not self.endpoints:
            raise ValueError("endpoints: give at least one node's host:port")
        if bearer_token is not None and tls is None:
            raise ValueError("bearer_token: only over TLS (nodes refuse it without)")
        if deadline <= 0:
            raise ValueError(f"deadline: must be above 0 s, got {deadline}")
        self.deadline = deadline
        self._metadata = (("authorization", f"Bearer {bearer_token}"),) if bearer_token else ()
        self._channels = [self._open(endpoint, tls) for endpoint in self.endpoints]
        self._lease = [stubs.LeaseStoreStub(ch) for ch in self._channels]
        self._cluster = [stubs.ClusterStub(ch) for ch in self._channels]
        self._batches = [Batches(stub, self._metadata, shared=batch) for stub in self._lease]
        # A client dropped without ``close`` ends its streams, whose threads would keep it.
        weakref.finalize(self, close_all, list(self._batches))
        self._preferred = 0
        self._session: Optional[int] = None
        self._pid = os.getpid()
        self._opening = threading.Lock()
        self._sequences = Sequences()

    @staticmethod
    def _open(endpoint: str, tls: Optional[TLS]) -> grpc.Channel:
        address = endpoint.split("://", 1)[-1]
        if tls is None:
            return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        credentials = grpc.ssl_channel_credentials(tls.ca, tls.key, tls.cert)
        return grpc.secure_channel(address, credentials, options=CHANNEL_OPTIONS)

    def close(self) -> None:
        """Closes this client's session in the store, if it opened one (within a second; one
        not closed expires after an idle hour), then its channels."""
        try:
            self.close_session(deadline=SESSION_CLOSE_WAIT)
        except LeaseholdError:
            pass  # Refused while a node runs 0.2.0 (log format 1), or no node answered.
        close_all(self._batches)
        for channel in self._channels:
            channel.close()

    def close_session(self, *, deadline: Optional[float] = None) -> None:
        """Closes this client's session, if it opened one, so that the store does not keep it
        for its idle hour; the next write opens a new one. A write of log format 2: while some
        node runs 0.2.0 the leader refuses it (FAILED_PRECONDITION, ``FORMAT_NOT_AGREED``)."""
        with self._opening:
            client_id = self._session if self._pid == os.getpid() else None
        if client_id is None:
            return
        until = self._until(deadline)
        with self._sequences.take(until) as sequence:
            request = pb.CloseSessionRequest(request_id=pb.RequestId(client_id=client_id, sequence=sequence))
            self._call(Effect.WRITE, self._lease_call("CloseSession"), request, until)
        with self._opening:
            if self._session == client_id:
                self._session = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- attempts ---------------------------------------------------------------------------

    def _lease_call(self, name: str) -> Callable[[int], Callable]:
        """Node i's ``LeaseStore`` call ``name``: on its ``Batch`` stream while another call of
        this client's to that node is under way, else unary (see ``_batch``)."""
        return lambda i: self._batches[i].method(name)

    def _until(self, deadline: Optional[float]) -> "Until":
        """The client's own deadline, or the caller's, which no attempt outlives."""
        if deadline is None:
            return Until.after(self.deadline, hard=False)
        return Until.after(max(deadline, 0.0), hard=True)

    def _call(self, effect: Effect, rpc: Callable[[int], Callable], request, until: Optional["Until"] = None):
        """Runs ``request`` against one node after another until one answers or ``until``
        passes. ``rpc(i)`` is node i's stub method."""
        until = until or self._until(None)
        first, count = self._preferred, len(self.endpoints)
        maybe: Optional[str] = None
        # Nodes that said the cluster removed them: not asked again by this call.
        gone: set = set()
        pauses = round_pauses()
        for attempt in itertools.count():
            index = (first + attempt) % count
            if attempt and attempt % count == 0:
                # A round of every node asked: pause before the next.
                time.sleep(min(next(pauses), max(until.left(), 0)))
            if index in gone:
                continue
            timeout = until.attempt_timeout()
            if timeout <= 0:
                # Only a caller's deadline ends a call before its first attempt.
                raise LeaseholdError(grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline passed before it was sent")
            try:
                answer = rpc(index)(request, timeout=timeout, metadata=self._metadata)
                self._preferred = index
                return answer
            except grpc.RpcError as error:
                failure = LeaseholdError.of(error)
                details = error.debug_error_string() if hasattr(error, "debug_error_string") else ""
                if effect is Effect.WRITE and maybe is None:
                    maybe = applied_maybe(failure, f"{failure.message} {details}")
                if failure.from_node and failure.reason == REMOVED_REASON:
                    gone.add(index)
                gave_up: Optional[str] = None
                if len(gone) == count:
                    gave_up = f"every node of {','.join(self.endpoints)} was removed from its cluster"
                elif until.left() <= 0:
                    gave_up = f"no node of {','.join(self.endpoints)} answered within {until.span:.3g} s"
                final = failure.from_node and failure.reason in CAPS_REACHED
                if failure.code in RETRYABLE and gave_up is None and not final:
                    continue
                raise self._final(effect, failure, maybe, gave_up) from error
        raise AssertionError("unreachable")

    def _final(self, effect, failure, maybe, gave_up: Optional[str]) -> LeaseholdError:
        """``gave_up`` says why the call stopped asking while ``failure`` was worth a retry."""
        message = failure.message
        if gave_up and failure.code in RETRYABLE:
            message = f"{gave_up}; last: {message}"
        if effect is Effect.WRITE and maybe is not None:
            if not failure.indeterminate or failure.session_unknown:
                message = f"{message}; the write may have been applied by an attempt: {maybe}"
            return IndeterminateError(
                failure.code, message, reason=failure.reason, metadata=failure.metadata,
                indeterminate=True, from_node=failure.from_node, session_unknown=failure.session_unknown,
            )
        return LeaseholdError(
            failure.code, message, reason=failure.reason, metadata=failure.metadata,
            from_node=failure.from_node, session_unknown=failure.session_unknown,
        )

    def _session_id(self, until: "Until") -> int:
        """This client's session, opened through the log on its first write."""
        with self._opening:
            if self._pid != os.getpid():
                # A forked child must not send its parent's request ids: the store would
                # answer it with the parent's answers. It opens a session of its own.
                self._pid, self._session = os.getpid(), None
                self._sequences = Sequences()
            if self._session is None:
                # A read as far as retries go: a lost registration leaves an unused session
                # that expires by itself.
                answer = self._call(Effect.READ, self._lease_call("Register"), pb.RegisterRequest(), until)
                self._session = answer.client_id
            return self._session

    def _write(self, rpc: Callable[[int], Callable], build: Callable[[pb.RequestId], object], deadline: Optional[float] = None):
        """Runs a write under this client's session, one request id for all its attempts, all
        within one deadline. If the store no longer knows the session (an hour idle expires
        it) and no attempt may have applied the write, a new session is opened and the write
        sent once more, as new."""
        until = self._until(deadline)
        for reopen in (True, False):
            client_id = self._session_id(until)
            try:
                with self._sequences.take(until) as sequence:
                    request = build(pb.RequestId(client_id=client_id, sequence=sequence))
                    return self._call(Effect.WRITE, rpc, request, until)
            except LeaseholdError as error:
                if not (reopen and error.session_unknown and not error.indeterminate):
                    raise
                with self._opening:
                    if self._session == client_id:
                        self._session = None
        raise AssertionError("unreachable")

    # -- the lease API ----------------------------------------------------------------------

    def acquire(self, lease: str, *, holder: str, ttl: float, deadline: Optional[float] = None) -> Union[a.Granted, a.HeldBy]:
        """Takes ``lease`` for ``holder`` for ``ttl`` seconds of store time, or renews it if
        ``holder`` holds it already (same token, expiry moved to now + ttl)."""
        ttl_ms = ttl_millis(ttl)
        answer = self._write(
            self._lease_call("Acquire"),
            lambda rid: pb.AcquireRequest(lease=lease, holder=holder, ttl_ms=ttl_ms, request_id=rid),
            deadline,
        )
        applied = a.Applied.of(answer.applied)
        outcome = answer.WhichOneof("outcome")
        if outcome == "granted":
            g = answer.granted
            return a.Granted(g.token, g.expires_at_ms, g.renewed, applied)
        if outcome == "held_by":
            return a.HeldBy(answer.held_by.holder, answer.held_by.token, answer.held_by.expires_at_ms, applied)
        raise no_outcome("Acquire")

    def release(self, lease: str, *, holder: str, token: int, deadline: Optional[float] = None) -> Union[a.Released, a.NotHeld, a.HeldBy, a.WrongToken]:
        """Frees ``lease`` at once, if ``holder`` holds it under ``token``."""
        answer = self._write(
            self._lease_call("Release"),
            lambda rid: pb.ReleaseRequest(lease=lease, holder=holder, token=token, request_id=rid),
            deadline,
        )
        applied = a.Applied.of(answer.applied)
        outcome = answer.WhichOneof("outcome")
        if outcome == "released":
            return a.Released(answer.released.token, applied)
        return not_holding(answer, outcome, applied, "Release")

    def renew(self, leases: Sequence[a.Renewal], *, deadline: Optional[float] = None) -> List[Union[a.Renewed, a.NotHeld, a.HeldBy, a.WrongToken]]:
        """Renews many leases in one request and one log entry: each only if its holder holds
        it under its token, for its own TTL. Answered lease by lease, in the order given; a
        lease that ran out is answered :class:`NotHeld`, never granted again. At most 512
        leases, each named once."""
        wire = [pb.Renewal(lease=r.lease, holder=r.holder, token=r.token, ttl_ms=ttl_millis(r.ttl)) for r in leases]
        answer = self._write(
            self._lease_call("Renew"),
            lambda rid: pb.RenewRequest(leases=wire, request_id=rid),
            deadline,
        )
        applied = a.Applied.of(answer.applied)
        if len(answer.leases) != len(wire):
            raise LeaseholdError(grpc.StatusCode.INTERNAL, "a renewal was answered for another number of leases than it named")
        return [renewed(lease, applied) for lease in answer.leases]

    def put(self, key: str, value: bytes, *, lease: Optional[str] = None, token: Optional[int] = None, deadline: Optional[float] = None) -> Union[a.Written, a.StaleToken]:
        """Writes a row: plain, or fenced with ``lease`` and ``token``, which the store refuses
        (:class:`StaleToken`) once it has seen a bigger token for that lease."""
        wire_fence = a.fence(lease, token)
        answer = self._write(
            self._lease_call("Put"),
            lambda rid: pb.PutRequest(key=key, value=bytes(value), fence=wire_fence, request_id=rid),
            deadline,
        )
        applied = a.Applied.of(answer.applied)
        outcome = answer.WhichOneof("outcome")
        if outcome == "written":
            return a.Written(applied)
        if outcome == "stale_token":
            return a.StaleToken(answer.stale_token.fence, applied)
        raise no_outcome("Put")

    def delete(self, key: str, *, lease: Optional[str] = None, token: Optional[int] = None, deadline: Optional[float] = None) -> Union[a.Deleted, a.StaleToken]:
        """Removes a row, fenced as :meth:`put` is."""
        wire_fence = a.fence(lease, token)
        answer = self._write(
            self._lease_call("Delete"),
            lambda rid: pb.DeleteRequest(key=key, fence=wire_fence, request_id=rid),
            deadline,
        )
        applied = a.Applied.of(answer.applied)
        outcome = answer.WhichOneof("outcome")
        if outcome == "deleted":
            return a.Deleted(answer.deleted.existed, applied)
        if outcome == "stale_token":
            return a.StaleToken(answer.stale_token.fence, applied)
        raise no_outcome("Delete")

    def check_token(self, lease: str, token: int) -> Union[a.TokenCurrent, a.TokenStale]:
        """Whether ``token`` is ``lease``'s current grant, linearizably."""
        request = pb.CheckTokenRequest(lease=lease, token=token)
        answer = self._call(Effect.READ, self._lease_call("CheckToken"), request)
        applied = a.Applied.of(answer.applied)
        outcome = answer.WhichOneof("outcome")
        if outcome == "current":
            return a.TokenCurrent(answer.current.holder, answer.current.expires_at_ms, applied)
        if outcome == "stale":
            return a.TokenStale(answer.stale.current_token, answer.stale.holder, applied)
        raise no_outcome("CheckToken")

    def get(self, key: str) -> Optional[bytes]:
        """A row's value, linearizably; None when it was never written (or was deleted)."""
        answer = self._call(Effect.READ, self._lease_call("Get"), pb.GetRequest(key=key))
        return answer.value if answer.HasField("value") else None

    def get_lease(self, lease: str) -> a.LeaseState:
        """A lease, linearizably: holder (empty when free), token, expiry and fence."""
        answer = self._call(Effect.READ, self._lease_call("GetLease"), pb.GetLeaseRequest(lease=lease))
        return a.LeaseState(answer.holder, answer.token, answer.expires_at_ms, answer.fence, a.Applied.of(answer.applied))

    def list_leases(self, prefix: str = "", *, limit: int = 0, serializable: bool = False) -> Iterator[Tuple[str, a.LeaseState]]:
        """The leases whose names start with ``prefix``, held or free, in name order: each name
        with its state (``holder`` empty when free). Read a page at a time as the iterator goes,
        each page linearizably unless ``serializable``; at most ``limit`` of them (0: all).
        Leases the caller may not read are left out."""
        for entry, applied in self._pages(self._lease_call("ListLeases"), pb.ListLeasesRequest, "leases", prefix, limit, serializable):
            yield entry.lease, a.LeaseState(entry.holder, entry.token, entry.expires_at_ms, entry.fence, applied)

    def list_keys(self, prefix: str = "", *, limit: int = 0, serializable: bool = False) -> Iterator[Tuple[str, bytes]]:
        """The rows whose keys start with ``prefix``, in key order, each key with its value;
        paged as :meth:`list_leases`."""
        for entry, _ in self._pages(self._lease_call("ListKeys"), pb.ListKeysRequest, "keys", prefix, limit, serializable):
            yield entry.key, entry.value

    def _pages(self, method: Callable[[int], Callable], request: Callable, field: str, prefix: str, limit: int, serializable: bool) -> Iterator[Tuple[Any, a.Applied]]:
        """Every entry of a listing, page after page, with where its page was read."""
        shown, token = 0, ""
        while True:
            size = MAX_LIST_PAGE if limit == 0 else min(limit - shown, MAX_LIST_PAGE)
            page = pb.ListPage(prefix=prefix, page_token=token, limit=size, serializable=serializable)
            answer = self._call(Effect.READ, method, request(page=page))
            applied = a.Applied.of(answer.applied)
            for entry in getattr(answer, field):
                yield entry, applied
                shown += 1
            token = answer.next_page_token
            if not token or (limit and shown >= limit):
                return

    def advance(self, seconds: float) -> a.Applied:
        """Moves store time forward, on a cluster started with ``--manual-clock`` only."""
        ms = ttl_millis(seconds, field="seconds")
        answer = self._write(self._lease_call("Advance"), lambda rid: pb.AdvanceRequest(ms=ms, request_id=rid))
        return a.Applied.of(answer.applied)

    def watch(self, *, lease: Optional[str] = None, prefix: Optional[str] = None, from_index: int = 0) -> Watch:
        """Lease events in log order, for ``lease`` or every lease under ``prefix``, from log
        index ``from_index`` on (0: from now). Iterate it; it resumes on another node where
        the one serving it fails. ``close()`` it (or use ``with``) to stop."""
        if (lease is None) == (prefix is None):
            raise ValueError("watch: give lease or prefix, not both")
        select = {"lease": lease} if lease is not None else {"prefix": prefix or ""}
        return Watch(self, select, from_index)

    def status(self) -> List[pb.NodeStatus]:
        """Every member's view of itself, gathered by the node asked."""
        answer = self._call(Effect.READ, lambda i: self._cluster[i].Status, pb.StatusRequest())
        return list(answer.nodes)

    def who_am_i(self) -> pb.WhoAmIResponse:
        """The identity this client's certificate or bearer token gives it, and its roles."""
        return self._call(Effect.READ, lambda i: self._cluster[i].WhoAmI, pb.WhoAmIRequest())


def ttl_millis(seconds: float, field: str = "ttl") -> int:
    """Whole milliseconds, as the store counts; the store itself checks its bounds."""
    if not isinstance(seconds, (int, float)) or seconds != seconds or seconds < 0:
        raise ValueError(f"{field}: must be a number of seconds, 0 or more; got {seconds!r}")
    return int(round(seconds * 1000))


def renewed(lease: pb.LeaseRenewal, applied: a.Applied) -> Union[a.Renewed, a.NotHeld, a.HeldBy, a.WrongToken]:
    """One lease's answer to a renewal."""
    outcome = lease.WhichOneof("outcome")
    if outcome == "renewed":
        return a.Renewed(lease.renewed.expires_at_ms, applied)
    return not_holding(lease, outcome, applied, "Renew")


def not_holding(answer, outcome: Optional[str], applied: a.Applied, rpc: str) -> Union[a.NotHeld, a.HeldBy, a.WrongToken]:
    """A release's refusal, or a renewal's of one lease: the caller does not hold the lease."""
    if outcome == "not_held":
        return a.NotHeld(applied)
    if outcome == "held_by":
        return a.HeldBy(answer.held_by.holder, answer.held_by.token, answer.held_by.expires_at_ms, applied)
    if outcome == "wrong_token":
        return a.WrongToken(answer.wrong_token.current_token, applied)
    raise no_outcome(rpc)


def no_outcome(rpc: str) -> LeaseholdError:
    return LeaseholdError(grpc.StatusCode.INTERNAL, f"{rpc}: the node answered without an outcome; is it a newer version?")
