"""Fuzz the decoders a node runs on what it receives: generated and mutated frames of every
message kind, batch bodies and checkpoint deltas.

What is run, in one process, from one seed:

1. **Seeds**: a valid frame of every message kind (its header built from the kind's
   record, with random values of the right types, and a random body), valid batch bodies
   (``smr.wire.batch_body``) and valid deltas (``checkpoint.delta``).
2. **Cases**, round robin over the three decoders: random bytes (one case in ten); a seed
   mutated one to four times (bits flipped, bytes set to msgpack's length markers and
   boundary values, bytes inserted, deleted, repeated, cut, spliced from another seed); or,
   for messages, a header rewritten field by field (a field dropped, or given a value of
   another type, a negative int, the largest uint64, a long string).
3. **Outcomes** per decoder: accepted (a valid record), refused with its declared error
   (``FrameError`` for messages and batch bodies, ``DeltaError`` for deltas), or anything
   else, which is a bug: the first ones are kept with their input.

``fuzz`` is what the tests run (a few tens of thousands of cases); the command line runs a
million and writes ``bench/results/fuzz_decoders.json`` (cases per outcome, rate, the
process's peak RSS before and after) and a plot beside it.

    python bench/fuzz_decoders.py [--cases 1000000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgpack

from smr.checkpoint.delta import Delta, DeltaError, decode_delta, encode_delta
from smr.ring.ids import Slot
from smr.wire.batch_body import decode_batch_body, encode_batch_body
from smr.wire.codec import decode, encode_raw, header_fields
from smr.wire.kinds import PROTOCOL_VERSION, FrameError, Kind

SLOT_COUNT: Final = 1 << 14
# Bytes that mean something to msgpack (length markers of str, bin, array, map, ext; the
# largest fixints) or are boundaries.
MARKERS: Final = bytes.fromhex("007f808f909fc0c1c4c5c6c7c8c9cfd3d9dadbdcdddedfff")
FAILURES_KEPT: Final = 20
BATCH_COUNTS: Final = (0, 1, 2, 5, 20)
KEYS: Final[tuple[str | int, ...]] = ("whale", 7, "", "k" * 30)


@dataclass
class Outcomes:
    """What the cases of one decoder came to."""

    accepted: int = 0
    refused: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)


# A decoder of one input; the int is the tuple count a batch body's header would announce
# (the count of the seed it came from), which the other decoders ignore.
Decoder = Callable[[bytes, int], Any]


def _random_value(types: tuple[type, ...], rng: random.Random) -> Any:
    """A value of one of ``types``, as a valid header field holds."""
    kind = rng.choice(types)
    if kind is int:
        return rng.choice([0, 1, rng.randrange(1 << 16), rng.randrange(1 << 62)])
    if kind is str:
        return rng.choice(["n0", "m/1", "", "x" * rng.randrange(40)])
    if kind is bool:
        return rng.random() < 0.5
    if kind is float:
        return rng.random() * 1e6
    if kind is bytes:
        return rng.randbytes(rng.randrange(16))
    return None


def seed_frames(rng: random.Random) -> list[bytes]:
    """Step 1: a valid frame of every message kind (each checked to decode)."""
    frames = []
    for kind in Kind:
        fields, has_body = header_fields(kind)
        header = {wire: _random_value(types, rng) for wire, types in fields}
        body = rng.randbytes(rng.randrange(64)) if has_body else b""
        (frame,) = encode_raw(kind, {"v": PROTOCOL_VERSION, **header}, body)
        decode([frame])
        frames.append(frame)
    return frames


def seed_batch_bodies(rng: random.Random) -> list[bytes]:
    """Step 1: valid batch bodies of 0 to 20 tuples (see ``batch_case``)."""
    bodies = []
    for count in BATCH_COUNTS:
        bodies.append(
            encode_batch_body(
                [rng.randrange(SLOT_COUNT) for _ in range(count)],
                [rng.randrange(1, 1 << 40) for _ in range(count)],
                [rng.choice(KEYS) for _ in range(count)],
                [rng.choice([1, -2, 3.5, "v", b"b", [1, 2], {"a": 1}, None]) for _ in range(count)],
                [rng.random() for _ in range(count)],
            )
        )
    return bodies


def seed_deltas(rng: random.Random) -> list[bytes]:
    """Step 1: valid deltas: empty, a few slots of keys and fields, deletions, hwms."""
    from smr.checkpoint.delta import TOMBSTONE
    from smr.checkpoint.ids import MapperId, Seq

    deltas = [encode_delta(Delta({}, {}))]
    for keys in (1, 5, 30):
        states: dict[Slot, dict[Any, dict[str, Any]]] = {}
        for _ in range(keys):
            slot = Slot(rng.randrange(SLOT_COUNT))
            fields = {"count": rng.randrange(1 << 40), "tags": (1, "a"), "gone": TOMBSTONE}
            states.setdefault(slot, {})[rng.choice(["k", 3, "w" * 10])] = fields
        hwms = {slot: {MapperId("m/0"): Seq(rng.randrange(1, 1 << 50))} for slot in states}
        deltas.append(encode_delta(Delta(states, hwms)))
    return deltas


def mutate(data: bytes, rng: random.Random, seeds: list[bytes]) -> bytes:
    """Step 2: ``data`` changed in one to four places."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(7)
        at = rng.randrange(len(out) + 1)
        if choice == 0 and out:
            out[min(at, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif choice == 1 and out:
            out[min(at, len(out) - 1)] = rng.choice(MARKERS)
        elif choice == 2:
            out[at:at] = rng.randbytes(rng.randint(1, 8))
        elif choice == 3:
            del out[at : at + rng.randint(1, 8)]
        elif choice == 4:
            out[at:at] = out[at : at + rng.randint(1, 16)] * rng.randint(1, 4)
        elif choice == 5:
            del out[at:]
        else:
            other = rng.choice(seeds)
            cut = rng.randrange(len(other) + 1)
            out[at:] = other[cut:]
    return bytes(out)


def rewrite_header(frame: bytes, rng: random.Random) -> bytes:
    """Step 2, messages only: a field of the header dropped or given a wrong value."""
    kind = Kind(frame[0])
    header_end = 5 + int.from_bytes(frame[1:5], "big")
    header = msgpack.unpackb(frame[5:header_end], strict_map_key=False)
    body = frame[header_end:]
    if not header:
        return frame
    name = rng.choice(list(header))
    if rng.random() < 0.2:
        del header[name]
    else:
        header[name] = rng.choice(
            [-1, (1 << 64) - 1, -(1 << 63), "x" * 300, None, [1, 2], {"a": 1}, 2.5, b"\x00", True]
        )
    (rewritten,) = encode_raw(kind, header, body)
    return rewritten


def _decode_message(data: bytes, _count: int) -> Any:
    return decode([data])


def _decode_batch_body(data: bytes, count: int) -> Any:
    return decode_batch_body(data, count, SLOT_COUNT)


def _decode_delta(data: bytes, _count: int) -> Any:
    return decode_delta(data)


DECODERS: Final[dict[str, tuple[Decoder, type[Exception]]]] = {
    "message": (_decode_message, FrameError),
    "batch body": (_decode_batch_body, FrameError),
    "delta": (_decode_delta, DeltaError),
}


def fuzz(cases: int, seed: int) -> dict[str, Outcomes]:
    """Run ``cases`` cases (steps 1-3) from ``seed``; the outcomes per decoder. Never
    raises for what a decoder does: a decoder that raises anything but its declared error
    is counted as failed, with the input kept (the first ``FAILURES_KEPT``)."""
    rng = random.Random(seed)
    seeds = {
        "message": seed_frames(rng),
        "batch body": seed_batch_bodies(rng),
        "delta": seed_deltas(rng),
    }
    outcomes = {name: Outcomes() for name in DECODERS}
    names = list(DECODERS)
    for case in range(cases):
        name = names[case % len(names)]
        decoder, declared = DECODERS[name]
        pool = seeds[name]
        index = rng.randrange(len(pool))
        count = BATCH_COUNTS[index] if name == "batch body" else 0
        draw = rng.random()
        if draw < 0.1:
            data = rng.randbytes(rng.randrange(80))
        elif draw < 0.7 or name != "message":
            data = mutate(pool[index], rng, pool)
        else:
            data = rewrite_header(pool[index], rng)
        outcome = outcomes[name]
        try:
            decoder(data, count)
        except declared:
            outcome.refused += 1
        except Exception as error:
            outcome.failed += 1
            if len(outcome.failures) < FAILURES_KEPT:
                outcome.failures.append(f"{type(error).__name__}: {error} <- {data[:200]!r}")
        else:
            outcome.accepted += 1
    return outcomes


def plot(report: dict[str, Any], path: Path) -> None:
    from bench.harness import pyplot

    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 4))
    names = list(report["outcomes"])
    bottom = [0] * len(names)
    for outcome, color in (("accepted", "tab:green"), ("refused", "tab:blue"), ("failed", "red")):
        values = [report["outcomes"][n][outcome] for n in names]
        axis.bar(names, values, bottom=bottom, label=outcome, color=color)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    axis.set_ylabel("cases")
    axis.set_title(f"{report['cases']:,} fuzzed inputs per decoder outcome")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    from bench.common import RESULTS, machine, versions
    from bench.harness import write_report

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS / "fuzz_decoders.json")
    args = parser.parse_args()
    rss_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    outcomes = fuzz(args.cases, args.seed)
    elapsed_s = time.perf_counter() - started
    rss_after_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = {
        "benchmark": "fuzz_decoders",
        "machine": machine(),
        "versions": versions(),
        "cases": args.cases,
        "seed": args.seed,
        "elapsed_s": elapsed_s,
        "cases_per_s": args.cases / elapsed_s,
        "peak_rss_kib_before": rss_before_kib,
        "peak_rss_kib_after": rss_after_kib,
        "outcomes": {name: vars(outcome) for name, outcome in outcomes.items()},
    }
    write_report(report, args.out, plot)
    failed = sum(o.failed for o in outcomes.values())
    for name, outcome in outcomes.items():
        print(
            f"{name}: {outcome.accepted:,} accepted, {outcome.refused:,} refused, "
            f"{outcome.failed:,} failed"
        )
    print(
        f"{args.cases:,} cases in {elapsed_s:.1f} s; peak RSS {rss_before_kib / 1024:.0f} -> "
        f"{rss_after_kib / 1024:.0f} MiB; wrote {args.out}"
    )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
