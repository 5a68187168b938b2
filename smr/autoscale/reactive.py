"""The two reactive baselines: ``thresholds`` (the thesis' queue-length and CPU thresholds)
and ``target-util`` (a CPU-utilisation target, as the Kubernetes HPA computes it).

Each is a pure function ``decide(config, memory, observation) -> (decision, memory)``: the
memory is a frozen value the caller keeps and passes back, so the simulation and property
tests can drive a policy step by step and replay it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Final

from smr.autoscale.observe import (
    Decision,
    Observation,
    clamp,
    first_released,
    hold,
    incomplete,
)

# -- thresholds -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ThresholdConfig:
    """Scale out by ``step`` when some node is over a high threshold (utilisation or queue)
    for ``sustain_s``; scale in by ``step`` when every node is under both low thresholds for
    ``sustain_s``; nothing within ``cooldown_s`` of the last action. The gap between the
    high and low thresholds is the hysteresis."""

    utilization_high: float = 0.8
    utilization_low: float = 0.3
    queue_high_tuples: int = 20_000
    queue_low_tuples: int = 1_000
    sustain_s: float = 3.0
    cooldown_s: float = 10.0
    step: int = 1


@dataclass(frozen=True)
class ThresholdMemory:
    """Since when the ring has been over (or under) its thresholds, and the last action."""

    over_since_s: float | None = None
    under_since_s: float | None = None
    acted_at_s: float = -math.inf


def thresholds(
    config: ThresholdConfig, memory: ThresholdMemory, observation: Observation
) -> tuple[Decision, ThresholdMemory]:
    """The thesis' threshold policy with hysteresis and a cooldown.

    Guarantees: no action on incomplete figures or within the cooldown; one step at a time;
    never outside ``[nodes_min, nodes_max]``.
    """
    now = observation.now_s
    why_not = incomplete(observation)
    if why_not is not None:
        # The sustain times start again once the figures are complete.
        return hold(observation, f"waiting: {why_not}"), ThresholdMemory(
            acted_at_s=memory.acted_at_s
        )
    over = [
        n
        for n in observation.nodes
        if n.utilization > config.utilization_high or n.backlog_tuples > config.queue_high_tuples
    ]
    under = all(
        n.utilization < config.utilization_low and n.backlog_tuples < config.queue_low_tuples
        for n in observation.nodes
    )
    memory = replace(
        memory,
        over_since_s=(memory.over_since_s if memory.over_since_s is not None else now)
        if over
        else None,
        under_since_s=(memory.under_since_s if memory.under_since_s is not None else now)
        if under
        else None,
    )
    count = len(observation.nodes)
    if now - memory.acted_at_s < config.cooldown_s:
        return hold(observation, "cooling down after the last action"), memory
    if memory.over_since_s is not None and now - memory.over_since_s >= config.sustain_s:
        wanted = clamp(observation, count + config.step)
        if wanted > count:
            reason = f"{over[0].node} over its thresholds for {now - memory.over_since_s:.0f} s"
            return Decision(wanted, reason), replace(memory, acted_at_s=now, over_since_s=None)
    if memory.under_since_s is not None and now - memory.under_since_s >= config.sustain_s:
        wanted = clamp(observation, count - config.step)
        if wanted < count:
            released = first_released(observation, count - wanted)
            reason = f"every node under its low thresholds for {now - memory.under_since_s:.0f} s"
            return Decision(wanted, reason, released), replace(
                memory, acted_at_s=now, under_since_s=None
            )
    return hold(observation, "within thresholds"), memory


# -- target-util ------------------------------------------------------------------------------

# The HPA leaves the count alone while the ratio to the target is within this tolerance.
HPA_TOLERANCE: Final = 0.1


@dataclass(frozen=True)
class TargetUtilConfig:
    """Keep the mean utilisation at ``target``: ``ceil(nodes * mean / target)`` nodes, as
    the HPA computes it; scale out at once, scale in to the largest count recommended over
    the last ``stabilization_s`` (the HPA's scale-down stabilisation window)."""

    target: float = 0.8
    stabilization_s: float = 60.0


@dataclass(frozen=True)
class TargetUtilMemory:
    """The recommendations of the stabilisation window, oldest first."""

    recommended: tuple[tuple[float, int], ...] = field(default_factory=tuple)


def target_util(
    config: TargetUtilConfig, memory: TargetUtilMemory, observation: Observation
) -> tuple[Decision, TargetUtilMemory]:
    """An HPA-like utilisation target.

    Guarantees: no action on incomplete figures; scaling in never goes below any count
    recommended within the stabilisation window; never outside ``[nodes_min, nodes_max]``.
    """
    now = observation.now_s
    why_not = incomplete(observation)
    if why_not is not None:
        return hold(observation, f"waiting: {why_not}"), memory
    count = len(observation.nodes)
    mean = sum(n.utilization for n in observation.nodes) / count
    ratio = mean / config.target
    desired = count if abs(ratio - 1) <= HPA_TOLERANCE else math.ceil(count * ratio - 1e-9)
    desired = clamp(observation, desired)
    kept = [(at, n) for at, n in memory.recommended if now - at <= config.stabilization_s]
    window = (*kept, (now, desired))
    memory = TargetUtilMemory(window)
    if desired > count:
        reason = f"mean utilization {mean:.0%} over the {config.target:.0%} target"
        return Decision(desired, reason), memory
    stable = max(wanted for _, wanted in window)
    if stable < count:
        released = first_released(observation, count - stable)
        reason = (
            f"mean utilization {mean:.0%}: {stable} nodes would do for the last "
            f"{config.stabilization_s:.0f} s"
        )
        return Decision(stable, reason, released), memory
    return hold(observation, f"mean utilization {mean:.0%}"), memory
