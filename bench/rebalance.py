"""Rebalance: how long a move, a join and a leave take on a live, fed cluster, how long the
feed stalls meanwhile, and whether any count is lost.

Per state size (``--keys``, default 10 000, 100 000 and 1 M distinct keys preloaded), on a fresh
local cluster of 3 nodes at replication 1 fed by bench/recovery.py's open-loop feeder
(``--rate`` tuples/s of the books' words, batches of 100; it samples every 50 ms how many of
its tuples every replica acked):

1. **move**: n0 is asked to move half its load (``smr move n0 --fraction 0.5``).
   ``total_ms`` is the giver's record: proposal to the receiver serving (decision to
   serving); ``frozen_ms`` how long the moving slots were refused (the other slots never
   are); ``promote_to_serving_ms`` the receiver's promotion to serving.
2. **join**: a node is started on standby (``start_s``: process start to answering) and
   asked to join beside the busiest node (``smr scale out``): ``total_ms`` from the request
   to the joiner serving, of which the catch-up (its snapshots of the ranges it backs up)
   is all but ``frozen_ms``.
3. **leave**: n2 leaves: ``total_ms`` from the request to the receiver serving its range,
   and ``replicated_ms`` until no node reports under-replicated slots (the ranges the
   leaver backed up have their copies again).

For each operation, ``stall_ms`` is the longest run of the feeder's 50 ms samples with no
new ack from the request to one second after it ended, against ``stall_ms_before``, the
same over the 2 s before it, measured in the same run. At the end the feeder stops and
drains, every key is dumped and compared with plain Python's counts (``exact``).

The feeder also records every tuple's ack latency (emit to acked by every replica) and
slot: per operation, the p99 of the slots that did not move during it against the
``SETTLE_S`` before (``p99_ratio``), and the longest wait of a tuple of the slots that
did not move (``max_other_during_ms``; ``max_kept_during_ms`` for the giver's own slots
that stayed, which share its channels with the moving ones) and of the moved ones
(``max_moving_ms``). ``peer_bytes_sent`` is what the giver sent its peers from the request
to the end, from its record: the copy holder's snapshot of the moving slots, checkpoints and
heartbeats (tuples come from the feeders and are not counted).

    python bench/rebalance.py [--keys 10000,100000,1000000] [--rate 20000]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import (  # noqa: E402
    RESULTS,
    check_counts,
    load_words,
    machine,
    percentile,
    stream_counts,
    versions,
)
from bench.harness import (  # noqa: E402
    cluster_statuses,
    dump_counts,
    feeder_process,
    local_cluster,
    pyplot,
    write_report,
)
from bench.recovery import _feeder, preload, preload_key  # noqa: E402
from smr.ring.hashing import slot_count  # noqa: E402
from smr.ring.ids import Slot  # noqa: E402
from smr.ring.placement import SlotRange  # noqa: E402

OUT = RESULTS / "rebalance.json"
SETTLE_S = 2.0
OPERATION_TIMEOUT_S = 120.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--keys", default="10000,100000,1000000", help="state sizes, comma-separated"
    )
    parser.add_argument("--rate", type=float, default=20_000.0, help="feed rate, tuples/s")
    args = parser.parse_args(argv)
    before = machine()
    words = load_words(200_000)
    runs = [run(int(keys), args.rate, words) for keys in args.keys.split(",")]
    report = {
        "benchmark": "rebalance",
        "nodes": 3,
        "replication": 1,
        "rate_tuples_per_s": args.rate,
        "runs": runs,
        "machine": {"before": before, "after": machine()},
        "versions": versions(),
    }
    write_report(report, OUT, plot)
    for entry in runs:
        print(
            f"{entry['keys']:>7} keys: move {entry['move']['total_ms']:.0f} ms "
            f"(frozen {entry['move']['frozen_ms']:.0f}), join {entry['join']['total_ms']:.0f} ms "
            f"(frozen {entry['join']['frozen_ms']:.0f}), leave {entry['leave']['total_ms']:.0f} ms"
            f" (+{entry['leave']['replicated_ms']:.0f} ms to re-replicate); exact: "
            f"{entry['exact']['exact']}"
        )
    print(f"wrote {OUT} and {OUT.with_suffix('.png')}")


def run(keys: int, rate: float, words: list[str]) -> dict[str, Any]:
    """The three operations on one fresh cluster holding ``keys`` preloaded keys."""
    from smr.client.control import Client
    from smr.cluster.provision import LocalProcesses

    with local_cluster(3, 1) as (cluster_dir, spec):
        preload_s = preload(spec, keys)
        addrs = {node.id: node.addr for node in spec.nodes}
        client = Client(timeout_ms=2000)
        try:
            wait_replicated(cluster_dir)
            with feeder_process(
                _timed_feeder, str(cluster_dir), words, rate, stoppable=True
            ) as feeder:
                feeder.result(30)
                time.sleep(SETTLE_S)
                move = operation(client, addrs["n0"], lambda: client.move(addrs["n0"], 0.5))
                time.sleep(SETTLE_S)
                started = time.monotonic()
                joiner = LocalProcesses(cluster_dir).start()
                start_s = time.monotonic() - started
                busiest = max(
                    cluster_statuses(spec).items(), key=lambda item: item[1]["tuples_per_s"]
                )[0]
                addrs[joiner.id] = joiner.addr
                join = operation(
                    client, addrs[busiest], lambda: client.join(joiner.addr, busiest), joiner.addr
                )
                join["start_s"] = round(start_s, 3)
                time.sleep(SETTLE_S)
                leave = operation(client, addrs["n2"], lambda: client.move(addrs["n2"], None))
                requested = time.monotonic()
                wait_replicated(cluster_dir)
                leave["replicated_ms"] = round((time.monotonic() - requested) * 1000, 1)
                time.sleep(SETTLE_S)
                feeder.request_stop()
                fed = feeder.result(OPERATION_TIMEOUT_S)
        finally:
            client.close()
        expected = stream_counts(words, fed["emitted"])
        expected.update({preload_key(i): 1 for i in range(keys)})
        exact = check_counts(dump_counts(list(addrs.values())), dict(expected))
        samples = fed["samples"]
        for entry in (move, join, leave):
            entry.update(stalls(samples, entry["requested_at_unix_s"], entry["done_at_unix_s"]))
            entry.update(slot_latencies(fed, entry, slot_count(spec.slot_bits)))
        return {
            "keys": keys,
            "preload_s": round(preload_s, 2),
            "move": move,
            "join": join,
            "leave": leave,
            "exact": exact,
            "feeder_error": fed["error"],
            "acked_per_window": [[t, acked] for t, acked, _ in samples],
        }


def operation(
    client: Any, giver_addr: str, ask: Any, serving_addr: str | None = None
) -> dict[str, Any]:
    """Ask for a move, a join or a leave (``ask``) and wait for the giver's record of it
    (and, for a join, for the joiner to serve); the record's figures."""
    giver_token = client.status(giver_addr)["token"]
    requested = time.time()
    reply = ask()
    if not reply.started:
        raise RuntimeError(f"refused: {reply.text}")
    deadline = time.monotonic() + OPERATION_TIMEOUT_S
    while time.monotonic() < deadline:
        time.sleep(0.05)
        moves = client.status(giver_addr)["moves"]
        done = [r for r in moves["recent"] if r["role"] == "giver" and r["at_unix_s"] >= requested]
        if done and not any(m["role"] == "giver" for m in moves["under_way"]):
            record = done[-1]
            if record["outcome"] != "done":
                raise RuntimeError(f"the operation ended: {record['outcome']}")
            if serving_addr is not None:
                while client.status(serving_addr)["status_in_view"] != "up":
                    time.sleep(0.05)
            return {
                "requested_at_unix_s": requested,
                "done_at_unix_s": time.time(),
                "total_ms": record["total_ms"],
                "frozen_ms": record["frozen_ms"],
                "slots": record["slots"],
                "start_slot": record["start_slot"],
                "giver_token": giver_token,
                "mappers_refused": record["mappers_refused"],
                "peer_bytes_sent": record["peer_bytes_sent"],
            }
    raise RuntimeError("the operation did not end in time")


