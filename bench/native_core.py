"""The compiled hot path (smr._native) against the Python path and the bare Python dict loop,
function by function, on the same batch bodies, in one process and one run.

The bodies are ``bench/throughput.py``'s: the books' words in batches of 1000 rows, raw
``(word, 1)`` or combined per batch (``(word, count)``, as the aggregators' partials travel).
For each step, tuples/s of the compiled and the Python path and each one's ratio to the bare
loop (msgpack-decode each body's keys and values and add them into one dict, the fair floor
of a node's work), best of ``--rounds`` interleaved rounds:

- **decode**: ``decode_batch_body`` (validation included);
- **encode**: ``encode_batch_body`` of the decoded columns;
- **cut**: the duplicate cut of each batch against its mapper's marks (the marks kept as a
  store keeps them);
- **merge+fold**: ``checkpoint.bulk.apply_folds`` of the decoded batches with ``agg.count()``
  (the cut, the merge of partials per key, the fold into state);
- **whole chain**: what ``bench/throughput.py``'s node apply does (decode, then apply through
  the job's reduce, a checkpoint every 20 turns) for the built-in count and for a per-tuple
  ``reduce``; the state of every way is checked against the bare loop's counts. For the
  count, the compiled path keeps each body in its bytes and folds a turn of them in one
  call (``Reducer.folds_bodies``); "count, decoded" is the same chain with every body
  decoded into Python objects first (the path before bodies were folded from their bytes).

    python bench/native_core.py [--words 500000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import RESULTS, load_words, machine, versions  # noqa: E402
from bench.harness import pyplot, write_report  # noqa: E402
from bench.throughput import _bare_dict_loop, _counts_of, _engine_apply, apply_batches  # noqa: E402
from smr.ring.hashing import SLOT_BITS_DEFAULT  # noqa: E402

SLOT_COUNT = 1 << SLOT_BITS_DEFAULT


@contextmanager
def path(compiled: bool) -> Iterator[None]:
    """Run the body with the compiled path in force, or with the Python one."""
    import smr.native
    import smr.wire.batch_body
    from smr.checkpoint import hwm, kernels

    force = kernels.IN_FORCE
    saved = (
        smr.native.NATIVE,
        smr.wire.batch_body.NATIVE,
        force.cut,
        force.group_add,
        force.fold_additive,
        force.fold_turn,
        force.fold_turn_bodies,
    )
    if not compiled:
        smr.native.NATIVE = None  # type: ignore[misc]
        smr.wire.batch_body.NATIVE = None  # type: ignore[misc]
        force.cut = hwm.cut
        force.group_add = kernels.group_add
        force.fold_additive = kernels.fold_additive
        force.fold_turn = None
        force.fold_turn_bodies = None
    try:
        yield
    finally:
        smr.native.NATIVE, smr.wire.batch_body.NATIVE = saved[:2]  # type: ignore[misc]
        (
            force.cut,
            force.group_add,
            force.fold_additive,
            force.fold_turn,
            force.fold_turn_bodies,
        ) = saved[2:]


def steps(bodies: list[tuple[int, bytes]], compiled: bool) -> dict[str, Callable[[], Any]]:
    """Each measured step as a call over all the bodies (``compiled``: master's slots in
    compiled tables for the count, as a node process keeps them)."""
    from smr import agg
    from smr.checkpoint import kernels
    from smr.checkpoint.bulk import apply_folds
    from smr.checkpoint.delta import TOMBSTONE
    from smr.checkpoint.store import StateStore
    from smr.native import NATIVE
    from smr.wire.batch_body import decode_batch_body, encode_batch_body

    decoded = [decode_batch_body(body, count, SLOT_COUNT) for count, body in bodies]

    def decode() -> None:
        for count, body in bodies:
            decode_batch_body(body, count, SLOT_COUNT)

    def encode() -> None:
        for columns in decoded:
            encode_batch_body(columns.slots, columns.seqs, columns.keys, columns.values, columns.ts)

    def cut() -> None:
        marks: dict[int, int] = {}
        for columns in decoded:
            marks.update(kernels.IN_FORCE.cut(marks, columns.slots, columns.seqs).marks)

    fold = agg.fields(count=agg.count())
    table = None if NATIVE is None else functools.partial(NATIVE.SlotTable, "count", TOMBSTONE)

    def merge_fold() -> StateStore:
        store = StateStore(slot_table=table if compiled else None)
        for start in range(0, len(decoded), 10):
            turn = [
                ("bench", c.slots, c.seqs, c.keys, c.values) for c in decoded[start : start + 10]
            ]
            apply_folds(store, turn, fold)  # type: ignore[arg-type]
        return store

    return {
        "decode": decode,
        "encode": encode,
        "cut": cut,
        "merge+fold": merge_fold,
        "whole chain, count": lambda: _engine_apply(bodies, "examples.wordcount:fast", compiled),
        "whole chain, count, decoded": lambda: _engine_apply(
            bodies, "examples.wordcount:fast", compiled, encoded=False
        ),
        "whole chain, per-tuple reduce": lambda: _engine_apply(bodies, "examples.wordcount:job"),
    }


def measure(words: list[str], combine: bool, rounds: int) -> dict[str, Any]:
    """Best-of-``rounds`` seconds of the bare loop and of each step on each path."""
    bodies = apply_batches(words, 1000, combine)
    tuples = sum(count for count, _ in bodies)
    expected = _bare_dict_loop(bodies)
    best: dict[str, float] = {}
    for _ in range(rounds):
        gc.collect()
        started = time.perf_counter()
        _bare_dict_loop(bodies)
        elapsed = time.perf_counter() - started
        best["bare dict loop"] = min(best.get("bare dict loop", elapsed), elapsed)
        for compiled in (True, False):
            with path(compiled):
                for name, step in steps(bodies, compiled).items():
                    gc.collect()
                    started = time.perf_counter()
                    result = step()
                    elapsed = time.perf_counter() - started
                    if name.startswith("whole chain") and _counts_of(result) != expected:
                        raise AssertionError(f"{name}: counts differ from the bare loop's")
                    label = f"{name} ({'compiled' if compiled else 'python'})"
                    best[label] = min(best.get(label, elapsed), elapsed)
    bare = best["bare dict loop"]
    return {
        "tuples": tuples,
        "bodies": len(bodies),
        "ways": {
            label: {
                "seconds": elapsed,
                "tuples_per_s": tuples / elapsed,
                "ratio_to_bare_loop": bare / elapsed,
            }
            for label, elapsed in best.items()
        },
    }


def plot(report: dict[str, Any], out: Path) -> None:
    """Ratio to the bare loop of each step, compiled beside Python, for both kinds of batch."""
    plt = pyplot()
    figure, axes_pair = plt.subplots(1, 2, figsize=(14, 5), sharey=True)
    for axes, (kind, result) in zip(axes_pair, report["batches"].items(), strict=True):
        names = [n for n in result["ways"] if n.endswith("(compiled)")]
        steps_ = [n.removesuffix(" (compiled)") for n in names]
        compiled = [result["ways"][f"{s} (compiled)"]["ratio_to_bare_loop"] for s in steps_]
        python = [result["ways"][f"{s} (python)"]["ratio_to_bare_loop"] for s in steps_]
        xs = range(len(steps_))
        axes.bar([x - 0.2 for x in xs], compiled, 0.4, label="compiled (smr._native)")
        axes.bar([x + 0.2 for x in xs], python, 0.4, label="python", color="tab:grey")
        axes.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        axes.set_xticks(list(xs), [s.replace(", ", "\n") for s in steps_], fontsize=8)
        axes.set_title(f"{kind} batches ({result['tuples']:,} tuples)")
        axes.set_yscale("log")
    axes_pair[0].set_ylabel("ratio to the bare Python dict loop (higher is faster)")
    axes_pair[0].legend()
    figure.tight_layout()
    figure.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "native_core.json")
    args = parser.parse_args()
    import smr.native

    if smr.native.NATIVE is None:
        raise SystemExit(
            "bench/native_core.py: smr._native does not import (SMR_NATIVE or no build)"
        )
    words = load_words(args.words)
    batches = {}
    for combine in (False, True):
        kind = "combined" if combine else "raw"
        batches[kind] = measure(words, combine, args.rounds)
        for label, way in batches[kind]["ways"].items():
            print(
                f"{kind:8} {label:42} {way['ratio_to_bare_loop']:6.2f}x of the bare loop",
                flush=True,
            )
    report = {
        "benchmark": "native_core",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "versions": versions(),
        "words": len(words),
        "rounds": args.rounds,
        "batches": batches,
    }
    write_report(report, args.out, plot)
    print(f"results in {args.out}")


if __name__ == "__main__":
    main()
