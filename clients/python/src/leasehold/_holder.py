"""`Holder`, the lease keeper: acquires a lease (waiting for it if asked), renews it every third
of its TTL, and knows until when its holding is safe.

The deadline is counted from the instant a successful request was *sent*, not from its answer:
the store started the grant's TTL at some point after the send, so ``send + ttl - margin`` is
never later than the store's own expiry, whatever the request and its answer spent on the way.
The margin covers the difference between this machine's clock rate and the leader's. Every
renewal attempt is cut off at that deadline, so the keeper never acts on a lease it may have
lost. This is the Rust client's `Holder`; it also ends the holding when the policy denies a
renewal (PERMISSION_DENIED), which no retry would change.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading
import time
from typing import Callable, Optional, Union

import grpc

from leasehold import _answers as a
from leasehold._client import Client
from leasehold._errors import LeaseholdError

# CLOCK_BOOTTIME keeps counting while the host is suspended, as the store's clock does;
# time.monotonic() (CLOCK_MONOTONIC on Linux) stops, so a holder that read it would believe
# itself safe after a resume for as long as the host slept. Elsewhere time.monotonic() is
# what there is (macOS's counts a sleep already).
_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)

# How long a wait for the deadline sleeps at most before it looks at the clock again: the
# waits themselves run on CLOCK_MONOTONIC, which a suspension stops.
_SLICE = 0.1


def now() -> float:
    """Now on the holders' clock, in seconds: every ``Holder`` instant (``safe_until``) is one."""
    if _BOOTTIME is not None:
        return time.clock_gettime(_BOOTTIME)
    return time.monotonic()


class HeldError(Exception):
    """The lease is held by another, and the holder was not asked to wait."""

    def __init__(self, held: a.HeldBy) -> None:
        super().__init__(f"lease is held by {held.holder} with token {held.token} until store time {held.expires_at_ms} ms")
        self.held = held


class NotSafeError(Exception):
    """The holding is over, or its safe deadline passed: nothing was sent."""

    def __init__(self, why: str) -> None:
        super().__init__(f"lease no longer held safely: {why}")
        self.why = why


# A tag no other process shares, and a counter per holder: the store takes a second acquire
# under the same holder name for a renewal, so two processes must never share one. Drawn anew
# in a forked child (celery, gunicorn and multiprocessing fork after the import).
_PROCESS_TAG = ""
_NEXT = itertools.count(1)
# The most the suffix adds: "~", the tag's 8 hex digits, "." and a counter of up to 20 digits.
_SUFFIX_BYTES = 30


def _new_process_tag() -> None:
    global _PROCESS_TAG, _NEXT
    _PROCESS_TAG = f"{random.SystemRandom().getrandbits(32):08x}"
    _NEXT = itertools.count(1)


_new_process_tag()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_process_tag)


def default_margin(ttl: float) -> float:
    """The larger of 100 ms and a tenth of the TTL, but at most a quarter of it."""
    return min(max(ttl / 10, 0.1), ttl / 4)


