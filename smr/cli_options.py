"""Command-line options several ``smr`` commands share (one definition each)."""

from __future__ import annotations

from pathlib import Path

import click

cluster_dir_option = click.option(
    "--cluster",
    "cluster_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The cluster's directory (holds cluster.json).",
)
