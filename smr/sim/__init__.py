"""The simulated twin of the transport and the clock: many real ``NodeCore``s and
``Emitter``s in one process, in virtual time, over a simulated network, under a seeded fault
schedule; then heal, converge, and check the state against plain Python's counts, exactly
once (docs/design/simulation.md#run).

Guarantee: a run is a pure function of its seed and its :class:`SimConfig`
(docs/design/simulation.md#determinism); a failed run raises :class:`SimulationFailure`,
whose message starts with ``seed=<seed>`` and names the command that replays it. Sweep seeds
with ``python -m smr.sim --seeds 2000``; replay one with ``python -m smr.sim --seed 1234 -v``
(with the flags the failure names) to print its events (docs/design/simulation.md#sweep).

Each name is imported from its module (``from smr.sim.simulation import ...``): the package itself
imports nothing, so importing one of its modules loads no other.
"""