def stalls(samples: list[list[float]], start: float, end: float) -> dict[str, float]:
    """The longest run without a new ack from ``start`` to a second after ``end``, and over
    the ``SETTLE_S`` before ``start``, in ms."""

    def longest(lo: float, hi: float) -> float:
        window = [(t, acked) for t, acked, _ in samples if lo <= t <= hi]
        best, since = 0.0, None
        for (t0, a0), (t1, a1) in itertools.pairwise(window):
            if a1 == a0:
                since = t0 if since is None else since
                best = max(best, t1 - since)
            else:
                since = None
        return round(best * 1000, 1)

    return {
        "stall_ms": longest(start, end + 1.0),
        "stall_ms_before": longest(start - SETTLE_S, start),
    }


def slot_latencies(fed: dict[str, Any], entry: dict[str, Any], slots: int) -> dict[str, Any]:
    """Per-tuple ack latencies (emit to acked by every replica) around one operation, by
    the tuple's slot: ``other`` slots are those that did not move, ``kept`` the giver's own
    that did not move (they share the giver's channels with the moving ones), ``moving``
    the moved ones. ``before`` is the ``SETTLE_S`` before the request, ``during`` from the
    request to the end; the times are when the tuples were emitted."""
    moving = SlotRange(Slot(entry["start_slot"]), entry["slots"], slots)
    giver_from = entry["giver_token"]
    kept = SlotRange(Slot(giver_from), (moving.start - giver_from) % slots, slots)
    start, end = entry["requested_at_unix_s"], entry["done_at_unix_s"]
    before: list[float] = []
    during: dict[str, list[float]] = {"other": [], "kept": [], "moving": []}
    for acked_at, slot, latency_ms in zip(
        fed["acked_at_unix_s"], fed["slot"], fed["latency_ms"], strict=True
    ):
        emitted_at = acked_at - latency_ms / 1000
        if start - SETTLE_S <= emitted_at < start and not moving.contains(slot):
            before.append(latency_ms)
        elif start <= emitted_at <= end:
            if moving.contains(slot):
                during["moving"].append(latency_ms)
            else:
                during["kept" if kept.contains(slot) else "other"].append(latency_ms)
    p99_before = percentile(before, 0.99)
    p99_during = percentile(during["other"] + during["kept"], 0.99)
    return {
        "p99_unmoved_before_ms": _ms(p99_before),
        "p99_unmoved_during_ms": _ms(p99_during),
        "p99_ratio": round(p99_during / p99_before, 2) if p99_before and p99_during else None,
        "max_other_during_ms": _ms(max(during["other"], default=None)),
        "max_kept_during_ms": _ms(max(during["kept"], default=None)),
        "max_moving_ms": _ms(max(during["moving"], default=None)),
        "tuples_during": {group: len(values) for group, values in during.items()},
    }


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _timed_feeder(cluster_dir: str, words: list[str], rate: float, stop: Any, results: Any) -> None:
    """bench/recovery.py's feeder, recording every tuple's ack latency and slot."""
    _feeder(cluster_dir, words, rate, stop, results, latencies=True)


