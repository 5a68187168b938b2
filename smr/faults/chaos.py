"""Chaos schedules: faults as data in a TOML file, played by ``smr fault run`` against any
backend (:mod:`smr.faults.backends`); the file's form: docs/design/faults.md#chaos.

Targets are chosen by a rule (:func:`resolve`, pure, seeded); the player (:func:`play`) does
each step at its time, waits until the last fault has healed and logs every action;
interrupted, it resumes what it paused and heals what it set.
"""

from __future__ import annotations

import random
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from smr.faults.backends import FaultBackend, FaultLog, parse_duration_ms, parse_percent_ppm

ACTIONS: Final = ("kill", "pause", "partition", "delay", "loss", "heal")
PICKS: Final = ("random", "random-live")
_KEYS: Final = {
    "at", "do", "nodes", "pick", "count", "others", "duration", "delay", "jitter", "share",
}  # fmt: skip


class ScheduleError(ValueError):
    """A chaos schedule that cannot be played, and where it is wrong."""


@dataclass(frozen=True)
class ChaosStep:
    """One fault of a schedule, its targets still a rule (``nodes`` or ``pick``)."""

    at_ms: int
    action: str
    nodes: tuple[str, ...] = ()
    pick: str | None = None
    count: int = 1
    others: tuple[str, ...] = ()
    duration_ms: int = 0
    delay_ms: int = 0
    jitter_ms: int = 0
    loss_ppm: int = 0


@dataclass(frozen=True)
class ChaosSchedule:
    """The steps in time order, and the seed of their random picks."""

    steps: tuple[ChaosStep, ...]
    seed: int = 0


