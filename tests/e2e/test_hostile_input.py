"""A live node fed garbage at full speed by another process while a feed runs: it keeps
exact state, counts every bad frame it was sent, and never mistakes one for a message."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.e2e.conftest import FEED_FLAGS, REPO, Cluster, feed_books, word_counts

pytestmark = pytest.mark.e2e

# The garbage: frames the decoders' fuzzer made (random and mutated frames of every kind),
# each one checked to be refused by the decoder, so none could pass for a message. Frames
# of the fault-rule kind are left out: the node answers those before decoding.
GARBAGE_SENDER = """
import pathlib, random, sys
import zmq
from bench.fuzz_decoders import mutate, rewrite_header, seed_frames
from smr.wire.kinds import FrameError
from smr.wire.codec import decode
from smr.transport.security import load_keys
from smr.wire.kinds import Kind

addr, stop_file, keys_dir = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
rng = random.Random(11)
seeds = seed_frames(rng)
garbage = []
while len(garbage) < 5000:
    draw = rng.random()
    if draw < 0.2:
        frame = rng.randbytes(rng.randrange(80))
    elif draw < 0.6:
        frame = mutate(rng.choice(seeds), rng, seeds)
    else:
        frame = rewrite_header(rng.choice(seeds), rng)
    if frame[:1] == bytes([Kind.NET_RULE_REQUEST]):
        continue
    try:
        decode([frame])
    except FrameError:
        garbage.append(frame)
context = zmq.Context()
sender = context.socket(zmq.DEALER)
sender.setsockopt(zmq.LINGER, 10_000)
# A key holder: hostile input from a process the cluster accepts.
keys = load_keys(keys_dir)
sender.curve_serverkey = keys.cluster_public
sender.curve_publickey = keys.client_public
sender.curve_secretkey = keys.client_secret
sender.connect(addr)
sent = 0
while not stop_file.exists():
    for frame in garbage[:500]:
        sender.send(frame)
    sent += 500
    garbage.append(garbage.pop(0))
sender.close()
context.term()
print(sent)
"""


@pytest.mark.slow
def test_garbage_at_full_speed_during_a_feed_is_counted_and_costs_nothing(
    cluster: Cluster,
) -> None:
    cluster.up(3, "examples.wordcount:job", "--replication", "1")
    target = cluster.spec()["nodes"][0]
    stop_file = cluster.dir / "stop-garbage"
    keys = cluster.dir / "keys"
    garbage = subprocess.Popen(
        [sys.executable, "-c", GARBAGE_SENDER, target["addr"], str(stop_file), str(keys)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.0)  # the sender is making its garbage and starting to send
        paths = feed_books()
        feed = cluster.feed_in_background(*paths, extra=FEED_FLAGS)
        cluster.wait_feed(feed)
        stop_file.touch()
        out, err = garbage.communicate(timeout=60)
    finally:
        stop_file.touch()
        if garbage.poll() is None:
            garbage.kill()
            garbage.wait()
    assert garbage.returncode == 0, err
    sent = int(out)
    assert sent >= 5000
    # Every frame sent reaches the node (a DEALER blocks rather than drop) and is counted.
    deadline = time.monotonic() + 20
    while (row := cluster.status()[target["id"]])["bad_frames"] < sent:
        assert time.monotonic() < deadline, (row["bad_frames"], sent)
        time.sleep(0.2)
    assert row["bad_frames"] == sent
    assert row["handler_errors"] == 0
    assert cluster.counts() == word_counts(paths)
