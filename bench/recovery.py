"""Recovery: how long a SIGKILL of k reducer nodes interrupts a steady feed, and whether any
count is lost.

What is measured, per failure (one JSON record each):

- **setup**: a fresh local cluster of ``n`` nodes (default 5) with replication ``r``, running
  the word-count job, optionally pre-loaded with ``P`` distinct keys (``preload-0000000``, ...,
  each counted once, by a separate mapper) so that the state to take over is large.
- **feed**: a feeder in its own process runs smr's Emitter over the books' word stream
  (``(word, 1)``, no combine), paced at a fixed rate (default 50 k tuples/s, well below the
  cluster's peak): every 10 ms it emits the tuples due by then and reads the acks that came
  in. Batches hold 100 tuples, about one per node per step at 50 k/s, so batches close by
  size and the feeder never needs ``Emitter.flush``. It is an open-loop source, like a log
  being tailed: tuples it could not emit while blocked are emitted as soon as it can. A
  sampler thread in the feeder records, every 50 ms, the wall time (``time.time()``,
  comparable with the nodes' records) and ``tuples_acked`` (tuples acked by every node of
  their replica set).
- **kill**: after a warm-up (default 3 s, and until no node reports under-replicated slots)
  the cluster's key count is read from ``status`` (``state_keys``), then ``k`` nodes are
  SIGKILLed at once: one thread per victim, released together by a barrier, each notes the
  wall time and calls ``smr.cluster.local.signal_node``. Victims are non-adjacent on the ring
  (n1, n3, n5, ...; the cluster grows to ``2k`` nodes when ``n`` is too small for that) or
  adjacent (n1, n2, ...; needs ``k <= r``).
- **detection_ms**: kill → ``declared_at_unix_s`` of the takeover record for the victim on
  the survivor that took it over. **takeover_ms**: that record's own duration (promote the
  replica, replay the backed-up tuples past the hwm, route by the new view).
  **kill_to_takeover_done_ms** = their sum. A failure of several victims is recovered when the
  last one is, so its failure-level figures are the worst victim's (each victim's are kept).
- **recovered_90_ms**: kill → the end of the first 50 ms window, after the acked throughput's
  trough, at which the feeder's acked rate over the last 250 ms (5 windows) is back at >= 90%
  of its average over the 2 s before the kill (0 if it never fell below 90%; null if it never
  came back before the feeder stopped). The trough is the first window after the kill where
  that 250 ms rate is lowest. ``stall_ms`` is the longest run of windows
  with no ack at all after the kill.
- **false takeovers**: every other takeover record on the survivors, of a node that was not
  killed or from before the kill, is kept: a live node was declared dead (and fenced).
  ``healthy_before_kill`` is false when that happened during the warm-up.
- **exact**: after the post-kill phase (default 4 s) the feeder stops and waits until every
  tuple it emitted is acked; then every key's state is dumped from each slot's primary in the
  live view and compared with plain Python's counts of what was fed.

Every case runs ``--runs`` times, round-robin over cases and state sizes so that drift of the
machine's load spreads over all of them. ``bench/results/recovery.json`` holds every failure,
the medians per (k, r, adjacent, preload) and the spread, the machine with its load average
before and after, and the versions; ``bench/results/recovery.png`` plots kill → takeover done
and the acked throughput around the kill. Targets, reported and not asserted: median
kill → takeover done <= 700 ms, worst <= 1.5 s.

This file runs the failures; ``bench/recovery_analysis.py`` turns their records into these
figures, the summary and the plot, and ``bench/harness.py`` starts, feeds and signals the
cluster.

    python bench/recovery.py [--runs 3] [--nodes 5] [--rate 50000] [--preload 0,100000]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import threading
import time
import traceback
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import (  # noqa: E402 (needs the path set above)
    RESULTS,
    check_counts,
    load_words,
    machine,
    source,
    stream_counts,
    versions,
)
from bench.harness import (  # noqa: E402
    cluster_emitter,
    dump_counts,
    feeder_process,
    local_cluster,
    machine_around,
    node_statuses,
    signal_at_once,
    write_report,
)
from bench.recovery_analysis import (  # noqa: E402
    BASELINE_S,
    SLIDING_WINDOWS,
    analyse_acks,
    format_ms,
    headline,
    plot,
    print_report,
    summarise,
)

# The feeder's sampling window and pacing step. 50 ms windows resolve a recovery of a few
# hundred ms; a 10 ms step and batches of 100 tuples (about one per node per step at 50 k/s)
# make the acked rate follow the emitted rate closely instead of in whole-batch bursts.
WINDOW_S = 0.050
STEP_S = 0.010
BATCH_SIZE = 100
# How long to wait for things that should take well under a second; past it the run is
# recorded as failed, not hung.
REPLICATED_TIMEOUT_S = 30.0
TAKEOVER_TIMEOUT_S = 15.0
FEEDER_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Case:
    """One kind of failure: ``victims`` nodes killed at once at replication ``replication``."""

    victims: int
    replication: int
    adjacent: bool

    @property
    def label(self) -> str:
        return f"k={self.victims} r={self.replication} {'adjacent' if self.adjacent else 'apart'}"

    def nodes(self, nodes_min: int) -> int:
        """Nodes the cluster needs: at least ``nodes_min``, and room for the victims to be
        apart (a live node between any two) or adjacent with a live successor."""
        need = self.victims + 1 if self.adjacent else 2 * self.victims
        return max(nodes_min, need)

    def victim_ids(self) -> list[str]:
        if self.adjacent:
            return [f"n{1 + i}" for i in range(self.victims)]
        return [f"n{1 + 2 * i}" for i in range(self.victims)]


def parse_cases(text: str) -> list[Case]:
    """``K:R:apart|adjacent`` items, comma-separated; SystemExit naming a bad item."""
    cases = []
    for item in text.split(","):
        try:
            k, r, placement = item.split(":")
            case = Case(int(k), int(r), placement == "adjacent")
            if placement not in ("apart", "adjacent"):
                raise ValueError(placement)
        except ValueError:
            raise SystemExit(
                f"--cases: bad item {item!r}; expected K:R:apart or K:R:adjacent"
            ) from None
        if case.replication < 1 or (case.adjacent and case.victims > case.replication):
            raise SystemExit(
                f"--cases: {item!r} is beyond the tolerance: r must be >= 1, and adjacent "
                "victims at most r"
            )
        cases.append(case)
    return cases


# -- the feeder process ----------------------------------------------------------------------


def _feeder(
    cluster_dir: str,
    words: list[str],
    rate: float,
    stop: Any,
    results: Any,
    latencies: bool = False,
) -> None:
    """Emit ``words`` cyclically at ``rate`` tuples/s until ``stop``, then wait for every ack;
    put the sampled ``(unix time, tuples acked, tuples emitted)`` series and the counts.
    With ``latencies``, also every tuple's ack: ``acked_at_unix_s``, ``slot`` and
    ``latency_ms`` (emit to acked by every replica), as parallel arrays."""
    acked_at = array("d")
    acked_slot = array("l")
    latency_ms = array("f")

    def on_acked(rows: Any) -> None:
        now = time.time()
        for row in rows:
            acked_at.append(now)
            acked_slot.append(row[0])
            latency_ms.append((now - row[4]) * 1000)

    emitter = cluster_emitter(
        cluster_dir,
        f"bench-recovery-{os.getpid()}",
        batch_size=BATCH_SIZE,
        on_acked=on_acked if latencies else None,
    )
    samples: list[tuple[float, int, int]] = []
    progress = [0]
    sampling_done = threading.Event()

    def sample() -> None:
        next_at = time.time()
        while not sampling_done.is_set():
            now = time.time()
            samples.append((now, emitter.tuples_acked, progress[0]))
            # The next point of the 50 ms grid that is still ahead: a sampler that was kept
            # from running (the feeder catching up holds the GIL) skips points rather than
            # taking a burst of samples microseconds apart.
            next_at += WINDOW_S * max(1, math.ceil((now - next_at) / WINDOW_S + 1e-9))
            time.sleep(max(0.0, next_at - time.time()))

    sampler = threading.Thread(target=sample, daemon=True)
    emit = emitter.emit
    count = len(words)
    emitted = 0
    error = None
    stopped_at = None
    sampler.start()
    results.put({"started_at_unix_s": time.time()})
    started = time.monotonic()
    step = 0
    try:
        while not stop.is_set():
            due = int((time.monotonic() - started) * rate)
            while emitted < due:
                emit(words[emitted % count], 1)
                emitted += 1
            progress[0] = emitted
            emitter.pump(0)
            step += 1
            time.sleep(max(0.0, started + step * STEP_S - time.monotonic()))
        stopped_at = time.time()
        emitter.close(timeout_s=FEEDER_TIMEOUT_S / 2)
    except Exception:  # reported, so that the run is recorded as failed
        error = traceback.format_exc()
    finally:
        sampling_done.set()
        sampler.join()
    results.put(
        {
            "emitted": emitted,
            "acked": emitter.tuples_acked,
            "stopped_at_unix_s": stopped_at,
            "closed_at_unix_s": time.time(),
            "samples": samples,
            "resends": emitter.resends,
            "reroutes": emitter.reroutes,
            "view_changes": emitter.view_changes,
            "error": error,
            **(
                {"acked_at_unix_s": acked_at, "slot": acked_slot, "latency_ms": latency_ms}
                if latencies
                else {}
            ),
        }
    )


# -- one failure -----------------------------------------------------------------------------


def preload(spec: Any, keys: int) -> float:
    """Feed ``keys`` distinct keys, each counted once, from a mapper of its own; seconds taken."""
    started = time.monotonic()
    emitter = cluster_emitter(spec, "bench-preload")
    for i in range(keys):
        emitter.emit(preload_key(i), 1)
    emitter.close(timeout_s=FEEDER_TIMEOUT_S)
    return time.monotonic() - started


def preload_key(i: int) -> str:
    # A '-' never occurs in a word of the stream, so these never collide with words.
    return f"preload-{i:07d}"


def wait_replicated(client: Any, addrs: dict[str, str], not_before: float) -> bool:
    """Wait until ``not_before`` (monotonic) and until no node has under-replicated slots."""
    deadline = time.monotonic() + REPLICATED_TIMEOUT_S
    while True:
        now = time.monotonic()
        if now >= not_before:
            rows = node_statuses(client, addrs)
            if all(row["under_replicated_slots"] == 0 for row in rows.values()):
                return True
            if now > deadline:
                return False
        time.sleep(min(0.25, max(0.01, not_before - now)))


def wait_takeovers(
    client: Any, survivors: dict[str, str], victims: list[str], killed_at: float
) -> tuple[dict[str, tuple[str, dict[str, Any]]], list[dict[str, Any]], dict[str, Any]]:
    """Each victim's takeover record (declared after the kill) and the node that holds it;
    the records of every other takeover, of a node that was not killed or from before the
    kill (false suspicions of a live node); and the survivors' last status."""
    deadline = time.monotonic() + TAKEOVER_TIMEOUT_S
    while True:
        rows = node_statuses(client, survivors)
        found: dict[str, tuple[str, dict[str, Any]]] = {}
        false_takeovers = []
        for node, row in rows.items():
            for record in row["takeover_records"]:
                after_kill = record["declared_at_unix_s"] >= killed_at
                if record["dead"] in victims and after_kill:
                    found.setdefault(record["dead"], (node, record))
                else:
                    false_takeovers.append(
                        {
                            "by": node,
                            **record,
                            "ms_after_kill": (record["declared_at_unix_s"] - killed_at) * 1000,
                        }
                    )
        if len(found) == len(victims) or time.monotonic() > deadline:
            return found, false_takeovers, rows
        time.sleep(0.1)


