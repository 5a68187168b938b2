"""The ``smr`` command line's data commands (``feed``, ``query``, ``dump``, ``status``,
``recover``, ``tail``): ``verb [options] target``. The root group is :mod:`smr.cli`'s,
``spark-feed`` is :mod:`smr.cli.spark`'s, the user errors are :mod:`smr.cli.errors`'.

A feed with failed records (``map`` raised, a bad emit, a line too long) exits 1
after delivering the rest; ``smr status`` exits 1 when a node does not answer, naming it, or
when slots are offline. ``smr dump`` and ``smr query`` refuse lost slots (exit 2); with
``--allow-lost`` they answer without them, name them on standard error and exit 1.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import warnings
from pathlib import Path
from typing import Any

import click

from smr.api import load_job
from smr.checkpoint.ids import MapperId
from smr.cli.options import cluster_option, interrupt, job_of_cluster_option
from smr.client import seeds
from smr.client.control import Client, NodeUnreachable, describe_slots
from smr.connection import LostSlotsSkipped, connect
from smr.feed import run as feed_run
from smr.feed.records import MAX_RECORD_BYTES_DEFAULT, InputError, check_inputs
from smr.feed.run import FeedOptions
from smr.feed.text_check import not_text_reason
from smr.mapper.emitter import (
    BATCH_BYTES_DEFAULT,
    BATCH_BYTES_MAX,
    BATCH_SIZE_DEFAULT,
    WINDOW_BATCHES_DEFAULT,
)
from smr.spec.model import CLUSTER_FILE
from smr.spec.parse import feeder_job, read_spec
from smr.transport.zeromq import Subscriber
from smr.values import state_json
from smr.windows import refuse_in_cluster
from smr.wire.codec import decode
from smr.wire.kinds import FrameError
from smr.wire.reads import Output

# -- data ----------------------------------------------------------------------------------


@click.command("feed")
@cluster_option
@job_of_cluster_option
@click.option("--batch-size", default=BATCH_SIZE_DEFAULT, show_default=True, type=click.IntRange(1))
@click.option(
    "--batch-bytes",
    default=BATCH_BYTES_DEFAULT,
    show_default=True,
    type=click.IntRange(1024, BATCH_BYTES_MAX),
    help="Encoded bytes a batch may reach; also the most one tuple may take.",
)
@click.option(
    "--max-record-bytes",
    default=MAX_RECORD_BYTES_DEFAULT,
    show_default=True,
    type=click.IntRange(1),
    help="A longer input line is skipped and counted as a failed record.",
)
@click.option(
    "--window",
    default=WINDOW_BATCHES_DEFAULT,
    show_default=True,
    type=click.IntRange(1),
    help="Unacked batches per node before the feed waits.",
)
@click.option("--no-combine", is_flag=True, help="Do not apply the job's combine.")
@click.option(
    "--mapper-id",
    help="The feed's identity [default: derived from the cluster's incarnation, the job and "
    "the files (path, size, modification time), so that running the same feed again delivers "
    "only what is missing; random for standard input, which cannot be resumed]. An id that "
    "already delivered tuples is refused unless --resume is given.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the stream of --mapper-id from its start: the nodes drop the tuples they "
    "already have (files only: standard input cannot be read again).",
)
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a TTY).")
@click.option(
    "--binary-ok",
    is_flag=True,
    help="Feed a file that does not look like text as lines of UTF-8 anyway (without it, "
    "such a file is refused).",
)
@click.argument("files", nargs=-1, required=True)
def feed_command(
    cluster_arg: str,
    job_ref: str | None,
    batch_size: int,
    batch_bytes: int,
    max_record_bytes: int,
    window: int,
    no_combine: bool,
    mapper_id: str | None,
    resume: bool,
    progress: bool | None,
    binary_ok: bool,
    files: tuple[str, ...],
) -> None:
    """Stream FILES (or - for standard input) through the job's map into the ring.

    Resumable: a feed stopped part-way (interrupted, killed, a node unreachable) delivers
    exactly the rest when run again with the same arguments, and a finished one nothing.
    """
    if resume and "-" in files:
        raise click.UsageError(
            "--resume cannot continue a stream from standard input (it cannot be read again "
            "from its start): feed files, or use a new --mapper-id"
        )
    cluster = seeds.resolve(cluster_arg)
    spec = cluster.spec
    job_ref = feeder_job(spec, cluster.where, job_ref)
    job = refuse_in_cluster(load_job(job_ref))
    check_inputs(files)
    for path in dict.fromkeys(files):
        reason = None if path == "-" else not_text_reason(path)
        if reason is not None and not binary_ok:
            raise InputError(
                f"{path} does not look like text ({reason}): not fed; --binary-ok feeds it "
                "as lines of UTF-8 anyway"
            )
        if reason is not None:
            click.echo(
                f"smr: warning: {path} does not look like text ({reason}); "
                "feeding it as lines of UTF-8 (--binary-ok)",
                err=True,
            )
    # The command that resumes a feed of a given id says so.
    flags = [*(["--mapper-id", mapper_id, "--resume"] if mapper_id else [])]
    if batch_size != BATCH_SIZE_DEFAULT:
        flags += ["--batch-size", str(batch_size)]
    if no_combine:
        flags.append("--no-combine")
    options = FeedOptions(
        batch_size=batch_size,
        batch_bytes=batch_bytes,
        max_record_bytes=max_record_bytes,
        window_batches=window,
        combine=not no_combine,
        mapper_id=MapperId(mapper_id) if mapper_id else None,
        resume=resume,
        show_progress=sys.stderr.isatty() if progress is None else progress,
        flags=tuple(flags),
    )
    code = feed_run.run(
        cluster,
        job_ref,
        job,
        files,
        options,
        say=click.echo,
        report=lambda line: click.echo(line, err=True),
    )
    if code:
        sys.exit(code)


ALLOW_LOST_HELP = (
    "Answer without the slots whose state is lost (named on standard error, exit 1) "
    "instead of refusing."
)


@click.command("dump")
@cluster_option
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--allow-lost", is_flag=True, help=ALLOW_LOST_HELP)
def dump_command(cluster_arg: str, out_path: Path, allow_lost: bool) -> None:
    """Write every key's state, one JSON object per line, read from each slot's primary.
    Refuses (exit 2, nothing written) if slots are lost, unless --allow-lost."""
    keys = 0
    temporary = out_path.with_name(out_path.name + ".partial")
    signal.signal(signal.SIGTERM, interrupt)  # so that the finally below runs
    try:
        with connect(cluster_arg) as cluster, open(temporary, "w", encoding="utf-8") as out:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", LostSlotsSkipped)  # said below, in one line
                for key, state in cluster.scan(allow_lost=allow_lost):
                    out.write(state_json({"key": key, "state": state}) + "\n")
                    keys += 1
            skipped = cluster.skipped_lost_slots
        temporary.replace(out_path)
    finally:
        # On every way out but success (replaced above), no half-written dump is left.
        temporary.unlink(missing_ok=True)
    click.echo(f"dumped {keys} keys to {out_path}")
    _exit_if_skipped("the dump", skipped)


def _exit_if_skipped(what: str, skipped: frozenset[int]) -> None:
    """After a read with --allow-lost: name the lost slots it left out and exit 1."""
    if skipped:
        click.secho(
            f"smr: warning: {what} left out {len(skipped):,} lost slots "
            f"({describe_slots(skipped)}): their state is gone ('smr recover' shows them)",
            fg="red",
            err=True,
        )
        sys.exit(1)


@click.command("query")
@cluster_option
@click.argument("key")
@click.option("--int-key", is_flag=True, help="Treat KEY as an integer key.")
@click.option("--allow-lost", is_flag=True, help=ALLOW_LOST_HELP)
def query_command(cluster_arg: str, key: str, int_key: bool, allow_lost: bool) -> None:
    """Print the state of one KEY, read from its primary. Refuses (exit 2) if its slot is
    lost, unless --allow-lost (then its state is printed as null, and the exit code is 1)."""
    typed_key: str | int = _int_key(key) if int_key else key
    with connect(cluster_arg) as cluster:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LostSlotsSkipped)  # said below, in one line
            state = cluster.get(typed_key, allow_lost=allow_lost)
        skipped = cluster.skipped_lost_slots
        node, slot = cluster.owner_of(typed_key)
    click.echo(state_json({"key": typed_key, "node": node, "slot": slot, "state": state}))
    _exit_if_skipped("the query", skipped)


def _int_key(key: str) -> int:
    try:
        return int(key)
    except ValueError:
        raise click.BadParameter(
            f"{key!r} is not an integer (--int-key reads KEY as one; omit it for a string key)",
            param_hint="KEY",
        ) from None


@click.command("status")
@cluster_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status_command(cluster_arg: str, as_json: bool) -> None:
    """Show the ring: node, token, range share, keys, tuples/s, reduce errors, bad frames,
    under-replicated slots. Exits 1 if any node does not answer, or answers though the
    others declared it dead, or slots are offline."""
    from smr.cli import status_view
    from smr.client import status

    with connect(cluster_arg, timeout_s=1.0) as cluster:
        rows = cluster.status()
        logs_dir = None if cluster.ref.directory is None else cluster.ref.directory / "logs"
    _note_start_refusals(cluster_arg, rows)
    if as_json:
        click.echo(json.dumps({"nodes": rows}, indent=2))
    else:
        status_view.print_table(rows, f"smr cluster {cluster_arg}")
        moves = status.moves_line(rows)
        if moves is not None:
            click.echo(moves)
        zones = status.zones_line(rows)
        if zones is not None:
            click.secho(zones, fg="yellow", err=True)
    problems = [
        (status.refused_start_line(rows), "red"),
        (status.offline_line(rows), "red"),
        (status.dead_line(rows), "red"),
        (status.unreachable_line(rows, logs_dir), None),
    ]
    for line, colour in problems:
        if line is not None:
            click.secho(line, fg=colour, err=True)
    if any(line is not None for line, _ in problems):
        sys.exit(1)


def _note_start_refusals(cluster_arg: str, rows: list[dict[str, Any]]) -> None:
    """For a local cluster, say in each row of a node that does not answer why it refused
    to start, if it did (``refused_start``: what ``up`` found wrong with its folder, else its
    log's last line)."""
    cluster_dir = Path(cluster_arg)
    if not (cluster_dir / CLUSTER_FILE).is_file():
        return
    from smr.cluster.local import state_damaged, state_missing
    from smr.cluster.processes import start_refusal

    spec = read_spec(cluster_dir)
    # What `up` refuses before it starts any node: a folder without state, a damaged one.
    refused = {**state_damaged(spec), **state_missing(spec)}
    # A node `up` left out (--without) while it started others refused nothing.
    started = {node.id for node in spec.nodes if node.pid is not None}
    for row in rows:
        if row["state"] != "unreachable" or (started and row["node"] not in started):
            continue
        why = refused.get(row["node"])
        if why is None and row["node"] in started:
            why = start_refusal(cluster_dir, row["node"])
        if why is not None:
            row["refused_start"] = why


@click.command("recover")
@cluster_option
@click.option(
    "--accept-loss",
    is_flag=True,
    help="Bring the lost slots back, empty: their old state is gone for good.",
)
def recover_command(cluster_arg: str, accept_loss: bool) -> None:
    """Show, or accept, slots whose state was lost beyond the replication factor."""
    spec = seeds.resolve(cluster_arg).spec
    client = Client(timeout_ms=1000)
    try:
        offline: dict[str, tuple[str, int]] = {}
        for addr, row in client.status_each([node.addr for node in spec.nodes]).items():
            if not isinstance(row, NodeUnreachable) and row.get("offline_slots"):
                offline[row["node"]] = (addr, row["offline_slots"])
        if not offline:
            click.echo("no slot is offline: nothing to recover")
            return
        if not accept_loss:
            for name, (_, count) in offline.items():
                click.echo(f"{name}: {count} slots offline (state lost)")
            click.echo("run again with --accept-loss to bring them back empty", err=True)
            sys.exit(1)
        for name, (addr, _) in offline.items():
            click.echo(f"{name}: {client.recover(addr)} slots back, empty")
    finally:
        client.close()


@click.command("tail")
@cluster_option
@click.option("--count", default=0, type=click.IntRange(0), help="Stop after N records (0: never).")
@click.option(
    "--timeout-s", default=0.0, type=click.FloatRange(0), help="Stop after S seconds idle."
)
def tail_command(cluster_arg: str, count: int, timeout_s: float) -> None:
    """Print reducers' output records as they are emitted."""
    spec = seeds.resolve(cluster_arg).spec
    unknown = [node.id for node in spec.nodes if not node.pub_addr]
    if unknown:
        click.echo(
            f"smr: warning: not following the output of {', '.join(unknown)}: "
            "they did not say where it is (not answering)",
            err=True,
        )
    subscriber = Subscriber([n.pub_addr for n in spec.nodes if n.pub_addr])
    try:
        # Ctrl-C is the way to stop it: the loop ends there, quietly, with exit 0.
        with contextlib.suppress(KeyboardInterrupt):
            _follow(subscriber, count, timeout_s)
    finally:
        subscriber.close()


def _follow(subscriber: Subscriber, count: int, timeout_s: float) -> None:
    printed = 0
    while count == 0 or printed < count:
        frames = subscriber.receive(int(timeout_s * 1000) if timeout_s else 1000)
        if frames is None:
            if timeout_s:
                break
            continue
        try:
            message = decode(frames)
        except FrameError:
            continue
        if not isinstance(message, Output):
            continue
        for line in message.body.decode("utf-8", errors="replace").splitlines():
            click.echo(line)
            printed += 1
            if count and printed >= count:
                break
