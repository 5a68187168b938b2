"""Plays a scenario of ``smr.faults.scenarios`` against a local cluster's node processes, and
checks the outcome it expects.

The local process backend carries out faults as ``smr fault`` does: a
:class:`~smr.faults.model.Kill` is SIGKILL; a :class:`~smr.faults.model.Pause` is SIGSTOP,
then SIGCONT ``duration_ms`` later; a :class:`~smr.faults.model.Partition` or a
:class:`~smr.faults.model.Delay` is a rule for the in-node network filter of each node it touches
(``smr.faults.backends.emulated_rules``), which ends by itself. Times count from the start
of the feed: the moment a node reports the first tuple applied (the simulation's mappers
start at virtual time 0).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import psutil

from smr.client.control import Client, NodeUnreachable
from smr.faults.backends import emulated_rules, send_rules
from smr.faults.model import Delay, FaultSchedule, Forge, Kill, Partition, Pause, Stall, Starve
from smr.faults.scenarios import Scenario

# A signal sent later than this after its time means the run did not follow the schedule
# (a 250 ms pause must not become 400 ms): the test fails rather than check the wrong run.
SIGNAL_LATE_MS_MAX: Final = 100
# A filter rule is set when every node it names has read it, between two turns of its loop,
# and lasts its duration from then: a late rule starts the fault later but does not lengthen
# it. Under load on two cores, one node's turn (a takeover, a snapshot) took just over
# 100 ms, and the run was refused though it followed the schedule.
RULES_LATE_MS_MAX: Final = 250
# How long a starved process runs between two gaps (smr.faults.model.Starve): a node's timer tick.
STARVE_TURN_MS: Final = 50
# Polling the nodes' status: how often, and for how long at most.
POLL_INTERVAL_S: Final = 0.02
FEED_START_TIMEOUT_S: Final = 30.0
SETTLE_TIMEOUT_S: Final = 20.0


def why_the_local_backend_cannot_run(scenario: Scenario) -> str | None:
    """None if signals and the in-node network filter can carry out every fault of
    ``scenario``; otherwise why not."""
    for fault in scenario.schedule:
        if isinstance(fault, Stall):
            return "a stall is a slow reduce call: tests/e2e/test_slow_reducer.py runs one"
        if isinstance(fault, Forge):
            return "a forged view: tests/e2e/test_forged_view.py sends one to real processes"
        if not isinstance(fault, Kill | Pause | Starve | Partition | Delay):
            return f"the local backend does not carry out a {type(fault).__name__.lower()}"
    return None


@dataclass(frozen=True)
class _Signal:
    at_ms: int
    node: str
    signum: signal.Signals


@dataclass(frozen=True)
class _Rules:
    """Filter rules, by node, sent at ``at_ms``: they end by themselves."""

    at_ms: int
    rules: dict[str, bytes]


def _rules(schedule: FaultSchedule, nodes: list[str]) -> list[_Rules]:
    rules: list[_Rules] = []
    for fault in schedule:
        if isinstance(fault, Partition):
            by_node = emulated_rules(
                "cut",
                nodes,
                fault.group_a,
                others=fault.group_b,
                duration_ms=fault.duration_ms,
            )
            rules.append(_Rules(fault.at_ms, by_node))
        elif isinstance(fault, Delay):
            by_node = emulated_rules(
                "delay", nodes, [fault.node], delay_ms=fault.extra_ms, duration_ms=fault.duration_ms
            )
            rules.append(_Rules(fault.at_ms, by_node))
    return rules


def _signals(schedule: FaultSchedule) -> list[_Signal]:
    signals: list[_Signal] = []
    for fault in schedule:
        if isinstance(fault, Partition | Delay):
            continue
        if isinstance(fault, Kill):
            signals.append(_Signal(fault.at_ms, fault.node, signal.SIGKILL))
        elif isinstance(fault, Pause):
            signals.append(_Signal(fault.at_ms, fault.node, signal.SIGSTOP))
            signals.append(_Signal(fault.end_ms, fault.node, signal.SIGCONT))
        elif isinstance(fault, Starve):
            # The process gets the CPU in turns: stopped for a gap, then run for a tick.
            for gap_at in range(fault.at_ms, fault.end_ms, fault.gap_ms + STARVE_TURN_MS):
                signals.append(_Signal(gap_at, fault.node, signal.SIGSTOP))
                signals.append(_Signal(gap_at + fault.gap_ms, fault.node, signal.SIGCONT))
        else:
            raise ValueError(f"the local backend cannot carry out {fault.describe().strip()}")
    return sorted(signals, key=lambda s: s.at_ms)


def statuses(addrs: Mapping[str, str], client: Client) -> dict[str, dict[str, Any]]:
    """Each node's status map, or ``{"state": "unreachable"}``."""
    rows: dict[str, dict[str, Any]] = {}
    for node, addr in addrs.items():
        try:
            rows[node] = {"state": "up", **client.status(addr)}
        except NodeUnreachable:
            rows[node] = {"state": "unreachable"}
    return rows


