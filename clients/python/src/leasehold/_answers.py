"""The store's answers, typed: what a refusal says is an answer, not an exception."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from leasehold.v1 import leasehold_pb2 as pb


@dataclass(frozen=True)
class Applied:
    """Where in the log the request was answered, and the store time there: a write's entry's,
    a linearizable read's the leader's when it read (so a lease's time left, ``expires_at_ms -
    store_time_ms``, counts down while nothing is logged)."""

    log_index: int
    store_time_ms: int
    position: int

    @classmethod
    def of(cls, applied: pb.Applied) -> "Applied":
        return cls(applied.log_index, applied.store_time_ms, applied.position)


@dataclass(frozen=True)
class Granted:
    """The lease is the caller's until ``expires_at_ms`` of store time, under ``token``;
    ``renewed`` when the caller held it already."""

    token: int
    expires_at_ms: int
    renewed: bool
    applied: Applied


@dataclass(frozen=True)
class HeldBy:
    """Another holder has the lease."""

    holder: str
    token: int
    expires_at_ms: int
    applied: Applied


@dataclass(frozen=True)
class Released:
    token: int
    applied: Applied


@dataclass(frozen=True)
class NotHeld:
    """Nobody holds the lease (free, or expired)."""

    applied: Applied


@dataclass(frozen=True)
class WrongToken:
    """The caller holds the lease under another token."""

    current_token: int
    applied: Applied


@dataclass(frozen=True)
class Renewal:
    """One lease of :meth:`Client.renew`: renewed only if ``holder`` holds it under ``token``,
    for ``ttl`` seconds from the renewal's store time."""

    lease: str
    holder: str
    token: int
    ttl: float


@dataclass(frozen=True)
class Renewed:
    """The lease was renewed: same token, its grant runs out at ``expires_at_ms`` of store
    time now."""

    expires_at_ms: int
    applied: Applied


@dataclass(frozen=True)
class Written:
    applied: Applied


@dataclass(frozen=True)
class StaleToken:
    """Refused: the store has seen ``fence``, a bigger token for the lease."""

    fence: int
    applied: Applied


@dataclass(frozen=True)
class Deleted:
    existed: bool
    applied: Applied


@dataclass(frozen=True)
class TokenCurrent:
    """The token is its lease's current grant."""

    holder: str
    expires_at_ms: int
    applied: Applied


@dataclass(frozen=True)
class TokenStale:
    """Not the current grant: ``current_token`` is the lease's latest, ``holder`` its holder
    now (empty when free)."""

    current_token: int
    holder: str
    applied: Applied


@dataclass(frozen=True)
class LeaseState:
    """A lease as the store has it: ``holder`` empty when free or expired."""

    holder: str
    token: int
    expires_at_ms: int
    fence: int
    applied: Applied


class EventKind(enum.Enum):
    GRANTED = pb.EVENT_KIND_GRANTED
    RENEWED = pb.EVENT_KIND_RENEWED
    RELEASED = pb.EVENT_KIND_RELEASED
    EXPIRED = pb.EVENT_KIND_EXPIRED

    @property
    def frees(self) -> bool:
        """Whether the lease is free after such an event."""
        return self in (EventKind.RELEASED, EventKind.EXPIRED)


@dataclass(frozen=True)
class LeaseEvent:
    kind: EventKind
    lease: str
    holder: str
    token: int
    expires_at_ms: int
    log_index: int
    store_time_ms: int

    @classmethod
    def of(cls, event: pb.LeaseEvent) -> "LeaseEvent":
        return cls(
            EventKind(event.kind),
            event.lease,
            event.holder,
            event.token,
            event.expires_at_ms,
            event.log_index,
            event.store_time_ms,
        )


def fence(lease: Optional[str], token: Optional[int]) -> Optional[pb.Fence]:
    """The wire fence of a write: both or neither."""
    if (lease is None) != (token is None):
        raise ValueError("lease and token: give both for a fenced write, or neither")
    return None if lease is None else pb.Fence(lease=lease, token=token)
