"""``smr spark-feed``: a Structured Streaming query over a directory or a socket that emits the
records through the job's ``map`` into the ring (docs/design/architecture.md#spark)."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from smr.api import load_job
from smr.cli.options import cluster_dir_option, interrupt, job_of_cluster_option
from smr.client.control import Client, NodeUnreachable, fetch_view
from smr.mapper.emitter import (
    BATCH_SIZE_DEFAULT,
    WINDOW_BATCHES_DEFAULT,
)
from smr.ring.view import View
from smr.spark import checkpoint as spark_checkpoint
from smr.spark.setup import (
    MASTER_DEFAULT,
    MAX_FILES_PER_TRIGGER_DEFAULT,
)
from smr.spec.parse import feeder_job, read_spec
from smr.windows import refuse_windowed
from smr.wording import counted

if TYPE_CHECKING:
    from smr.spark.query import BatchReport


@click.command("spark-feed")
@cluster_dir_option
@job_of_cluster_option
@click.option(
    "--input",
    "input_ref",
    required=True,
    help="A directory of text files (.gz too), streamed with Spark's file source; or "
    "socket://HOST:PORT for lines from a TCP socket (demos: not replayable, so not exactly "
    "once across restarts).",
)
@click.option(
    "--checkpoint",
    "checkpoint_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="The query's checkpoint; restart with the same one to resume exactly once "
    "[default: CLUSTER/spark-checkpoints/QUERY].",
)
@click.option("--once", is_flag=True, help="Process the files there now, then exit.")
@click.option(
    "--from-start",
    is_flag=True,
    help="If the checkpoint fed an earlier life of the cluster (before 'smr cluster up' "
    "started it again, empty), move it aside and feed everything again; without this flag "
    "such a checkpoint is refused.",
)
@click.option("--query", "query_name", help="The query's name [default: smr-JOBNAME].")
@click.option(
    "--max-files-per-trigger",
    default=MAX_FILES_PER_TRIGGER_DEFAULT,
    show_default=True,
    type=click.IntRange(1),
)
@click.option("--trigger-ms", type=click.IntRange(1), help="Processing-time trigger interval.")
@click.option("--master", default=MASTER_DEFAULT, show_default=True, help="Spark master.")
@click.option("--batch-size", default=BATCH_SIZE_DEFAULT, show_default=True, type=click.IntRange(1))
@click.option("--window", default=WINDOW_BATCHES_DEFAULT, show_default=True, type=click.IntRange(1))
@click.option("--no-combine", is_flag=True, help="Do not apply the job's combine.")
def spark_feed_command(
    cluster_dir: Path,
    job_ref: str | None,
    input_ref: str,
    checkpoint_dir: Path | None,
    once: bool,
    from_start: bool,
    query_name: str | None,
    max_files_per_trigger: int,
    trigger_ms: int | None,
    master: str,
    batch_size: int,
    window: int,
    no_combine: bool,
) -> None:
    """Stream the files of a directory through the job's map in Spark, into the ring.

    A batch commits in Spark only once all its tuples are acked by every node of their
    replica set; a task or batch that runs again (a retry, a restart from the same
    checkpoint) is applied once.
    """
    from smr.spark import query as smr_spark

    # User errors before Spark's start-up time: the job, the input, Java, the cluster.
    spec = read_spec(cluster_dir)
    job_ref = feeder_job(spec, str(cluster_dir / "cluster.json"), job_ref)
    refuse_windowed(load_job(job_ref), "smr spark-feed")
    socket_addr = smr_spark.parse_socket_ref(input_ref)
    if socket_addr is None:
        smr_spark.check_input_dir(Path(input_ref))
    smr_spark.check_java()
    view = fetch_view(spec.seeds)
    name = query_name or f"smr-{load_job(job_ref).name}"
    checkpoint = checkpoint_dir or cluster_dir / "spark-checkpoints" / name
    _claim_checkpoint(checkpoint, spec.incarnation, cluster_dir, from_start, view)
    started = time.monotonic()
    session = _start_session(cluster_dir, job_ref, master, started)
    totals = _Totals()
    failure: str | None = None
    running = False
    try:
        if socket_addr is None:
            df = smr_spark.text_files(session, Path(input_ref), max_files_per_trigger)
        else:
            df = smr_spark.socket_lines(session, *socket_addr)
        query = smr_spark.emit(
            df,
            job_ref,
            cluster_dir,
            query=name,
            checkpoint_dir=checkpoint,
            available_now=once,
            trigger_ms=trigger_ms,
            combine=not no_combine,
            batch_size=batch_size,
            window_batches=window,
            on_batch=totals.report,
        )
        running = True
        spark_checkpoint.record(checkpoint, spec.incarnation)
        click.echo(f"query {name} running, checkpoint {checkpoint}", err=True)
        failure = _await_query(query)
    finally:
        with contextlib.suppress(Exception):
            session.stop()
    if running:
        # One line however the query ended, so a failed or stopped feed says what it delivered.
        click.echo(totals.summary(time.monotonic() - started))
    if failure is not None:
        click.echo(f"smr: error: {failure}", err=True)
        sys.exit(1)


def _claim_checkpoint(
    checkpoint: Path, incarnation: str | None, cluster_dir: Path, from_start: bool, view: View
) -> None:
    """Refuse a checkpoint that fed an earlier life of the cluster, or with ``from_start``
    move it aside, saying so (``smr.spark.checkpoint.claim``)."""
    # Without an incarnation to compare, an empty ring is what tells a restarted one.
    ring_keys = _ring_keys(view) if incarnation is None else None
    moved = spark_checkpoint.claim(checkpoint, incarnation, cluster_dir, from_start, ring_keys)
    if moved is not None:
        click.echo(moved, err=True)


def _start_session(cluster_dir: Path, job_ref: str, master: str, started: float) -> Any:
    """The Spark session of the feed, its start-up time said; the JVM's own warnings go to
    the cluster's logs, not the terminal."""
    from smr.spark import query as smr_spark

    jvm_log = cluster_dir / "logs" / "spark-feed.log"
    session = smr_spark.session(f"smr spark-feed {job_ref}", master, jvm_log=jvm_log)
    click.echo(
        f"Spark {session.version} started in {time.monotonic() - started:.1f} s "
        f"(its log: {jvm_log})",
        err=True,
    )
    return session


