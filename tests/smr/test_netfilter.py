"""The in-node network filter (``smr.transport.netfilter``): what it holds, for how long, in
what order, and that it never drops a message."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smr.faults.backends import emulated_rules, parse_duration_ms, parse_groups
from smr.ring.ids import NodeId
from smr.transport.netfilter import (
    HELD_MESSAGES_MAX,
    RETRANSMIT_MS,
    FilteredLinks,
    NetRule,
    pack_rule,
    parse_rule,
    release_at,
)
from smr.wire.codec import unpack_body

A, B, C = NodeId("a"), NodeId("b"), NodeId("c")


class FakeLinks:
    """Records what the filter lets through."""

    def __init__(self) -> None:
        self.sent: list[tuple[NodeId, bytes]] = []

    def reply(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        return True

    def send(self, node: NodeId, addr: str, frames: Sequence[bytes]) -> bool:
        self.sent.append((node, frames[0]))
        return True

    def dropped(self, peers: Sequence[tuple[NodeId, str]]) -> list[NodeId]:
        return []


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def filtered(draw: float = 0.5) -> tuple[FilteredLinks, FakeLinks, Clock]:
    inner, clock = FakeLinks(), Clock()
    return FilteredLinks(inner, clock, lambda: draw), inner, clock


def test_a_cut_holds_until_it_ends_and_spares_other_peers() -> None:
    cut = NetRule("cut", frozenset({B}), ends_at=105.0)
    assert release_at([cut], B, 100.0, lambda: 0.5) == 105.0
    assert release_at([cut], C, 100.0, lambda: 0.5) == 100.0
    assert release_at([cut], B, 106.0, lambda: 0.5) == 106.0  # over


def test_a_delay_holds_its_time_within_the_jitter_and_loss_holds_a_retransmission() -> None:
    delay = NetRule("delay", frozenset(), ends_at=200.0, delay_ms=100, jitter_ms=20)
    assert release_at([delay], A, 100.0, lambda: 0.0) == pytest.approx(100.08)
    assert release_at([delay], A, 100.0, lambda: 0.999999) == pytest.approx(100.12)
    loss = NetRule("loss", frozenset(), ends_at=200.0, loss_ppm=50_000)
    assert release_at([loss], A, 100.0, lambda: 0.049) == 100.0 + RETRANSMIT_MS / 1000
    assert release_at([loss], A, 100.0, lambda: 0.051) == 100.0


def test_messages_to_a_peer_leave_in_order_after_the_cut_and_others_pass() -> None:
    links, inner, clock = filtered()
    links.apply(parse_rule(pack_rule("cut", ["b"], duration_ms=1000), clock.now))
    assert links.send(B, "x", [b"1"]) and links.send(C, "y", [b"c"])
    assert inner.sent == [(C, b"c")]
    assert links.cut_off(B) and not links.cut_off(C)
    clock.now += 0.5
    links.send(B, "x", [b"2"])
    assert links.release_due() == pytest.approx(0.5)
    assert inner.sent == [(C, b"c")]
    clock.now += 0.5
    links.release_due()
    assert inner.sent == [(C, b"c"), (B, b"1"), (B, b"2")]
    links.send(B, "x", [b"3"])  # the rule is over: straight through
    assert inner.sent[-1] == (B, b"3") and links.held == 0 and not links.rules


def test_a_message_never_overtakes_one_held_before_it() -> None:
    links, inner, clock = filtered(draw=0.0)
    links.apply(parse_rule(pack_rule("loss", [], duration_ms=100, loss_ppm=10), clock.now))
    links.send(B, "x", [b"held"])  # draw 0.0 < loss share: held one retransmission
    clock.now += 0.15  # the rule ended
    links.send(B, "x", [b"later"])
    assert inner.sent == []
    clock.now += 0.1
    links.release_due()
    assert inner.sent == [(B, b"held"), (B, b"later")]


def test_heal_lets_everything_go_at_once_and_the_hold_is_bounded() -> None:
    links, inner, clock = filtered()
    links.apply(parse_rule(pack_rule("cut", ["b"], duration_ms=60_000), clock.now))
    for n in range(HELD_MESSAGES_MAX):
        assert links.send(B, "x", [str(n).encode()])
    assert not links.send(B, "x", [b"one too many"])  # as a full socket queue
    assert links.apply(parse_rule(pack_rule("heal"), clock.now)).startswith("healed")
    assert len(inner.sent) == HELD_MESSAGES_MAX and links.held == 0


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"action": "drop"}, "action must be one of"),
        ({"action": "cut", "peers": "b"}, "peers must be a list"),
        ({"action": "cut", "duration_ms": 0}, "duration_ms > 0"),
        ({"action": "delay", "duration_ms": 5}, "delay_ms > 0"),
        ({"action": "loss", "duration_ms": 5, "loss_ppm": 2_000_000}, "at most 1000000"),
        ({"action": "cut", "duration_ms": -1}, "int >= 0"),
    ],
)
def test_a_bad_rule_is_refused_saying_why(fields: dict[str, object], error: str) -> None:
    from smr.wire.codec import pack_body

    with pytest.raises(ValueError, match=error):
        parse_rule(pack_body(fields), 0.0)
    with pytest.raises(ValueError, match="msgpack"):
        parse_rule(b"\xc1", 0.0)


def test_a_fault_is_set_on_both_sides() -> None:
    nodes = ["n0", "n1", "n2", "n3"]
    cut = emulated_rules("cut", nodes, ["n1"], others=["n2", "n3"], duration_ms=5)
    assert {node: unpack_body(body)["peers"] for node, body in cut.items()} == {
        "n1": ("n2", "n3"),
        "n2": ("n1",),
        "n3": ("n1",),
    }
    delay = emulated_rules("delay", nodes, ["n2"], delay_ms=100, duration_ms=5)
    assert unpack_body(delay["n2"])["peers"] == ()  # every peer
    assert all(unpack_body(delay[n])["peers"] == ("n2",) for n in ("n0", "n1", "n3"))


def test_the_cli_words_parse_or_say_why() -> None:
    assert parse_duration_ms("100ms") == 100 and parse_duration_ms("2.5s") == 2500
    assert parse_duration_ms("1m") == 60_000 and parse_duration_ms("3") == 3000
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration_ms("soon")
    nodes = ["n0", "n1", "n2"]
    assert parse_groups(["n0,n1", "/", "n2"], nodes) == (["n0", "n1"], ["n2"])
    assert parse_groups(["n1"], nodes) == (["n1"], ["n0", "n2"])
    for words, error in ((["n1", "/", "n1"], "both sides"), (["n7"], "unknown")):
        with pytest.raises(ValueError, match=error):
            parse_groups(words, nodes)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["send", "cut", "delay", "loss", "tick", "wait", "heal"]),
            st.sampled_from([A, B, C]),
            st.integers(1, 300),
        ),
        max_size=60,
    ),
    st.floats(0.0, 0.999),
)
def test_every_message_leaves_once_in_the_order_sent_to_its_peer(
    steps: list[tuple[str, NodeId, int]], draw: float
) -> None:
    links, inner, clock = filtered(draw)
    sent: list[tuple[NodeId, bytes]] = []
    for n, (step, peer, ms) in enumerate(steps):
        if step == "send":
            message = str(n).encode()
            assert links.send(peer, "addr", [message])
            sent.append((peer, message))
        elif step in ("tick", "wait"):
            clock.now += ms / 1000
            if step == "tick":  # "wait": time passes before the release task runs
                links.release_due()
        elif step == "heal":
            links.apply(None)
        else:
            body = pack_rule(step, [peer], duration_ms=ms, delay_ms=ms, loss_ppm=ms * 1000)
            links.apply(parse_rule(body, clock.now))
    clock.now += 10.0  # every rule is over (durations are at most 0.3 s)
    links.release_due()
    assert links.held == 0
    for peer in (A, B, C):
        assert [m for p, m in inner.sent if p == peer] == [m for p, m in sent if p == peer]
