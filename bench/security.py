"""What CurveZMQ keys cost: the same feed into a cluster with keys (the default) and into one
started with ``--insecure``, in one run.

What is measured, on local clusters of 3 nodes with ``r = 1``: ``smr feed FILE`` of the same
text (the books' words, ten to a line) as a fresh process on a fresh cluster, timed from
process start to exit (every tuple acked by its 2 nodes), with and without ``combine``. The
two kinds of cluster alternate run by run, and every run's counts are checked against plain
Python. The ratio is the secured rate over the insecure one (1.0: free). A third kind is
the secured cluster while an outsider (a process with keys of its own) opens a new
connection to every node twenty times a second, each one refused at the handshake: its rate
over the secured one says what such knocking costs the cluster.

Each figure is the median of ``--runs`` runs with min and max; the JSON in
``bench/results/security.json`` records every run, the machine and the versions; a plot goes
to ``bench/results/security.png``.

    python bench/security.py [--runs 3] [--words 1000000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    JOB,
    RESULTS,
    check_counts,
    load_words,
    machine,
    spread,
    stream_counts,
    versions,
    write_words_text,
)
from bench.harness import dump_counts, pyplot, smr_command, timed_run, write_report
from smr.spec.parse import read_spec
from smr.transport.security import load_keys

NODES = 3
REPLICATION = 1
WORDS_PER_LINE = 10


def _smr(*args: str) -> None:
    timed_run(smr_command(*args))


# An outsider: it knows the cluster's public key but holds no accepted client key. Twenty
# times a second, a new socket with keys of its own to every node, each sending a message
# its handshake never lets through (the node's ZAP refuses the key); until its stop file.
OUTSIDER = """
import pathlib, sys, time
import zmq
addrs, stop = sys.argv[1].split(","), pathlib.Path(sys.argv[2])
server_key = sys.argv[3].encode()  # the cluster's public key: public, as its name says
ROUNDS_PER_S = 20
context = zmq.Context()
attempts = 0
while not stop.exists():
    sockets = []
    for addr in addrs:
        public, secret = zmq.curve_keypair()
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.curve_serverkey = server_key
        sock.curve_publickey, sock.curve_secretkey = public, secret
        sock.connect(addr)
        try:
            sock.send(b"x", zmq.NOBLOCK)
        except zmq.Again:
            pass  # no connection completes: there is nothing to queue on
        sockets.append(sock)
    time.sleep(1 / ROUNDS_PER_S)
    for sock in sockets:
        sock.close()
    attempts += len(sockets)