class Holder:
    """Holds ``lease`` while the ``with`` block runs::

        with Holder(client, "jobs/beat", holder="worker-1", ttl=10, wait=True) as held:
            while held.is_safe():
                held.fenced_put("jobs/beat/last", b"...")

    ``holder`` gets a suffix unique to this holder (``exact_name=True`` keeps it as given). With
    authorization on, an identity holds as itself or as ``IDENTITY/...``.
    """

    def __init__(
        self,
        client: Client,
        lease: str,
        *,
        holder: Optional[str] = None,
        ttl: float = 10.0,
        wait: bool = False,
        margin: Optional[float] = None,
        exact_name: bool = False,
    ) -> None:
        # Whole milliseconds, as the store counts the grant: the deadline never passes it.
        self.ttl = round(ttl * 1000) / 1000
        self.margin = default_margin(self.ttl) if margin is None else margin
        if not 0 <= self.margin < self.ttl - self.ttl / 3:
            raise ValueError(
                f"margin: must be shorter than two thirds of the TTL ({self.ttl * 2 / 3:.3f} s), so that "
                f"the holding outlasts a renewal; got {self.margin} s"
            )
        name = holder or f"{socket.gethostname()}-{os.getpid()}"
        # Checked here, so that a refusal speaks of the name given, not of one with a suffix
        # the caller never wrote: the store takes names of at most 128 bytes.
        most = 128 if exact_name else 128 - _SUFFIX_BYTES
        if len(name.encode()) > most:
            raise ValueError(
                f"holder: must be at most {most} bytes"
                + ("" if exact_name else f", leaving room for the suffix of up to {_SUFFIX_BYTES} that sets it apart (or exact_name=True)")
                + f"; got {len(name.encode())}"
            )
        self.holder = name if exact_name else f"{name}~{_PROCESS_TAG}.{next(_NEXT)}"
        self.client, self.lease, self.wait = client, lease, wait
        self.token = 0
        self.renewals = 0
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        # Set while a standby (``wait=True``) waits for the lease to be freed.
        self.waiting = threading.Event()
        self._listeners: "list[Callable[[], None]]" = []
        self._safe_until = 0.0
        self._state = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -- standing ---------------------------------------------------------------------------

    @property
    def safe_until(self) -> float:
        """An instant of :func:`now` (CLOCK_BOOTTIME on Linux) before which the store grants
        the lease to nobody else."""
        with self._state:
            return self._safe_until

    def is_safe(self) -> bool:
        """Whether the holding is safe now."""
        return not self.lost.is_set() and now() < self.safe_until

    def unsafe_reason(self) -> Optional[str]:
        """Why the holding is not safe now, if it is not."""
        if self.lost.is_set():
            return self.lost_reason
        if now() >= self.safe_until:
            return "no renewal succeeded before the safe deadline"
        return None

    def wait_lost(self, timeout: Optional[float] = None) -> Optional[str]:
        """Blocks until the holding is lost (or its safe deadline passes without a renewal), up
        to ``timeout``; returns why, or None if it is still held."""
        give_up = None if timeout is None else now() + timeout
        while True:
            why = self.unsafe_reason()
            if why is not None:
                return why
            at = now()
            wait = self.safe_until - at
            if give_up is not None:
                if at >= give_up:
                    return None
                wait = min(wait, give_up - at)
            self.lost.wait(min(max(wait, 0), _SLICE))

    # -- acquiring and releasing ------------------------------------------------------------

    def acquire(self) -> "Holder":
        """Acquires the lease (waiting while another holds it, if ``wait``) and starts renewing."""
        if self._thread is not None:
            raise RuntimeError("this Holder acquired its lease already; make a new one")
        self.token, sent = self._grant()
        with self._state:
            self._safe_until = sent + self.ttl - self.margin
        self._thread = threading.Thread(target=self._keep, args=(sent,), name=f"leasehold-holder {self.lease}", daemon=True)
        self._thread.start()
        return self

    def release(self) -> Optional[Union[a.Released, a.NotHeld, a.HeldBy, a.WrongToken]]:
        """Stops renewing and gives the lease up; returns the store's answer (None if the
        holding ended before it could be asked)."""
        if self._thread is None:
            return None
        self._stop.set()
        # A renewal in flight ends by itself, at the latest at the safe deadline.
        self._thread.join(max(self.safe_until - now(), 0) + 0.1)
        was_lost = self.lost.is_set() and self.lost_reason != "released"
        self._lose("released")
        if was_lost:
            return None
        return self.client.release(self.lease, holder=self.holder, token=self.token)

    def __enter__(self) -> "Holder":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        try:
            self.release()
        except LeaseholdError:
            pass  # the lease expires by itself; the block's own exception matters more

    def fenced_put(self, key: str, value: bytes) -> Union[a.Written, a.StaleToken]:
        """Writes ``key`` fenced with this holding's token. Refused here (:class:`NotSafeError`)
        once the holding is not safe, and by the store (:class:`StaleToken`) once it has seen a
        bigger token for the lease."""
        why = self.unsafe_reason()
        if why is not None:
            raise NotSafeError(why)
        return self.client.put(key, value, lease=self.lease, token=self.token)

    # -- the keeper -------------------------------------------------------------------------

    def _grant(self) -> "tuple[int, float]":
        """The token, and when the granting request was sent."""
        watch = None
        woken = threading.Event()
        try:
            while True:
                sent = now()
                answer = self.client.acquire(self.lease, holder=self.holder, ttl=self.ttl)
                if isinstance(answer, a.Granted):
                    self.waiting.clear()
                    return answer.token, sent
                if not self.wait:
                    raise HeldError(answer)
                self.waiting.set()
                if watch is None:
                    # Woken by the event that frees the lease after the refusal, or at the
                    # latest when the holder's grant runs out in store time.
                    watch = self.client.watch(lease=self.lease, from_index=answer.applied.log_index + 1)
                    threading.Thread(target=_wake_on_free, args=(watch, woken), daemon=True).start()
                left = max(answer.expires_at_ms - answer.applied.store_time_ms, 0) / 1000 + 0.02
                woken.wait(left)
                woken.clear()
        finally:
            if watch is not None:
                watch.close()

    def _keep(self, last_sent: float) -> None:
        """Renews every third of the TTL from the last successful send until the holding ends."""
        while not self._stop.wait(max(last_sent + self.ttl / 3 - now(), 0)):
            sent, why = self._renew()
            if why is not None:
                self._lose(why)
                return
            last_sent = sent
        self._lose("released")

    def _renew(self) -> "tuple[float, Optional[str]]":
        """One renewal, retried until it succeeds or the safe deadline passes."""
        while True:
            if self._stop.is_set():
                return 0.0, "released"
            sent, safe_until = now(), self.safe_until
            if sent >= safe_until:
                return sent, "no renewal succeeded before the safe deadline"
            try:
                answer = self.client.acquire(self.lease, holder=self.holder, ttl=self.ttl, deadline=safe_until - sent)
            except LeaseholdError as error:
                if error.code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED):
                    return sent, f"renewal refused: {error}"
                # Unavailable, indeterminate: the next attempt settles it, in time or not.
                self._stop.wait(0.02)
                continue
            if now() >= safe_until:
                # Answered too late: the holding was not safe for a while, so it is over, as
                # the Rust Holder's attempt is cut off at the deadline.
                return sent, "no renewal succeeded before the safe deadline"
            if isinstance(answer, a.Granted) and answer.renewed and answer.token == self.token:
                with self._state:
                    self._safe_until = sent + self.ttl - self.margin
                    self.renewals += 1
                return sent, None
            if isinstance(answer, a.Granted):
                # Ours again, but after a gap someone may have filled: given back.
                threading.Thread(
                    target=self.client.release, args=(self.lease,),
                    kwargs={"holder": self.holder, "token": answer.token}, daemon=True,
                ).start()
                return sent, f"the lease expired and was granted anew (token {answer.token})"
            return sent, f"held by {answer.holder} with token {answer.token}"

    def _lose(self, why: str) -> None:
        with self._state:
            if self.lost.is_set():
                return
            self.lost_reason = why
            self.lost.set()
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    def _on_lost(self, listener: "Callable[[], None]") -> "Callable[[], None]":
        """Calls ``listener`` (from the keeper's thread) once the holding is lost; returns what
        removes it."""
        with self._state:
            self._listeners.append(listener)

        def remove() -> None:
            with self._state:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove


def _wake_on_free(watch, woken: threading.Event) -> None:
    """Sets ``woken`` on every event that frees the lease, until the watch is closed."""
    try:
        for event in watch:
            if event.kind.frees:
                woken.set()
    except LeaseholdError:
        pass  # the expiry timer alone wakes the standby