def wait_for_feed_start(addrs: Mapping[str, str], feed: subprocess.Popen[str]) -> float:
    """The ``time.monotonic()`` at which a node first reports a tuple applied."""
    client = Client(timeout_ms=1000)
    deadline = time.monotonic() + FEED_START_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            rows = statuses(addrs, client).values()
            if any(row.get("tuples_applied", 0) > 0 for row in rows):
                return time.monotonic()
            assert feed.poll() is None, "the feed ended before any node applied a tuple"
            time.sleep(POLL_INTERVAL_S)
    finally:
        client.close()
    raise AssertionError(f"no node applied a tuple within {FEED_START_TIMEOUT_S} s")


def play(
    schedule: FaultSchedule,
    pids: Mapping[str, int],
    feed: subprocess.Popen[str],
    started_s: float,
    addrs: Mapping[str, str] | None = None,
) -> None:
    """Send each fault's signals, and its filter rules to the nodes at ``addrs``, at its
    time from ``started_s`` (``time.monotonic()``); every fault must start while ``feed``
    still runs. A paused node is resumed whatever happens."""
    paused: set[str] = set()
    events: list[_Signal | _Rules] = [*_signals(schedule)]
    if addrs is not None:
        events += _rules(schedule, sorted(addrs))
    client = Client(timeout_ms=1000)
    try:
        for sent in sorted(events, key=lambda event: event.at_ms):
            due_s = started_s + sent.at_ms / 1000
            time.sleep(max(0.0, due_s - time.monotonic()))
            if isinstance(sent, _Rules):
                assert feed.poll() is None, f"the feed ended before {sent.at_ms} ms"
                assert addrs is not None
                send_rules(client, sent.rules, dict(addrs))
                late_ms = (time.monotonic() - due_s) * 1000
                assert late_ms <= RULES_LATE_MS_MAX, f"{sent} set {late_ms:.0f} ms late"
                continue
            if sent.signum is not signal.SIGCONT:
                assert feed.poll() is None, f"the feed ended before {sent.at_ms} ms"
            os.kill(pids[sent.node], sent.signum)
            late_ms = (time.monotonic() - due_s) * 1000
            assert late_ms <= SIGNAL_LATE_MS_MAX, f"{sent} sent {late_ms:.0f} ms late"
            if sent.signum is signal.SIGSTOP:
                paused.add(sent.node)
            elif sent.signum is signal.SIGCONT:
                paused.discard(sent.node)
    finally:
        client.close()
        for node in paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pids[node], signal.SIGCONT)


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie has)."""
    try:
        status: str = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return True
    return bool(status == psutil.STATUS_ZOMBIE)


def outcome_differences(
    scenario: Scenario, rows: Mapping[str, Mapping[str, Any]], pids: Mapping[str, int]
) -> list[str]:
    """How the cluster's state (``rows``: each node's status) differs from what the
    scenario expects (``smr.faults.scenarios``), in words; empty when it does not."""
    expect = scenario.expect
    differences: list[str] = []
    for node in scenario.killed:
        if not gone(pids[node]):
            differences.append(f"{node} was killed but its process {pids[node]} still runs")
    live = [node for node in scenario.node_ids if node not in scenario.killed]
    if down := [node for node in live if rows[node]["state"] != "up"]:
        return [*differences, f"{down} do not answer"]
    owners = [node for node in live if rows[node]["range_share"] > 0]
    if owners != list(scenario.owners_at_end):
        differences.append(f"the owners are {owners}, not {list(scenario.owners_at_end)}")
    shares = sum(rows[node]["range_share"] for node in live)
    if not math.isclose(shares, 1.0):
        differences.append(f"the live nodes' ranges cover {shares} of the ring, not all of it")
    for node in live:
        row = rows[node]
        taken = [record["dead"] for record in row["takeover_records"]]
        if taken != expect.taken_over_by(node) or row["takeovers"] != len(taken):
            differences.append(
                f"{node} took over {taken} ({row['takeovers']} takeovers), "
                f"not {expect.taken_over_by(node)}"
            )
        fenced = 1 if node in expect.fenced else 0
        if row["fenced"] != fenced:
            differences.append(f"{node} was fenced {row['fenced']} times, not {fenced}")
        if node in expect.quorum_missed and row["quorum_missed"] < 1:
            differences.append(f"{node} never missed a quorum")
        if node in expect.vouched and row["suspicions_vouched"] < 1:
            differences.append(f"{node} never had a suspicion vouched against")
    for node in expect.fenced:
        row = rows[node]
        rejoined = (row["incarnation"], row["status_in_view"], row["range_share"], row["keys"])
        if rejoined != (2, "standby", 0.0, 0):
            differences.append(
                f"{node} is (incarnation, status, range share, keys) {rejoined}, "
                "not rejoined empty as (2, 'standby', 0.0, 0)"
            )
    return differences


def wait_for_outcome(
    scenario: Scenario, addrs: Mapping[str, str], pids: Mapping[str, int]
) -> list[str]:
    """Poll the live nodes until their state is what ``scenario`` expects (then ``[]``) or
    ``SETTLE_TIMEOUT_S`` passes (then the last differences)."""
    live = {node: addr for node, addr in addrs.items() if node not in scenario.killed}
    client = Client(timeout_ms=1000)
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    try:
        while True:
            differences = outcome_differences(scenario, statuses(live, client), pids)
            if not differences or time.monotonic() > deadline:
                return differences
            time.sleep(POLL_INTERVAL_S * 10)
    finally:
        client.close()
