"""The failure detector's verdicts: never early, any sign of life cancels them, and silence
alone gets a node declared dead only by a judge in contact with a majority of the owners."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from smr.ring.failure import FailureDetector, Verdict, may_declare_dead
from smr.ring.ids import NodeId

A, B = NodeId("a"), NodeId("b")
# Two more owners, heard from at every judgement below unless a test says otherwise: with the
# judge and a and b that makes 5 owners, 3 in contact (a quorum) while a and b are silent.
C, D = NodeId("c"), NodeId("d")
OWNERS = [A, B, C, D]


class _Judged:
    """``FailureDetector.judge`` driven as a node drives it: each probe round's probe gets a
    request id (``probe_sent``), and c and d answer the latest probe just before each call."""

    def __init__(self, detector: FailureDetector) -> None:
        self.detector = detector
        self.req = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.detector, name)

    def judge(self, nearest: list[NodeId], now: float) -> tuple[Verdict, NodeId] | None:
        for node in (C, D):
            self.detector.answered(node, self.req)
        verdict = self.detector.judge(nearest, now, owners_besides_me=OWNERS)
        if verdict is not None and verdict[0] in (Verdict.PROBE, Verdict.NO_QUORUM):
            self.req += 1
            self.detector.probe_sent(verdict[1], self.req)
        return verdict


def detector() -> _Judged:
    d = FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2)
    d.watch([A, B], now=0.0)
    return _Judged(d)


def test_silence_past_the_timeout_starts_a_probe_then_death_after_the_probe_timeout() -> None:
    d = detector()
    assert d.judge([A, B], 0.49) is None
    assert d.judge([A, B], 0.5) == (Verdict.PROBE, A)
    assert d.judge([A, B], 0.69) is None
    assert d.judge([A, B], 0.7) == (Verdict.DEAD, A)


def test_an_answer_to_the_probe_cancels_it() -> None:
    d = detector()
    assert d.judge([A], 0.6) == (Verdict.PROBE, A)
    d.heard(A, 0.65)
    assert d.judge([A], 0.9) is None
    assert d.judge([A], 1.16) == (Verdict.PROBE, A)


def test_only_the_nearest_node_is_judged() -> None:
    d = detector()
    d.heard(A, 10.0)
    assert d.judge([A, B], 10.1) is None  # B is silent, but A is nearer and alive


def test_a_suspicion_skips_the_silence_wait() -> None:
    d = detector()
    assert d.suspect(A, 0.1)
    assert not d.suspect(A, 0.1)
    assert d.judge([A], 0.29) is None
    assert d.judge([A], 0.31) == (Verdict.DEAD, A)


@given(st.lists(st.tuples(st.sampled_from(["heard", "judge"]), st.floats(0, 0.3)), max_size=60))
def test_never_declared_dead_without_timeout_plus_probe_of_silence(
    steps: list[tuple[str, float]],
) -> None:
    d = _Judged(FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2))
    d.watch([A], 0.0)
    now = last_heard = 0.0
    for action, advance in steps:
        now += advance
        if action == "heard":
            d.heard(A, now)
            last_heard = now
        else:
            verdict = d.judge([A], now)
            if verdict == (Verdict.DEAD, A):
                assert now - last_heard >= 0.5 + 0.2 - 1e-9
                return


def test_a_node_never_heard_from_gets_the_first_contact_grace_but_not_after() -> None:
    d = _Judged(
        FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2, first_contact_grace_s=5.0)
    )
    d.watch([A], now=0.0)
    assert d.judge([A], 5.49) is None
    assert d.judge([A], 5.51) == (Verdict.PROBE, A)
    d.heard(A, 6.0)
    d.watch([], now=6.0)
    d.watch([A], now=7.0)  # watched again later: heard before, so no grace
    assert d.judge([A], 7.51) == (Verdict.PROBE, A)


def test_a_suspicion_is_judged_without_the_grace() -> None:
    d = _Judged(
        FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2, first_contact_grace_s=5.0)
    )
    d.watch([A], now=0.0)
    assert d.suspect(A, 0.1)
    assert d.judge([A], 0.31) == (Verdict.DEAD, A)


def test_first_contact_ends_the_grace() -> None:
    d = _Judged(
        FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2, first_contact_grace_s=5.0)
    )
    d.watch([A], now=0.0)
    d.heard(A, 0.2)
    assert d.judge([A], 0.71) == (Verdict.PROBE, A)


# -- the quorum ------------------------------------------------------------------------------


@given(
    owner_count=st.integers(2, 40),
    in_contact=st.integers(1, 40),
    more=st.integers(0, 40),
)
def test_more_contacts_never_forbid_a_declaration(
    owner_count: int, in_contact: int, more: int
) -> None:
    in_contact = min(in_contact, owner_count - 1)
    bigger = min(in_contact + more, owner_count - 1)
    if may_declare_dead(owner_count, in_contact, connection_dropped=False):
        assert may_declare_dead(owner_count, bigger, connection_dropped=False)


@given(owner_count=st.integers(2, 40))
def test_an_isolated_node_declares_nobody_dead_on_silence(owner_count: int) -> None:
    assert not may_declare_dead(owner_count, 1, connection_dropped=False)
    # A crashed peer (its connection dropped) is another matter: the last survivor of a
    # ring still takes over its crashed neighbours.
    assert may_declare_dead(owner_count, 1, connection_dropped=True)


@given(owner_count=st.integers(2, 40), data=st.data())
def test_two_sides_of_a_partition_never_both_declare_on_silence(
    owner_count: int, data: st.DataObject
) -> None:
    # The owners split into two sides that do not hear each other. A judge's contacts are at
    # best its whole side (the suspect is on the other). If both sides could declare, both
    # would take over nodes of the other, both dead marks would win the merge on heal, and
    # ranges would fall on nodes holding no copy of them.
    side_a = data.draw(st.integers(1, owner_count - 1))
    side_b = owner_count - side_a
    a_declares = may_declare_dead(owner_count, side_a, connection_dropped=False)
    b_declares = may_declare_dead(owner_count, side_b, connection_dropped=False)
    assert not (a_declares and b_declares)


@given(
    st.integers(3, 9),
    st.lists(st.integers(0, 8), min_size=1, max_size=8, unique=True),
)
def test_the_detector_declares_on_silence_only_with_a_majority_in_contact(
    owner_count: int, heard: list[int]
) -> None:
    # The judge watches owner 0; owners 1.. are the others it may hear from after the probe.
    owners = [NodeId(f"o{i}") for i in range(owner_count - 1)]
    suspect = owners[0]
    d = FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2)
    d.watch([suspect], 0.0)
    assert d.judge([suspect], 0.5, owners_besides_me=owners) == (Verdict.PROBE, suspect)
    d.probe_sent(suspect, 1)
    contacts = {owners[i] for i in heard if 0 < i < len(owners)}
    for node in sorted(contacts):
        d.answered(node, 1)
    verdict = d.judge([suspect], 0.7, owners_besides_me=owners)
    if 2 * (1 + len(contacts)) > owner_count:
        assert verdict == (Verdict.DEAD, suspect)
    else:
        assert verdict == (Verdict.NO_QUORUM, suspect)
        # A new round began: nothing more until its own deadline.
        assert d.judge([suspect], 0.85, owners_besides_me=owners) is None


def test_only_answers_to_the_rounds_probe_count_as_contacts() -> None:
    d = FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2)
    d.watch([A], 0.0)
    for node in (B, C, D):
        d.answered(node, 1)  # answers to an earlier probe
    assert d.judge([A], 0.5, owners_besides_me=OWNERS) == (Verdict.PROBE, A)
    d.probe_sent(A, 2)
    # Messages read now, whenever they were sent, are no contacts: only answers are.
    for node in (B, C, D):
        d.heard(node, 0.6)
    assert d.judge([A], 0.7, owners_besides_me=OWNERS) == (Verdict.NO_QUORUM, A)
    d.probe_sent(A, 3)
    for node in (B, C):
        d.answered(node, 3)
    assert d.judge([A], 0.9, owners_besides_me=OWNERS) == (Verdict.DEAD, A)


def test_a_dropped_connection_needs_no_quorum_until_an_answer_refutes_it() -> None:
    d = FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2)
    d.watch([A], 0.0)
    assert d.suspect(A, 0.1)
    assert d.judge([A], 0.31, owners_besides_me=OWNERS) == (Verdict.DEAD, A)
    # A message read late (sent before the crash) cancels the probe but not the drop: the
    # node is judged again after the silence timeout, and still needs no quorum.
    d2 = FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2)
    d2.watch([A], 0.0)
    assert d2.suspect(A, 0.1)
    d2.heard(A, 0.2)
    assert d2.judge([A], 0.31, owners_besides_me=OWNERS) is None
    assert d2.judge([A], 0.71, owners_besides_me=OWNERS) == (Verdict.PROBE, A)
    assert d2.judge([A], 0.91, owners_besides_me=OWNERS) == (Verdict.DEAD, A)
    # An answer to a probe sent after the drop refutes it: then silence needs a quorum.
    d3 = FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2)
    d3.watch([A], 0.0)
    assert d3.suspect(A, 0.1)
    d3.heard(A, 0.2)
    d3.refuted(A)
    assert d3.judge([A], 0.71, owners_besides_me=OWNERS) == (Verdict.PROBE, A)
    assert d3.judge([A], 0.91, owners_besides_me=OWNERS) == (Verdict.NO_QUORUM, A)


def test_a_node_behind_the_nearest_is_found_crashed_only_by_a_drop_and_an_unanswered_probe() -> (
    None
):
    # The judge walks to the nearest watched node only (a, alive); b behind it is never
    # judged, but the evidence of step 2a about it is there to ask for (a leave's receiver
    # asks it of the secondaries it awaits).
    d = FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2)
    d.watch([A, B], 0.0)
    assert not d.crashed(B, 5.0)  # silence alone is no crash
    assert d.suspect(B, 1.0)
    d.heard(A, 1.2)
    assert not d.crashed(B, 1.19)  # the probe's deadline has not passed
    assert d.judge([A, B], 1.21, owners_besides_me=OWNERS) is None
    assert d.crashed(B, 1.21)
    # An answer to a probe sent after the drop refutes it.
    d.heard(B, 1.3)
    d.refuted(B)
    assert not d.crashed(B, 2.0)


# -- suspicion, refutation and vouches (step 2c) ---------------------------------------------


def suspecting(suspicion_timeout_s: float = 0.3) -> _Judged:
    d = FailureDetector(
        failure_timeout_s=0.5, probe_timeout_s=0.2, suspicion_timeout_s=suspicion_timeout_s
    )
    d.watch([A, B], now=0.0)
    return _Judged(d)


def test_silence_becomes_a_suspicion_and_a_death_only_when_the_suspicion_times_out() -> None:
    d = suspecting()
    assert d.judge([A], 0.5) == (Verdict.PROBE, A)
    assert d.judge([A], 0.7) == (Verdict.SUSPECT, A)
    assert d.judge([A], 0.99) is None
    assert d.judge([A], 1.0) == (Verdict.DEAD, A)


def test_a_sign_of_life_during_the_suspicion_ends_it() -> None:
    d = suspecting()
    d.judge([A], 0.5)
    assert d.judge([A], 0.7) == (Verdict.SUSPECT, A)
    d.heard(A, 0.8)  # the suspect refuted
    assert d.judge([A], 1.0) is None
    assert d.judge([A], 1.29) is None  # its silence counts from the refutation
    assert d.judge([A], 1.3) == (Verdict.PROBE, A)


def test_a_vouch_ends_the_suspicion_but_is_no_contact_of_the_judge() -> None:
    d = suspecting()
    d.judge([A], 0.5)
    assert d.judge([A], 0.7) == (Verdict.SUSPECT, A)
    d.vouched(A, 0.8)
    assert d.judge([A], 1.0) is None
    assert A not in d.answered_req


def test_a_busy_suspect_and_an_unhealthy_judge_get_longer_suspicions() -> None:
    d = suspecting()
    assert d.suspicion_s(A) == 0.3
    d.note_busy(A, True)
    assert d.suspicion_s(A) == 0.6
    d.note_busy(A, False)
    d.note_late(0.0)
    d.note_late(0.0)
    assert abs(d.suspicion_s(A) - 0.9) < 1e-9
    d.note_on_time(0.5)  # recovers one step per second only
    assert d.local_health == 2
    d.note_on_time(1.0)
    assert d.local_health == 1


def test_a_dropped_connection_skips_the_suspicion() -> None:
    d = suspecting()
    assert d.suspect(A, 0.1)
    assert d.judge([A], 0.31) == (Verdict.DEAD, A)


@given(
    heard_at=st.lists(st.floats(0.0, 5.0), max_size=6),
    suspicion_timeout_s=st.floats(0.05, 1.0),
    busy=st.booleans(),
)
def test_no_verdict_of_death_on_silence_before_probe_and_suspicion(
    heard_at: list[float], suspicion_timeout_s: float, busy: bool
) -> None:
    # Whatever the signs of life, A is declared dead only after failure + probe + suspicion
    # timeouts of silence since the last of them.
    d = FailureDetector(
        failure_timeout_s=0.5, probe_timeout_s=0.2, suspicion_timeout_s=suspicion_timeout_s
    )
    d.watch([A], 0.0)
    d.note_busy(A, busy)
    judged = _Judged(d)
    signs = sorted(heard_at)
    last = 0.0
    now = 0.0
    while now < 8.0:
        while signs and signs[0] <= now:
            last = signs.pop(0)
            d.heard(A, last)
        verdict = judged.judge([A], now)
        if verdict == (Verdict.DEAD, A):
            assert now - last >= 0.5 + 0.2 + suspicion_timeout_s * (2 if busy else 1) - 1e-9
            return
        now = round(now + 0.01, 6)
    raise AssertionError("a node silent for seconds was never declared dead")


def test_a_pause_of_the_judge_does_not_count_against_the_suspect() -> None:
    # The judge probes, then is paused for a second before the probe's deadline: on resume
    # the deadline lies as far ahead as it did when the pause began, so the answer that
    # waits in its socket is read before any verdict.
    d = suspecting()
    assert d.judge([A], 0.5) == (Verdict.PROBE, A)
    d.postpone(1.0)  # the judge read nothing from 0.6 to 1.6
    assert d.judge([A], 1.65) is None
    d.heard(A, 1.66)
    assert d.judge([A], 1.7) is None
    assert d.judge([A], 2.15) is None  # silence counts from 1.66


def test_the_probe_after_a_dropped_connection_waits_a_few_round_trips() -> None:
    d = FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2)
    d.watch([A], 0.0)
    assert d.drop_probe_timeout_s() == 0.2  # no round trip seen yet
    d.note_rtt(0.002)
    assert d.drop_probe_timeout_s() == 0.05  # 4 x 2 ms, but never below 50 ms
    assert d.suspect(A, 0.1)
    assert d.judge([A], 0.149, owners_besides_me=OWNERS) is None
    assert d.judge([A], 0.151, owners_besides_me=OWNERS) == (Verdict.DEAD, A)
    d.note_rtt(0.09)  # one slow round trip: the longest recent one rules
    assert d.drop_probe_timeout_s() == 0.2
