"""Micro-benchmark of ``StateStore.apply_batch``: a word count over 1 M tuples.

Run: ``.venv/bin/python tests/checkpoint/bench_apply.py``. Not a test (pytest collects only
``test_*.py``). 50 k distinct keys over 16,384 slots, batches of 1000 from one mapper, seqs
increasing per slot. Prints, best of ``--rounds``:

- apply_batch alone, as the brief asks;
- apply_batch with a checkpoint (swap + merge_inactive) every ``--checkpoint-every`` batches,
  and the time those took: after a checkpoint most keys live in master and active at once,
  which is the slower, merging read path;
- the same reducer called on a plain dict of dicts, with no dedup, no fragments, no failure
  isolation: the floor, to read the figures above as ratios, since this machine is noisy and
  the same run moves by up to 2x between sessions (PERF-NOTES).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

from smr.checkpoint.ids import Key, MapperId
from smr.checkpoint.store import StateStore

SLOT_COUNT = 1 << 14  # docs/design/architecture.md#words: SLOT_BITS = 14

Batch = tuple[list[int], list[int], list[Key], list[int]]


def count_words(key: Key, value: Any, state: dict[str, Any]) -> None:
    """The word-count reducer."""
    state["count"] = state.get("count", 0) + value


def make_batches(tuple_count: int, key_count: int, batch_size: int, seed: int) -> list[Batch]:
    """Batches of (slots, seqs, keys, values) with per-slot increasing seqs, built up front."""
    rng = random.Random(seed)
    words = [f"word{i}" for i in range(key_count)]
    slot_of = {word: rng.randrange(SLOT_COUNT) for word in words}
    next_seq = [1] * SLOT_COUNT
    batches: list[Batch] = []
    for start in range(0, tuple_count, batch_size):
        keys: list[Key] = [rng.choice(words) for _ in range(min(batch_size, tuple_count - start))]
        slots = [slot_of[str(key)] for key in keys]
        seqs = []
        for slot in slots:
            seqs.append(next_seq[slot])
            next_seq[slot] += 1
        batches.append((slots, seqs, keys, [1] * len(keys)))
    return batches


def run_store(batches: list[Batch], checkpoint_every: int) -> tuple[float, float]:
    """Seconds spent in apply_batch, and in checkpoints (0 if ``checkpoint_every`` is 0)."""
    store = StateStore()
    mapper = MapperId("bench-mapper")
    apply_s = checkpoint_s = 0.0
    clock = time.perf_counter
    for number, (slots, seqs, keys, values) in enumerate(batches, 1):
        started_s = clock()
        store.apply_batch(mapper, slots, seqs, keys, values, count_words)
        apply_s += clock() - started_s
        if checkpoint_every and number % checkpoint_every == 0:
            started_s = clock()
            store.swap()
            store.merge_inactive()
            checkpoint_s += clock() - started_s
    total = sum(state["count"] for _, _, state in store.items())
    assert total == sum(len(keys) for _, _, keys, _ in batches), "lost or doubled counts"
    return apply_s, checkpoint_s


def run_plain(batches: list[Batch]) -> float:
    """Seconds for the same reducer over a plain dict of dicts: the floor."""
    states: dict[Key, dict[str, Any]] = {}
    started_s = time.perf_counter()
    for _, _, keys, values in batches:
        for key, value in zip(keys, values, strict=True):
            state = states.get(key)
            if state is None:
                state = states[key] = {}
            count_words(key, value, state)
    return time.perf_counter() - started_s


def best(rounds: int, measure: Callable[[], tuple[float, float]]) -> tuple[float, float]:
    return min((measure() for _ in range(rounds)), key=lambda times: times[0] + times[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tuples", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--checkpoint-every", type=int, default=250, help="batches")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    batches = make_batches(args.tuples, args.keys, args.batch, seed=1)
    mtuples = args.tuples / 1e6
    print(f"{args.tuples} tuples, {args.keys} keys, batches of {args.batch}, best of {args.rounds}")
    apply_s, _ = best(args.rounds, lambda: run_store(batches, 0))
    print(f"  apply_batch:                        {mtuples / apply_s:5.2f} M tuples/s")
    apply_s, checkpoint_s = best(args.rounds, lambda: run_store(batches, args.checkpoint_every))
    checkpoints = len(batches) // args.checkpoint_every
    print(
        f"  apply_batch, checkpoint every {args.checkpoint_every} batches: "
        f"{mtuples / apply_s:5.2f} M tuples/s applying, "
        f"{mtuples / (apply_s + checkpoint_s):5.2f} M/s overall, "
        f"{checkpoint_s / max(checkpoints, 1) * 1e3:.1f} ms per checkpoint"
    )
    plain_s, _ = best(args.rounds, lambda: (run_plain(batches), 0.0))
    print(f"  plain dict floor (same reducer):    {mtuples / plain_s:5.2f} M tuples/s")


if __name__ == "__main__":
    main()
