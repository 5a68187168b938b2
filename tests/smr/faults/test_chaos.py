"""Chaos schedules (``smr.faults.chaos``): parsed with clear errors, targets chosen by their rule
the
same way every time, and played in time order with pauses resumed and faults healed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from smr.faults.backends import FaultLog
from smr.faults.chaos import (
    ChaosSchedule,
    ScheduleError,
    load_schedule,
    parse_schedule,
    play,
    resolve,
)

SCHEDULE = """
seed = 3

[[fault]]
at = "8s"
do = "partition"
nodes = ["n2"]
duration = "6s"

[[fault]]
at = "5s"
do = "kill"
pick = "random-live"

[[fault]]
at = "9s"
do = "pause"
pick = "random-live"
count = 2
duration = "1s"

[[fault]]
at = "16s"
do = "loss"
nodes = ["n3"]
share = "5%"
duration = "2s"
"""

NODES = ["n0", "n1", "n2", "n3"]


class Recorder:
    """A backend that records what it is asked, at what (virtual) time."""

    name = "test"

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.calls: list[tuple[float, str, tuple[str, ...]]] = []

    def _note(self, verb: str, *args: str) -> str:
        self.calls.append((self.clock[0], verb, args))
        return verb

    def nodes(self) -> list[str]:
        return list(NODES)

    def kill(self, node: str) -> str:
        return self._note("kill", node)

    def pause(self, node: str) -> str:
        return self._note("pause", node)

    def resume(self, node: str) -> str:
        return self._note("resume", node)

    def partition(self, group_a: Sequence[str], group_b: Sequence[str], duration_ms: int) -> str:
        return self._note("partition", *group_a, "/", *group_b)

    def delay(self, node: str, delay_ms: int, jitter_ms: int, duration_ms: int) -> str:
        return self._note("delay", node)

    def loss(self, node: str, loss_ppm: int, duration_ms: int) -> str:
        return self._note("loss", node, str(loss_ppm))

    def heal(self) -> str:
        return self._note("heal")


def schedule_from(text: str, tmp_path: Path) -> ChaosSchedule:
    path = tmp_path / "chaos.toml"
    path.write_text(text)
    return load_schedule(path)


def test_a_schedule_plays_in_time_order_resumes_its_pauses_and_logs_each_action(
    tmp_path: Path,
) -> None:
    schedule = schedule_from(SCHEDULE, tmp_path)
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    backend = Recorder(clock)
    log = FaultLog(tmp_path / "faults.jsonl", "test")
    actions = play(schedule, backend, log, sleep=sleep, clock=lambda: clock[0])
    (killed,) = [args[0] for _, verb, args in backend.calls if verb == "kill"]
    paused = sorted(args[0] for _, verb, args in backend.calls if verb == "pause")
    assert killed not in paused and len(paused) == 2  # random-live skips the killed node
    assert [(round(t, 3), verb) for t, verb, _ in backend.calls] == [
        (5.0, "kill"),
        (8.0, "partition"),
        (9.0, "pause"),
        (9.0, "pause"),
        (10.0, "resume"),
        (10.0, "resume"),
        (16.0, "loss"),
    ]
    assert clock[0] == pytest.approx(18.0)  # returns once the loss has healed
    # One line per step (the pause of two nodes is one) and per resume.
    assert actions == 6 == len((tmp_path / "faults.jsonl").read_text().splitlines())
    again = resolve(schedule, NODES)
    assert [targets for _, targets in again] == [targets for _, targets in resolve(schedule, NODES)]


def test_an_interrupted_schedule_resumes_its_paused_nodes_and_heals(tmp_path: Path) -> None:
    schedule = schedule_from(SCHEDULE, tmp_path)
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds
        if clock[0] >= 9.5:
            raise KeyboardInterrupt

    backend = Recorder(clock)
    with pytest.raises(KeyboardInterrupt):
        play(schedule, backend, FaultLog(None, "test"), sleep=sleep, clock=lambda: clock[0])
    verbs = [verb for _, verb, _ in backend.calls]
    assert verbs[-3:] == ["resume", "resume", "heal"], verbs


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "no \\[\\[fault\\]\\] steps"),
        ('[[fault]]\ndo = "explode"\nnodes = ["n1"]', "do must be one of"),
        ('[[fault]]\ndo = "pause"\nnodes = ["n1"]', "needs a duration"),
        ('[[fault]]\ndo = "kill"', "name the targets"),
        ('[[fault]]\ndo = "kill"\nnodes = ["n1"]\nwhen = "5s"', "unknown fields \\['when'\\]"),
        ('[[fault]]\ndo = "delay"\nnodes = ["n1"]\nduration = "1s"', "delay = "),
        ('[[fault]]\ndo = "kill"\nat = "soon"\nnodes = ["n1"]', "fault 1: not a duration"),
        ("[[fault]\n", "is not TOML"),
    ],
)
def test_a_bad_schedule_is_refused_saying_where(text: str, error: str, tmp_path: Path) -> None:
    with pytest.raises(ScheduleError, match=error):
        schedule_from(text, tmp_path)


def test_a_step_naming_an_unknown_node_or_too_many_is_refused() -> None:
    unknown = parse_schedule({"fault": [{"do": "kill", "nodes": ["n9"]}]}, "s")
    with pytest.raises(ScheduleError, match="unknown nodes \\['n9'\\]"):
        resolve(unknown, NODES)
    greedy = parse_schedule({"fault": [{"do": "kill", "pick": "random", "count": 5}]}, "s")
    with pytest.raises(ScheduleError, match="wants 5"):
        resolve(greedy, NODES)
    with pytest.raises(ScheduleError, match="cannot read"):
        load_schedule(Path("/nonexistent/chaos.toml"))


def test_the_shipped_compose_schedule_parses_and_names_the_compose_nodes() -> None:
    shipped = load_schedule(Path(__file__).resolve().parents[3] / "compose" / "chaos.toml")
    resolved = resolve(shipped, NODES)
    assert [step.action for step, _ in resolved] == ["kill", "partition", "delay", "loss"]
    assert all(set(targets) <= set(NODES) for _, targets in resolved)
