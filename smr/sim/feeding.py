"""What the simulated mappers feed: each mapper's words (seeded, Zipf-like), its emitter over
a simulated transport, and the feed loop that paces it in virtual time and, when the run
says so, finishes its mapper ids (``smr.mapper.finish``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from smr.api import Job
from smr.checkpoint.ids import MapperId
from smr.client.control import NodeUnreachable
from smr.client.history import mapper_history
from smr.mapper.emitter import Emitter
from smr.ring.view import View
from smr.sim.clients import SimClient
from smr.sim.ledger import FeedLedger, MapperProgress
from smr.sim.mappers import MapperProcess, SimMapperTransport
from smr.sim.nodes import job_of
from smr.sim.run import Run
from smr.sim.windowed import WindowedFeed, event_times
from smr.windows.stamps import Stamper

# A windowed writer's wait for every owner's answer (smr.connection's default timeout).
REGISTER_TIMEOUT_S: Final = 10.0


class FeedingRun(Run, Protocol):
    """What feeding asks of the run besides :class:`~smr.sim.run.Run`: the oracle to count
    the words into, the ledger of what the readers may expect, and the mappers and emitters
    it adds."""

    @property
    def oracle(self) -> Counter[str]: ...

    @property
    def ledger(self) -> FeedLedger | None: ...

    @property
    def mappers(self) -> list[MapperProcess]: ...

    @property
    def emitters(self) -> dict[str, Emitter]: ...

    @property
    def windowed(self) -> WindowedFeed | None: ...


def _words(sim: Run, mapper: int) -> list[str]:
    """The words mapper ``mapper`` emits, drawn from the seed."""
    rng = sim.rng(f"words:{mapper}")
    vocabulary = [f"w{i}" for i in range(sim.config.vocabulary)]
    # A Zipf-like skew: a few words are frequent, as in text.
    weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]
    return rng.choices(vocabulary, weights=weights, k=sim.config.tuples_per_mapper)


def start_mappers(sim: FeedingRun, view: View) -> int:
    """Create the run's mappers (``config.mappers`` of them, 1 ms apart), each an
    :class:`~smr.mapper.emitter.Emitter` over a simulated transport in a
    :class:`~smr.sim.mappers.MapperProcess`; their words go into the oracle. Returns how
    many tuples they emit in all."""
    config = sim.config
    job = job_of(config)
    tuples = 0
    for index in range(config.mappers):
        name = f"m{index}"
        words = _words(sim, index)
        sim.oracle.update(words)
        tuples += len(words)
        values: Sequence[Any] = _values(sim, name, words, job)
        progress = sim.ledger.add_mapper(words) if sim.ledger is not None else None
        transport = SimMapperTransport(sim, name)
        emitter = Emitter(
            view,
            config.slot_bits,
            MapperId(name),
            replication=config.replication,
            combine=job.combine if config.combine else None,
            batch_size=config.batch_size,
            window_batches=config.window_batches,
            resend_after_ms=config.resend_after_ms,
            give_up_after_s=config.give_up_after_s,
            clock=sim.clock.seconds,
            transport=transport,
            linger_ms=None,  # it goes by wall time; a run depends on its seed alone
        )
        sim.emitters[name] = emitter
        process = MapperProcess(
            sim.scheduler, name, _feed(sim, emitter, transport, words, values, progress)
        )
        transport.process = process
        sim.mappers.append(process)
        sim.scheduler.at(index * 1000, process.start)
    return tuples


def _values(sim: FeedingRun, name: str, words: list[str], job: Job) -> Sequence[Any]:
    """What mapper ``name`` emits with each of its words: 1, or for a windowed run 1
    stamped with the word's event time (``smr.sim.windowed`` step 1), the words and their
    times kept for the model."""
    if sim.windowed is None:
        return [1] * len(words)
    config = sim.config
    rng = sim.rng(f"event-times:{name}")
    jitter = [rng.randint(0, config.out_of_orderness_ms) for _ in words]
    times = event_times(config, len(words), jitter)
    sim.windowed.add_mapper(name, words, times)
    stamper = Stamper(job)
    return [stamper.stamp(1, event_time_ms) for event_time_ms in times]


def _register(sim: FeedingRun, transport: SimMapperTransport, mapper: MapperId) -> None:
    """A windowed writer's ask before its first tuple, as ``smr.connection`` makes it: every
    owner answers for its slots, and registers the writer with its windows."""
    rng = sim.rng(f"register:{mapper}")

    def view(refresh: bool) -> View:
        live = sim.live()
        if not live:
            raise NodeUnreachable("no node answers")
        return rng.choice(live)[1].view

    mapper_history(
        SimClient(transport),
        view,
        sim.config.slot_bits,
        mapper,
        REGISTER_TIMEOUT_S,
        clock=transport.sim.clock.seconds,
        sleep=lambda seconds: transport.sleep(seconds * 1000),
    )


def _feed(
    sim: FeedingRun,
    emitter: Emitter,
    transport: SimMapperTransport,
    words: list[str],
    values: Sequence[Any],
    progress: MapperProgress | None,
) -> Callable[[], None]:
    """The body of one mapper: emit ``words``, each with its value, a chunk at a time,
    letting virtual time pass between chunks; with ``finish_mappers``, say it finished at
    the end (and, with ``mapper_parts``, feed as that many mapper ids in turn, each
    finished). With ``progress``, report what may have been emitted and what was
    acknowledged."""
    chunk = sim.config.feed_chunk
    pace_ms = sim.config.feed_pace_ms

    finish = sim.config.finish_mappers
    parts = sim.config.mapper_parts if finish else 1
    chunks = range(0, len(words), chunk)
    # The chunks after which one mapper id finishes and the next begins.
    part_ends = {chunks[len(chunks) * part // parts - 1] for part in range(1, parts)}

    def feed() -> None:
        emit = emitter.emit
        name = emitter.mapper_id
        if sim.windowed is not None:
            _register(sim, transport, name)
        for start in chunks:
            if progress is not None:
                progress.emitting(start + chunk)
            for word, value in zip(
                words[start : start + chunk], values[start : start + chunk], strict=True
            ):
                emit(word, value)
            transport.sleep(pace_ms)
            emitter.pump(0)
            if start in part_ends:
                emitter.finish_mapper()
                if progress is not None:
                    progress.acked(start + chunk)
                emitter.begin_mapper(MapperId(f"{name}.{start}"))
        emitter.close(finished=finish)
        if progress is not None:
            progress.acked(len(words))

    return feed