def load_schedule(path: Path) -> ChaosSchedule:
    """Read and check the schedule in TOML file ``path``; ScheduleError saying where it is
    wrong (or that the file is missing)."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ScheduleError(f"cannot read {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ScheduleError(f"{path} is not TOML: {error}") from None
    return parse_schedule(raw, str(path))


def parse_schedule(raw: dict[str, Any], source: str) -> ChaosSchedule:
    """A schedule from its TOML table; ScheduleError naming the step and field at fault."""
    seed = raw.get("seed", 0)
    if not isinstance(seed, int):
        raise ScheduleError(f"{source}: seed must be an int, got {seed!r}")
    entries = raw.get("fault", [])
    if not isinstance(entries, list) or not entries:
        raise ScheduleError(f"{source}: no [[fault]] steps")
    steps = [_step(entry, f"{source}: fault {n + 1}") for n, entry in enumerate(entries)]
    return ChaosSchedule(tuple(sorted(steps, key=lambda step: step.at_ms)), seed)


def _step(entry: Any, where: str) -> ChaosStep:
    if not isinstance(entry, dict):
        raise ScheduleError(f"{where}: must be a table")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise ScheduleError(f"{where}: unknown fields {unknown} (fields: {sorted(_KEYS)})")
    action = entry.get("do")
    if action not in ACTIONS:
        raise ScheduleError(f"{where}: do must be one of {', '.join(ACTIONS)}, got {action!r}")
    try:
        step = ChaosStep(
            at_ms=parse_duration_ms(str(entry.get("at", "0s"))),
            action=action,
            nodes=_names(entry, "nodes"),
            pick=entry.get("pick"),
            count=entry.get("count", 1),
            others=_names(entry, "others"),
            duration_ms=_ms(entry, "duration"),
            delay_ms=_ms(entry, "delay"),
            jitter_ms=_ms(entry, "jitter"),
            loss_ppm=parse_percent_ppm(str(entry["share"])) if "share" in entry else 0,
        )
    except ValueError as error:
        raise ScheduleError(f"{where}: {error}") from None
    _check(step, where)
    return step


def _names(entry: dict[str, Any], key: str) -> tuple[str, ...]:
    names = entry.get(key, [])
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ValueError(f"{key} must be a list of node ids, got {names!r}")
    return tuple(names)


def _ms(entry: dict[str, Any], key: str) -> int:
    return parse_duration_ms(str(entry[key])) if key in entry else 0


def _check(step: ChaosStep, where: str) -> None:
    def fail(why: str) -> None:
        raise ScheduleError(f"{where} ({step.action}): {why}")

    if step.action == "heal":
        return
    if bool(step.nodes) == (step.pick is not None):
        fail('name the targets: nodes = [...] or pick = "random" / "random-live"')
    if step.pick is not None and step.pick not in PICKS:
        fail(f"pick must be one of {', '.join(PICKS)}, got {step.pick!r}")
    if not isinstance(step.count, int) or step.count < 1:
        fail(f"count must be an int >= 1, got {step.count!r}")
    if step.action != "kill" and step.duration_ms <= 0:
        fail("needs a duration (every fault but kill heals by itself after it)")
    if step.action in ("delay", "loss") and (len(step.nodes) > 1 or step.count > 1):
        fail("acts on one node")
    if step.action == "delay" and step.delay_ms <= 0:
        fail('needs delay = "100ms" (more than 0)')
    if step.action == "loss" and step.loss_ppm <= 0:
        fail('needs share = "5%"')


def resolve(schedule: ChaosSchedule, nodes: Sequence[str]) -> list[tuple[ChaosStep, list[str]]]:
    """Each step with its targets, chosen by its rule over ``nodes`` (the same schedule and
    nodes give the same targets). ScheduleError if a step names an unknown node or wants
    more nodes than its rule has."""
    rng = random.Random(schedule.seed)
    killed: set[str] = set()
    resolved: list[tuple[ChaosStep, list[str]]] = []
    for step in schedule.steps:
        if step.action == "heal":
            resolved.append((step, []))
            continue
        if step.pick is None:
            targets = list(step.nodes)
        else:
            pool = sorted(n for n in nodes if step.pick == "random" or n not in killed)
            if len(pool) < step.count:
                raise ScheduleError(f"step at {step.at_ms} ms wants {step.count} of {pool}")
            targets = rng.sample(pool, step.count)
        unknown = sorted(set(targets + list(step.others)) - set(nodes))
        if unknown:
            raise ScheduleError(f"step at {step.at_ms} ms names unknown nodes {unknown}")
        if step.action == "kill":
            killed.update(targets)
        resolved.append((step, targets))
    return resolved


def play(
    schedule: ChaosSchedule,
    backend: FaultBackend,
    log: FaultLog,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Do every step at its time from now against ``backend``, logging each action; return
    once the last fault has healed. Returns how many actions ran. A step that fails stops
    the schedule (raising ClusterError); whatever happens, paused nodes are resumed and
    network faults healed before it returns or raises."""
    nodes = backend.nodes()
    resolved = resolve(schedule, nodes)
    started = clock()
    resumes: list[tuple[int, str]] = []
    ends_ms = 0
    actions = 0

    def wait_until(at_ms: int) -> None:
        nonlocal actions
        while True:
            due = sorted(r for r in resumes if r[0] <= at_ms)
            next_ms = due[0][0] if due else at_ms
            sleep(max(0.0, started + next_ms / 1000 - clock()))
            if not due:
                return
            resumes.remove(due[0])
            log.record("resume", [due[0][1]], backend.resume(due[0][1]))
            actions += 1

    try:
        for step, targets in resolved:
            wait_until(step.at_ms)
            how, extra = _do(step, targets, nodes, backend)
            log.record(step.action, targets, how, **extra)
            actions += 1
            ends_ms = max(ends_ms, step.at_ms + step.duration_ms)
            if step.action == "pause":
                resumes.extend((step.at_ms + step.duration_ms, node) for node in targets)
        wait_until(ends_ms)
    finally:
        for _, node in resumes:
            log.record("resume", [node], backend.resume(node))
        if resumes or clock() - started < ends_ms / 1000:
            log.record("heal", nodes, backend.heal())
    return actions


def _do(
    step: ChaosStep, targets: list[str], nodes: Sequence[str], backend: FaultBackend
) -> tuple[str, dict[str, Any]]:
    duration = {"duration_ms": step.duration_ms}
    if step.action == "kill":
        return " / ".join(backend.kill(node) for node in targets), {}
    if step.action == "pause":
        return " / ".join(backend.pause(node) for node in targets), duration
    if step.action == "partition":
        others = list(step.others) or [n for n in nodes if n not in targets]
        return backend.partition(targets, others, step.duration_ms), {**duration, "others": others}
    if step.action == "delay":
        how = backend.delay(targets[0], step.delay_ms, step.jitter_ms, step.duration_ms)
        return how, {**duration, "delay_ms": step.delay_ms, "jitter_ms": step.jitter_ms}
    if step.action == "loss":
        how = backend.loss(targets[0], step.loss_ppm, step.duration_ms)
        return how, {**duration, "loss_ppm": step.loss_ppm}
    return backend.heal(), {}
