"""The asyncio twin of :class:`leasehold.Holder`: the same keeper, whose blocking calls run in a
worker thread, so an event loop never waits on the network::

    async with AsyncHolder(client, "jobs/beat", holder="worker-1", ttl=10, wait=True) as held:
        await held.fenced_put("jobs/beat/last", b"...")
"""

from __future__ import annotations

import asyncio
from typing import Optional, Union

from leasehold import _answers as a
from leasehold._client import Client
from leasehold import _holder
from leasehold._holder import Holder


class AsyncHolder:
    """Holds a lease while an ``async with`` block runs; see :class:`leasehold.Holder`."""

    def __init__(self, client: Client, lease: str, **options) -> None:
        self.sync = Holder(client, lease, **options)

    @property
    def token(self) -> int:
        return self.sync.token

    @property
    def holder(self) -> str:
        return self.sync.holder

    @property
    def safe_until(self) -> float:
        return self.sync.safe_until

    def is_safe(self) -> bool:
        return self.sync.is_safe()

    async def acquire(self) -> "AsyncHolder":
        await asyncio.to_thread(self.sync.acquire)
        return self

    async def release(self) -> Optional[Union[a.Released, a.NotHeld, a.HeldBy, a.WrongToken]]:
        return await asyncio.to_thread(self.sync.release)

    async def wait_lost(self, timeout: Optional[float] = None) -> Optional[str]:
        """Why the holding ended, once it does (None if still held after ``timeout``). Waits
        on the event loop, not in a worker thread, so it can be cancelled."""
        loop = asyncio.get_running_loop()
        lost = asyncio.Event()

        def wake() -> None:
            loop.call_soon_threadsafe(lost.set)

        remove = self.sync._on_lost(wake)
        give_up = None if timeout is None else loop.time() + timeout
        try:
            while True:
                why = self.sync.unsafe_reason()
                if why is not None:
                    return why
                wait = min(self.sync.safe_until - _holder.now(), _holder._SLICE)
                if give_up is not None:
                    if loop.time() >= give_up:
                        return None
                    wait = min(wait, give_up - loop.time())
                try:
                    await asyncio.wait_for(lost.wait(), max(wait, 0))
                except asyncio.TimeoutError:
                    pass
        finally:
            remove()

    async def fenced_put(self, key: str, value: bytes) -> Union[a.Written, a.StaleToken]:
        return await asyncio.to_thread(self.sync.fenced_put, key, value)

    async def __aenter__(self) -> "AsyncHolder":
        return await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.sync.__exit__, *exc)
