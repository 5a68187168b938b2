"""Checkpoints: how big an incremental checkpoint is next to the full state, and what peer
replication costs in throughput.

What is measured:

1. **delta size** (in this process, no network): a ``StateStore`` with the word-count reducer
   is first warmed with the whole books corpus once (every word of it, so the state holds
   the corpus's whole vocabulary, as in a system that has been running), and checkpointed.
   Then the word stream goes on (the corpus again, from its start) at a fixed realistic rate
   (default 200 k words/s), time-sliced by the checkpoint interval: an interval of T s covers
   ``rate * T`` words, applied in batches of 1000 from one mapper. At the end of each slice,
   ``delta bytes = len(encode_delta(store.swap()))``; after ``merge_inactive``, ``full bytes =
   len(encode_delta(store.snapshot(all slots)))``. The ratio is delta / full, per slice, for
   ``--samples`` consecutive slices per interval (0.5, 1, 2, 5, 10 s by default); the share
   of hwm vectors in each is reported too. These sizes are deterministic: the samples differ
   in which text they cover, not by noise. The books have only about 40 k distinct words, so
   the same is repeated with ``--cold-keys`` (default 1 M) more keys in the state that the
   stream never touches, as in a state of many keys of which few are hot; the headline is
   the corpus alone.
2. **replication cost**: the same word stream (``--tuples``, default 1 M, batch 1000, no
   combine) is fed by a feeder in its own process running smr's Emitter into a fresh local
   3-node cluster with r = 0, 1 and 2; tuples/s from the first emit until every tuple is acked
   by every node of its replica set. The configurations take turns (r = 0, 1, 2, r = 0, ...)
   ``--runs`` times, so that drift in the machine's load hits them alike; the ratio to r = 0
   is reported both as the ratio of medians and as the median of the ratios within a turn.
   Also kept: the rate up to the return of the last ``emit`` (``emit_tuples_per_s``, under
   backpressure all along, but without the wait for the last window's acks in ``close``),
   how long ``close`` waited, and whether any channel had to resend (which only happens
   after ``resend_after_ms``, 1 s, without an ack).

``bench/results/checkpoint.json`` holds every sample and run, the medians and spreads, the
machine with its load average before and after, and the versions; ``checkpoint.png`` plots
both. Targets, reported and not asserted: at a 2 s interval the delta is <= 7% of the full
state; r = 1 runs at >= 85% of the throughput of r = 0.

    python bench/checkpoint.py [--runs 5] [--samples 5] [--rate 200000] [--tuples 1000000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import (  # noqa: E402 (needs the path set above)
    RESULTS,
    corpus_words,
    load_words,
    machine,
    source,
    spread,
    versions,
)
from bench.harness import (  # noqa: E402
    check_applied,
    cluster_emitter,
    cluster_statuses,
    local_cluster,
    machine_around,
    pyplot,
    run_feeder,
    write_report,
)

BATCH_SIZE = 1000
NODES = 3
REPLICATIONS = (0, 1, 2)
TARGET_DELTA_RATIO_AT_2_S = 0.07
TARGET_R1_TO_R0 = 0.85
FEEDER_TIMEOUT_S = 600.0


# -- 1. delta size ---------------------------------------------------------------------------


class WordStream:
    """The corpus as an endless stream of ``(word, 1)`` tuples from one mapper, applied to a
    store in batches, with the slots and per-slot seqs a mapper would give them."""

    def __init__(self, words: list[str], slot_bits: int) -> None:
        from smr.ring.hashing import slot_of

        self.words = words
        self.position = 0
        self.slot_of = {word: slot_of(word, slot_bits) for word in set(words)}
        self.seqs = [0] * (1 << slot_bits)

    def apply(self, store: Any, count: int) -> None:
        """Apply the next ``count`` words of the stream to ``store``."""
        from smr.checkpoint.ids import MapperId

        mapper = MapperId("bench-checkpoint")
        words = self.words
        ones = [1] * BATCH_SIZE
        while count > 0:
            size = min(BATCH_SIZE, count, len(words) - self.position)
            keys = words[self.position : self.position + size]
            slots = [self.slot_of[word] for word in keys]
            seqs = []
            for slot in slots:
                self.seqs[slot] += 1
                seqs.append(self.seqs[slot])
            store.apply_batch(mapper, slots, seqs, keys, ones[:size], count_words)
            self.position = (self.position + size) % len(words)
            count -= size


def count_words(key: str, value: int, state: dict[str, Any]) -> None:
    """The word-count reducer (``examples.wordcount.count``) without its emit argument."""
    state["count"] = state.get("count", 0) + value


def load_cold_keys(store: Any, keys: int, slot_bits: int) -> None:
    """``keys`` distinct keys the word stream never touches, counted once each."""
    from smr.checkpoint.ids import MapperId
    from smr.ring.hashing import slot_of

    seqs = [0] * (1 << slot_bits)
    for start in range(0, keys, BATCH_SIZE):
        names = [f"cold-{i:07d}" for i in range(start, min(start + BATCH_SIZE, keys))]
        slots = [slot_of(name, slot_bits) for name in names]
        batch_seqs = []
        for slot in slots:
            seqs[slot] += 1
            batch_seqs.append(seqs[slot])
        ones = [1] * len(names)
        store.apply_batch(MapperId("bench-cold"), slots, batch_seqs, names, ones, count_words)


def measure_deltas(
    words: list[str], intervals_s: list[float], rate: float, samples: int, cold_keys: int = 0
) -> dict[str, Any]:
    """Delta and full-state bytes per slice of each interval (see the module docstring, 1),
    with ``cold_keys`` more keys in the state that the stream never touches."""
    from smr.checkpoint.delta import Delta, encode_delta
    from smr.checkpoint.store import StateStore
    from smr.ring.hashing import SLOT_BITS_DEFAULT

    store = StateStore()
    stream = WordStream(words, SLOT_BITS_DEFAULT)
    started = time.monotonic()
    load_cold_keys(store, cold_keys, SLOT_BITS_DEFAULT)
    stream.apply(store, len(words))
    store.swap()
    store.merge_inactive()
    warm_s = time.monotonic() - started
    rows: list[dict[str, Any]] = []
    for interval_s in intervals_s:
        for sample in range(samples):
            stream.apply(store, int(rate * interval_s))
            delta = store.swap()
            encode_started = time.perf_counter()
            delta_bytes = len(encode_delta(delta))
            encode_ms = (time.perf_counter() - encode_started) * 1000
            delta_state_bytes = len(encode_delta(Delta(delta.states, {})))
            delta_keys = delta.key_count()
            store.merge_inactive()
            full = store.snapshot(store.slots())
            full_bytes = len(encode_delta(full))
            full_state_bytes = len(encode_delta(Delta(full.states, {})))
            rows.append(
                {
                    "interval_s": interval_s,
                    "sample": sample,
                    "words": int(rate * interval_s),
                    "delta_bytes": delta_bytes,
                    "delta_hwm_bytes": delta_bytes - delta_state_bytes,
                    "delta_keys": delta_keys,
                    "delta_slots_with_hwm": len(delta.hwms),
                    "delta_encode_ms": encode_ms,
                    "full_bytes": full_bytes,
                    "full_hwm_bytes": full_bytes - full_state_bytes,
                    "full_keys": full.key_count(),
                    "ratio": delta_bytes / full_bytes,
                    "state_only_ratio": delta_state_bytes / full_state_bytes,
                }
            )
    per_interval = []
    for interval_s in intervals_s:
        mine = [row for row in rows if row["interval_s"] == interval_s]
        per_interval.append(
            {
                "interval_s": interval_s,
                "words": mine[0]["words"],
                "ratio": spread([row["ratio"] for row in mine]),
                "state_only_ratio": spread([row["state_only_ratio"] for row in mine]),
                "delta_bytes": spread([row["delta_bytes"] for row in mine]),
                "delta_keys": spread([row["delta_keys"] for row in mine]),
                "full_bytes": spread([row["full_bytes"] for row in mine]),
                "full_keys": spread([row["full_keys"] for row in mine]),
            }
        )
    return {
        "cold_keys": cold_keys,
        "corpus_words": len(words),
        "corpus_distinct_words": len(stream.slot_of),
        "warm_s": warm_s,
        "rate_words_per_s": rate,
        "samples_per_interval": samples,
        "per_interval": per_interval,
        "samples": rows,
    }


# -- 2. replication cost ---------------------------------------------------------------------


def _feeder(cluster_dir: str, words: list[str], results: Any) -> None:
    """Emit every word once as fast as the cluster takes them; tuples/s until all acked."""
    from smr.spec.parse import read_spec

    spec = read_spec(Path(cluster_dir))
    emitter = cluster_emitter(spec, f"bench-checkpoint-{spec.replication}", batch_size=BATCH_SIZE)
    emit = emitter.emit
    cpu_started = time.process_time()
    started = time.perf_counter()
    for word in words:
        emit(word, 1)
    emitted_s = time.perf_counter() - started
    emitter.close()
    elapsed = time.perf_counter() - started
    cpu_s = time.process_time() - cpu_started
    results.put(
        {
            "tuples": len(words),
            "tuples_sent": emitter.tuples_sent,
            "elapsed_s": elapsed,
            "tuples_per_s": len(words) / elapsed,
            # The last emit returned at emitted_s; close() then waited for the last acks. A
            # resend means some channel went resend_after_ms (1 s) without an ack.
            "emitted_s": emitted_s,
            "close_s": elapsed - emitted_s,
            "resends": emitter.resends,
            "feeder_cpu_s": cpu_s,
        }
    )


def run_replicated(words: list[str], replication: int) -> dict[str, Any]:
    """One run: a fresh 3-node cluster at ``replication``, one feeder, every tuple acked;
    checks that the primaries applied exactly what was sent."""
    import psutil

    with local_cluster(NODES, replication) as (cluster_dir, spec):
        nodes = [psutil.Process(n.pid) for n in spec.nodes]
        cpu_before = [sum(node.cpu_times()[:2]) for node in nodes]
        result: dict[str, Any] = run_feeder(
            _feeder, str(cluster_dir), words, timeout_s=FEEDER_TIMEOUT_S
        )
        rows = list(cluster_statuses(spec).values())
        node_cpu_s = [sum(n.cpu_times()[:2]) - b for n, b in zip(nodes, cpu_before, strict=True)]
    check_applied(rows, result)
    result.update(
        replication=replication,
        backup_batches=sum(row["backup_batches"] for row in rows),
        checkpoints_applied=sum(row["checkpoints_applied"] for row in rows),
        nodes_cpu_s=node_cpu_s,
    )
    return result


def measure_replication(words: list[str], runs: int) -> dict[str, Any]:
    """Tuples/s at r = 0, 1, 2 in turns, and their ratios to r = 0."""
    by_replication: dict[int, list[dict[str, Any]]] = {r: [] for r in REPLICATIONS}
    for run in range(runs):
        for replication in REPLICATIONS:
            result = run_replicated(words, replication)
            result["run"] = run
            by_replication[replication].append(result)
            print(f"run {run} r={replication}: {result['tuples_per_s']:,.0f} tuples/s", flush=True)
    for results in by_replication.values():
        for result in results:
            result["emit_tuples_per_s"] = result["tuples"] / result["emitted_s"]
    summary = {}
    base = statistics.median(r["tuples_per_s"] for r in by_replication[0])
    emit_base = statistics.median(r["emit_tuples_per_s"] for r in by_replication[0])
    for replication, results in by_replication.items():
        rates = [r["tuples_per_s"] for r in results]
        emit_rates = [r["emit_tuples_per_s"] for r in results]
        paired = [
            r["tuples_per_s"] / r0["tuples_per_s"]
            for r, r0 in zip(results, by_replication[0], strict=True)
        ]
        summary[f"r={replication}"] = {
            "replication": replication,
            "tuples_per_s": spread(rates),
            "ratio_of_medians_to_r0": statistics.median(rates) / base,
            "ratio_to_r0_same_turn": spread(paired),
            "emit_tuples_per_s": spread(emit_rates),
            "emit_ratio_of_medians_to_r0": statistics.median(emit_rates) / emit_base,
            "close_s": spread([r["close_s"] for r in results]),
            "runs_with_resends": sum(1 for r in results if r["resends"]),
            "runs": results,
        }
    return {"nodes": NODES, "tuples_per_run": len(words), "batch_size": BATCH_SIZE, **summary}


# -- report ----------------------------------------------------------------------------------


def plot(report: dict[str, Any], path: Path) -> None:
    """Left: delta / full state per interval (median, min-max) against the 2 s target.
    Right: tuples/s at r = 0, 1, 2 (median, min-max) with the ratio to r = 0."""
    plt = pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    deltas = report["delta"]["per_interval"]
    intervals = [row["interval_s"] for row in deltas]
    for name, colour, label in (
        ("ratio", "tab:blue", "delta / full state"),
        ("state_only_ratio", "tab:grey", "the same, key states only (no hwm vectors)"),
    ):
        medians = [100 * row[name]["median"] for row in deltas]
        lows = [100 * (row[name]["median"] - row[name]["min"]) for row in deltas]
        highs = [100 * (row[name]["max"] - row[name]["median"]) for row in deltas]
        left.errorbar(
            intervals, medians, yerr=[lows, highs], marker="o", capsize=3, color=colour, label=label
        )
    for other in report["delta_with_cold_keys"]:
        rows = other["per_interval"]
        left.errorbar(
            [row["interval_s"] for row in rows],
            [100 * row["ratio"]["median"] for row in rows],
            yerr=[
                [100 * (row["ratio"]["median"] - row["ratio"]["min"]) for row in rows],
                [100 * (row["ratio"]["max"] - row["ratio"]["median"]) for row in rows],
            ],
            marker="s",
            capsize=3,
            color="tab:purple",
            label=f"delta / full state with {other['cold_keys']:,} more, cold keys",
        )
    left.scatter(
        [2.0], [100 * TARGET_DELTA_RATIO_AT_2_S], marker="*", s=150, color="tab:green", zorder=3
    )
    left.scatter([], [], marker="*", s=150, color="tab:green", label="target at 2 s")
    left.set_xscale("log")
    left.set_xticks(intervals, [f"{i:g}" for i in intervals])
    left.set_xlabel("checkpoint interval (s)")
    left.set_ylabel("% of full state bytes (median, min-max)")
    left.set_ylim(0, 105)
    left.set_title(
        f"checkpoint delta at {report['delta']['rate_words_per_s']:,.0f} words/s, "
        f"{report['delta']['corpus_distinct_words']:,} keys"
    )
    left.legend(fontsize=8)
    replication = report["replication"]
    names = [f"r={r}" for r in REPLICATIONS]
    for offset, figure_name, ratio_name, colour, label in (
        (-0.2, "tuples_per_s", "ratio_of_medians_to_r0", "tab:blue", "until every tuple is acked"),
        (
            0.2,
            "emit_tuples_per_s",
            "emit_ratio_of_medians_to_r0",
            "tab:cyan",
            "up to the last emit",
        ),
    ):
        rates = [replication[n][figure_name] for n in names]
        medians = [rate["median"] / 1e3 for rate in rates]
        lows = [(rate["median"] - rate["min"]) / 1e3 for rate in rates]
        highs = [(rate["max"] - rate["median"]) / 1e3 for rate in rates]
        positions = [index + offset for index in range(len(names))]
        right.bar(
            positions, medians, width=0.4, yerr=[lows, highs], capsize=4, color=colour, label=label
        )
        for index, name in enumerate(names):
            right.annotate(
                f"{replication[name][ratio_name]:.2f}x",
                (positions[index], medians[index]),
                textcoords="offset points",
                xytext=(-10, 4),
                fontsize=8,
            )
        if figure_name == "tuples_per_s":
            right.axhline(
                TARGET_R1_TO_R0 * medians[0],
                color="tab:green",
                linestyle="--",
                label="target for r=1 (85% of r=0, acked)",
            )
    right.set_xticks(range(len(names)), names)
    right.set_ylabel("thousand tuples per second (median, min-max)")
    right.set_title(
        f"{replication['nodes']}-node cluster, {replication['tuples_per_run']:,} tuples, "
        f"batch {replication['batch_size']}"
    )
    right.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="turns of r = 0, 1, 2")
    parser.add_argument("--samples", type=int, default=5, help="slices per interval")
    parser.add_argument("--intervals", default="0.5,1,2,5,10", help="checkpoint intervals, s")
    parser.add_argument("--rate", type=float, default=200_000, help="words/s of the stream")
    parser.add_argument("--tuples", type=int, default=1_000_000)
    parser.add_argument(
        "--cold-keys", default="1000000", help="also measure deltas with these many more keys"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "checkpoint.json")
    args = parser.parse_args()
    started = time.monotonic()
    machine_before = machine()
    intervals = [float(i) for i in args.intervals.split(",")]
    words = corpus_words()
    deltas = []
    for cold_keys in sorted({0, *(int(c) for c in args.cold_keys.split(",") if c)}):
        delta = measure_deltas(words, intervals, args.rate, args.samples, cold_keys)
        deltas.append(delta)
        for row in delta["per_interval"]:
            print(
                f"{cold_keys:,} cold keys, interval {row['interval_s']:g} s "
                f"({row['words']:,} words): delta {100 * row['ratio']['median']:.1f}% of full "
                f"state [{100 * row['ratio']['min']:.1f}-{100 * row['ratio']['max']:.1f}%], "
                f"key states only {100 * row['state_only_ratio']['median']:.1f}%",
                flush=True,
            )
    del words
    replication = measure_replication(load_words(args.tuples), args.runs)
    at_2_s = next((r for r in deltas[0]["per_interval"] if r["interval_s"] == 2.0), None)
    report = {
        "benchmark": "checkpoint",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_around(machine_before),
        "versions": versions(),
        "source": source(),
        "headline": {
            "delta_ratio_at_2_s_median": at_2_s["ratio"]["median"] if at_2_s else None,
            "target_delta_ratio_at_2_s": TARGET_DELTA_RATIO_AT_2_S,
            "r1_to_r0_ratio_of_medians": replication["r=1"]["ratio_of_medians_to_r0"],
            "r2_to_r0_ratio_of_medians": replication["r=2"]["ratio_of_medians_to_r0"],
            "r1_to_r0_emit_ratio_of_medians": replication["r=1"]["emit_ratio_of_medians_to_r0"],
            "r2_to_r0_emit_ratio_of_medians": replication["r=2"]["emit_ratio_of_medians_to_r0"],
            "target_r1_to_r0": TARGET_R1_TO_R0,
        },
        "delta": deltas[0],
        "delta_with_cold_keys": deltas[1:],
        "replication": replication,
    }
    report["elapsed_s"] = time.monotonic() - started
    write_report(report, args.out, plot)
    head = report["headline"]
    print()
    for name in (f"r={r}" for r in REPLICATIONS):
        row = replication[name]
        print(
            f"{name}: {row['tuples_per_s']['median']:,.0f} tuples/s "
            f"[{row['tuples_per_s']['min']:,.0f}-{row['tuples_per_s']['max']:,.0f}], "
            f"{row['ratio_of_medians_to_r0']:.2f} of r=0 (same-turn ratios "
            f"{row['ratio_to_r0_same_turn']['min']:.2f}-{row['ratio_to_r0_same_turn']['max']:.2f})"
            f"; up to the last emit {row['emit_tuples_per_s']['median']:,.0f} tuples/s, "
            f"{row['emit_ratio_of_medians_to_r0']:.2f} of r=0; close waited "
            f"{row['close_s']['median']:.2f} s (median), {row['runs_with_resends']} runs resent"
        )
    ratio_at_2_s = head["delta_ratio_at_2_s_median"]
    print(
        f"delta at 2 s: "
        f"{'n/a' if ratio_at_2_s is None else f'{100 * ratio_at_2_s:.1f}%'} of full state "
        f"(target <= {100 * TARGET_DELTA_RATIO_AT_2_S:.0f}%); r=1 at "
        f"{head['r1_to_r0_ratio_of_medians']:.2f} of r=0 (target >= {TARGET_R1_TO_R0}); "
        f"load average {report['machine']['loadavg_before']} → "
        f"{report['machine']['loadavg_after']}; {report['elapsed_s']:.0f} s; results in {args.out}"
    )


if __name__ == "__main__":
    main()
