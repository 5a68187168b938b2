"""The autoscaling policies by name, and a runner that keeps a policy's memory between
steps (the controller's and the benchmarks' way to use one).

Every policy is a pure function ``(config, memory, observation) -> (decision, memory)``:

- ``thresholds``: the thesis' utilisation and queue thresholds, hysteresis, cooldown
  (:mod:`smr.autoscale.reactive`);
- ``target-util``: an HPA-like utilisation target with a scale-down stabilisation window
  (:mod:`smr.autoscale.reactive`);
- ``capacity``: capacity estimate, forecast, ring headroom, billing-aware release
  (:mod:`smr.autoscale.capacity`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from smr.autoscale.capacity import CapacityConfig, CapacityMemory, capacity
from smr.autoscale.observe import Decision, Observation
from smr.autoscale.reactive import (
    TargetUtilConfig,
    TargetUtilMemory,
    ThresholdConfig,
    ThresholdMemory,
    target_util,
    thresholds,
)


@dataclass(frozen=True)
class PolicyKind:
    """A policy: its decision function, its default configuration and empty memory."""

    decide: Callable[[Any, Any, Observation], tuple[Decision, Any]]
    config: Callable[[], Any]
    memory: Callable[[], Any]


POLICIES: Final[dict[str, PolicyKind]] = {
    "thresholds": PolicyKind(thresholds, ThresholdConfig, ThresholdMemory),
    "target-util": PolicyKind(target_util, TargetUtilConfig, TargetUtilMemory),
    "capacity": PolicyKind(capacity, CapacityConfig, CapacityMemory),
}


class PolicyRunner:
    """One policy with its memory: ``step`` decides on an observation and remembers.

    Guarantees: the decisions are those of the pure function fed the same observations in
    the same order; ``last`` is the latest decision (None before any).
    """

    def __init__(self, name: str, config: Any = None) -> None:
        if name not in POLICIES:
            raise ValueError(f"unknown policy {name!r}: choose one of {', '.join(POLICIES)}")
        self.name = name
        self._kind = POLICIES[name]
        self.config = config if config is not None else self._kind.config()
        self.memory = self._kind.memory()
        self.last: Decision | None = None

    def step(self, observation: Observation) -> Decision:
        """Decide on ``observation``."""
        decision, self.memory = self._kind.decide(self.config, self.memory, observation)
        self.last = decision
        return decision
