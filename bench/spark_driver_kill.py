"""The driver-kill harness: a Spark baseline query in a driver process of its own, SIGKILLed
mid-batch (its whole process group: Python driver, JVM and Python workers) and restarted from
its checkpoint, with the time until it commits again and a check that no count was lost.

``DriverProcess`` starts and kills a driver (``python bench/spark_baselines.py driver``, whose
body is ``driver_main``); ``measure_recovery`` is one kill and restart; ``recovery_benchmark``
repeats it per case and state size.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import check_counts, spread
from bench.spark_input import (
    BATCH_TIMEOUT_S,
    POLL_S,
    CheckpointLog,
    Dripper,
    book_lines,
    directory_counts,
    split_lines,
    synthetic_lines,
    write_input_files,
)
from bench.spark_queries import (
    BASELINES_SCRIPT,
    SESSION_TIMEOUT_S,
    quiet_spark_environment,
    read_sink_counts,
    spark_session,
    start_query,
)
from bench.spark_runners import run_error, say

# Bounds on the waits for a driver to stop when asked and for a killed process group to be
# gone; past them the harness kills what is left instead of hanging.
STOP_TIMEOUT_S = 30.0
KILL_TIMEOUT_S = 15.0

__all__ = [
    "DriverProcess",
    "driver_main",
    "measure_recovery",
    "recovery_benchmark",
]


# -- recovery: kill the driver, restart it ---------------------------------------------------


class DriverProcess:
    """A baseline query in its own driver process (``python bench/spark_baselines.py
    driver``), in a new session so that its process group holds the Python driver, the JVM and
    the Python workers. It records its steps in a JSON-lines events file; ``stop`` asks it to
    stop (a stop file), ``kill`` SIGKILLs the whole group by its id."""

    def __init__(self, workdir: Path, label: str, args: Sequence[str]) -> None:
        self.events_path = workdir / f"{label}.events.jsonl"
        self.stop_path = workdir / f"{label}.stop"
        self.log_path = workdir / f"{label}.log"
        command = [
            sys.executable,
            str(BASELINES_SCRIPT),
            "driver",
            *args,
            "--events",
            str(self.events_path),
            "--stop-file",
            str(self.stop_path),
        ]
        # Nothing of a SIGKILLed driver outlives workdir: the log4j2 configuration comes from
        # this process, Spark's scratch (block manager, RocksDB working copies) goes to
        # SPARK_LOCAL_DIRS and the JVM's and Python's temporary files to the same place.
        quiet_spark_environment()
        local_dir = workdir / f"{label}.spark-local"
        local_dir.mkdir(exist_ok=True)
        environment = {
            **os.environ,
            "SPARK_LOCAL_DIRS": str(local_dir),
            "TMPDIR": str(local_dir),
            "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={local_dir}",
        }
        self.spawned_at_unix_s = time.time()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=environment,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def events(self) -> dict[str, dict[str, Any]]:
        """The driver's events so far, by name."""
        if not self.events_path.exists():
            return {}
        lines = self.events_path.read_text().splitlines()
        return {e["event"]: e for e in (json.loads(line) for line in lines if line.strip())}

    def wait_event(self, name: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            events = self.events()
            if name in events:
                return events[name]
            if "failed" in events or self.process.poll() is not None:
                raise RuntimeError(
                    f"driver {self.pid} ended before {name!r}: {events.get('failed')}; log "
                    f"{self.log_path}: {self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"driver {self.pid}: no {name!r} after {timeout_s:.0f} s")
            time.sleep(POLL_S)

    def check_running(self) -> None:
        """RuntimeError with the driver's log if it has exited (for waits on its batches)."""
        if self.process.poll() is not None:
            raise RuntimeError(
                f"driver {self.pid} exited with {self.process.returncode}; log "
                f"{self.log_path}: {self.log_tail()}"
            )

    def log_tail(self, lines: int = 15) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def group(self) -> list[Any]:
        """The live processes of the driver's process group (whose id is the driver's PID),
        including the ones orphaned when the driver exited (the JVM outlives it briefly)."""
        import psutil

        members = []
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                if os.getpgid(process.pid) == self.pid and _alive(process):
                    members.append(process)
        return members

    def kill(self) -> dict[str, Any]:
        """SIGKILL the driver's process group by its id and wait until every process of it is
        gone (a zombie counts as gone); any still there is killed by its own PID."""
        members = self.group()
        killed_at = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(KILL_TIMEOUT_S)
        stragglers = _wait_gone(members, KILL_TIMEOUT_S)
        for straggler in stragglers:
            with contextlib.suppress(Exception):
                straggler.kill()
        return {
            "killed_at_unix_s": killed_at,
            "gone_after_s": time.time() - killed_at,
            "processes": len(members),
            "stragglers": [p.pid for p in stragglers],
        }

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """Ask the driver to stop its query and session (the stop file) and wait until its
        whole group has exited; SIGKILL the group if it has not after ``timeout_s``. True if
        it stopped by itself."""
        members = self.group()
        self.stop_path.touch()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return False
        if _wait_gone(members, timeout_s):
            self.kill()
            return False
        return True

    def ensure_stopped(self) -> None:
        """Kill whatever is left of the group (for ``finally`` blocks)."""
        if self.process.poll() is None or self.group():
            self.kill()


def _alive(process: Any) -> bool:
    """Running and not a zombie (a killed process init has not reaped yet is gone)."""
    import psutil

    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _wait_gone(processes: Sequence[Any], timeout_s: float) -> list[Any]:
    """Wait until none of ``processes`` is alive; the ones still alive after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p for p in processes if _alive(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def measure_recovery(
    baseline: str,
    keys_n: int,
    workdir: Path,
    words_per_s: float = 10_000.0,
    state_store: str = "rocksdb",
    trigger_ms: int = 0,
    kill_after_s: float = 3.0,
    after_restart_s: float = 2.0,
    words_per_file: int = 2_000,
    keys_per_file: int = 100_000,
    batch_timeout_s: float = BATCH_TIMEOUT_S,
) -> dict[str, Any]:
    """One recovery run, in ``workdir`` (kept for its logs; the caller removes it). Each
    wait for a batch fails after ``batch_timeout_s`` with what it waited for.

    1. Preload: ``keys_n`` distinct keys (``synthetic_lines``), files of ``keys_per_file``,
       in the input directory before the driver starts.
    2. Start driver 1; wait until the preload files are committed: the state holds
       ``keys_n`` keys (plus nothing else).
    3. Drip book text at ``words_per_s`` in files of ``words_per_file`` words.
    4. After ``kill_after_s`` of drip, and at least one committed batch of it, SIGKILL
       driver 1's process group; wait until every process of it is gone.
    5. Restart at once: driver 2 on the same checkpoint, input and sink. The drip goes on.
    6. The first batch committed after the kill (``commits/<batch>`` mtime > kill) gives
       ``kill_to_commit_s`` and ``restart_to_commit_s``; driver 2's events split the latter
       into spawn → session ready → query started → commit.
    7. Drip ``after_restart_s`` more, stop the drip, wait until every file is committed, stop
       driver 2 (stop file; SIGKILL of its group if it hangs).
    8. Counts: the sink's rows of the committed batches vs plain Python over every input file.
    """
    input_dir, checkpoint_dir, sink_dir = (
        workdir / "input",
        workdir / "checkpoint",
        workdir / "sink",
    )
    preload = write_input_files(
        synthetic_lines(keys_n), input_dir, max(1, math.ceil(keys_n / keys_per_file)), "keys-"
    )
    drip = split_lines(
        book_lines(int(words_per_s * (kill_after_s + after_restart_s + 120))), words_per_file
    )
    log = CheckpointLog(checkpoint_dir)
    driver_args = [
        "--baseline",
        baseline,
        "--state-store",
        state_store,
        "--trigger-ms",
        str(trigger_ms),
        "--input",
        str(input_dir),
        "--checkpoint",
        str(checkpoint_dir),
        "--sink",
        str(sink_dir),
    ]
    record: dict[str, Any] = {
        "baseline": baseline,
        "state_store": state_store,
        "keys_n": keys_n,
        "trigger": f"{trigger_ms} ms" if trigger_ms else "default",
        "words_per_s": words_per_s,
    }
    dripper = Dripper(drip, input_dir, words_per_s)
    drivers: list[DriverProcess] = []
    try:
        # 1.-2. preload
        first = DriverProcess(workdir, "driver1", driver_args)
        drivers.append(first)
        ready = first.wait_event("session_ready", SESSION_TIMEOUT_S)
        preload_started = time.time()
        log.wait_committed(
            [f["name"] for f in preload["files"]],
            batch_timeout_s,
            "preload",
            first.check_running,
        )
        record["preload_s"] = time.time() - preload_started
        record["first_session_s"] = ready["session_s"]
        # 3.-4. drip, then kill mid-stream
        dripper.start()
        time.sleep(kill_after_s)
        deadline = time.monotonic() + batch_timeout_s
        while not any(
            name.startswith("drip-") and at is not None
            for name, (_, at) in log.file_commits().items()
        ):
            first.check_running()
            if time.monotonic() > deadline:
                raise TimeoutError("no dripped file committed before the kill")
            time.sleep(POLL_S)
        kill = first.kill()
        committed_before = log.committed()
        batches_before = log.batches()
        # 5. restart
        second = DriverProcess(workdir, "driver2", driver_args)
        drivers.append(second)
        # 6. the first commit after the kill
        deadline = time.monotonic() + batch_timeout_s
        while True:
            after = {b: at for b, at in log.committed().items() if at > kill["killed_at_unix_s"]}
            if after:
                break
            if second.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no commit after restart; driver 2 log: {second.log_tail()}")
            time.sleep(POLL_S)
        first_batch = min(after)
        committed_at = after[first_batch]
        events = second.events()
        batch = log.batches()[first_batch]
        # 7. more drip, then drain and stop
        time.sleep(after_restart_s)
        dripper.stop()
        if dripper.error is not None:
            raise dripper.error
        log.wait_committed(
            [f["name"] for f in dripper.published],
            batch_timeout_s,
            "drained after restart",
            second.check_running,
        )
        record["stopped_cleanly"] = second.stop()
        # 8. counts
        committed = log.committed()
        counted = read_sink_counts(sink_dir, committed)
        expected = directory_counts(input_dir)
        last_before = max(committed_before) if committed_before else None
        uncommitted = [
            b for b, known in batches_before.items() if known.committed_at_unix_s is None
        ]
        record.update(
            killed_at_unix_s=kill["killed_at_unix_s"],
            processes_killed=kill["processes"],
            stragglers=kill["stragglers"],
            last_batch_before_kill=last_before,
            uncommitted_batches_at_kill=uncommitted,
            first_batch_after_restart=first_batch,
            first_batch_replayed=first_batch in uncommitted,
            first_batch_files=len(batch.files),
            restarted_at_unix_s=second.spawned_at_unix_s,
            kill_to_restart_s=second.spawned_at_unix_s - kill["killed_at_unix_s"],
            kill_to_commit_s=committed_at - kill["killed_at_unix_s"],
            restart_to_commit_s=committed_at - second.spawned_at_unix_s,
            restart_to_session_s=events["session_ready"]["unix_s"] - second.spawned_at_unix_s,
            session_s=events["session_ready"]["session_s"],
            session_to_query_s=events["query_started"]["unix_s"]
            - events["session_ready"]["unix_s"],
            query_start_to_commit_s=committed_at - events["query_started"]["unix_s"],
            files_dripped=len(dripper.published),
            words_dripped=sum(f["words"] for f in dripper.published),
            batches=len(committed),
            **check_counts(counted, expected),
        )
        return record
    finally:
        dripper.stop()
        for driver in drivers:
            driver.ensure_stopped()


def recovery_benchmark(
    cases: Sequence[tuple[str, str]] = (("native", "rocksdb"), ("native", "default")),
    keys: Sequence[int] = (10_000, 100_000),
    runs: int = 3,
    words_per_s: float = 10_000.0,
    trigger_ms: int = 0,
    kill_after_s: float = 3.0,
    logs_dir: Path | None = None,
) -> dict[str, Any]:
    """``measure_recovery`` ``runs`` times for each (baseline, state store) of ``cases`` and
    each state size in ``keys``, round-robin; per (case, keys): the spread of kill → commit,
    restart → commit and its parts, and exactness. Each run's driver logs are copied under
    ``logs_dir`` if given."""
    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for run in range(runs):
        for baseline, state_store in cases:
            for keys_n in keys:
                workdir = Path(tempfile.mkdtemp(prefix="smr-spark-recovery-"))
                try:
                    record = measure_recovery(
                        baseline,
                        keys_n,
                        workdir,
                        words_per_s,
                        state_store,
                        trigger_ms,
                        kill_after_s,
                    )
                except Exception as error:
                    errors.append(
                        {
                            **run_error(run, baseline, error),
                            "state_store": state_store,
                            "keys_n": keys_n,
                        }
                    )
                    continue
                finally:
                    if logs_dir is not None:
                        target = logs_dir / f"run{run}-{baseline}-{state_store}-{keys_n}"
                        target.mkdir(parents=True, exist_ok=True)
                        for log in [*workdir.glob("*.log"), *workdir.glob("*.events.jsonl")]:
                            shutil.copy(log, target)
                    shutil.rmtree(workdir, ignore_errors=True)
                record["run"] = run
                results.append(record)
                say(
                    f"recovery run {run} {baseline}/{state_store} {keys_n:,} keys: kill → commit "
                    f"{record['kill_to_commit_s']:.1f} s, restart → commit "
                    f"{record['restart_to_commit_s']:.1f} s (session {record['session_s']:.1f} s)"
                    f", exact {record['exact']}"
                )
    summary = []
    for baseline, state_store in cases:
        for keys_n in keys:
            mine = [
                r
                for r in results
                if (r["baseline"], r["state_store"], r["keys_n"]) == (baseline, state_store, keys_n)
            ]
            row: dict[str, Any] = {
                "baseline": baseline,
                "state_store": state_store,
                "keys_n": keys_n,
                "runs": len(mine),
                "exact": sum(1 for r in mine if r["exact"]),
                "first_batch_replayed": sum(1 for r in mine if r["first_batch_replayed"]),
            }
            for figure in (
                "kill_to_commit_s",
                "restart_to_commit_s",
                "kill_to_restart_s",
                "restart_to_session_s",
                "session_s",
                "session_to_query_s",
                "query_start_to_commit_s",
                "preload_s",
            ):
                row[figure] = spread([r[figure] for r in mine])
            summary.append(row)
    return {
        "how": "per run a fresh directory; the query runs in a driver process of its own "
        "(python bench/spark_baselines.py driver, new session); keys_n distinct keys are "
        "preloaded and committed, then book text is dripped at words_per_s; after kill_after_s "
        "(and a committed batch of drip) the driver's process group (Python driver, JVM, Python "
        "workers) is SIGKILLed and, once every process is gone, a new driver is started on the "
        "same checkpoint while the drip goes on. kill_to_commit_s = mtime of the first "
        "commits/<batch> written after the kill - the kill; restart_to_commit_s = that commit - "
        "the new driver's spawn; its parts from the driver's events (session ready, query "
        "started). At the end the sink's rows of the committed batches are compared with plain "
        "Python's count of every input file.",
        "words_per_s": words_per_s,
        "trigger": f"{trigger_ms} ms" if trigger_ms else "default",
        "kill_after_s": kill_after_s,
        "summary": summary,
        "runs": results,
        "errors": errors,
    }


# -- the driver process (``driver`` subcommand) ----------------------------------------------


def driver_main(args: argparse.Namespace) -> int:
    """The ``driver`` subcommand: one baseline query until the stop file appears; its steps
    as JSON lines in the events file."""
    events_path: Path = args.events

    def event(name: str, **fields: Any) -> None:
        with open(events_path, "a") as out:
            out.write(json.dumps({"event": name, "unix_s": time.time(), **fields}) + "\n")

    event("started", pid=os.getpid())
    try:
        started = time.time()
        spark = spark_session(args.state_store, app_name=f"smr-baseline-{args.baseline}")
        event("session_ready", session_s=time.time() - started)
        query = start_query(
            spark,
            args.baseline,
            args.input,
            args.checkpoint,
            args.sink,
            args.state_store,
            args.max_files_per_trigger,
            args.trigger_ms,
        )
        event("query_started")
        while query.isActive:
            if args.stop_file.exists():
                query.stop()
                break
            query.awaitTermination(0.2)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        spark.stop()
        event("stopped")
        return 0
    except Exception as error:
        event("failed", error=f"{type(error).__name__}: {error}", traceback=traceback.format_exc())
        return 1
