"""Nexmark Q5 and Q7's first stage in plain Python, the model smr's and Spark's windows are
compared with: every bid put in every window that holds its event time, found by brute
force over window starts, and counted or maxed. Nothing from smr."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["bid_counts", "bid_maxima"]

Windows = dict[tuple[int, tuple[int, int]], int]  # (auction, (start_ms, end_ms)) -> value


def _windows_of(time_ms: int, size_ms: int, slide_ms: int) -> list[tuple[int, int]]:
    first = (time_ms - size_ms) // slide_ms
    return [
        (k * slide_ms, k * slide_ms + size_ms)
        for k in range(first, time_ms // slide_ms + 1)
        if k * slide_ms <= time_ms < k * slide_ms + size_ms
    ]


def bid_counts(events: Iterable[dict[str, Any]], size_ms: int, slide_ms: int) -> Windows:
    """Q5: bids per auction per window."""
    counts: Windows = {}
    for event in events:
        if event["kind"] == "bid":
            for window in _windows_of(event["date_time"], size_ms, slide_ms):
                key = (event["auction"], window)
                counts[key] = counts.get(key, 0) + 1
    return counts


def bid_maxima(events: Iterable[dict[str, Any]], size_ms: int) -> Windows:
    """Q7: the highest price per auction per tumbling window."""
    maxima: Windows = {}
    for event in events:
        if event["kind"] == "bid":
            for window in _windows_of(event["date_time"], size_ms, size_ms):
                key = (event["auction"], window)
                maxima[key] = max(maxima.get(key, event["price"]), event["price"])
    return maxima
