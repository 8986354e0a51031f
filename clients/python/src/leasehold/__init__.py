"""Leasehold's Python client: leases with fencing tokens the store enforces.

- :class:`Client` speaks to any node of a cluster, with sessions, request ids and retries
  across nodes under one id; :class:`IndeterminateError` says a write may have been applied.
- :class:`Holder` (and :class:`leasehold.aio.AsyncHolder`) acquires, renews every TTL/3 and
  counts ``safe_until`` from each request's send; :func:`release_on_signals` gives holders'
  leases up when the process gets SIGTERM.
- :class:`leasehold.aio.Client` is the client for asyncio.
"""

from leasehold._answers import (
    Applied,
    Deleted,
    EventKind,
    Granted,
    HeldBy,
    LeaseEvent,
    LeaseState,
    NotHeld,
    Released,
    Renewal,
    Renewed,
    StaleToken,
    TokenCurrent,
    TokenStale,
    Written,
    WrongToken,
)
from leasehold._client import TLS, Client
from leasehold._errors import IndeterminateError, LeaseholdError
from leasehold._holder import HeldError, Holder, NotSafeError, default_margin
from leasehold._signals import release_on_signals
from leasehold._watch import Watch

__all__ = [
    "Applied", "Client", "Deleted", "EventKind", "Granted", "HeldBy", "HeldError", "Holder",
    "IndeterminateError", "LeaseEvent", "LeaseState", "LeaseholdError", "NotHeld", "NotSafeError",
    "Released", "Renewal", "Renewed", "StaleToken", "TLS", "TokenCurrent", "TokenStale", "Watch", "Written",
    "WrongToken", "default_margin", "release_on_signals",
]
__version__ = "0.5.0"
