"""What a simulated run reports: the nodes' warnings captured as the run's events
(:func:`node_events`), the figures of its result, and the failure that names its seed, its
schedule, the command that replays it and its last events (:class:`SimulationFailure`)."""

from __future__ import annotations

import logging
import traceback
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from smr.faults.model import FaultSchedule
from smr.mapper.emitter import Emitter
from smr.sim.clock import Scheduler
from smr.sim.config import SimConfig

# The last events a failure report shows.
FAILURE_EVENTS_SHOWN = 60


class SimulationFailure(AssertionError):
    """A simulated run broke an invariant; the message starts with ``seed=<seed>``."""


class _EventLog(logging.Handler):
    """Collects the nodes' warnings and errors with the virtual time and the node."""

    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__(logging.WARNING)
        self._scheduler = scheduler

    def emit(self, record: logging.LogRecord) -> None:
        scheduler = self._scheduler
        scheduler.note(f"{scheduler.acting or '-'} {record.levelname}: {record.getMessage()}")


@contextmanager
def node_events(scheduler: Scheduler) -> Iterator[None]:
    """Within the block, the nodes' warnings become events of the run (``scheduler.note``),
    reported with a failure; they are not printed (hundreds of runs would flood the
    output). The node log is as it was after the block."""
    handler = _EventLog(scheduler)
    node_log = logging.getLogger("smr.node")
    saved = node_log.level, node_log.propagate
    node_log.setLevel(logging.WARNING)
    node_log.propagate = False
    node_log.addHandler(handler)
    try:
        yield
    finally:
        node_log.removeHandler(handler)
        node_log.setLevel(saved[0])
        node_log.propagate = saved[1]


def emitter_figures(emitters: Mapping[str, Emitter]) -> dict[str, dict[str, int]]:
    """What each emitter counted, by mapper name."""
    return {
        name: {
            "tuples_emitted": e.tuples_emitted,
            "tuples_acked": e.tuples_acked,
            "batches_sent": e.batches_sent,
            "resends": e.resends,
            "reroutes": e.reroutes,
            "view_changes": e.view_changes,
        }
        for name, e in emitters.items()
    }


def edges_tally(tallies: Iterable[Counter[str]]) -> dict[str, int]:
    """The edges' tallies added up, by kind of answer in name order."""
    tally: Counter[str] = Counter()
    for each in tallies:
        tally.update(each)
    return dict(sorted(tally.items()))


def failure(
    seed: int,
    at_ms: float,
    what: str,
    schedule: FaultSchedule,
    config: SimConfig,
    replay: str | None,
    events: Sequence[str],
    error: BaseException | None = None,
) -> SimulationFailure:
    """The failure of run ``seed`` at ``at_ms`` of virtual time: ``what`` broke, with the
    innermost frames of ``error`` if given, and the last of its ``events``."""
    where = []
    if error is not None:
        # The innermost frames say where it broke; the sweep prints only the message.
        frames = traceback.format_exception(error)
        where = ["where:", *("  " + line for line in "".join(frames[-6:]).splitlines())]
    lines = [
        f"seed={seed} at {at_ms:.3f} ms: {what}",
        schedule.describe(),
        f"config: {config.describe()}",
        f"network: {config.network}",
        f"replay: {replay or 'the same Simulation(...) call'}",
        *where,
        "last events:",
        *(f"  {event}" for event in list(events)[-FAILURE_EVENTS_SHOWN:]),
    ]
    return SimulationFailure("\n".join(lines))
