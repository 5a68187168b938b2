"""``smr.aio.connect``: :mod:`smr.connection` for programs that run an asyncio event loop.

The same verbs, awaited::

    async with await smr.aio.connect("clusters/demo") as cluster:
        await cluster.emit_many(pairs)
        await cluster.flush()
        state = await cluster.get("whale")
        async for key, state in cluster.scan():
            ...

Each connection runs its :class:`smr.connection.Cluster` on one worker thread of its own,
so calls never block the loop, run in the order they were awaited, and keep every
guarantee of the synchronous verbs (exactly-once writes, per-key consistent reads,
timeouts).
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

from smr.connection import Cluster, OutputRecord, Subscription
from smr.connection import connect as connect_sync

__all__ = ["AsyncCluster", "connect"]

T = TypeVar("T")


async def connect(cluster: str | os.PathLike[str] | Sequence[str], **options: Any) -> AsyncCluster:
    """An :class:`AsyncCluster` connected to ``cluster``; the arguments are those of
    :func:`smr.connection.connect`."""
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="smr-aio")
    try:
        loop = asyncio.get_running_loop()
        sync = await loop.run_in_executor(
            executor, functools.partial(connect_sync, cluster, **options)
        )
    except BaseException:
        executor.shutdown(wait=False)
        raise
    return AsyncCluster(sync, executor)


class AsyncCluster:
    """A :class:`smr.connection.Cluster` whose verbs are awaited (see the module's text)."""

    def __init__(self, cluster: Cluster, executor: ThreadPoolExecutor) -> None:
        self._cluster = cluster
        self._executor = executor

    async def _run(self, call: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(call, *args))

    async def emit(self, key: str | int, value: Any, *, event_time: int | None = None) -> None:
        """:meth:`smr.connection.Cluster.emit`."""
        await self._run(functools.partial(self._cluster.emit, event_time=event_time), key, value)

    async def emit_many(self, pairs: Iterable[tuple[str | int, Any]]) -> None:
        """:meth:`smr.connection.Cluster.emit_many` (an iterator is read on the worker)."""
        await self._run(self._cluster.emit_many, pairs)

    async def flush(self, timeout: float | None = None) -> int:
        """:meth:`smr.connection.Cluster.flush`: the position once every tuple is acked."""
        return await self._run(self._cluster.flush, timeout)

    @property
    def position(self) -> int:
        """:attr:`smr.connection.Cluster.position`."""
        return self._cluster.position

    async def get(self, key: str | int, *, allow_lost: bool = False) -> dict[str, Any] | None:
        """:meth:`smr.connection.Cluster.get`."""
        return await self._run(functools.partial(self._cluster.get, allow_lost=allow_lost), key)

    async def get_many(
        self, keys: Iterable[str | int], *, allow_lost: bool = False
    ) -> dict[str | int, dict[str, Any] | None]:
        """:meth:`smr.connection.Cluster.get_many`."""
        get_many = functools.partial(self._cluster.get_many, allow_lost=allow_lost)
        return await self._run(get_many, list(keys))

    @property
    def skipped_lost_slots(self) -> frozenset[int]:
        """:attr:`smr.connection.Cluster.skipped_lost_slots`."""
        return self._cluster.skipped_lost_slots

    async def status(self) -> list[dict[str, Any]]:
        """:meth:`smr.connection.Cluster.status`."""
        return await self._run(self._cluster.status)

    async def scan(
        self, prefix: str | None = None, *, allow_lost: bool = False
    ) -> AsyncIterator[tuple[str | int, dict[str, Any]]]:
        """:meth:`smr.connection.Cluster.scan`, a page read on the worker at a time."""
        async for entry in self._iterate(self._cluster.scan(prefix, allow_lost=allow_lost)):
            yield entry

    async def subscribe(
        self, position: Mapping[str, int] | str = "end", idle_timeout_s: float | None = None
    ) -> AsyncIterator[OutputRecord]:
        """:meth:`smr.connection.Cluster.subscribe`; the subscription's position is
        :attr:`last_subscription`'s."""
        subscription = await self._run(self._cluster.subscribe, position, idle_timeout_s)
        self.last_subscription: Subscription = subscription
        async for record in self._iterate(subscription):
            yield record

    async def _iterate(self, iterator: Iterator[T]) -> AsyncIterator[T]:
        done = object()
        while True:
            item = await self._run(next, iterator, done)
            if item is done:
                return
            yield item

    async def close(self, timeout: float | None = None) -> None:
        """:meth:`smr.connection.Cluster.close`, then stop the worker."""
        try:
            await self._run(self._cluster.close, timeout)
        finally:
            self._executor.shutdown(wait=False)

    async def abort(self) -> None:
        """:meth:`smr.connection.Cluster.abort`, then stop the worker."""
        try:
            await self._run(self._cluster.abort)
        finally:
            self._executor.shutdown(wait=False)

    async def __aenter__(self) -> AsyncCluster:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self.close()
        else:
            await self.abort()
