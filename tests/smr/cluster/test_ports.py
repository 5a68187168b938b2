"""Where local nodes listen: loopback ports below the kernel's ephemeral range, which any
process's outgoing connection may take between the choice and the node's bind."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from smr.cluster import ports as local_ports
from smr.spec.model import ClusterError


def test_ports_are_free_and_below_the_ephemeral_range() -> None:
    low = local_ports._ephemeral_low()
    taken: set[int] = set()
    ports = {local_ports.free_port(taken) for _ in range(50)}
    assert ports == taken
    assert all(local_ports.LISTEN_PORT_MIN <= port < low for port in ports)
    assert len(ports) > 40  # drawn at random, not handed out in order
    for port in list(ports)[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
            listener.bind((local_ports.LOOPBACK_HOST, port))


def test_an_unreadable_range_falls_back_to_the_linux_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(local_ports, "EPHEMERAL_RANGE_FILE", tmp_path / "missing")
    assert local_ports._ephemeral_low() == local_ports.EPHEMERAL_LOW_DEFAULT


def test_no_free_port_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class Taken(socket.socket):
        def bind(self, address: object) -> None:
            raise OSError("in use")

    monkeypatch.setattr(local_ports.socket, "socket", Taken)
    with pytest.raises(ClusterError, match="no free loopback port"):
        local_ports.free_port(set())


def test_a_spec_never_gets_one_port_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each port is released after its probe, so a port drawn again probes free again.
    class Repeating:
        draws = iter(
            [20_000, 20_000, 20_001, 20_001, 20_000, 20_002, 20_002, 20_003, 20_004, 20_005]
        )

        def randrange(self, low: int, high: int) -> int:
            return next(self.draws)

    monkeypatch.setattr(local_ports.random, "SystemRandom", Repeating)
    spec = local_ports.plan_cluster(2, 1, "examples.wordcount:job", 8, 1000, ())
    addresses = [a for n in spec.nodes for a in (n.addr, n.pub_addr, n.metrics_addr)]
    ports = [int(a.rsplit(":", 1)[1]) for a in addresses]
    assert sorted(ports) == [20_000, 20_001, 20_002, 20_003, 20_004, 20_005]
