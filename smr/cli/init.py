"""``smr init DIR``: write a new job project to start from (:mod:`smr.cli.scaffold`). Registered
on the main group by :mod:`smr.cli`."""

from __future__ import annotations

from pathlib import Path

import click

from smr.cli.scaffold import write_project


@click.command("init")
@click.argument("directory", type=click.Path(path_type=Path))
def init_command(directory: Path) -> None:
    """Write a job project into DIRECTORY (created if missing): job.py (a word count with
    typed map, reduce and combine to edit), sample.txt, test_job.py (runs the job
    in-process against plain Python; it passes as written) and README.md with the commands
    that run it on a local cluster. Never overwrites a file."""
    for path in write_project(directory):
        click.echo(f"wrote {path}")
    click.echo(
        f"next: cd {directory} && python test_job.py, then the commands in README.md "
        "(smr cluster up, smr feed, smr query)"
    )
