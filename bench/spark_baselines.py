"""Pure-Spark baselines for smr's benchmarks: the word count as Structured Streaming queries on
``local[2]``, with their throughput, latency and recovery after a SIGKILL of the driver.

The life of one word in a baseline:

1. **Input.** ``write_input_files`` (or a ``Dripper``, at a words/s rate) publishes text files
   in an input directory: each is written under a hidden name (``.x.tmp``, which the file
   source ignores) and renamed into place, so Spark never sees half a file.
2. **Source.** The text file source lists the directory each trigger and takes the new files
   (at most ``maxFilesPerTrigger``, oldest modification time first); each line is a row.
3. **Tokenise.** ``regexp_extract_all(lower(line), "[a-z0-9']+")`` exploded into one row per
   word: the same words as plain Python's ``WORD.findall(line.lower())`` (checked over the whole
   corpus by ``check_tokenisation``; the GITenberg BOM and CRLF endings are not word characters
   on either side).
4. **Count.** One of the ``BASELINES``: ``native`` (``groupBy(word).count()``), ``pandas_state``
   (``applyInPandasWithState``, a count per word) or ``tws_pandas``
   (``transformWithStateInPandas``, a ``ValueState`` per word); update mode, state in the
   chosen state store provider, checkpointed to a local directory.
5. **Sink.** ``BatchFileSink`` (``foreachBatch``) writes each micro-batch's updated
   ``(word, count)`` rows to ``<sink>/<batch>.json``, atomically, named by the batch id: a batch
   replayed after a crash overwrites its own file with the same rows, so the sink is exactly
   once. ``read_sink_counts`` replays the files of the committed batches in order; in update
   mode a word's last row is its count.
6. **Commit.** Spark writes ``<checkpoint>/commits/<batch>``; ``CheckpointLog`` reads which
   files each batch took (``sources/0``), when it was planned (``offsets/<batch>``'s mtime) and
   when it committed (``commits/<batch>``'s mtime). Every latency and recovery figure is read
   from those mtimes, never from a poll.

Measurements (each one run returns a plain dict; ``*_benchmark`` repeats it ``runs`` times,
round-robin over the baselines, and summarises with ``bench.common.spread``):

- ``measure_throughput``: input words per second from the first batch's trigger start to the
  last commit, at a fixed batch size (``maxFilesPerTrigger`` files), session start excluded
  (``measure_session_start`` times it separately, in fresh processes).
- ``measure_latency``: files dripped at a words/s rate; per file, its publication time to the
  commit of the micro-batch that took it; p50/p95/p99/max.
- ``measure_recovery``: the query in a separate driver process (``driver`` subcommand), preloaded
  with ``keys_n`` distinct keys, fed by a dripper, SIGKILLed (its whole process group: Python
  driver, JVM and Python workers) mid-stream and restarted from its checkpoint; kill → first
  commit after restart, and restart → that commit; counts checked exact at the end.

    python bench/spark_baselines.py throughput|latency|recovery|tokenisation|all [options]

Results go to ``bench/results/spark_baselines.json`` (one section per measurement, each with
the machine, versions and how it was measured) and ``bench/results/spark_baselines.png``.

This file is only the command line. The code, by role:

- ``bench/spark_input.py``: steps 1 and 6, the input files, the dripper and the checkpoint log;
- ``bench/spark_queries.py``: steps 2-5, the baseline queries, their session and sink;
- ``bench/spark_runners.py``: throughput, session start and latency runs in one session;
- ``bench/spark_driver_kill.py``: the driver process, its SIGKILL and restart (recovery);
- ``bench/spark_results.py``: the results JSON and its plot.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if sys.path[0] != str(REPO):
    sys.path.insert(0, str(REPO))

from bench.common import machine  # noqa: E402 (needs the path set above)
from bench.spark_driver_kill import driver_main, recovery_benchmark  # noqa: E402
from bench.spark_input import book_lines, write_input_files  # noqa: E402
from bench.spark_queries import (  # noqa: E402
    BASELINES,
    STATE_STORES,
    check_tokenisation,
    spark_session,
)
from bench.spark_results import RESULTS_JSON, plot, save_section  # noqa: E402
from bench.spark_runners import (  # noqa: E402
    latency_benchmark,
    measure_session_start,
    say,
    session_probe_main,
    throughput_benchmark,
)


def _rates(text: str) -> dict[str, float]:
    """``name=words_per_s`` items, comma-separated."""
    rates = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        if name not in BASELINES or not value:
            raise SystemExit(
                f"bad item {item!r}: expected BASELINE=WORDS_PER_S, BASELINE one of "
                f"{sorted(BASELINES)}"
            )
        rates[name] = float(value)
    return rates


def _cases(text: str) -> list[tuple[str, str]]:
    """``baseline/state_store`` items, comma-separated."""
    cases = []
    for item in text.split(","):
        baseline, _, state_store = item.partition("/")
        if baseline not in BASELINES or state_store not in BASELINES[baseline].state_stores:
            raise SystemExit(
                f"bad case {item!r}: expected BASELINE/STATE_STORE, e.g. native/rocksdb; "
                f"stores per baseline: { {b: v.state_stores for b, v in BASELINES.items()} }"
            )
        cases.append((baseline, state_store))
    return cases


def run_throughput(args: argparse.Namespace) -> None:
    session = measure_session_start(args.runs)
    say(f"session start: {session['spawn_to_session_s']['median']:.1f} s (median)")
    spark = spark_session()
    with tempfile.TemporaryDirectory(prefix="smr-spark-input-") as input_dir:
        lines = book_lines(args.words)
        written = write_input_files(
            lines, Path(input_dir), max(1, round(args.words / args.words_per_file))
        )
        batches_max = {b: args.python_batches for b in ("pandas_state", "tws_pandas")}
        section = throughput_benchmark(
            spark,
            Path(input_dir),
            args.baselines.split(","),
            args.runs,
            args.max_files_per_trigger,
            batches_max,
        )
    spark.stop()
    section.update(
        session_start=session,
        input={
            "words": written["words"],
            "files": written["files_n"],
            "lines": written["lines"],
            "words_per_file": args.words_per_file,
        },
        baselines={b: BASELINES[b].operator for b in args.baselines.split(",")},
    )
    save_section("throughput", section, args.out, args.loadavg_before)


def run_latency(args: argparse.Namespace) -> None:
    spark = spark_session()
    section = latency_benchmark(
        spark,
        _rates(args.rates),
        args.runs,
        [int(t) for t in args.triggers_ms.split(",")],
        args.duration_s,
        args.files_per_s,
    )
    spark.stop()
    save_section("latency", section, args.out, args.loadavg_before)


def run_recovery(args: argparse.Namespace) -> None:
    section = recovery_benchmark(
        _cases(args.cases),
        [int(k) for k in args.keys.split(",")],
        args.runs,
        args.rate,
        args.trigger_ms,
        args.kill_after_s,
        args.logs,
    )
    save_section("recovery", section, args.out, args.loadavg_before)


def run_tokenisation(args: argparse.Namespace) -> None:
    spark = spark_session()
    section = check_tokenisation(spark)
    spark.stop()
    say(f"tokenisation over {section['words']:,} words: exact {section['exact']}")
    save_section("tokenisation", section, args.out, args.loadavg_before)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--out", type=Path, default=RESULTS_JSON, help="results JSON (the PNG goes next to it)"
    )

    throughput = commands.add_parser(
        "throughput", parents=[common], help="input words/s per baseline"
    )
    throughput.add_argument("--runs", type=int, default=3)
    throughput.add_argument("--words", type=int, default=1_000_000, help="input words")
    throughput.add_argument("--words-per-file", type=int, default=25_000)
    throughput.add_argument("--max-files-per-trigger", type=int, default=2)
    throughput.add_argument(
        "--python-batches",
        type=int,
        default=2,
        help="batches per run for the Python-state baselines (slow): the first N batches",
    )
    throughput.add_argument("--baselines", default=",".join(BASELINES))

    latency = commands.add_parser(
        "latency", parents=[common], help="file published → batch committed, per file"
    )
    latency.add_argument("--runs", type=int, default=3)
    latency.add_argument(
        "--rates",
        default="native=20000,pandas_state=2000,tws_pandas=1000",
        help="BASELINE=WORDS_PER_S items: each baseline's feed rate",
    )
    latency.add_argument("--triggers-ms", default="0,500", help="0 = Spark's default trigger")
    latency.add_argument("--duration-s", type=float, default=20.0)
    latency.add_argument("--files-per-s", type=float, default=4.0)

    recovery = commands.add_parser(
        "recovery", parents=[common], help="SIGKILL the driver, restart, time to commit"
    )
    recovery.add_argument("--runs", type=int, default=3)
    recovery.add_argument(
        "--cases", default="native/rocksdb,native/default", help="BASELINE/STATE_STORE items"
    )
    recovery.add_argument("--keys", default="10000,100000", help="distinct keys preloaded")
    recovery.add_argument("--rate", type=float, default=10_000.0, help="drip words/s")
    recovery.add_argument("--trigger-ms", type=int, default=0)
    recovery.add_argument("--kill-after-s", type=float, default=3.0)
    recovery.add_argument("--logs", type=Path, help="copy each run's driver logs under this dir")

    commands.add_parser(
        "tokenisation", parents=[common], help="Spark's tokens vs Python's over the whole corpus"
    )

    everything = commands.add_parser(
        "all",
        parents=[common],
        help="tokenisation, throughput, latency, recovery with their defaults",
    )
    everything.add_argument("--runs", type=int, default=3)

    driver = commands.add_parser("driver", help="(internal) one query in its own process")
    driver.add_argument("--baseline", choices=sorted(BASELINES), required=True)
    driver.add_argument("--state-store", choices=sorted(STATE_STORES), default="rocksdb")
    driver.add_argument("--input", type=Path, required=True)
    driver.add_argument("--checkpoint", type=Path, required=True)
    driver.add_argument("--sink", type=Path, required=True)
    driver.add_argument("--max-files-per-trigger", type=int)
    driver.add_argument("--trigger-ms", type=int, default=0)
    driver.add_argument("--events", type=Path, required=True)
    driver.add_argument("--stop-file", type=Path, required=True)

    commands.add_parser("session-probe", help="(internal) time one session start")
    commands.add_parser("plot", parents=[common], help="redraw the PNG from the results JSON")

    args = parser.parse_args(argv)
    if args.command == "driver":
        return driver_main(args)
    if args.command == "session-probe":
        return session_probe_main()
    if args.command == "plot":
        plot(json.loads(args.out.read_text()), args.out.with_suffix(".png"))
        return 0
    runners: dict[str, Callable[[argparse.Namespace], None]] = {
        "throughput": run_throughput,
        "latency": run_latency,
        "recovery": run_recovery,
        "tokenisation": run_tokenisation,
    }
    args.loadavg_before = machine()["loadavg"]
    if args.command == "all":
        for name in ("tokenisation", "throughput", "latency", "recovery"):
            defaults = main_parser_defaults(parser, name)
            defaults.runs = args.runs
            defaults.out = args.out
            defaults.loadavg_before = machine()["loadavg"]
            runners[name](defaults)
        return 0
    runners[args.command](args)
    return 0


def main_parser_defaults(parser: argparse.ArgumentParser, command: str) -> argparse.Namespace:
    """The defaults of ``command``'s options, as if it were run with none."""
    return parser.parse_args([command])


if __name__ == "__main__":
    sys.exit(main())
