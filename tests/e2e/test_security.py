"""CurveZMQ keys over real node processes: a cluster `smr cluster up` starts has keys, its
own tools work with them, and a process without them (or with another cluster's) cannot
feed, dump, query, join, or send fault or move commands; what it tries changes nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import zmq.auth

from smr.cluster.ports import free_port
from smr.wire.codec import encode, pack_body
from smr.wire.messages import JoinRequest, Message, MoveRequest, NetRuleRequest, StatusRequest
from smr.wire.reads import DumpRequest, QueryRequest
from tests.e2e.conftest import EXAMPLE_BOOKS, REPO, Cluster, word_counts

pytestmark = pytest.mark.e2e

# A process that sends one well-formed message of each kind a cluster's commands use, to a
# node, with the keys $SMR_KEYS names (none if unset), and prints how many replies came.
RAW_SENDER = """
import sys, time
from smr.transport.zeromq import Outbox
addr = sys.argv[1]
frames = [bytes.fromhex(h) for h in sys.argv[2:]]
outbox = Outbox(addr, immediate=False)
for frame in frames:
    outbox.send([frame])
replies = 0
deadline = time.monotonic() + 3
while time.monotonic() < deadline:
    if outbox.receive() is not None:
        replies += 1
    time.sleep(0.01)
