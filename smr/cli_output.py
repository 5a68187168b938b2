"""``smr output``: a local cluster's output, each record once. Registered on the main group by
:mod:`smr.cli`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from smr.cli_options import cluster_dir_option
from smr.output import read_output_files
from smr.spec import ClusterError


@click.command("output")
@cluster_dir_option
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the records to this file [default: standard output].",
)
def output_command(cluster_dir: Path, out: Path | None) -> None:
    """Every record the cluster's reducers emitted, from every node's output file (those of
    dead nodes too), one JSON line each: {"key", "value", "origin"}. A record a takeover
    emitted again (same origin: the tuple it came from) is written once; how many repeats
    were dropped goes to standard error."""
    directory = cluster_dir / "output"
    if not directory.is_dir():
        raise ClusterError(f"{cluster_dir} has no output directory: is it a cluster's directory?")
    records, repeats, torn = read_output_files(directory)
    lines = "".join(
        json.dumps({"key": r["key"], "value": r.get("value"), "origin": r.get("origin")}) + "\n"
        for r in records
    )
    if out is None:
        click.echo(lines, nl=False)
    else:
        out.write_text(lines, encoding="utf-8")
    torn_note = f", {torn} torn lines of killed nodes skipped" if torn else ""
    click.echo(f"{len(records)} records, {repeats} repeats dropped{torn_note}", err=True)
