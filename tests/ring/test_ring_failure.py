"""The failure detector's verdicts: never early, and any sign of life cancels them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ring.failure import FailureDetector, Verdict
from ring.ids import NodeId

A, B = NodeId("a"), NodeId("b")


def detector() -> FailureDetector:
    d = FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2)
    d.watch([A, B], now=0.0)
    return d


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
    d = FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2)
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
    d = FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2, first_contact_grace_s=5.0)
    d.watch([A], now=0.0)
    assert d.judge([A], 5.49) is None
    assert d.judge([A], 5.51) == (Verdict.PROBE, A)
    d.heard(A, 6.0)
    d.watch([], now=6.0)
    d.watch([A], now=7.0)  # watched again later: heard before, so no grace
    assert d.judge([A], 7.51) == (Verdict.PROBE, A)


def test_a_suspicion_is_judged_without_the_grace() -> None:
    d = FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2, first_contact_grace_s=5.0)
    d.watch([A], now=0.0)
    assert d.suspect(A, 0.1)
    assert d.judge([A], 0.31) == (Verdict.DEAD, A)


def test_first_contact_ends_the_grace() -> None:
    d = FailureDetector(failure_timeout_s=0.5, probe_timeout_s=0.2, first_contact_grace_s=5.0)
    d.watch([A], now=0.0)
    d.heard(A, 0.2)
    assert d.judge([A], 0.71) == (Verdict.PROBE, A)
