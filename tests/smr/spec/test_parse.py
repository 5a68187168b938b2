"""The cluster spec: ``cluster.json`` as written before bind addresses, zones and seeds
existed still reads; the new fields read and round-trip; bad files fail with the field named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from smr.ring.ids import NodeId, Token
from smr.spec.model import CLUSTER_FILE, ClusterError, ClusterSpec, NodeSpec
from smr.spec.parse import read_spec, spec_to_json, write_spec

# Exactly what `smr cluster up` wrote before the spec had its own module.
OLD_FILE: dict[str, Any] = {
    "slot_bits": 14,
    "replication": 1,
    "job": "examples.wordcount:job",
    "nodes": [
        {
            "id": "n0",
            "addr": "tcp://127.0.0.1:40001",
            "pub_addr": "tcp://127.0.0.1:40002",
            "token": 0,
            "pid": 1234,
        },
        {
            "id": "n1",
            "addr": "tcp://127.0.0.1:40003",
            "pub_addr": "tcp://127.0.0.1:40004",
            "token": 8192,
            "pid": None,
        },
    ],
    "checkpoint_interval_ms": 1000,
    "format": 1,
    "extra": {},
}

# Nodes in containers: each binds the wildcard and advertises its service name.
NEW_FILE: dict[str, Any] = {
    "format": 1,
    "slot_bits": 10,
    "replication": 1,
    "job": "examples.wordcount:job",
    "checkpoint_interval_ms": 500,
    "incarnation": "5f0c2a9e41d7b3c8",
    "nodes": [
        {
            "id": "a",
            "addr": "tcp://smr-a:7000",
            "pub_addr": "tcp://smr-a:7001",
            "bind_addr": "tcp://0.0.0.0:7000",
            "pub_bind_addr": "tcp://0.0.0.0:7001",
            "zone": "rack-1",
            "token": 0,
            "pid": None,
        },
        {
            "id": "b",
            "addr": "tcp://smr-b:7000",
            "pub_addr": "tcp://smr-b:7001",
            "bind_addr": "tcp://*:7000",
            "pub_bind_addr": "tcp://*:7001",
            "zone": "rack-2",
            "metrics_addr": "0.0.0.0:9100",
            "token": 512,
        },
    ],
    "extra": {"owner": "tests"},
    "seeds": ["tcp://smr-a:7000"],
}


def write_raw(cluster_dir: Path, raw: object) -> None:
    cluster_dir.mkdir(parents=True, exist_ok=True)
    (cluster_dir / CLUSTER_FILE).write_text(json.dumps(raw))


def test_old_file_reads_with_bind_equal_to_advertised_empty_zone_and_nodes_as_seeds(
    tmp_path: Path,
) -> None:
    write_raw(tmp_path, OLD_FILE)
    spec = read_spec(tmp_path)
    n0 = spec.node("n0")
    assert (n0.id, n0.token, n0.pid, n0.zone) == ("n0", 0, 1234, "")
    assert n0.bind_addr == n0.addr == "tcp://127.0.0.1:40001"
    assert n0.pub_bind_addr == n0.pub_addr == "tcp://127.0.0.1:40002"
    assert spec.node("n1").pid is None
    assert spec.seeds == ["tcp://127.0.0.1:40001", "tcp://127.0.0.1:40003"]
    assert (spec.slot_bits, spec.replication, spec.checkpoint_interval_ms) == (14, 1, 1000)


def test_old_file_is_written_back_in_its_old_shape(tmp_path: Path) -> None:
    write_raw(tmp_path, OLD_FILE)
    write_spec(tmp_path, read_spec(tmp_path))
    assert json.loads((tmp_path / CLUSTER_FILE).read_text()) == OLD_FILE


def test_old_file_without_checkpoint_interval_or_extra_takes_the_defaults(tmp_path: Path) -> None:
    raw = {k: v for k, v in OLD_FILE.items() if k not in ("checkpoint_interval_ms", "extra")}
    write_raw(tmp_path, raw)
    spec = read_spec(tmp_path)
    assert (spec.checkpoint_interval_ms, spec.extra) == (1000, {})


def test_file_without_an_incarnation_reads_as_none_and_is_written_back_without_one(
    tmp_path: Path,
) -> None:
    write_raw(tmp_path, OLD_FILE)
    assert read_spec(tmp_path).incarnation is None
    write_spec(tmp_path, read_spec(tmp_path))
    assert "incarnation" not in json.loads((tmp_path / CLUSTER_FILE).read_text())


def test_incarnation_round_trips(tmp_path: Path) -> None:
    write_raw(tmp_path, NEW_FILE)
    write_spec(tmp_path, read_spec(tmp_path))
    assert read_spec(tmp_path).incarnation == "5f0c2a9e41d7b3c8"


def test_new_file_reads_bind_and_advertised_addresses_zones_and_seeds(tmp_path: Path) -> None:
    write_raw(tmp_path, NEW_FILE)
    spec = read_spec(tmp_path)
    b = spec.node("b")
    assert (b.bind_addr, b.addr) == ("tcp://*:7000", "tcp://smr-b:7000")
    assert (b.pub_bind_addr, b.pub_addr) == ("tcp://*:7001", "tcp://smr-b:7001")
    assert (b.zone, b.pid) == ("rack-2", None)
    assert spec.seeds == ["tcp://smr-a:7000"]
    assert spec.extra == {"owner": "tests"}


def test_new_file_round_trips(tmp_path: Path) -> None:
    write_raw(tmp_path, NEW_FILE)
    before = read_spec(tmp_path)
    write_spec(tmp_path, before)
    assert read_spec(tmp_path) == before
    written = json.loads((tmp_path / CLUSTER_FILE).read_text())
    assert written["seeds"] == NEW_FILE["seeds"]
    assert [n["bind_addr"] for n in written["nodes"]] == ["tcp://0.0.0.0:7000", "tcp://*:7000"]
    assert [n["zone"] for n in written["nodes"]] == ["rack-1", "rack-2"]
    assert [n.get("metrics_addr") for n in written["nodes"]] == [None, "0.0.0.0:9100"]


def test_initial_view_uses_advertised_addresses_and_zones(tmp_path: Path) -> None:
    write_raw(tmp_path, NEW_FILE)
    view = read_spec(tmp_path).initial_view()
    a = view.get(NodeId("a"))
    assert a is not None
    assert (a.addr, a.zone, a.token, a.incarnation, a.version) == (
        "tcp://smr-a:7000",
        "rack-1",
        0,
        1,
        1,
    )


def test_a_spec_built_in_code_defaults_bind_addresses_and_seeds() -> None:
    node = NodeSpec(NodeId("n0"), "tcp://h:1", "tcp://h:2", Token(0))
    spec = ClusterSpec(8, 0, "examples.wordcount:job", [node])
    assert (node.bind_addr, node.pub_bind_addr, spec.seeds) == (
        "tcp://h:1",
        "tcp://h:2",
        ["tcp://h:1"],
    )
    assert "seeds" not in spec_to_json(spec)
    assert set(spec_to_json(spec)["nodes"][0]) == {"id", "addr", "pub_addr", "token", "pid"}


def test_launcher_module_re_exports_the_spec() -> None:
    from smr.cluster import local as cluster
    from smr.spec import model, parse

    assert cluster.read_spec is parse.read_spec
    assert cluster.ClusterError is model.ClusterError
    assert cluster.ClusterSpec is model.ClusterSpec


# -- errors ------------------------------------------------------------------------------------


def test_missing_file_says_how_to_start_a_cluster(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"no cluster at .*not found \(start one with 'smr"):
        read_spec(tmp_path)


def test_malformed_json_is_a_read_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / CLUSTER_FILE).write_text("{not json")
    with pytest.raises(ClusterError, match=r"cannot read .*cluster\.json"):
        read_spec(tmp_path)


def test_unknown_node_id_lists_the_known_ones(tmp_path: Path) -> None:
    write_raw(tmp_path, OLD_FILE)
    with pytest.raises(ClusterError, match=r"no node 'n9' in this cluster \(nodes: n0, n1\)"):
        read_spec(tmp_path).node("n9")


def test_other_format_is_refused(tmp_path: Path) -> None:
    write_raw(tmp_path, {**OLD_FILE, "format": 2})
    with pytest.raises(ClusterError, match="has format 2, expected 1"):
        read_spec(tmp_path)


def with_node(**changes: Any) -> dict[str, Any]:
    node = {**OLD_FILE["nodes"][0], **changes}
    return {**OLD_FILE, "nodes": [node, OLD_FILE["nodes"][1]]}


def without(raw: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k != key}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([1, 2], "expected a JSON object, got list"),
        (without(OLD_FILE, "job"), "job is missing"),
        (without(OLD_FILE, "nodes"), "nodes is missing"),
        ({**OLD_FILE, "slot_bits": "14"}, "slot_bits must be an integer, got '14'"),
        ({**OLD_FILE, "slot_bits": 40}, "slot_bits must be an int between 1 and 20"),
        ({**OLD_FILE, "replication": True}, "replication must be an integer, got True"),
        ({**OLD_FILE, "replication": -1}, "replication must be 0 or more"),
        ({**OLD_FILE, "checkpoint_interval_ms": 0}, "checkpoint_interval_ms must be positive"),
        ({**OLD_FILE, "incarnation": 7}, "incarnation must be a non-empty string, got 7"),
        ({**OLD_FILE, "nodes": {}}, "nodes must be a list"),
        ({**OLD_FILE, "nodes": ["n0"]}, r"nodes\[0\] must be an object"),
        ({**OLD_FILE, "nodes": []}, "lists no nodes and no seeds"),
        ({**OLD_FILE, "seeds": "tcp://h:1"}, "seeds must be a list of addresses"),
        ({**OLD_FILE, "seeds": ["tcp://0.0.0.0:1"]}, r"seeds\[0\] 'tcp://0.0.0.0:1' is a wildcard"),
        (with_node(token="0"), r"nodes\[0\]\.token must be an integer, got '0'"),
        (with_node(token=1 << 14), r"nodes\[0\]\.token must be in \[0, 16384\)"),
        (with_node(token=8192), "nodes 'n0' and 'n1' have the same token 8192"),
        (with_node(id="n1"), "node id 'n1' appears twice"),
        (with_node(addr=5), r"nodes\[0\]\.addr must be a string, got 5"),
        (with_node(addr=""), r"nodes\[0\]\.addr must not be empty"),
        (with_node(pid="1234"), r"nodes\[0\]\.pid must be a positive integer or null"),
        (with_node(zone=3), r"nodes\[0\]\.zone must be a string"),
        (with_node(adress="tcp://h:1"), r"nodes\[0\] has unknown field 'adress'"),
        (with_node(metrics_addr="9100"), r"nodes\[0\]\.metrics_addr must be host:port"),
        (with_node(metrics_addr="h:99999"), r"nodes\[0\]\.metrics_addr must be host:port"),
        (
            with_node(addr="tcp://0.0.0.0:40001"),
            r"nodes\[0\]\.addr 'tcp://0.0.0.0:40001' is a wildcard; advertise an address",
        ),
        (
            with_node(pub_addr="tcp://*:40002"),
            r"nodes\[0\]\.pub_addr 'tcp://\*:40002' is a wildcard",
        ),
    ],
)
def test_malformed_spec_names_the_file_and_the_field(
    tmp_path: Path, raw: object, message: str
) -> None:
    write_raw(tmp_path, raw)
    with pytest.raises(ClusterError, match=r"cluster\.json is malformed: .*" + message):
        read_spec(tmp_path)


def test_a_spec_write_that_fails_leaves_no_temporary_file(tmp_path: Path) -> None:
    write_raw(tmp_path, OLD_FILE)
    spec = read_spec(tmp_path)
    (tmp_path / "cluster.json").unlink()
    (tmp_path / "cluster.json").mkdir()  # os.replace onto a directory fails
    with pytest.raises(OSError):
        write_spec(tmp_path, spec)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.json"]
