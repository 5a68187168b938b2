"""The read lease (``ring.lease``): held only while every watcher echoed a beat sent less
than the duration ago, against a plain model over random histories."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from smr.ring.ids import NodeId
from smr.ring.lease import BEATS_KEPT, ReadLease

A, B = NodeId("a"), NodeId("b")


def test_no_watcher_means_the_lease_holds() -> None:
    assert ReadLease(0.5).holds(100.0, [])


def test_the_lease_runs_from_the_echoed_beats_sending_not_from_the_echo() -> None:
    lease = ReadLease(0.5)
    lease.sent(1, 10.0)
    lease.sent(2, 10.1)
    assert not lease.holds(10.2, [A])  # never echoed
    lease.echoed(A, 1)  # arrives late: still runs from 10.0
    assert lease.holds(10.49, [A])
    assert not lease.holds(10.5, [A])
    lease.echoed(A, 2)
    assert lease.holds(10.59, [A]) and not lease.holds(10.6, [A])


def test_every_watcher_must_have_echoed_and_an_older_echo_renews_nothing() -> None:
    lease = ReadLease(0.5)
    lease.sent(1, 10.0)
    lease.sent(2, 10.3)
    lease.echoed(A, 2)
    assert not lease.holds(10.4, [A, B])
    lease.echoed(B, 1)
    assert lease.holds(10.4, [A, B]) and not lease.holds(10.5, [A, B])
    lease.echoed(A, 1)  # out of order: A's later echo stands
    assert lease.expires_at([A]) == 10.8


def test_a_forgotten_watcher_must_echo_again_and_unknown_beats_count_for_nothing() -> None:
    lease = ReadLease(0.5)
    lease.sent(1, 10.0)
    lease.echoed(A, 1)
    lease.forget([A])
    assert not lease.holds(10.1, [A])
    lease.echoed(A, 99)  # never sent (another incarnation's number): ignored
    assert not lease.holds(10.1, [A])
    for beat in range(2, BEATS_KEPT + 3):
        lease.sent(beat, 10.0 + beat)
    lease.echoed(A, 1)  # its send time is no longer kept
    assert lease.expires_at([A]) == float("-inf")


@given(
    st.lists(
        st.tuples(st.sampled_from(["send", "echo a", "echo b"]), st.integers(1, 40)),
        max_size=60,
    ),
    st.floats(0.0, 60.0),
)
def test_the_lease_matches_a_plain_model(
    steps: list[tuple[str, int]], probe_at_offset: float
) -> None:
    lease = ReadLease(2.0)
    sent: dict[int, float] = {}
    echoed: dict[NodeId, float] = {}
    now = 0.0
    beat = 0
    for action, gap in steps:
        now += gap / 10
        if action == "send":
            beat += 1
            sent[beat] = now
            lease.sent(beat, now)
        else:
            peer = A if action == "echo a" else B
            echo = max(1, beat - gap % 3)
            lease.echoed(peer, echo)
            if echo in sent:
                echoed[peer] = max(echoed.get(peer, float("-inf")), sent[echo])
    probe = now + probe_at_offset / 10
    model = all(peer in echoed and probe < echoed[peer] + 2.0 for peer in (A, B))
    assert lease.holds(probe, [A, B]) == model