print(attempts)
"""


def feed_once(
    secure: bool,
    text: Path,
    words: int,
    combine: bool,
    expected: Any,
    outsider: bool = False,
) -> dict[str, Any]:
    """One ``smr feed`` of ``text`` into a fresh cluster, with keys or without (with keys,
    while an outsider keeps knocking if ``outsider``); its rate and the check of the
    counts."""
    with tempfile.TemporaryDirectory(prefix="smr-bench-") as workdir:
        cluster_dir = Path(workdir) / "cluster"
        up = ["cluster", "up", "--dir", str(cluster_dir), "--nodes", str(NODES), "--job", JOB]
        _smr(*up, "--replication", str(REPLICATION), *([] if secure else ["--insecure"]))
        try:
            command = smr_command("feed", str(text), "--cluster", str(cluster_dir))
            command += [] if combine else ["--no-combine"]
            knocking = None
            stop = Path(workdir) / "stop-outsider"
            if outsider:
                addrs = ",".join(n.addr for n in read_spec(cluster_dir).nodes)
                cluster_public = load_keys(cluster_dir / "keys").cluster_public.decode()
                knocking = subprocess.Popen(
                    [sys.executable, "-c", OUTSIDER, addrs, str(stop), cluster_public],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            try:
                elapsed = timed_run(command)
            finally:
                stop.touch()
                attempts = int(knocking.communicate(timeout=30)[0]) if knocking else 0
            # (The dump reaches the cluster by its directory: with its keys, if it has any.)
            check = check_counts(dump_counts([str(cluster_dir)]), expected)
        finally:
            _smr("cluster", "down", "--dir", str(cluster_dir), "--grace-s", "3")
    return {
        "secure": secure,
        "outsider_attempts": attempts,
        "combine": combine,
        "elapsed_s": elapsed,
        "words_per_s": words / elapsed,
        "check": check,
    }


def run(runs: int, words_count: int) -> dict[str, Any]:
    """Every mode, ``runs`` runs of each kind of cluster in alternating order."""
    words = load_words(words_count)
    expected = dict(stream_counts(words, len(words)))
    with tempfile.TemporaryDirectory(prefix="smr-bench-text-") as textdir:
        text = Path(textdir) / "words.txt"
        write_words_text(words, text, WORDS_PER_LINE)
        modes: dict[str, Any] = {}
        for combine in (False, True):
            kinds = {"keys": (True, False), "insecure": (False, False), "outsider": (True, True)}
            by_kind: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
            for index in range(runs):
                # The kinds rotate, so that none is always first (or last) after a pause.
                order = list(kinds)[index % len(kinds) :] + list(kinds)[: index % len(kinds)]
                for kind in order:
                    secure, outsider = kinds[kind]
                    result = feed_once(secure, text, len(words), combine, expected, outsider)
                    by_kind[kind].append(result)
                    print(
                        f"  {kind:8} combine={combine!s:5} {result['words_per_s']:,.0f} words/s "
                        f"exact={result['check']['exact']} "
                        f"outsider attempts={result['outsider_attempts']}",
                        flush=True,
                    )
            rates = {kind: spread([r["words_per_s"] for r in by_kind[kind]]) for kind in kinds}
            medians = {kind: rate["median"] for kind, rate in rates.items()}
            assert all(median is not None for median in medians.values())
            modes["combine" if combine else "no_combine"] = {
                "runs": by_kind,
                "keys_words_per_s": rates["keys"],
                "insecure_words_per_s": rates["insecure"],
                "outsider_words_per_s": rates["outsider"],
                "keys_over_insecure": medians["keys"] / medians["insecure"],  # type: ignore[operator]
                "outsider_over_keys": medians["outsider"] / medians["keys"],  # type: ignore[operator]
                "outsider_attempts": spread([r["outsider_attempts"] for r in by_kind["outsider"]]),
                "exact": all(r["check"]["exact"] for rs in by_kind.values() for r in rs),
            }
    return {
        "benchmark": "security",
        "nodes": NODES,
        "replication": REPLICATION,
        "words": len(words),
        "runs": runs,
        "modes": modes,
        "machine": machine(),
        "versions": versions(),
    }


def plot(report: dict[str, Any], path: Path) -> None:
    """Words/s with keys and without, per mode, with min-max bars."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(6, 3.5))
    names = list(report["modes"])
    for offset, (kind, label) in enumerate(
        (("keys", "keys (CurveZMQ)"), ("insecure", "--insecure"))
    ):
        figures = [report["modes"][name][f"{kind}_words_per_s"] for name in names]
        medians = [f["median"] / 1000 for f in figures]
        errors = [
            [(f["median"] - f["min"]) / 1000 for f in figures],
            [(f["max"] - f["median"]) / 1000 for f in figures],
        ]
        positions = [i + offset * 0.27 for i in range(len(names))]
        axes.bar(positions, medians, 0.27, yerr=errors, label=label, capsize=3)
    axes.set_xticks([i + 0.27 for i in range(len(names))], [n.replace("_", " ") for n in names])
    axes.set_ylabel("k words/s (smr feed, 3 nodes, r = 1)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=RESULTS / "security.json")
    args = parser.parse_args()
    report = run(args.runs, args.words)
    write_report(report, args.out, plot)
    for name, mode in report["modes"].items():
        print(
            f"{name}: keys {mode['keys_words_per_s']['median']:,.0f} words/s, insecure "
            f"{mode['insecure_words_per_s']['median']:,.0f}: "
            f"{mode['keys_over_insecure']:.2f}x; with an outsider knocking "
            f"{mode['outsider_over_keys']:.2f}x of keys; exact {mode['exact']}"
        )


if __name__ == "__main__":
    main()
