"""The decoders' fuzzer reaches both sides of every decoder, and no decoder raises anything
but its declared error on what it generates (bench/fuzz_decoders.py runs a million)."""

from __future__ import annotations

import tracemalloc

import pytest

from bench.fuzz_decoders import DECODERS, fuzz


@pytest.mark.parametrize("seed", [1, 2])
def test_every_decoder_accepts_or_refuses_and_never_fails(seed: int) -> None:
    outcomes = fuzz(30_000, seed)
    assert set(outcomes) == set(DECODERS)
    for name, outcome in outcomes.items():
        assert outcome.failed == 0, (name, outcome.failures)
        assert outcome.accepted > 0 and outcome.refused > 0, (name, outcome)


def test_decoding_garbage_allocates_little() -> None:
    # A forged length must not make a decoder allocate more than the input it came in.
    tracemalloc.start()
    try:
        fuzz(6_000, 3)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * 1024 * 1024, peak
