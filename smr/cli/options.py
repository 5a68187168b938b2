"""Command-line options several ``smr`` commands share (one definition each)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import click

T = TypeVar("T", str, Path, None)

# The environment variable naming the cluster when a command is given no --cluster.
CLUSTER_ENV = "SMR_CLUSTER"


def choose_keys(_ctx: click.Context, _param: click.Parameter, value: T) -> T:
    """Before the command opens any socket: its keys are the cluster directory's ``keys/``,
    else ``$SMR_KEYS``'s, else none (smr.transport.security). Unreadable keys are a usage
    error naming the file."""
    from smr.transport.security import KeysError
    from smr.transport.zeromq import use_keys_of

    try:
        use_keys_of(value)
    except KeysError as error:
        raise click.BadParameter(str(error)) from None
    return value


cluster_dir_option = click.option(
    "--cluster",
    "cluster_dir",
    required=True,
    envvar=CLUSTER_ENV,
    type=click.Path(file_okay=False, path_type=Path),
    callback=choose_keys,
    help="The cluster's directory (holds cluster.json, and keys/ when it is secured) "
    f"[default: ${CLUSTER_ENV}].",
)

cluster_option = click.option(
    "--cluster",
    "cluster_arg",
    required=True,
    envvar=CLUSTER_ENV,
    metavar="DIR|HOST:PORT,...",
    callback=choose_keys,
    help="The cluster's directory (holds cluster.json, and keys/ when it is secured), or seed "
    f"addresses of its nodes (keys: $SMR_KEYS) [default: ${CLUSTER_ENV}].",
)

docker_project_option = click.option(
    "--docker-project",
    help="New nodes are containers of this compose project (self: this container's own), "
    "not local processes; run on the compose network with the engine's socket.",
)


job_of_cluster_option = click.option(
    "--job",
    "job_ref",
    help="The job, as module:attribute; it must be the cluster's [default: the cluster's job].",
)


def interrupt(signum: int, frame: Any) -> None:
    """A signal handler (SIGTERM) that stops a command as Ctrl-C does, so its cleanup runs."""
    raise KeyboardInterrupt
