"""Giving leases up when the process is told to stop: a service manager's SIGTERM (systemd,
Kubernetes, ``docker stop``) otherwise ends the process with its leases held, and the next
holder waits out their TTL."""

from __future__ import annotations

import signal
from typing import Any, Dict, Iterable


def release_on_signals(*holders: Any, signals: Iterable[int] = (signal.SIGTERM,)) -> None:
    """When one of ``signals`` (SIGTERM by default) arrives, releases each of ``holders``
    (:class:`leasehold.Holder` or :class:`leasehold.aio.AsyncHolder`), then lets the signal do
    what it did before: the handler that was set, or by default the process ends. Call it from
    the main thread (Python runs signal handlers there), once the holders are made."""
    previous: Dict[int, Any] = {}

    def release(signum: int, frame: Any) -> None:
        for holder in holders:
            try:
                getattr(holder, "sync", holder).release()
            except Exception:  # the others are released all the same; the TTL covers this one
                pass
        signal.signal(signum, previous[signum])
        signal.raise_signal(signum)

    for signum in signals:
        previous[signum] = signal.signal(signum, release)
