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

cluster_option = click.option(
    "--cluster",
    "cluster_arg",
    required=True,
    metavar="DIR|HOST:PORT,...",
    help="The cluster's directory (holds cluster.json), or seed addresses of its nodes.",
)

docker_project_option = click.option(
    "--docker-project",
    help="New nodes are containers of this compose project (self: this container's own), "
    "not local processes; run on the compose network with the engine's socket.",
)
