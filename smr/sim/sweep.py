"""The seed sweep from the command line: ``python -m smr.sim --seeds N [...]`` (see
docs/design/simulation.md#sweep)."""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Iterator, Sequence

from smr.sim.config import SweepOptions
from smr.sim.report import SimulationFailure
from smr.sim.simulation import run_seed, seed_simulation

log = logging.getLogger("smr.sim")


# -- the sweep --------------------------------------------------------------------------------


def _parse_range(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def _sweep_one(args: tuple[int, SweepOptions]) -> tuple[int, str | None, float]:
    seed, options = args
    started = time.perf_counter()
    try:
        run_seed(seed, options)
    except SimulationFailure as failure:
        return seed, str(failure), time.perf_counter() - started
    return seed, None, time.perf_counter() - started


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m smr.sim",
        description="Deterministic simulation sweep of smr: each seed draws a configuration\n"
        "and a fault schedule within tolerance, runs real nodes and emitters in virtual\n"
        "time, and checks the state against plain Python's counts.",
        epilog="A failing seed prints its failure and the command that replays it, e.g.\n"
        "  python -m smr.sim --seed 1234 -v    # replay one seed, printing its events\n"
        "How a run works: docs/design/simulation.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, help="run only this seed (replay)")
    parser.add_argument("--nodes", default="3-6", help="node count range, e.g. 3-6")
    parser.add_argument("--replication", default="0-2", help="replication range, e.g. 1-2")
    parser.add_argument("--slot-bits", default="6-10", help="slot bits range, e.g. 6-10")
    parser.add_argument("--tuples", default="1000-3000", help="tuples per run range")
    parser.add_argument("--mappers", default="1-2", help="mapper count range, e.g. 1-3")
    parser.add_argument("--faults-max", type=int, default=3, help="faults per schedule, at most")
    parser.add_argument("--drop", type=float, default=0.0, help="message drop probability")
    parser.add_argument("--duplicate", type=float, default=0.0, help="duplicate probability")
    parser.add_argument(
        "--edges",
        action="store_true",
        help="attack the edges too: readers during and after the run (checked against the "
        "oracle), a stream id reused, a restart from simulated disks with a disk fault",
    )
    parser.add_argument(
        "--strict-reads",
        action="store_true",
        help="kept for replay commands: --edges fails a run on a lost slot or a stale primary "
        "served to a reader",
    )
    parser.add_argument(
        "--strict-disk",
        action="store_true",
        help="with --edges, fail a run on a restore partial in silence that the state files "
        "cannot detect today (a lost tail, a lost file)",
    )
    parser.add_argument(
        "--windows",
        action="store_true",
        help="run a windowed word count (tumbling or hopping, out-of-order event times) and "
        "check every window's result in the output against a plain model; not with --edges",
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each run's events")
    return parser


def _options(args: argparse.Namespace) -> SweepOptions:
    """The sweep's options from its flags (ValueError for flags that do not go together)."""
    return SweepOptions(
        nodes=_parse_range(args.nodes),
        replication=_parse_range(args.replication),
        slot_bits=_parse_range(args.slot_bits),
        tuples=_parse_range(args.tuples),
        mappers=_parse_range(args.mappers),
        faults_max=args.faults_max,
        drop_probability=args.drop,
        duplicate_probability=args.duplicate,
        edges=args.edges or args.strict_reads or args.strict_disk,
        strict_reads=args.strict_reads,
        strict_disk=args.strict_disk,
        windows=args.windows,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """The sweep: run many seeds, print the failing ones and a summary; 1 if any failed."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        options = _options(args)
    except ValueError as error:
        parser.error(str(error))
    logging.basicConfig(level=logging.CRITICAL)
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    if args.seed is not None:
        simulation = seed_simulation(args.seed, options)
        print(f"seed={args.seed} {simulation.describe_config()}")
        print(simulation.schedule.describe())
        try:
            result = simulation.run()
        except SimulationFailure as failure:
            print(f"FAIL {failure}")
            return 1
        if args.verbose:
            print("\n".join(result.events))
        print(
            f"ok seed={args.seed}: {result.tuples} tuples, {result.keys} keys, "
            f"{result.end_ms:.0f} ms virtual, fingerprint {result.fingerprint()[:16]}"
        )
        if result.edges:
            print("edges: " + ", ".join(f"{kind} {n}" for kind, n in result.edges.items()))
        return 0
    started = time.perf_counter()
    failed: list[int] = []
    work = [(seed, options) for seed in seeds]
    outcomes: Iterator[tuple[int, str | None, float]]
    if args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(args.jobs)
        outcomes = pool.map(_sweep_one, work, chunksize=4)
    else:
        pool = None
        outcomes = map(_sweep_one, work)
    slowest = (0.0, -1)
    for seed, report, seconds in outcomes:
        slowest = max(slowest, (seconds, seed))
        if report is not None:
            failed.append(seed)
            print(f"FAIL {report}\n", flush=True)
    if pool is not None:
        pool.shutdown()
    elapsed = time.perf_counter() - started
    print(
        f"{len(work) - len(failed)} of {len(work)} seeds passed in {elapsed:.1f} s "
        f"(slowest: seed {slowest[1]}, {slowest[0]:.2f} s)"
    )
    if failed:
        print("failing seeds: " + " ".join(map(str, failed)))
        return 1
    return 0
