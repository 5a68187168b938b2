"""The simulated twin of the transport and the clock: many real ``NodeCore``s and
``Emitter``s in one process, in virtual time, over a simulated network, under a seeded fault
schedule; then heal, converge, and check the state against plain Python's counts, exactly
once (docs/design/simulation.md#run).

Guarantee: a run is a pure function of its seed and its :class:`SimConfig`
(docs/design/simulation.md#determinism); a failed run raises :class:`SimulationFailure`,
whose message starts with ``seed=<seed>`` and names the command that replays it. Sweep seeds
with ``python -m smr.sim --seeds 2000``; replay one with ``python -m smr.sim --seed 1234 -v``
(with the flags the failure names) to print its events (docs/design/simulation.md#sweep).
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
