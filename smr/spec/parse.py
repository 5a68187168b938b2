"""Reading and writing ``cluster.json``: :func:`read_spec`, :func:`write_spec`, :func:`parse_spec`
(every field checked, a bad one named in a one-line :class:`ClusterError`),
:func:`spec_to_json`, :func:`feeder_job` and the field readers."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Final

from smr.api import JobLoadError, load_job
from smr.ring.hashing import check_slot_bits
from smr.ring.ids import NodeId, Token
from smr.spec.model import (
    CHECKPOINT_INTERVAL_MS_DEFAULT,
    CLUSTER_FILE,
    CLUSTER_FORMAT,
    ClusterError,
    ClusterSpec,
    NodeSpec,
)

_WILDCARD_HOSTS: Final = ("0.0.0.0", "*", "[::]", "::")

_NODE_FIELDS: Final = frozenset(
    {
        "id",
        "addr",
        "pub_addr",
        "token",
        "pid",
        "bind_addr",
        "pub_bind_addr",
        "zone",
        "standby",
        "metrics_addr",
    }
)


def read_spec(cluster_dir: Path) -> ClusterSpec:
    """Read ``DIR/cluster.json``; ClusterError saying what is missing or wrong otherwise."""
    path = cluster_dir / CLUSTER_FILE
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterError(
            f"no cluster at {cluster_dir}: {path} not found (start one with 'smr cluster up')"
        ) from None
    except (OSError, ValueError) as error:
        raise ClusterError(f"cannot read {path}: {error}") from None
    return parse_spec(raw, str(path))


def write_spec(cluster_dir: Path, spec: ClusterSpec) -> None:
    """Write ``DIR/cluster.json`` atomically (readers never see half a file)."""
    path = cluster_dir / CLUSTER_FILE
    temporary = path.with_suffix(".tmp")
    try:
        temporary.write_text(json.dumps(spec_to_json(spec), indent=2) + "\n")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)  # left only if writing failed


def spec_to_json(spec: ClusterSpec) -> dict[str, Any]:
    """The JSON object for ``spec``; optional fields only where they differ from defaults."""
    nodes = []
    for node in spec.nodes:
        entry: dict[str, Any] = {
            "id": node.id,
            "addr": node.addr,
            "pub_addr": node.pub_addr,
            "token": node.token,
            "pid": node.pid,
        }
        if node.bind_addr != node.addr:
            entry["bind_addr"] = node.bind_addr
        if node.pub_bind_addr != node.pub_addr:
            entry["pub_bind_addr"] = node.pub_bind_addr
        if node.zone:
            entry["zone"] = node.zone
        if node.standby:
            entry["standby"] = True
        if node.metrics_addr:
            entry["metrics_addr"] = node.metrics_addr
        nodes.append(entry)
    raw: dict[str, Any] = {
        "format": spec.format,
        "slot_bits": spec.slot_bits,
        "replication": spec.replication,
        "job": spec.job,
        "checkpoint_interval_ms": spec.checkpoint_interval_ms,
        **({"incarnation": spec.incarnation} if spec.incarnation is not None else {}),
        "nodes": nodes,
        "extra": spec.extra,
    }
    if spec.seeds != [node.addr for node in spec.nodes]:
        raw["seeds"] = list(spec.seeds)
    return raw


def parse_spec(raw: object, source: str) -> ClusterSpec:
    """The spec in the decoded JSON ``raw``; ClusterError naming ``source`` (a path) and the
    first field that is missing or wrong otherwise."""
    try:
        return _parse(raw, source)
    except ValueError as error:
        raise ClusterError(f"{source} is malformed: {error}") from None


def _parse(raw: object, source: str) -> ClusterSpec:
    if not isinstance(raw, dict):
        raise ValueError(f"expected a JSON object, got {type(raw).__name__}")
    if raw.get("format") != CLUSTER_FORMAT:
        raise ClusterError(f"{source} has format {raw.get('format')!r}, expected 1")
    slot_bits = check_slot_bits(_int(raw, "slot_bits", "slot_bits"))
    replication = _int(raw, "replication", "replication")
    if replication < 0:
        raise ValueError(f"replication must be 0 or more, got {replication}")
    checkpoint_interval_ms = _int(
        raw, "checkpoint_interval_ms", "checkpoint_interval_ms", CHECKPOINT_INTERVAL_MS_DEFAULT
    )
    if checkpoint_interval_ms <= 0:
        raise ValueError(f"checkpoint_interval_ms must be positive, got {checkpoint_interval_ms}")
    job = _str(raw, "job", "job")
    extra = raw.get("extra", {})
    if not isinstance(extra, dict):
        raise ValueError(f"extra must be an object, got {extra!r}")
    entries = _required(raw, "nodes", "nodes")
    if not isinstance(entries, list):
        raise ValueError(f"nodes must be a list, got {entries!r}")
    nodes = [_parse_node(entry, slot_bits, f"nodes[{i}]") for i, entry in enumerate(entries)]
    seeds = raw.get("seeds", [])
    if not isinstance(seeds, list) or not all(isinstance(s, str) and s for s in seeds):
        raise ValueError(f"seeds must be a list of addresses, got {seeds!r}")
    for i, seed in enumerate(seeds):
        _check_advertised(f"seeds[{i}]", seed)
    if not nodes and not seeds:
        raise ValueError("lists no nodes and no seeds: give at least one")
    _check_unique(nodes)
    incarnation = raw.get("incarnation")
    if incarnation is not None and (not isinstance(incarnation, str) or not incarnation):
        raise ValueError(f"incarnation must be a non-empty string, got {incarnation!r}")
    return ClusterSpec(
        slot_bits=slot_bits,
        replication=replication,
        job=job,
        nodes=nodes,
        checkpoint_interval_ms=checkpoint_interval_ms,
        extra=dict(extra),
        seeds=list(seeds),
        incarnation=incarnation,
    )


def _parse_node(entry: object, slot_bits: int, where: str) -> NodeSpec:
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be an object, got {entry!r}")
    unknown = sorted(set(entry) - _NODE_FIELDS)
    if unknown:
        raise ValueError(
            f"{where} has unknown field {unknown[0]!r} (known: {', '.join(sorted(_NODE_FIELDS))})"
        )
    token = _int(entry, "token", f"{where}.token")
    if not 0 <= token < 2**slot_bits:
        raise ValueError(f"{where}.token must be in [0, {2**slot_bits}), got {token}")
    pid = entry.get("pid")
    if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0):
        raise ValueError(f"{where}.pid must be a positive integer or null, got {pid!r}")
    node = NodeSpec(
        id=NodeId(_str(entry, "id", f"{where}.id")),
        addr=_str(entry, "addr", f"{where}.addr"),
        pub_addr=_str(entry, "pub_addr", f"{where}.pub_addr"),
        token=Token(token),
        pid=pid,
        bind_addr=_str(entry, "bind_addr", f"{where}.bind_addr", ""),
        pub_bind_addr=_str(entry, "pub_bind_addr", f"{where}.pub_bind_addr", ""),
        zone=_str(entry, "zone", f"{where}.zone", "", empty_ok=True),
        standby=_bool(entry, "standby", f"{where}.standby"),
        metrics_addr=_str(entry, "metrics_addr", f"{where}.metrics_addr", "", empty_ok=True),
    )
    if node.metrics_addr:
        split_host_port(node.metrics_addr, f"{where}.metrics_addr")
    _check_advertised(f"{where}.addr", node.addr)
    _check_advertised(f"{where}.pub_addr", node.pub_addr)
    return node


def split_host_port(addr: str, where: str = "address") -> tuple[str, int]:
    """``"host:port"`` as its host and port (0 to 65535); ValueError naming ``where`` if not."""
    host, colon, port = addr.rpartition(":")
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{where} must be host:port (port 0 to 65535), got {addr!r}")
    return host.strip("[]"), int(port)


def _check_advertised(where: str, addr: str) -> None:
    """An advertised address must name one reachable host, not "every interface"."""
    host = addr.partition("://")[2].rpartition(":")[0]
    if host in _WILDCARD_HOSTS:
        raise ValueError(
            f"{where} {addr!r} is a wildcard; advertise an address other hosts can reach "
            "(the wildcard belongs in bind_addr or pub_bind_addr)"
        )


def _check_unique(nodes: list[NodeSpec]) -> None:
    seen_ids: set[str] = set()
    seen_tokens: dict[int, str] = {}
    for node in nodes:
        if node.id in seen_ids:
            raise ValueError(f"node id {node.id!r} appears twice")
        seen_ids.add(node.id)
        if node.standby:
            continue  # a standby node's token places nothing (it owns no range)
        if node.token in seen_tokens:
            raise ValueError(
                f"nodes {seen_tokens[node.token]!r} and {node.id!r} have the same token "
                f"{node.token}"
            )
        seen_tokens[node.token] = node.id


_MISSING: Final = object()


def _required(raw: dict[str, Any], key: str, where: str) -> Any:
    if key not in raw:
        raise ValueError(f"{where} is missing")
    return raw[key]


def _bool(raw: dict[str, Any], key: str, where: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{where} must be true or false, got {value!r}")
    return value


def _int(raw: dict[str, Any], key: str, where: str, default: object = _MISSING) -> int:
    value = raw.get(key, default) if default is not _MISSING else _required(raw, key, where)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{where} must be an integer, got {value!r}")
    return value


def _str(
    raw: dict[str, Any], key: str, where: str, default: object = _MISSING, empty_ok: bool = False
) -> str:
    value = raw.get(key, default) if default is not _MISSING else _required(raw, key, where)
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {value!r}")
    if not value and not empty_ok and default is _MISSING:
        raise ValueError(f"{where} must not be empty")
    return value


def feeder_job(spec: ClusterSpec, where: str, job_ref: str | None) -> str:
    """The job a feeder runs: the cluster's, which ``--job`` may only repeat.

    A feeder with another job's ``map`` would send its tuples to nodes folding them with
    this cluster's ``reduce``, mixing two jobs' state: refused, naming both.
    """
    if job_ref is None or job_ref == spec.job:
        return spec.job
    with contextlib.suppress(JobLoadError):
        if load_job(job_ref) is load_job(spec.job):  # two names for one job
            return spec.job
    raise ClusterError(
        f"--job {job_ref} is not the cluster's job {spec.job} (in {where}): "
        f"its nodes run {spec.job}'s reduce; omit --job or pass --job {spec.job}"
    )
