"""The simulated twin of the transport and the clock (docs/design/architecture.md#simulation): many
nodes in one process, in virtual time, under a seeded fault schedule; a failing seed replays
exactly.

What is real and what is simulated: every node is a real :class:`~smr.node.NodeCore` and
every mapper a real :class:`~smr.mapper.emitter.Emitter`; only the clock (:class:`SimClock`), the
network (:class:`SimNetwork`) and the process shell around each node (its timers, and the
loop that calls the node's two entry points, ``NodeCore.receive_turn`` and
``NodeCore.on_timer``, as :mod:`smr.node.loop` does) are simulated. Nothing sleeps; one seed
drives every random choice, so a run is a pure function of its seed (and its
:class:`SimConfig`).

A run (:meth:`Simulation.run`):

1. Start ``nodes`` nodes with replication ``r`` on a ring of ``2**slot_bits`` slots, each a
   ``NodeCore`` whose ``reply`` and ``send_to_peer`` are wired into the network, with a tick
   timer every 50 ms and a checkpoint timer every checkpoint interval (seeded phases).
2. Start the mappers: each emits a seeded stream of words through ``Emitter.emit``, paced in
   virtual time, then calls ``Emitter.close()``, which must return (every tuple acked).
3. The fault schedule plays meanwhile (:mod:`smr.faults`).
4. Heal: every fault still acting ends (partitions, pauses, delays; random drops and
   duplicates stop), what they held back arrives; run until the cluster converges: every
   live node holds the same view, whose owners are all live current incarnations, no node
   has under-replicated slots (where ``r`` copies can exist), batches or snapshot work
   pending, and every owner's secondaries hold complete replicas of it.
5. Check: (a) the live owners' ranges partition the ring, with exactly one live primary
   per slot; (b) the union of every live primary's state for the slots it is primary of
   equals the oracle (plain Python word counts of everything emitted): exactly-once,
   which implies (c) no acked tuple was lost (and each emitter counted its tuples); and
   (d), after one more checkpoint cycle and convergence, what every secondary of an owner
   would promote if it took over now (its replica of the owner's range plus its backed-up
   batches replayed) equals the owner's state and hwm vectors: the next takeover would be
   exact too.

With ``--edges`` (``SimConfig.readers``, ``reuse_ids``, ``restart_fault``), a run also
attacks the edges where the ring meets a reader, a stream's identity and a disk: readers
query and dump during the faults and after convergence, each answer checked against the
oracle (:mod:`smr.sim.readers`); a second stream names mapper ``m0``'s id at position 0,
which the history check must refuse (:mod:`smr.sim.reuse`); and after the checks the whole
cluster restarts from its simulated disks under one disk fault, each restore exact or
refused loudly (:mod:`smr.sim.disk`, :mod:`smr.sim.restart`); a subscriber follows the
output from the start across deaths and must return every record written
(:mod:`smr.sim.subscriber`). Every read is strict: a lost slot or a stale primary served
fails the run; so does a node revived from an older disk serving its state, or restored views
that never agree. ``--strict-disk`` also fails the known limits the restart counts (none).

A failed run raises :class:`SimulationFailure` (an ``AssertionError``) whose message starts
with ``seed=<seed>``, and holds the fault schedule, the command that replays it and the
last notable events (faults, takeovers, fencing) with their virtual times.

The network: one FIFO link per (sender, receiver) pair, as ZeroMQ over TCP keeps order per
connection; each message takes a seeded latency (``latency_us_min`` to ``latency_us_max``),
never overtaking an earlier one on its link. A link holds at most ``link_messages_max``
messages not yet read by the receiver; at the bound ``send`` returns False, as a ZeroMQ
send does at its high-water mark (a mapper keeps the batch and retries; a node counts a
dropped peer message). Faults (see :mod:`smr.faults` for their meaning): a killed node's
state is dropped, what is sent to it is never read (a mapper's send to it fails at once, as
with ``ZMQ_IMMEDIATE``; a peer's queues until the bound), and every node with a connection
to it sees the connection drop at its next tick (``NodeCore.suspect``, as the real shell's
socket monitor does). A paused node runs no timers and reads nothing; on resume what queued
is read, and each timer that came due fires once. A partition holds every message across
it until it ends (TCP delivers late, in order); a delay adds to the latency of messages to
and from its node. Optional seeded drop and duplicate probabilities exist for experiments;
the real transport never drops or duplicates within a connection, so they default to 0.

Determinism: virtual time is integer microseconds; events at the same time run in the order
they were scheduled; mapper threads run one at a time, handing control back and forth with
the scheduler, so thread scheduling never decides anything; the simulator iterates no
``set`` or ``dict`` of str in an order that depends on ``PYTHONHASHSEED`` where the order
could change an outcome. The code under test might (a ``set`` of peers or channels): so each
link draws its latencies and losses from its own generator, and a node reads messages that
arrive at the same instant in sender-name order, which makes the order in which it sent to
different peers within one instant irrelevant.
``time.time()`` is still read by the emitter (tuple timestamps) and ``NodeCore`` (takeover
records), and ``os.getpid``/``psutil`` by ``NodeCore.status``: none of them decides anything.

The sweep, from the command line::

    python -m smr.sim --seeds 2000 [--start 0] [--jobs 2] [--nodes 3-6] [--replication 0-2]
                      [--slot-bits 6-10] [--tuples 1000-3000] [--mappers 1-2]
                      [--faults-max 3] [--drop 0.0] [--duplicate 0.0]
                      [--edges] [--strict-reads] [--strict-disk]
    python -m smr.sim --seed 1234 -v       # replay one seed, printing its events

draws a configuration and a fault schedule within tolerance from each seed
(:meth:`SimConfig.from_seed`, :func:`smr.faults.draws.random_schedule`), prints every failing seed
with its failure and the command that replays it, then a summary; exits 1 if any seed
failed. ``--drop``/``--duplicate`` go beyond the real transport (see above): failures they
cause are worth reading, but are not promises the ring makes today.
"""

from smr.sim.config import SimConfig, SimResult, SweepOptions
from smr.sim.network import NetworkSettings, SimClock, SimNetwork
from smr.sim.nodes import MemoryOutput, sim_job
from smr.sim.report import SimulationFailure
from smr.sim.simulation import Simulation, run_seed, seed_simulation
from smr.sim.sweep import main

__all__ = [
    "MemoryOutput",
    "NetworkSettings",
    "SimClock",
    "SimConfig",
    "SimNetwork",
    "SimResult",
    "Simulation",
    "SimulationFailure",
    "SweepOptions",
    "main",
    "run_seed",
    "seed_simulation",
    "sim_job",
]