print(replies)
"""


READS: list[Message] = [
    DumpRequest(4, 0, 16, 100),
    QueryRequest(5, pack_body(["whale"])),
    StatusRequest(6),
]


def raw_replies(addr: str, messages: list[Message], env: dict[str, str]) -> int:
    """How many replies ``messages``, sent raw to ``addr`` by a process with ``env``, got."""
    sender = subprocess.run(
        [sys.executable, "-c", RAW_SENDER, addr] + [encode(m)[0].hex() for m in messages],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sender.returncode == 0, sender.stderr
    return int(sender.stdout)


def env_without_keys(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SMR_KEYS"}
    env.update(extra)
    return env


def smr_as(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "smr", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_only_key_holders_reach_a_cluster_and_others_change_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.up(3, "examples.wordcount:job", "--replication", "1")
    keys = cluster.dir / "keys"
    assert (keys / "cluster.key_secret").stat().st_mode & 0o077 == 0
    cluster.feed(EXAMPLE_BOOKS[0])
    expected = word_counts(EXAMPLE_BOOKS[:1])
    before = cluster.status()
    nodes = cluster.spec()["nodes"]
    seed = nodes[0]["addr"].removeprefix("tcp://")
    other = tmp_path / "other"
    subprocess.run([sys.executable, "-m", "smr", "keys", "init", str(other)], cwd=REPO, check=True)
    # The cluster's public key (public, as its name says) with a client pair of its own.
    knows_public = tmp_path / "knows-public"
    knows_public.mkdir()
    zmq.auth.create_certificates(knows_public, "client")
    shutil.copy(keys / "cluster.key", knows_public / "cluster.key")
    outsiders = {
        "no keys": env_without_keys(),
        "another cluster's keys": env_without_keys(SMR_KEYS=str(other / "keys")),
        "an unknown client key": env_without_keys(SMR_KEYS=str(knows_public)),
    }
    book = EXAMPLE_BOOKS[1]
    commands = [
        ("feed", "--cluster", seed, "--job", "examples.wordcount:job", book),
        ("dump", "--cluster", seed, "--out", str(tmp_path / "dump.jsonl")),
        ("query", "--cluster", seed, "whale"),
        ("status", "--cluster", seed),
    ]
    # Raw messages of the kinds the fault, move and join commands send, and reads.
    messages: list[Message] = [
        NetRuleRequest(1, b"{}"),
        MoveRequest(2, 500_000, False),
        JoinRequest(3, "n0"),
        *READS,
    ]
    # Each refused command waits out its connect timeout: run them side by side.
    with ThreadPoolExecutor(max_workers=len(commands) * len(outsiders)) as pool:
        results = {
            (who, args): pool.submit(smr_as, env, *args)
            for who, env in outsiders.items()
            for args in commands
        }
        replies = {
            who: pool.submit(raw_replies, nodes[0]["addr"], messages, env)
            for who, env in outsiders.items()
        }
        for (who, args), future in results.items():
            result = future.result()
            assert result.returncode != 0, (who, args, result.stdout)
            assert "accepts no connection" in result.stderr, (who, args, result.stderr)
        for who, future in replies.items():
            assert future.result() == 0, who
    # The same from a key holder (the directory's own keys, through $SMR_KEYS): answered.
    holder = env_without_keys(SMR_KEYS=str(keys))
    assert raw_replies(nodes[0]["addr"], READS, holder) == len(READS)
    answered = smr_as(holder, "status", "--cluster", seed)
    assert answered.returncode == 0, answered.stderr
    after = cluster.status()
    # The outsider with the right cluster key but a client key of its own reached the ZAP
    # check of the first node and was refused there: counted, not silent.
    assert after["n0"]["handshakes_refused"] > before["n0"]["handshakes_refused"]
    for node, row in after.items():
        # Nothing an outsider sent reached a node: no frame was even counted as bad.
        assert row["bad_frames"] == before[node]["bad_frames"] == 0
        assert row["tuples_applied"] == before[node]["tuples_applied"]
        assert row["moves"]["under_way"] == []
    assert cluster.counts() == expected


@pytest.mark.slow
def test_a_node_without_the_keys_cannot_join(cluster: Cluster) -> None:
    cluster.up(2, "examples.wordcount:job", "--replication", "1")
    seed_spec = cluster.dir / "cluster.json"
    outsider_dir = cluster.dir.parent / "outsider"
    outsider_dir.mkdir()
    (outsider_dir / "cluster.json").write_text(seed_spec.read_text())
    port = free_port(set())  # below the ephemeral range, as the launcher picks ports
    node = subprocess.Popen(
        [
            sys.executable, "-m", "smr", "node", "--cluster", str(outsider_dir), "--id",
            "intruder", "--port", str(port), "--advertise", "127.0.0.1", "--join",
        ],
        cwd=REPO,
        env=env_without_keys(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        time.sleep(4)  # it asks to join one second after it starts, then every few seconds
        rows = cluster.status()
        running = node.poll() is None
    finally:
        node.kill()
        log, _ = node.communicate()
    assert running, log
    assert "without keys" in log and "asked n0 to join" in log, log
    assert set(rows) == {"n0", "n1"}
    assert all("intruder" not in str(row["cluster"]) for row in rows.values())
    assert sum(row["range_share"] for row in rows.values()) == pytest.approx(1.0)


def test_insecure_runs_without_keys_and_refuses_a_directory_that_has_them(
    cluster: Cluster,
) -> None:
    cluster.up(2, "examples.wordcount:job", "--insecure")
    assert not (cluster.dir / "keys").exists()
    seed = cluster.spec()["nodes"][0]["addr"].removeprefix("tcp://")
    result = smr_as(env_without_keys(), "status", "--cluster", seed)
    assert result.returncode == 0, result.stderr
    cluster.smr("cluster", "down", "--dir", str(cluster.dir))
    (cluster.dir / "keys").mkdir()
    refused = cluster.smr(
        "cluster", "up", "--dir", str(cluster.dir), "--nodes", "2", "--job",
        "examples.wordcount:job", "--insecure", check=False,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "keys" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1


def test_a_client_added_before_the_nodes_start_reaches_them_by_their_addresses(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.dir.mkdir(parents=True)
    cluster.smr("keys", "init", str(cluster.dir))
    out = tmp_path / "analytics"
    cluster.smr("keys", "add-client", str(cluster.dir), "analytics", "--out", str(out))
    cluster.up(2, "examples.wordcount:job")  # keeps the keys it finds
    seed = cluster.spec()["nodes"][1]["addr"].removeprefix("tcp://")
    analytics = env_without_keys(SMR_KEYS=str(out))
    fed = smr_as(
        analytics, "feed", "--cluster", seed, "--job", "examples.wordcount:job", EXAMPLE_BOOKS[0]
    )
    assert fed.returncode == 0, fed.stderr
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS[:1])
