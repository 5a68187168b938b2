"""Throughput: tuples per second into 1 and 2 reducer nodes, against the raw transport ceiling.

What is measured, all in one run (the machine is noisy, so only ratios within a run count):

- **raw ceiling**: two processes and no engine; the sender msgpack-encodes batches of
  ``(key, value, ts)`` columns and PUSHes them over ZeroMQ on 127.0.0.1, the receiver PULLs
  and decodes them. Tuples/s from the first send to the last decode.
- **engine**: a local cluster of 1 or 2 node processes and a feeder in its own process that
  runs smr's Emitter over the same word stream (``(word, 1)`` pairs from the books), with and
  without ``combine``; tuples/s from the first emit until every tuple is acked, counting
  input tuples (before combine).

- **node apply**, in one process: the same batch bodies (1000 rows of the books' words, raw
  or folded per batch as the aggregators' partials are) decoded and applied as a node does,
  through a per-tuple ``reduce``, a ``reduce_batch`` and the built-in count, against a bare
  Python dict loop that decodes the same bodies and adds the same counts; best of
  ``--apply-rounds`` interleaved rounds, counts checked (reading the engine's counts back
  for the check is not timed: the loop's dict needs no reading).

Each configuration runs ``--runs`` times; the JSON in ``bench/results/throughput.json``
holds every run, the median and the spread (min, max), the machine and the versions; a
plot goes to ``bench/results/throughput.png``. The headline is the engine's median at batch
size 100 as a ratio of the raw ceiling's median at batch size 100.

    python bench/throughput.py [--runs 3] [--tuples 1000000] [--native off,on]

With ``--native off,on`` every engine configuration runs on the Python path and on the
compiled one (``SMR_NATIVE``), run by run, so the two compare within one run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import RESULTS, load_words, machine, versions  # noqa: E402
from bench.harness import (  # noqa: E402
    check_applied,
    cluster_emitter,
    cluster_statuses,
    local_cluster,
    pyplot,
    run_feeder,
    write_report,
)

# -- raw ceiling ---------------------------------------------------------------------------


def _raw_receiver(port: int, batches: int, results: Any) -> None:
    import msgpack
    import zmq

    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 1000)
    pull.bind(f"tcp://127.0.0.1:{port}")
    results.put("ready")
    received = 0
    started = 0.0
    for index in range(batches):
        data = pull.recv()
        if index == 0:
            started = time.perf_counter()
        keys, _values, _ts = msgpack.unpackb(data, use_list=False)
        received += len(keys)
    results.put((received, started, time.perf_counter()))


def _raw_sender(port: int, words: list[str], batch_size: int, results: Any) -> None:
    import msgpack
    import zmq

    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 1000)
    push.connect(f"tcp://127.0.0.1:{port}")
    ones = [1] * batch_size
    started = time.perf_counter()
    for start in range(0, len(words), batch_size):
        keys = words[start : start + batch_size]
        now = time.time()
        push.send(msgpack.packb([keys, ones[: len(keys)], [now] * len(keys)]))
    results.put(started)
    push.close(linger=-1)


def run_raw(words: list[str], batch_size: int) -> dict[str, Any]:
    """One raw-ceiling run: tuples/s between two processes with no engine."""
    import socket

    context = multiprocessing.get_context("spawn")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    batches = (len(words) + batch_size - 1) // batch_size
    results = context.Queue()
    receiver = context.Process(target=_raw_receiver, args=(port, batches, results))
    receiver.start()
    assert results.get(timeout=60) == "ready"
    sender_results = context.Queue()
    sender = context.Process(target=_raw_sender, args=(port, words, batch_size, sender_results))
    sender.start()
    sent_at = sender_results.get(timeout=300)
    received, _first, last = results.get(timeout=300)
    sender.join()
    receiver.join()
    elapsed = last - sent_at
    return {"tuples": received, "elapsed_s": elapsed, "tuples_per_s": received / elapsed}


# -- node apply, in one process -------------------------------------------------------------


def apply_batches(words: list[str], batch_size: int, combine: bool) -> list[tuple[int, bytes]]:
    """The books' words as the emitter sends them to a node owning every slot: batch bodies
    of ``batch_size`` rows, ``(word, count)`` folded per batch with ``combine`` (as the job's
    combine and the aggregators' partials do), else ``(word, 1)``; with their row counts."""
    from collections import Counter

    from smr.ring.hashing import SLOT_BITS_DEFAULT, slot_of
    from smr.wire.batch_body import encode_batch_body

    slots_of: dict[str, int] = {}
    seqs = [0] * (1 << SLOT_BITS_DEFAULT)
    bodies = []
    step = batch_size * (3 if combine else 1)  # a combined batch holds about a third as many
    for start in range(0, len(words), step):
        chunk = words[start : start + step]
        if combine:
            counted = Counter(chunk)
            keys, values = list(counted), list(counted.values())
        else:
            keys, values = chunk, [1] * len(chunk)
        slots = []
        batch_seqs = []
        for key in keys:
            slot = slots_of.get(key)
            if slot is None:
                slot = slots_of[key] = slot_of(key, SLOT_BITS_DEFAULT)
            seqs[slot] += 1
            slots.append(slot)
            batch_seqs.append(seqs[slot])
        body = encode_batch_body(slots, batch_seqs, keys, values, [0.0] * len(keys))
        bodies.append((len(keys), body))
    return bodies


def _bare_dict_loop(bodies: list[tuple[int, bytes]]) -> dict[str, int]:
    """The fair floor for the engine's overhead: decode each body's keys and values (msgpack,
    as a node must) and add the counts into one dict, one tuple at a time."""
    import msgpack

    counts: dict[str, int] = {}
    get = counts.get
    for count, body in bodies:
        keys, values = msgpack.unpackb(body[20 * count :], use_list=False)
        for key, value in zip(keys, values, strict=True):
            counts[key] = get(key, 0) + value
    return counts


def _engine_apply(
    bodies: list[tuple[int, bytes]], job_ref: str, compact: bool = True, encoded: bool = True
) -> Any:
    """What a node does with the same bodies: decode and validate each, apply it through the
    job's reduce as ``smr.node.ingest`` does (aggregators: ``APPLY_TUPLES_PER_TURN`` tuples
    a turn), with a checkpoint swap and merge every second's worth (20 turns). Returns the
    store: reading the counts back (``_counts_of``) is the check's work, not the node's.
    With ``compact`` the store holds master as a node process does for the job
    (``smr.native.keep_slots_compact``: compiled tables for a lone count or sum); with
    ``encoded`` a body the job's compiled fold reads straight from its bytes is kept so,
    as intake keeps it (``Reducer.folds_bodies``), else every body is decoded."""
    from smr.api import load_job
    from smr.checkpoint import kernels
    from smr.checkpoint.ids import MapperId
    from smr.checkpoint.store import StateStore
    from smr.native import keep_slots_compact
    from smr.node.ingest import APPLY_TUPLES_PER_TURN
    from smr.node.reducer import Reducer
    from smr.output.files import OutputSink
    from smr.ring.hashing import SLOT_BITS_DEFAULT
    from smr.wire.batch_body import decode_batch_ids, decode_primary_batch

    job = load_job(job_ref)
    field = None if job.aggregation is None or not compact else job.aggregation.compact_field
    saved = kernels.IN_FORCE.slot_table
    keep_slots_compact(field)
    store = StateStore()
    kernels.IN_FORCE.slot_table = saved
    sink = OutputSink("bench", Path(os.devnull), lambda frames: None)
    reducer = Reducer(job, sink, time.monotonic)
    turn: list[Any] = []
    turn_tuples = turns = 0
    slot_count = 1 << SLOT_BITS_DEFAULT
    keep_bytes = encoded and reducer.folds_bodies
    for count, body in bodies:
        ids = decode_batch_ids(body, count, slot_count)
        batch = decode_primary_batch(body, count, slot_count, ids, keep_bytes)
        turn.append(batch.applied_as(MapperId("bench")))
        turn_tuples += count
        if turn_tuples >= APPLY_TUPLES_PER_TURN or not reducer.in_bulk:
            reducer.apply(store, turn)
            turn, turn_tuples, turns = [], 0, turns + 1
            if turns % 20 == 0:
                store.swap()
                store.merge_inactive()
    if turn:
        reducer.apply(store, turn)
    return store


def _counts_of(result: Any) -> dict[str, int]:
    """The counts a way of applying left: the bare loop's dict, or a store's ``count``s."""
    if isinstance(result, dict):
        return result
    return {key: state["count"] for _, key, state in result.items()}


APPLY_JOBS = {
    "per-tuple reduce": "examples.wordcount:job",
    "reduce_batch": "examples.wordcount:batched",
    "aggregators": "examples.wordcount:fast",
}


def run_apply(words: list[str], batch_size: int, combine: bool, rounds: int) -> dict[str, Any]:
    """Tuples/s of each way of applying the same bodies, in one process, interleaved
    ``rounds`` times (best of the rounds), with each one's ratio to the bare dict loop; the
    counts of every way are checked against the loop's."""
    import gc

    bodies = apply_batches(words, batch_size, combine)
    tuples = sum(count for count, _ in bodies)
    expected = _bare_dict_loop(bodies)
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, run in [("bare dict loop", _bare_dict_loop)] + [
            (name, lambda b, ref=ref: _engine_apply(b, ref)) for name, ref in APPLY_JOBS.items()
        ]:
            gc.collect()
            started = time.perf_counter()
            result = run(bodies)
            elapsed = time.perf_counter() - started
            if _counts_of(result) != expected:
                raise AssertionError(f"{name}: counts differ from the bare loop's")
            best[name] = min(best.get(name, elapsed), elapsed)
    bare = best["bare dict loop"]
    return {
        "bodies": len(bodies),
        "tuples": tuples,
        "words": len(words),
        "combined": combine,
        "rounds": rounds,
        "ways": {
            name: {"tuples_per_s": tuples / elapsed, "ratio_to_bare_loop": bare / elapsed}
            for name, elapsed in best.items()
        },
    }


# -- engine --------------------------------------------------------------------------------


def _engine_feeder(
    cluster_dir: str, words: list[str], batch_size: int, combine: bool, results: Any
) -> None:
    from examples.wordcount import add

    emitter = cluster_emitter(
        cluster_dir,
        f"bench-{os.getpid()}",
        batch_size=batch_size,
        combine=add if combine else None,
    )
    emit = emitter.emit
    started = time.perf_counter()
    for word in words:
        emit(word, 1)
    emitter.close()
    elapsed = time.perf_counter() - started
    results.put(
        {
            "tuples": len(words),
            "tuples_sent": emitter.tuples_sent,
            "elapsed_s": elapsed,
            "tuples_per_s": len(words) / elapsed,
            "resends": emitter.resends,
        }
    )


def run_engine(words: list[str], nodes: int, batch_size: int, combine: bool) -> dict[str, Any]:
    """One engine run: a fresh cluster, one feeder process, every tuple acked."""
    with local_cluster(nodes, 0) as (cluster_dir, spec):
        result: dict[str, Any] = run_feeder(
            _engine_feeder, str(cluster_dir), words, batch_size, combine, timeout_s=600
        )
        check_applied(cluster_statuses(spec).values(), result)
    return result


# -- report --------------------------------------------------------------------------------


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and spread of tuples/s over runs."""
    rates = [r["tuples_per_s"] for r in runs]
    return {
        "median_tuples_per_s": statistics.median(rates),
        "min_tuples_per_s": min(rates),
        "max_tuples_per_s": max(rates),
        "runs": runs,
    }


def plot(report: dict[str, Any], path: Path) -> None:
    """Bars of median tuples/s per configuration, with min-max whiskers."""
    plt = pyplot()
    labels, medians, lows, highs = [], [], [], []
    for name, summary in report["configurations"].items():
        labels.append(name.replace(" ", "\n"))
        medians.append(summary["median_tuples_per_s"] / 1e6)
        lows.append((summary["median_tuples_per_s"] - summary["min_tuples_per_s"]) / 1e6)
        highs.append((summary["max_tuples_per_s"] - summary["median_tuples_per_s"]) / 1e6)
    figure, axes = plt.subplots(figsize=(max(8, 1.1 * len(labels)), 5))
    colours = ["tab:grey" if label.startswith("raw") else "tab:blue" for label in labels]
    axes.bar(range(len(labels)), medians, yerr=[lows, highs], color=colours, capsize=4)
    axes.set_xticks(range(len(labels)), labels, fontsize=7)
    axes.set_ylabel("million tuples per second (median, min-max)")
    axes.set_title(
        f"smr throughput vs raw pyzmq+msgpack ceiling; batch 100 ratio "
        f"{report['headline']['engine_to_raw_ratio_batch_100']:.2f}"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tuples", type=int, default=1_000_000)
    parser.add_argument("--batch-sizes", default="100,1000")
    parser.add_argument("--apply-rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "throughput.json")
    parser.add_argument(
        "--native",
        default="",
        help="comma-separated SMR_NATIVE modes (e.g. off,on): every engine configuration runs "
        "under each, interleaved run by run, named '... [native MODE]' (default: the "
        "environment's one mode, names unchanged); the node apply runs in this process",
    )
    args = parser.parse_args()
    modes = [mode.strip() for mode in args.native.split(",") if mode.strip()]
    words = load_words(args.tuples)
    load_before = os.getloadavg()
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    node_apply = {}
    for combine in (False, True):
        name = "combined batches" if combine else "raw batches"
        node_apply[name] = run_apply(words, 1000, combine, args.apply_rounds)
        ways = node_apply[name]["ways"]
        print(
            f"node apply, {name}: "
            + ", ".join(f"{way} {w['ratio_to_bare_loop']:.2f}x" for way, w in ways.items()),
            flush=True,
        )
    configurations: dict[str, dict[str, Any]] = {}
    for batch_size in batch_sizes:
        name = f"raw batch {batch_size}"
        configurations[name] = summarise([run_raw(words, batch_size) for _ in range(args.runs)])
        print(f"{name}: {configurations[name]['median_tuples_per_s']:,.0f} tuples/s", flush=True)
        for nodes in (1, 2):
            for combine in (False, True):
                name = f"smr {nodes} node{'s' if nodes > 1 else ''} batch {batch_size}" + (
                    " combine" if combine else ""
                )
                runs_by_mode: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes or [""]}
                for _ in range(args.runs):
                    for mode in runs_by_mode:
                        # Node and feeder processes inherit the environment: SMR_NATIVE.
                        if mode:
                            os.environ["SMR_NATIVE"] = mode
                        runs_by_mode[mode].append(run_engine(words, nodes, batch_size, combine))
                for mode, runs in runs_by_mode.items():
                    label = f"{name} [native {mode}]" if mode else name
                    configurations[label] = summarise(runs)
                    print(
                        f"{label}: {configurations[label]['median_tuples_per_s']:,.0f} tuples/s",
                        flush=True,
                    )
    raw_100 = configurations.get("raw batch 100", {}).get("median_tuples_per_s")
    engine_name = "smr 1 node batch 100" + (f" [native {modes[-1]}]" if modes else "")
    engine_100 = configurations.get(engine_name, {}).get("median_tuples_per_s")
    report = {
        "benchmark": "throughput",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {**machine(), "loadavg_before": load_before},
        "versions": versions(),
        "tuples_per_run": len(words),
        "runs_per_configuration": args.runs,
        "configurations": configurations,
        "node_apply": node_apply,
        "native_modes": modes,
        "headline": {
            "engine_to_raw_ratio_batch_100": (engine_100 / raw_100)
            if raw_100 and engine_100
            else None,
            "target_ratio": 0.5,
            "engine_to_raw_ratio_batch_100_by_mode": {
                mode: configurations[f"smr 1 node batch 100 [native {mode}]"]["median_tuples_per_s"]
                / raw_100
                for mode in modes
                if raw_100 and f"smr 1 node batch 100 [native {mode}]" in configurations
            },
        },
    }
    write_report(report, args.out, plot)
    print(
        f"engine/raw at batch 100: {report['headline']['engine_to_raw_ratio_batch_100']:.3f} "
        f"(target 0.5); results in {args.out}"
    )


if __name__ == "__main__":
    main()
