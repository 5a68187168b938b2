"""What the simulation's processes ask of the run they are part of: :class:`Run`, which
``Simulation`` offers. The readers, the feeding mappers, the id reuse and the subscriber
receive it rather than the ``Simulation`` that builds them, so none imports that module."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from smr.node.core import NodeCore
from smr.ring.ids import NodeId
from smr.sim.clock import Scheduler
from smr.sim.config import SimConfig
from smr.sim.mappers import Post
from smr.sim.nodes import SimNode


class Run(Post, Protocol):
    """The run as its processes see it: its configuration and random streams, the
    scheduler, the nodes (the live ones with their cores), the oracle, and notes."""

    @property
    def config(self) -> SimConfig: ...

    @property
    def scheduler(self) -> Scheduler: ...

    @property
    def node_ids(self) -> Sequence[NodeId]: ...

    @property
    def standby_ids(self) -> Sequence[NodeId]: ...

    @property
    def oracle(self) -> Mapping[str, int]: ...

    @property
    def tick_ms(self) -> int: ...

    def rng(self, stream: str) -> random.Random: ...

    def note(self, text: str) -> None: ...

    def live(self) -> list[tuple[SimNode, NodeCore]]: ...

    def live_cores(self) -> dict[NodeId, NodeCore]: ...

    def schedule_at(self, time_us: int, action: Callable[..., None], *args: Any) -> None: ...

    def run_until(self, done: Callable[[], bool], limit_us: int) -> bool: ...
