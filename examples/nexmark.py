"""Nexmark Q5 and Q7 as windowed smr jobs (events: ``bench/nexmark_events.py``).

- ``q5`` (hot items): bids counted per auction in hopping windows of 10 s every 2 s; the
  auctions with the most bids per window are :func:`hottest` of its windows.
- ``q7`` (highest bid): the highest price per auction in tumbling windows of 10 s; the
  highest bid per window and the auctions that reached it are :func:`hottest` too.

Each job is the first, keyed stage; the second stage (the maximum over a window's auctions)
is a plain function of the first stage's windows, the same for smr and for Spark
(``bench/nexmark_spark.py``). The events are in event-time order, so no bid is late.

    from smr.testing import run_job
    run = run_job(q5, read_events(paths))
    hot = hottest(run.windows, "count")   # {Window: (bids, [auctions])}

They run in ``smr.testing.run_job`` and on a cluster of nodes (``smr feed``, or a program's
``smr.connect(job=...)`` with ``emit(..., event_time=...)``, docs/guide/windows.md);
``bench/nexmark.py`` measures both against Spark, the second stage over the first's windows
read from the cluster's output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from smr import Job, agg, windows
from smr.windows import Window

WINDOW_MS = 10_000
SLIDE_MS = 2_000


# --8<-- [start:q5]
def bid_count(event: dict[str, Any], emit: Any) -> None:
    if event["kind"] == "bid":
        emit(event["auction"], 1)


def event_time(event: dict[str, Any]) -> int:
    return int(event["date_time"])


q5 = Job(
    "nexmark-q5",
    map=bid_count,
    reduce=agg.count(),
    event_time=event_time,
    window=windows.hopping(WINDOW_MS, SLIDE_MS),
)
# --8<-- [end:q5]


def bid_price(event: dict[str, Any], emit: Any) -> None:
    if event["kind"] == "bid":
        emit(event["auction"], event["price"])


q7 = Job(
    "nexmark-q7",
    map=bid_price,
    reduce=agg.max(),
    event_time=event_time,
    window=windows.tumbling(WINDOW_MS),
)


def hottest(
    per_auction: Mapping[tuple[Any, Window], Mapping[str, Any]], field: str
) -> dict[Window, tuple[Any, list[Any]]]:
    """Per window, the largest ``field`` over its auctions and the auctions that reach it
    (sorted): Q5's most-bid auctions, Q7's highest bid."""
    best: dict[Window, tuple[Any, list[Any]]] = {}
    for (auction, window), state in per_auction.items():
        value = state[field]
        top = best.get(window)
        if top is None or value > top[0]:
            best[window] = (value, [auction])
        elif value == top[0]:
            top[1].append(auction)
    return {window: (value, sorted(auctions)) for window, (value, auctions) in best.items()}
