"""The ``capacity`` policy, after Daedalus: estimate what each node can apply, forecast the
workload, run the fewest nodes whose capacity covers it, plus two rules of this project (ring
headroom, billing-period-aware release). Pure: ``capacity(config, memory, observation)`` is
one step; its six steps and why: docs/design/architecture.md#capacity-policy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from smr.autoscale.forecast import ForecastConfig, Forecaster
from smr.autoscale.observe import (
    Decision,
    NodeReport,
    Observation,
    first_released,
    hold,
    incomplete,
)
from smr.ring.ids import NodeId

# Below this utilisation a point says little about capacity (idle overheads dominate).
UTILIZATION_MIN: Final = 0.05
# Lines through points this close in utilisation are noise: use throughput / utilisation.
UTILIZATION_SPREAD_MIN: Final = 0.05


@dataclass(frozen=True)
class Regression:
    """An online least-squares line of throughput (y) on utilisation (x), each older point
    weighted ``decay`` times less per new one (so a node whose cost per tuple changes is
    re-learned)."""

    weight: float = 0.0
    sum_x: float = 0.0
    sum_y: float = 0.0
    sum_xx: float = 0.0
    sum_xy: float = 0.0

    def add(self, x: float, y: float, decay: float) -> Regression:
        """The line with one more point."""
        return Regression(
            self.weight * decay + 1,
            self.sum_x * decay + x,
            self.sum_y * decay + y,
            self.sum_xx * decay + x * x,
            self.sum_xy * decay + x * y,
        )

    def at(self, x: float) -> float | None:
        """The throughput the line gives at utilisation ``x`` (None before enough points)."""
        if self.weight < 1:
            return None
        mean_x, mean_y = self.sum_x / self.weight, self.sum_y / self.weight
        if mean_x < UTILIZATION_MIN:
            return None
        var_x = self.sum_xx / self.weight - mean_x * mean_x
        if var_x < UTILIZATION_SPREAD_MIN**2:
            return mean_y / mean_x * x  # one operating point: proportional (Daedalus' quick form)
        slope = (self.sum_xy / self.weight - mean_x * mean_y) / var_x
        return max(0.0, mean_y + slope * (x - mean_x))


@dataclass(frozen=True)
class CapacityConfig:
    """The policy's parameters (times in seconds of the controller's clock)."""

    utilization_max: float = 0.95
    """Plan to use at most this share of the estimated capacity (the estimate reads a hair
    under a node's true capacity when one node is hotter than the rest: at 0.9, a load
    that 4 nodes serve at 90% got a 5th node every time)."""
    average_s: float = 10.0
    """The recent workload is averaged over this long."""
    forecast: ForecastConfig = field(default_factory=ForecastConfig)
    cooldown_s: float = 10.0
    regression_decay: float = 0.995
    recovery_target_s: float | None = 5.0
    """Ring headroom: a failure of the hottest node is caught up within this long (None:
    the rule is off)."""
    detect_s: float = 0.3
    """Failure to takeover (the recovery benchmark's median is about 0.25 s)."""
    relief_s: float = 2.5
    """Takeover until the nodes a scale-out adds serve beside the neighbour (a poll, a
    decision and a join)."""
    relief_nodes: int = 2
    """How many nodes a scale-out after a failure adds beside the neighbour at most."""
    join_s: float = 3.0
    """A decision to the nodes it adds serving (their processes start side by side in
    about 1.6 s on two cores, a join takes a fraction of a second, a poll up to one): the
    forecast must cover at least this far."""
    scale_in_margin_s: float = 5.0
    """Scale in only if the forecast stays low for ``join_s`` and this margin: a node
    released now could not be back before the load returns."""
    scale_in_settle_s: float = 5.0
    """Scale in only to the highest count recommended over this long, once the
    recommendations stopped falling."""
    drain_s: float = 5.0
    """Scale in only if the backlog drains within this long at the smaller count."""
    backlog_saturated_s: float = 2.0
    """A backlog over this many seconds of workload means the ring is saturated."""
    saturated_utilization: float = 0.97
    """A node this busy applies all it can: the mappers wait for it, so the workload the
    ring sees is only a floor of what is offered."""
    saturated_growth: float = 2.0
    """A saturated ring (not just scaled) plans for this many times what it applies: the
    workload waiting at the mappers cannot be measured, and growing step by step would
    take a decision per step (doubling is what HPA allows per period by default)."""
    billing_period_s: float | None = None
    """A node is paid for in periods from its start (None: release at once)."""
    release_window_s: float = 10.0
    """Release a node only within this long of the end of its paid period."""


@dataclass(frozen=True)
class CapacityMemory:
    """What the policy has learned: a line per node, the forecast, its last action."""

    lines: Mapping[NodeId, Regression] = field(default_factory=dict)
    forecaster: Forecaster = field(default_factory=Forecaster)
    acted_at_s: float = -math.inf
    recommended: tuple[tuple[float, int], ...] = ()
    """The counts step 5 chose over the last ``scale_in_settle_s``, as ``(time, count)``."""


@dataclass(frozen=True)
class Capacities:
    """The capacity estimate of one step."""

    node_full_per_s: float
    """Mean capacity of one node at full utilisation."""
    skew: float
    """The share of the nodes' full capacity the key distribution lets the ring use (the
    hottest node saturates first), 0 to 1."""
    hot_factor: float
    """The hottest node's applied rate over the mean (1 when even)."""
    now_per_s: float
    """The ring's capacity at its current size."""

    def at(self, nodes: int) -> float:
        """The capacity of ``nodes`` nodes (the ring's now when that is its size)."""
        return nodes * self.node_full_per_s * self.skew


def capacity(
    config: CapacityConfig, memory: CapacityMemory, observation: Observation
) -> tuple[Decision, CapacityMemory]:
    """One step of the capacity policy (the module docstring's steps)."""
    now = observation.now_s
    # 1. Learn.
    memory = learn(config, memory, observation)
    forecaster = memory.forecaster
    # 2.
    why_not = incomplete(observation)
    if why_not is not None:
        return hold(observation, f"waiting: {why_not}"), memory
    # 3.
    estimate = capacities(config, memory, observation)
    if estimate is None:
        return hold(observation, "waiting: no node has been measured at work yet"), memory
    count = len(observation.nodes)
    samples = max(1, round(config.average_s / config.forecast.interval_s))
    seasonal = forecaster.seasonal(config.forecast)
    # Without a period, the recent average too (decisions are meant to last); with one,
    # the forecast knows when the load falls and rises.
    average = 0.0 if seasonal else forecaster.average(samples)
    # Nodes asked for now serve in join_s: a scale-out plans for the forecast that far;
    # a scale-in only if the load stays low a margin longer (a node released now could
    # not be back in time).
    peak = forecaster.peak(config.forecast, config.join_s)
    peak_kept = forecaster.peak(config.forecast, config.join_s + config.scale_in_margin_s)
    # The latest sample too: after a step, the new level is the best forecast there is.
    # And the backlog (the nodes' and the source's), drained within drain_s.
    draining = observation.backlog_tuples / config.drain_s
    latest = forecaster.average(1)
    demand = max(average, peak, latest) + draining
    demand_kept = max(demand, peak_kept + draining)
    usable = config.utilization_max
    # Without the source's figures, a saturated ring's workload is a floor (with them, the
    # workload and the lag at the source are known, and the demand above covers both).
    hottest = max(node.utilization for node in observation.nodes)
    saturated = observation.source is None and hottest >= config.saturated_utilization
    cooling = now - memory.acted_at_s < config.cooldown_s
    if saturated and not cooling:
        demand = max(demand, estimate.now_per_s * config.saturated_growth * usable)
        demand_kept = max(demand_kept, demand)

    def decided(nodes: int, reason: str, release: tuple[NodeId, ...] = ()) -> Decision:
        return Decision(nodes, reason, release, round(estimate.at(nodes), 1), round(peak, 1))

    # 4. Shortly after an action, a saturated ring is catching up what waited at the
    #    mappers: what it applies then is that backlog, not the workload.
    if cooling and saturated:
        return decided(count, "recently scaled; catching up what waited"), memory
    if cooling and estimate.now_per_s * usable >= demand_kept:
        return decided(count, "recently scaled; capacity covers the workload"), memory
    # 5.
    chosen = fewest_nodes(config, estimate, observation, demand)
    kept = fewest_nodes(config, estimate, observation, demand_kept)
    memory = replace(memory, recommended=_window(memory.recommended, now, kept, config))
    if chosen > count:
        reason = (
            f"workload {demand:,.0f}/s (average {average:,.0f}/s, forecast peak "
            f"{peak:,.0f}/s{', saturated' if saturated else ''}): {count} nodes cover "
            f"{estimate.at(count) * usable:,.0f}/s"
        )
        return decided(chosen, reason), replace(memory, acted_at_s=now)
    # 6. Scale in once the recommendations stopped falling, to the highest of them, and only
    #    by nodes at the end of a paid period.
    settled = kept if seasonal else _settled(memory.recommended, now, config)
    if settled is None or settled >= count:
        return decided(count, f"{count} nodes cover the workload ({demand_kept:,.0f}/s)"), memory
    release = releasable_nodes(config, observation)[: count - settled]
    if not release:
        return decided(count, f"{settled} nodes would do; no paid period ends soon"), memory
    reason = f"{count - len(release)} nodes cover the workload ({demand_kept:,.0f}/s)"
    return decided(count - len(release), reason, release), replace(memory, acted_at_s=now)


def fewest_nodes(
    config: CapacityConfig, estimate: Capacities, observation: Observation, demand: float
) -> int:
    """Step 5: the fewest nodes within the bounds whose capacity (at ``utilization_max``)
    covers ``demand`` and whose ring headroom holds (the most allowed when none does)."""
    for nodes in range(observation.nodes_min, observation.nodes_max + 1):
        if estimate.at(nodes) * config.utilization_max < demand:
            continue
        if config.recovery_target_s is not None and (
            recovery_s(config, estimate, demand, nodes, observation.nodes_max)
            > config.recovery_target_s
        ):
            continue
        return nodes
    return observation.nodes_max


def _window(
    recommended: tuple[tuple[float, int], ...], now: float, nodes: int, config: CapacityConfig
) -> tuple[tuple[float, int], ...]:
    """The recommendations of the last ``scale_in_settle_s`` and half as long again (polls
    come a little over a second apart: the window must still span the settle time), with
    ``nodes`` at ``now``."""
    kept = [(at, n) for at, n in recommended if now - at <= config.scale_in_settle_s * 1.5]
    return (*kept, (now, nodes))


def _settled(
    recommended: tuple[tuple[float, int], ...], now: float, config: CapacityConfig
) -> int | None:
    """The highest count recommended over the settle window, if the recommendations have
    stopped falling (the highest of the window's recent half is as high) and the window is
    full; else None. Scaling in to it is one decision, not a staircase."""
    settle_s = config.scale_in_settle_s
    if not recommended or now - recommended[0][0] < settle_s * 0.9:
        return None
    highest = max(n for at, n in recommended if now - at <= settle_s)
    recent = max(n for at, n in recommended if now - at <= settle_s / 2)
    return highest if recent == highest else None


def learn(
    config: CapacityConfig, memory: CapacityMemory, observation: Observation
) -> CapacityMemory:
    """Step 1: the lines with every fresh report at work, the forecast with the workload."""
    lines = dict(memory.lines)
    for node in observation.nodes:
        if node.changing or node.utilization < UTILIZATION_MIN:
            continue
        line = lines.get(node.node, Regression())
        lines[node.node] = line.add(node.utilization, node.applied_per_s, config.regression_decay)
    current = {node.node for node in observation.nodes}
    lines = {node: line for node, line in lines.items() if node in current}
    forecaster = memory.forecaster.observe(
        config.forecast, observation.workload_per_s, observation.now_s
    )
    return replace(memory, lines=lines, forecaster=forecaster)


def capacities(
    config: CapacityConfig, memory: CapacityMemory, observation: Observation
) -> Capacities | None:
    """Step 3: the capacity estimate (None while no node's line is known)."""
    lines = memory.lines
    full = [lines[n.node].at(1.0) for n in observation.nodes if n.node in lines]
    known = [value for value in full if value]
    if not known:
        return None
    node_full = sum(known) / len(known)
    nodes = observation.nodes
    hottest = max(n.utilization for n in nodes)
    mean_applied = sum(n.applied_per_s for n in nodes) / len(nodes)
    hot_factor = max(n.applied_per_s for n in nodes) / mean_applied if mean_applied > 0 else 1.0
    if hottest >= UTILIZATION_MIN:
        # The hottest node reaches full utilisation first; the others at their share of it.
        usable = 0.0
        for node in nodes:
            line = memory.lines.get(node.node)
            at = line.at(node.utilization / hottest) if line is not None else None
            usable += at if at is not None else node_full * node.utilization / hottest
        skew = min(1.0, usable / (node_full * len(nodes)))
    else:
        skew = 1.0 / hot_factor
    now = node_full * skew * len(nodes)
    workload = memory.forecaster.average(1)
    if observation.backlog_tuples > workload * config.backlog_saturated_s > 0:
        # Saturated: what the ring applies is what it can apply.
        now = min(now, observation.applied_per_s)
        skew = now / (node_full * len(nodes))
    return Capacities(node_full, skew, hot_factor, now)


def recovery_s(
    config: CapacityConfig,
    estimate: Capacities,
    workload: float,
    nodes: int,
    nodes_max: int | None = None,
) -> float:
    """The ring-headroom rule: how long until a failure of the hottest of ``nodes`` nodes
    is caught up at ``workload`` (``inf`` when it never is).

    The hottest node applies ``hot_factor * workload / nodes``; its clockwise neighbour,
    assumed as hot, takes its load after ``detect_s``, with the backlog of that time. The
    neighbour alone drains it with what it can apply beyond both loads (or the backlog
    grows, when it cannot apply both), until a scale-out relieves it (``relief_s``): up to
    ``relief_nodes`` nodes (as many as ``nodes_max`` allows after the failure; all of them
    when it is None) join beside the neighbour and share the two ranges, and the backlog
    drains at their spare capacity together.
    """
    if nodes < 2:
        return math.inf
    capacity_node = estimate.node_full_per_s
    load = estimate.hot_factor * workload / nodes
    backlog = load * config.detect_s
    alone_per_s = capacity_node - 2 * load  # the neighbour's drain (negative: growth)
    if alone_per_s > 0 and backlog / alone_per_s <= config.relief_s:
        return config.detect_s + backlog / alone_per_s
    backlog -= alone_per_s * config.relief_s
    room = config.relief_nodes if nodes_max is None else nodes_max - (nodes - 1)
    added = max(0, min(config.relief_nodes, room))
    spare = (1 + added) * capacity_node - 2 * load
    if spare <= 0:
        return math.inf
    return config.detect_s + config.relief_s + backlog / spare


def releasable_nodes(config: CapacityConfig, observation: Observation) -> tuple[NodeId, ...]:
    """Step 6: the nodes that may be released now, the nearest to the end of its paid
    period first (every node, last started first, when there are no periods)."""
    now = observation.now_s
    if config.billing_period_s is None:
        return first_released(observation, len(observation.nodes))
    period = config.billing_period_s

    def left_s(node: NodeReport) -> float:
        return period - (now - node.started_at_s) % period

    ending = [n for n in observation.nodes if left_s(n) <= config.release_window_s]
    return tuple(n.node for n in sorted(ending, key=lambda n: (left_s(n), n.node)))
