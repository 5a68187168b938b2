"""Cluster keys for CurveZMQ: who may talk to a cluster's nodes, and encryption of all of it.

A secured cluster's directory holds ``keys/``:

- ``cluster.key`` and ``cluster.key_secret``: the cluster's key pair. Every node serves with
  it (its inbox and its output publisher); every client checks the nodes by its public half.
- ``client.key`` and ``client.key_secret``: the client key pair this directory's own tools
  use (the nodes, as clients of each other; the CLI; feeders; Spark's workers).
- ``clients/NAME.key``: the public keys the nodes accept (ZAP). ``smr keys init`` puts the
  directory's own client there; ``smr keys add-client`` adds more, each written with
  ``cluster.key`` into a folder of its own for another host.

A process finds its keys (``keys_for``): the ``--cluster`` directory's ``keys/``, else the
folder named by ``SMR_KEYS``, else none (the cluster is reached without security, and a
secured node never completes the handshake). Secret files are written readable by their owner
only. Nothing here opens a socket: :mod:`smr.transport.zeromq` applies the keys.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import zmq
import zmq.auth

KEYS_DIR_NAME: Final = "keys"
"""The folder of a cluster directory that holds its keys."""
KEYS_ENV: Final = "SMR_KEYS"
"""The environment variable naming a keys folder, for a process given no cluster directory
(``--cluster host:port``) or started by one (node processes, Spark's workers)."""
CLUSTER_KEY: Final = "cluster"
CLIENT_KEY: Final = "client"
CLIENTS_DIR: Final = "clients"


class KeysError(Exception):
    """Keys are missing, unreadable or malformed; the message names the file."""


@dataclass(frozen=True)
class Keys:
    """The keys one process uses: the cluster's public key (to check the nodes), its own
    client pair, and, on a node, the cluster's secret key and the accepted clients. Secrets
    never show in a repr (a log line, a traceback)."""

    directory: Path
    cluster_public: bytes
    client_public: bytes
    client_secret: bytes = field(repr=False)
    cluster_secret: bytes | None = field(default=None, repr=False)
    """Only where ``cluster.key_secret`` is present (a cluster's own directory)."""

    def client_material(self) -> tuple[bytes, bytes, bytes]:
        """What a client elsewhere needs, as plain values: the cluster's public key and this
        process's client pair (no secret of the cluster's)."""
        return (self.cluster_public, self.client_public, self.client_secret)

    @property
    def clients_dir(self) -> Path:
        """The public keys a node accepts."""
        return self.directory / CLIENTS_DIR


def init_keys(cluster_dir: Path) -> Path:
    """Create ``cluster_dir/keys`` with a new cluster key pair and a client key pair that
    the nodes accept; returns the folder. KeysError if it exists (keys are never replaced:
    running nodes and distributed clients hold them)."""
    directory = cluster_dir / KEYS_DIR_NAME
    if directory.exists():
        raise KeysError(f"{directory} exists: keys are never replaced (remove it to start over)")
    directory.mkdir(parents=True)
    os.chmod(directory, 0o700)
    _create_pair(directory, CLUSTER_KEY)
    _create_pair(directory, CLIENT_KEY)
    (directory / CLIENTS_DIR).mkdir()
    shutil.copy(directory / f"{CLIENT_KEY}.key", directory / CLIENTS_DIR / f"{CLIENT_KEY}.key")
    return directory


def add_client(cluster_dir: Path, name: str, out_dir: Path) -> Path:
    """A new client key pair named ``name``, accepted by the cluster's nodes from their next
    start, written to ``out_dir`` with the cluster's public key: the folder a process on
    another host points ``SMR_KEYS`` at. Returns ``out_dir``."""
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise KeysError(f"a client name is letters, digits, - and _, got {name!r}")
    directory = cluster_dir / KEYS_DIR_NAME
    load_keys(directory)  # a clear error if the cluster has no keys
    accepted = directory / CLIENTS_DIR / f"{name}.key"
    if accepted.exists():
        raise KeysError(f"a client named {name!r} exists already ({accepted})")
    if not out_dir.exists():
        out_dir.mkdir(parents=True)
        os.chmod(out_dir, 0o700)  # a folder of our own (the secret file is 0600 anyway)
    for existing in (f"{CLIENT_KEY}.key", f"{CLIENT_KEY}.key_secret"):
        if (out_dir / existing).exists():
            raise KeysError(f"{out_dir / existing} exists: keys are never replaced")
    _create_pair(out_dir, CLIENT_KEY)
    shutil.copy(directory / f"{CLUSTER_KEY}.key", out_dir / f"{CLUSTER_KEY}.key")
    shutil.copy(out_dir / f"{CLIENT_KEY}.key", accepted)
    return out_dir


def load_keys(directory: Path) -> Keys:
    """The keys in ``directory``; KeysError naming the file that is missing or malformed."""
    cluster_public, cluster_secret = _read(directory, CLUSTER_KEY, secret_needed=False)
    client_public, client_secret = _read(directory, CLIENT_KEY, secret_needed=True)
    assert client_secret is not None
    return Keys(directory, cluster_public, client_public, client_secret, cluster_secret)


def keys_for(cluster_dir: Path | None) -> Keys | None:
    """The keys a process working on ``cluster_dir`` (None: named by seeds) uses: the
    directory's ``keys/`` if it has one, else ``$SMR_KEYS`` if set, else None."""
    if cluster_dir is not None and (cluster_dir / KEYS_DIR_NAME).is_dir():
        return load_keys(cluster_dir / KEYS_DIR_NAME)
    from_env = os.environ.get(KEYS_ENV)
    if from_env:
        return load_keys(Path(from_env))
    return None


def _create_pair(directory: Path, name: str) -> None:
    _, secret_file = zmq.auth.create_certificates(directory, name)
    os.chmod(secret_file, 0o600)


def _read(directory: Path, name: str, secret_needed: bool) -> tuple[bytes, bytes | None]:
    secret_file = directory / f"{name}.key_secret"
    public_file = directory / f"{name}.key"
    path = secret_file if secret_file.exists() else public_file
    if secret_needed and path is not secret_file:
        raise KeysError(f"{secret_file} is missing (smr keys init, or smr keys add-client)")
    if not path.exists():
        raise KeysError(f"{public_file} is missing (smr keys init, or smr keys add-client)")
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as error:
        raise KeysError(f"{path} is not a key file: {error}") from None
    if len(public) != 40 or (secret is not None and len(secret) != 40):
        raise KeysError(f"{path} is not a key file: a key is 40 Z85 characters")
    return public, secret
