"""``smr output``: a local cluster's output, each record once. Registered on the main group by
:mod:`smr.cli`."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from smr.cli.options import cluster_dir_option
from smr.output.files import OutputFiles
from smr.output.records import record_line
from smr.spec.model import ClusterError


@click.command("output")
@cluster_dir_option
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the records to this file [default: standard output].",
)
def output_command(cluster_dir: Path, out: Path | None) -> None:
    """Every record the cluster's reducers emitted, from every node's output file (those of
    dead nodes too), one line of strict JSON each: {"key", "value", "origin"}, bytes as
    {"base64": ...} and a non-finite float as {"float": "NaN"}, as the files hold them. A
    record a takeover emitted again (same origin: the tuple it came from) is written once;
    how many repeats were dropped goes to standard error."""
    directory = cluster_dir / "output"
    if not directory.is_dir():
        raise ClusterError(f"{cluster_dir} has no output directory: is it a cluster's directory?")
    files = OutputFiles(directory)
    written = 0
    with contextlib.ExitStack() as stack:
        sink = sys.stdout if out is None else stack.enter_context(out.open("w", encoding="utf-8"))
        # Written as read: only the origins seen are held, not the records.
        for record in files:
            line = {
                "key": record["key"],
                "value": record.get("value"),
                "origin": record.get("origin"),
            }
            sink.write(record_line(line) + "\n")
            written += 1
    torn_note = f", {files.torn} torn lines of killed nodes skipped" if files.torn else ""
    click.echo(f"{written} records, {files.repeats} repeats dropped{torn_note}", err=True)
