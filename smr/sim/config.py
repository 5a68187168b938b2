"""What a simulated run depends on besides its seed (:class:`SimConfig`), what a sweep draws
configurations from (:class:`SweepOptions`), and what a run ends with (:class:`SimResult`)."""

from __future__ import annotations

import hashlib
import json
import logging
import random
from dataclasses import asdict, dataclass, field, replace
from typing import Final

from smr.faults.model import FaultSchedule
from smr.node.settings import NodeCounters, NodeSettings
from smr.sim.disk import DISK_FAULTS
from smr.sim.network import NetworkSettings

log = logging.getLogger("smr.sim")


# -- the simulation ---------------------------------------------------------------------------


_NODE_DEFAULTS = NodeSettings()

# A windowed run's mappers must never be taken for idle: a mapper held back by a fault would
# (by design) let its slots' watermarks pass its delayed tuples (smr.sim.windowed).
WINDOW_IDLE_TIMEOUT_MS: Final = 3_600_000


@dataclass(frozen=True)
class SimConfig:
    """Everything a run depends on besides its seed. :meth:`from_seed` draws one."""

    # The ring: node ids n0, n1, ... in ring order; replication r; 2**slot_bits slots.
    nodes: int = 5
    replication: int = 1
    slot_bits: int = 8
    # Nodes started on standby (s0, s1, ...), owning nothing: capacity that a Join uses.
    standby: int = 0
    # The feed: mapper ids m0, m1, ...; each emits this many words (key w<i>, value 1)
    # drawn with a Zipf-like skew from a vocabulary of this many.
    mappers: int = 1
    tuples_per_mapper: int = 2000
    vocabulary: int = 200
    # Emitter settings (see smr.mapper.emitter); combine: the job's combine is used.
    batch_size: int = 50
    window_batches: int = 8
    combine: bool = False
    resend_after_ms: int = 1000
    give_up_after_s: float = 20.0
    # The feed emits `feed_chunk` tuples, then lets `feed_pace_ms` of virtual time pass.
    feed_chunk: int = 50
    feed_pace_ms: int = 20
    # Node settings (smr.node.settings.NodeSettings' defaults; the failure detector keeps its own).
    checkpoint_interval_ms: int = _NODE_DEFAULTS.checkpoint_interval_ms
    snapshot_chunk_keys: int = _NODE_DEFAULTS.snapshot_chunk_keys
    checkpoint_part_keys: int = _NODE_DEFAULTS.checkpoint_part_keys
    backup_bytes_max: int = _NODE_DEFAULTS.backup_bytes_max
    # Tuples a node applies per (virtual) second at most (None: no cap): a feed above the
    # ring's cap saturates it, as the autoscaling benchmarks do.
    apply_rate_cap_per_s: float | None = None
    # The real default (5 s) is for processes that start one after the other; simulated
    # nodes all start at virtual time 0 and hear each other within milliseconds.
    first_contact_grace_ms: int = 0
    # Tokens evenly spaced (ring.hashing.even_tokens), or distinct seeded random ones.
    even_tokens: bool = True
    # On resume from a pause, fire the missed timers before reading what queued.
    timers_first_on_resume: bool = False
    network: NetworkSettings = NetworkSettings()
    # None: a random schedule within tolerance of at most `faults_max` faults, drawn from
    # the seed over the feed's expected duration.
    schedule: FaultSchedule | None = None
    faults_max: int = 3
    # Mappers that say they finished when they close, and the nodes' lease before they
    # retire them (smr.node.retirement): short, so retirements happen while faults go on.
    finish_mappers: bool = False
    mapper_lease_ms: int = _NODE_DEFAULTS.mapper_lease_ms
    # With finish_mappers, each mapper feeds its tuples as this many mapper ids in turn,
    # finishing each: retirements then happen while the faults go on.
    mapper_parts: int = 1
    # Virtual time allowed for the feed to end (every close() returned), and for the
    # cluster to converge after healing; past them the run fails.
    feed_limit_ms: int = 120_000
    heal_limit_ms: int = 30_000
    # The edges (smr.sim.readers): clients read the ring during the run and after it
    # converged, every answer checked against the oracle. strict_reads fails a run on a
    # lost slot served or a stale primary served; the edges always read strictly (the
    # ledger refuses lost slots, the read lease stale primaries), and only a configuration
    # made by hand may count them instead.
    readers: bool = False
    strict_reads: bool = False
    # A second stream names mapper m0's id at position 0 once m0 closed (smr.sim.reuse): the
    # history check must refuse it.
    reuse_ids: bool = False
    # After the checks, restart the whole cluster from the nodes' simulated disks with
    # this fault (smr.sim.disk.DISK_FAULTS; None: no disks, no restart). strict_disk fails
    # a run on the silent partial restores the state files cannot detect today.
    restart_fault: str | None = None
    strict_disk: bool = False
    # A subscriber follows the output from the start (smr.sim.subscriber).
    subscriber: bool = False
    # A windowed job (smr.sim.windowed) when window_size_ms > 0: hopping windows sliding by
    # window_slide_ms, tumbling ones when it is 0; a mapper's i-th word at event time
    # i * event_step_ms less a seeded jitter of at most out_of_orderness_ms.
    window_size_ms: int = 0
    window_slide_ms: int = 0
    out_of_orderness_ms: int = 0
    event_step_ms: int = 1

    @property
    def windowed(self) -> bool:
        """Whether the run's job is windowed."""
        return self.window_size_ms > 0

    @property
    def keeps_output(self) -> bool:
        """Whether the nodes write their output files (on the disk they share): for a
        subscriber to follow, and for a windowed run's results to be checked."""
        return self.subscriber or self.windowed

    @property
    def feed_ms(self) -> int:
        """About how long the feed lasts in virtual time, without faults."""
        chunks = -(-self.tuples_per_mapper // self.feed_chunk)
        return max(100, chunks * self.feed_pace_ms)

    def describe(self) -> str:
        """The configuration, on one line (without the schedule and the network)."""
        fields = {
            name: value
            for name, value in asdict(self).items()
            if name not in ("schedule", "network")
        }
        return " ".join(f"{name}={value}" for name, value in fields.items())

    def node_settings(self) -> NodeSettings:
        """The settings every node of the run starts with."""
        return NodeSettings(
            replication=self.replication,
            checkpoint_interval_ms=self.checkpoint_interval_ms,
            backup_bytes_max=self.backup_bytes_max,
            snapshot_chunk_keys=self.snapshot_chunk_keys,
            checkpoint_part_keys=self.checkpoint_part_keys,
            first_contact_grace_ms=self.first_contact_grace_ms,
            # The schedules' tolerance rules hold a lost node lost for the whole run: a
            # fenced node that joins again somewhere else would change which nodes are
            # adjacent (joins are played as Join commands instead).
            rejoin_after_fence_ms=None,
            mapper_lease_ms=self.mapper_lease_ms,
            apply_rate_cap_per_s=self.apply_rate_cap_per_s,
            window_idle_timeout_ms=WINDOW_IDLE_TIMEOUT_MS,
        )

    def with_edges(self, seed: int, options: SweepOptions) -> SimConfig:
        """This configuration with the edges ``options`` ask for (readers, a reused id);
        a seed's other draws stay what they were without them."""
        if not options.edges:
            return self
        rng = random.Random(f"smr.sim:{seed}:edges")
        return replace(
            self,
            readers=True,
            strict_reads=True,
            reuse_ids=True,
            restart_fault=rng.choice(DISK_FAULTS),
            strict_disk=options.strict_disk,
            subscriber=True,
        )

    def with_windows(self, seed: int, options: SweepOptions) -> SimConfig:
        """This configuration with a windowed job when ``options`` ask for one: its windows
        drawn from a stream of their own (a seed's other draws stay what they were), its
        mappers finishing (so every window closes) each as one mapper id (when every mapper
        a slot heard of finished, its windows all close: a later id's tuples would be late),
        no combine (a stamped value is not added up)."""
        if not options.windows:
            return self
        rng = random.Random(f"smr.sim:{seed}:windows")
        size_ms = rng.choice((20, 100, 500))
        return replace(
            self,
            window_size_ms=size_ms,
            window_slide_ms=rng.choice((0, 0, size_ms // 2, size_ms // 4)),
            out_of_orderness_ms=rng.choice((0, 5, 50)),
            event_step_ms=rng.choice((1, 2, 5)),
            finish_mappers=True,
            mapper_parts=1,
            combine=False,
        )

    @classmethod
    def from_seed(cls, seed: int, options: SweepOptions | None = None) -> SimConfig:
        """A configuration drawn from ``seed`` within ``options`` (default ``SweepOptions()``)."""
        options = options or SweepOptions()
        rng = random.Random(f"smr.sim:{seed}:config")
        node_count = rng.randint(*options.nodes)
        r_low, r_high = options.replication
        r_choices = list(range(max(0, r_low), min(r_high, node_count - 1) + 1)) or [0]
        # r = 0 tolerates no lost node, so its schedules are mild: draw it less often.
        weights = [1 if r == 0 else 4 for r in r_choices]
        total = rng.randint(*options.tuples)
        mappers = rng.randint(*options.mappers)
        return (
            cls(
                nodes=node_count,
                replication=rng.choices(r_choices, weights=weights)[0],
                slot_bits=rng.randint(*options.slot_bits),
                mappers=mappers,
                tuples_per_mapper=total // mappers,
                vocabulary=rng.choice((20, 100, 300)),
                batch_size=rng.choice((10, 25, 50, 100, 200)),
                window_batches=rng.choice((1, 2, 4, 8, 16)),
                combine=rng.random() < 0.3,
                feed_chunk=rng.choice((20, 50, 100)),
                feed_pace_ms=rng.choice((10, 20, 40)),
                checkpoint_interval_ms=rng.choice((50, 100, 250, 500, 1000)),
                snapshot_chunk_keys=rng.choice((5, 20, 5000)),
                backup_bytes_max=rng.choice((512 * 1024 * 1024, 512 * 1024 * 1024, 40_000)),
                first_contact_grace_ms=rng.choice((0, 0, 300)),
                resend_after_ms=rng.choice((250, 1000)),
                even_tokens=rng.random() < 0.5,
                timers_first_on_resume=rng.random() < 0.5,
                network=NetworkSettings(
                    drop_probability=options.drop_probability,
                    duplicate_probability=options.duplicate_probability,
                ),
                faults_max=options.faults_max,
                # Drawn last, so that every earlier draw of a seed stays what it was.
                standby=rng.choice((0, 0, 1, 2)),
                finish_mappers=rng.random() < 0.7,
                mapper_lease_ms=rng.choice((50, 300, 2000)),
                mapper_parts=rng.choice((1, 3, 8)),
                checkpoint_part_keys=rng.choice((3, 20, _NODE_DEFAULTS.checkpoint_part_keys)),
            )
            .with_edges(seed, options)
            .with_windows(seed, options)
        )


@dataclass(frozen=True)
class SweepOptions:
    """What a sweep draws its configurations from: inclusive ranges, and fixed settings."""

    nodes: tuple[int, int] = (3, 6)
    replication: tuple[int, int] = (0, 2)
    slot_bits: tuple[int, int] = (6, 10)
    tuples: tuple[int, int] = (1000, 3000)
    mappers: tuple[int, int] = (1, 2)
    faults_max: int = 3
    drop_probability: float = 0.0
    duplicate_probability: float = 0.0
    # The edges: readers during and after the run (smr.sim.readers); strict: fail the known
    # limits of reads too.
    edges: bool = False
    strict_reads: bool = False
    strict_disk: bool = False
    # A windowed job (smr.sim.windowed) instead of the plain count; not with the edges,
    # whose readers and subscriber check a plain count.
    windows: bool = False

    def __post_init__(self) -> None:
        if self.windows and self.edges:
            raise ValueError("a windowed run does not attack the edges: drop --edges or --windows")

    def flags(self) -> str:
        """The command-line flags that select these options (for the replay command)."""
        ranges = {
            "nodes": self.nodes,
            "replication": self.replication,
            "slot-bits": self.slot_bits,
            "tuples": self.tuples,
            "mappers": self.mappers,
        }
        text = " ".join(f"--{name} {low}-{high}" for name, (low, high) in ranges.items())
        text += f" --faults-max {self.faults_max}"
        if self.drop_probability:
            text += f" --drop {self.drop_probability}"
        if self.duplicate_probability:
            text += f" --duplicate {self.duplicate_probability}"
        if self.edges:
            text += " --edges"
        if self.strict_reads:
            text += " --strict-reads"
        if self.strict_disk:
            text += " --strict-disk"
        if self.windows:
            text += " --windows"
        return text


# Node counters that depend on the wall clock, which a seeded run does not control: the bytes
# of peer messages vary with the encoded size of the real timestamps and CPU figures in them.
WALL_CLOCK_COUNTERS: Final = frozenset({"peer_bytes_sent"})


def seeded_counters(counters: NodeCounters) -> dict[str, int]:
    """The counters of a node that its seed decides: the integers, less
    `WALL_CLOCK_COUNTERS`."""
    return {
        name: value
        for name, value in vars(counters).items()
        if isinstance(value, int) and name not in WALL_CLOCK_COUNTERS
    }


@dataclass
class SimResult:
    """What a run ended with; ``fingerprint()`` is equal for two runs of one seed."""

    seed: int
    schedule: FaultSchedule
    end_ms: float
    view: list[list[str | int]]
    counters: dict[str, dict[str, int]]
    emitters: dict[str, dict[str, int]]
    network: dict[str, int]
    events: list[str]
    tuples: int
    keys: int
    # How the edges' clients fared, by kind of answer (smr.sim.readers, smr.sim.reuse;
    # empty without them).
    edges: dict[str, int] = field(default_factory=dict)

    def fingerprint(self) -> str:
        """A digest of everything deterministic about the run."""
        data = {key: value for key, value in asdict(self).items() if key != "schedule"}
        data["schedule"] = self.schedule.to_wire()
        text = json.dumps(data, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()
