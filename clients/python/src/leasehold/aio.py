"""The asyncio twins of :class:`leasehold.Client` and :class:`leasehold.Holder`: the same
client and keeper, whose blocking calls run in a worker thread, so an event loop never waits
on the network::

    async with Client(endpoints) as client:
        async with AsyncHolder(client.sync, "jobs/beat", holder="worker-1", ttl=10, wait=True) as held:
            await held.fenced_put("jobs/beat/last", b"...")
        async for name, state in client.list_leases("jobs/"):
            ...
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, AsyncIterator, List, Optional, Sequence, Tuple, Union

from leasehold import _answers as a
from leasehold._client import MAX_LIST_PAGE, Client as SyncClient
from leasehold import _holder
from leasehold._holder import Holder


class Client:
    """:class:`leasehold.Client` for asyncio: the same sessions, request ids and retries, each
    call run in a worker thread. ``sync`` is the blocking client, for a :class:`Holder` or an
    :class:`AsyncHolder`."""

    def __init__(self, endpoints: Union[str, Sequence[str]], **options: Any) -> None:
        self.sync = SyncClient(endpoints, **options)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def acquire(self, lease: str, *, holder: str, ttl: float, deadline: Optional[float] = None) -> Union[a.Granted, a.HeldBy]:
        return await asyncio.to_thread(self.sync.acquire, lease, holder=holder, ttl=ttl, deadline=deadline)

    async def release(self, lease: str, *, holder: str, token: int, deadline: Optional[float] = None) -> Union[a.Released, a.NotHeld, a.HeldBy, a.WrongToken]:
        return await asyncio.to_thread(self.sync.release, lease, holder=holder, token=token, deadline=deadline)

    async def renew(self, leases: Sequence[a.Renewal], *, deadline: Optional[float] = None) -> List[Union[a.Renewed, a.NotHeld, a.HeldBy, a.WrongToken]]:
        return await asyncio.to_thread(self.sync.renew, leases, deadline=deadline)

    async def put(self, key: str, value: bytes, *, lease: Optional[str] = None, token: Optional[int] = None, deadline: Optional[float] = None) -> Union[a.Written, a.StaleToken]:
        return await asyncio.to_thread(self.sync.put, key, value, lease=lease, token=token, deadline=deadline)

    async def delete(self, key: str, *, lease: Optional[str] = None, token: Optional[int] = None, deadline: Optional[float] = None) -> Union[a.Deleted, a.StaleToken]:
        return await asyncio.to_thread(self.sync.delete, key, lease=lease, token=token, deadline=deadline)

    async def check_token(self, lease: str, token: int) -> Union[a.TokenCurrent, a.TokenStale]:
        return await asyncio.to_thread(self.sync.check_token, lease, token)

    async def get(self, key: str) -> Optional[bytes]:
        return await asyncio.to_thread(self.sync.get, key)

    async def get_lease(self, lease: str) -> a.LeaseState:
        return await asyncio.to_thread(self.sync.get_lease, lease)

    async def list_leases(self, prefix: str = "", *, limit: int = 0, serializable: bool = False) -> AsyncIterator[Tuple[str, a.LeaseState]]:
        """As :meth:`leasehold.Client.list_leases`, a page at a time in a worker thread."""
        pages = self.sync.list_leases(prefix, limit=limit, serializable=serializable)
        async for entry in _paged(pages):
            yield entry

    async def list_keys(self, prefix: str = "", *, limit: int = 0, serializable: bool = False) -> AsyncIterator[Tuple[str, bytes]]:
        """As :meth:`leasehold.Client.list_keys`, a page at a time in a worker thread."""
        pages = self.sync.list_keys(prefix, limit=limit, serializable=serializable)
        async for entry in _paged(pages):
            yield entry


async def _paged(entries: Any) -> AsyncIterator[Any]:
    """The entries of a blocking iterator, read a page's worth at a time in a worker thread."""
    while True:
        page = await asyncio.to_thread(lambda: list(itertools.islice(entries, MAX_LIST_PAGE)))
        for entry in page:
            yield entry
        if len(page) < MAX_LIST_PAGE:
            return


class AsyncHolder:
    """Holds a lease while an ``async with`` block runs; see :class:`leasehold.Holder`."""

    def __init__(self, client: SyncClient, lease: str, **options) -> None:
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
