"""``smr keys``: a cluster's CurveZMQ keys (smr.transport.security). ``smr cluster up`` makes
them by default; these commands make them for a cluster started otherwise and give keys to
clients on other hosts. A failure is a ``KeysError``, which :mod:`smr.cli` prints as one
``smr: error:`` line (exit 2)."""

from __future__ import annotations

from pathlib import Path

import click

from smr.transport.security import KEYS_ENV, add_client, init_keys


@click.group("keys")
def keys_group() -> None:
    """Make a cluster's keys and give keys to its clients."""


@keys_group.command("init")
@click.argument("cluster_dir", type=click.Path(file_okay=False, path_type=Path))
def keys_init(cluster_dir: Path) -> None:
    """Make CLUSTER_DIR/keys: the cluster's key pair and a client pair its nodes accept (for
    the directory's own tools). Nodes started after this accept only key holders; existing
    keys are never replaced."""
    directory = init_keys(cluster_dir)
    click.echo(f"keys made in {directory}; nodes started from now on require them")


@keys_group.command("add-client")
@click.argument("cluster_dir", type=click.Path(file_okay=False, path_type=Path))
@click.argument("name")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write the new client's keys (with the cluster's public key).",
)
def keys_add_client(cluster_dir: Path, name: str, out_dir: Path) -> None:
    """A new client key pair NAME, accepted by the cluster's nodes from their next start,
    written to --out: copy that folder to the client's host and point SMR_KEYS at it."""
    add_client(cluster_dir, name, out_dir)
    click.echo(
        f"client {name} written to {out_dir}; on its host: {KEYS_ENV}={out_dir} "
        "smr ... --cluster HOST:PORT (nodes accept it once restarted)"
    )