def run_failure(
    words: list[str],
    case: Case,
    nodes_min: int,
    preload_keys: int,
    rate: float,
    warmup_s: float,
    post_s: float,
    logs_dir: Path | None = None,
) -> dict[str, Any]:
    """One failure on a fresh cluster: feed, kill, measure, check the counts; the nodes'
    logs are copied to ``logs_dir`` if given."""
    from smr.client.control import Client

    nodes = case.nodes(nodes_min)
    victims = case.victim_ids()
    run_started = time.monotonic()
    record: dict[str, Any] = {
        "case": case.label,
        "k": case.victims,
        "n": nodes,
        "r": case.replication,
        "adjacent": case.adjacent,
        "victims": victims,
        "preload_keys": preload_keys,
        "rate_tuples_per_s": rate,
    }
    with local_cluster(nodes, case.replication) as (cluster_dir, spec):
        addrs = {n.id: n.addr for n in spec.nodes}
        survivors = {node: addr for node, addr in addrs.items() if node not in victims}
        client = Client()
        try:
            record["preload_s"] = preload(spec, preload_keys) if preload_keys else 0.0
            with feeder_process(_feeder, str(cluster_dir), words, rate, stoppable=True) as feeder:
                feeder.result(timeout_s=60)
                record["replicated_before_kill"] = wait_replicated(
                    client, addrs, time.monotonic() + warmup_s
                )
                before = node_statuses(client, addrs)
                record["state_keys"] = sum(row["keys"] for row in before.values())
                # A live node declared dead during the warm-up (and fenced) spoils the run.
                record["healthy_before_kill"] = not any(
                    row["takeovers"] or row["fenced"] for row in before.values()
                )
                killed_at = signal_at_once(spec, victims)
                time.sleep(post_s)
                feeder.request_stop()
                fed = feeder.result(timeout_s=FEEDER_TIMEOUT_S)
            found, false_takeovers, after = wait_takeovers(
                client, survivors, victims, min(killed_at.values())
            )
            dumped = dump_counts(list(survivors.values()))
        finally:
            client.close()
            if logs_dir is not None:
                shutil.copytree(cluster_dir / "logs", logs_dir, dirs_exist_ok=True)
    expected: dict[Any, int] = dict(stream_counts(words, fed["emitted"]))
    expected.update((preload_key(i), 1) for i in range(preload_keys))
    kill_time = min(killed_at.values())
    per_victim = []
    for victim in victims:
        entry: dict[str, Any] = {"victim": victim, "killed_at_unix_s": killed_at[victim]}
        if victim in found:
            node, takeover = found[victim]
            detection_ms = (takeover["declared_at_unix_s"] - killed_at[victim]) * 1000
            entry.update(
                taken_over_by=node,
                detection_ms=detection_ms,
                takeover_ms=takeover["takeover_ms"],
                kill_to_takeover_done_ms=detection_ms + takeover["takeover_ms"],
                tuples_replayed=takeover["tuples_replayed"],
                keys_after=takeover["keys_after"],
            )
        per_victim.append(entry)
    taken_over = [v for v in per_victim if "detection_ms" in v]
    complete = len(taken_over) == len(victims)
    record.update(
        killed_at_unix_s=kill_time,
        kill_spread_ms=(max(killed_at.values()) - kill_time) * 1000,
        all_taken_over=complete,
        detection_ms=max(v["detection_ms"] for v in taken_over) if complete else None,
        takeover_ms=max(v["takeover_ms"] for v in taken_over) if complete else None,
        kill_to_takeover_done_ms=(
            max(v["kill_to_takeover_done_ms"] for v in taken_over) if complete else None
        ),
        per_victim=per_victim,
        false_takeovers=false_takeovers,
        fenced=sum(row["fenced"] for row in after.values()),
        **analyse_acks(fed["samples"], kill_time, fed["stopped_at_unix_s"]),
        emitted=fed["emitted"],
        feeder_error=fed["error"],
        feeder_resends=fed["resends"],
        feeder_reroutes=fed["reroutes"],
        feeder_view_changes=fed["view_changes"],
        **check_counts(dumped, expected),
        run_s=time.monotonic() - run_started,
    )
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument(
        "--cases",
        default="1:1:apart,2:1:apart,3:1:apart,2:2:adjacent",
        help="K:R:apart|adjacent items: K victims killed at once at replication R",
    )
    parser.add_argument("--preload", default="0,100000", help="distinct keys pre-loaded")
    parser.add_argument("--rate", type=float, default=50_000, help="feeder tuples/s")
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--post-s", type=float, default=4.0)
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=RESULTS / "recovery.json")
    parser.add_argument("--logs", type=Path, help="copy each run's node logs under this dir")
    args = parser.parse_args()
    cases = parse_cases(args.cases)
    preloads = [int(p) for p in args.preload.split(",")]
    started = time.monotonic()
    machine_before = machine()
    words = load_words(args.words)
    failures: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for run in range(args.runs):
        for case in cases:
            for preload_keys in preloads:
                try:
                    logs_dir = (
                        args.logs / f"run{run}-{case.label.replace(' ', '-')}-{preload_keys}"
                        if args.logs
                        else None
                    )
                    failure = run_failure(
                        words,
                        case,
                        args.nodes,
                        preload_keys,
                        args.rate,
                        args.warmup_s,
                        args.post_s,
                        logs_dir,
                    )
                except Exception as error:  # recorded; the other runs still count
                    errors.append(
                        {
                            "run": run,
                            "case": case.label,
                            "preload_keys": preload_keys,
                            "error": f"{type(error).__name__}: {error}",
                        }
                    )
                    print(f"run {run} {case.label} preload {preload_keys:,}: {error}", flush=True)
                    continue
                failure["run"] = run
                failures.append(failure)
                print(
                    f"run {run} {case.label} preload {preload_keys:,}: "
                    f"{failure['state_keys']:,} keys, "
                    f"detection {format_ms(failure['detection_ms'])}, "
                    f"takeover {format_ms(failure['takeover_ms'], 1)}, 90% acked rate after "
                    f"{format_ms(failure['recovered_90_ms'])}, exact {failure['exact']}, "
                    f"{len(failure['false_takeovers'])} false takeovers "
                    f"({failure['run_s']:.0f} s)",
                    flush=True,
                )
    report = {
        "benchmark": "recovery",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_around(machine_before),
        "versions": versions(),
        "source": source(),
        "settings": {
            "runs": args.runs,
            "nodes_min": args.nodes,
            "cases": args.cases,
            "preload_keys": preloads,
            "warmup_s": args.warmup_s,
            "post_s": args.post_s,
            "words": len(words),
            "window_ms": WINDOW_S * 1000,
            "sliding_windows": SLIDING_WINDOWS,
            "baseline_s": BASELINE_S,
            "node_detection": {
                "heartbeat_ms": 100,
                "failure_timeout_ms": 500,
                "probe_timeout_ms": 200,
                "tick_ms": 50,
            },
        },
        "rate_tuples_per_s": args.rate,
        "headline": headline(failures),
        "summary": summarise(failures),
        "failures": failures,
        "errors": errors,
        "elapsed_s": time.monotonic() - started,
    }
    write_report(report, args.out, plot)
    print_report(report, args.out)


if __name__ == "__main__":
    main()