def _await_query(query: Any) -> str | None:
    """Wait for the query to end (SIGTERM and Ctrl-C stop it); what failed it, if anything."""
    from smr.spark import query as smr_spark

    signal.signal(signal.SIGTERM, interrupt)
    try:
        smr_spark.await_query(query)
    except KeyboardInterrupt:
        # A signal to the whole process group may have stopped the JVM already.
        with contextlib.suppress(Exception):
            query.stop()
        click.echo("stopped", err=True)
    except smr_spark.SparkQueryError as error:
        return str(error)
    return None


@dataclass
class _Totals:
    """What the query delivered so far: each batch said as it commits, and the sums."""

    records: int = 0
    tuples: int = 0
    batches: int = 0

    def report(self, batch: BatchReport) -> None:
        self.records += batch.records
        self.tuples += batch.tuples
        self.batches += 1
        rate = batch.tuples / batch.elapsed_s if batch.elapsed_s > 0 else 0.0
        click.echo(
            f"batch {batch.batch_id}: {batch.records:,} records, {batch.tuples:,} tuples acked "
            f"in {batch.elapsed_s:.2f} s ({rate:,.0f}/s); total {self.tuples:,} tuples"
        )

    def summary(self, elapsed_s: float) -> str:
        return (
            f"fed {counted(self.tuples, 'tuple')} from {counted(self.records, 'record')} "
            f"read in {counted(self.batches, 'batch')} (every tuple acked), "
            f"{elapsed_s:.1f} s in all"
        )


def _ring_keys(view: View) -> int | None:
    """The keys the ring's owners hold, all told; None if an owner does not answer."""
    client = Client(timeout_ms=2000)
    try:
        rows = client.status_each([member.addr for member in view.owners()])
    finally:
        client.close()
    if any(isinstance(row, NodeUnreachable) for row in rows.values()):
        return None
    return sum(int(row["keys"]) for row in rows.values() if isinstance(row, dict))