def wait_replicated(cluster_dir: Path) -> None:
    """Wait until no node reports under-replicated slots."""
    from smr.spec.parse import read_spec

    deadline = time.monotonic() + OPERATION_TIMEOUT_S
    while time.monotonic() < deadline:
        statuses = cluster_statuses(read_spec(cluster_dir))
        if statuses and not any(s["under_replicated_slots"] for s in statuses.values()):
            return
        time.sleep(0.1)
    raise RuntimeError("still under-replicated")


def plot(report: dict[str, Any], png: Path) -> None:
    """Per state size: each operation's total and frozen ms; the acked tuples of the largest
    run over time, with the operations marked."""
    plt = pyplot()
    fig, (bars, series) = plt.subplots(1, 2, figsize=(12, 4.5))
    runs = report["runs"]
    names = ["move", "join", "leave"]
    width = 0.8 / len(runs)
    for index, entry in enumerate(runs):
        xs = [i + index * width for i in range(len(names))]
        bars.bar(xs, [entry[n]["total_ms"] for n in names], width, label=f"{entry['keys']:,} keys")
        bars.bar(xs, [entry[n]["frozen_ms"] for n in names], width, color="black", alpha=0.35)
    bars.set_xticks([i + width * (len(runs) - 1) / 2 for i in range(len(names))], names)
    bars.set_ylabel("request to serving, ms (dark: moving slots refused)")
    bars.legend()
    last = runs[-1]
    points = last["acked_per_window"]
    t0 = points[0][0]
    rates = [
        (t1 - t0, (a1 - a0) / (t1 - ta))
        for (ta, a0), (t1, a1) in itertools.pairwise(points)
        if t1 > ta
    ]
    series.plot([t for t, _ in rates], [r for _, r in rates], linewidth=0.8)
    for name in names:
        series.axvline(last[name]["requested_at_unix_s"] - t0, color="red", linestyle=":")
        series.text(last[name]["requested_at_unix_s"] - t0, 0, name, rotation=90, va="bottom")
    series.set_xlabel("s")
    series.set_ylabel(f"acked tuples/s ({last['keys']:,} keys)")
    fig.suptitle("smr: move, join and leave on a fed 3-node ring (r = 1)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
