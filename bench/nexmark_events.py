"""Nexmark events: a seeded generator of persons, auctions and bids after the shape of Beam's
Nexmark generator, written once to JSON-lines files that smr and Spark both read.

The rules (our own code, following the published design of Beam's generator):

- Events come in epochs of 50: 1 person, 3 auctions, 46 bids, by the event number's place
  in its epoch. The n-th event's time is ``BASE_TIME_MS + n * 1000 // events_per_second``
  (integer milliseconds), so event times follow event numbers and never go back.
- Ids: the person and auction ids an event number implies (the newest created so far)
  start at 1000. A bid goes to a hot auction (the first of the newest block of 100 auctions)
  except one time in ``hot_auction_ratio``, else to a random auction among the last 100 in
  flight or up to 10 not created yet; its bidder likewise among persons (hot one time in
  ``hot_bidder_ratio`` out).
- A price is ``round(10 ** (u * 6) * 100)`` cents for a uniform ``u``: prices over six
  orders of magnitude, as Beam's.
- Every event draws from its own generator seeded by ``(seed, event number)``: the same
  seed gives the same events, however they are split into files.

Each line is one event as a JSON object with ``kind`` (``person``, ``auction``, ``bid``)
and ``date_time`` (event time, ms). Command line: ``python -m bench.nexmark_events --events
N --out DIR`` writes ``DIR/events-K.jsonl`` and ``DIR/manifest.json``.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

__all__ = ["BASE_TIME_MS", "NexmarkConfig", "events", "read_events", "write_events"]

BASE_TIME_MS: Final = 1_436_918_400_000  # 2015-07-15T00:00:00Z, the base time Beam uses
PERSON_PROPORTION: Final = 1
AUCTION_PROPORTION: Final = 3
BID_PROPORTION: Final = 46
EPOCH_EVENTS: Final = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
FIRST_PERSON_ID: Final = 1000
FIRST_AUCTION_ID: Final = 1000
FIRST_CATEGORY_ID: Final = 10
CATEGORIES: Final = 5
HOT_BLOCK: Final = 100  # a hot auction or bidder is the first of the newest block of this many
AUCTIONS_IN_FLIGHT: Final = 100
PERSONS_ACTIVE: Final = 1000
ID_LEAD: Final = 10  # ids not created yet a bid may still name (events arrive out of order)
AUCTION_LENGTH_MS: Final = 10_000
US_STATES: Final = ("AZ", "CA", "ID", "OR", "WA", "WY")
CITIES: Final = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Seattle")
MANIFEST: Final = "manifest.json"


@dataclass(frozen=True)
class NexmarkConfig:
    """What the events depend on: the seed, how many, their rate in event time, the hot
    ratios."""

    seed: int = 1
    events: int = 100_000
    events_per_second: int = 10_000
    hot_auction_ratio: int = 2
    hot_bidder_ratio: int = 4


def _last_person(event_number: int) -> int:
    """The newest person id (base 0) created at or before ``event_number``."""
    epoch, offset = divmod(event_number, EPOCH_EVENTS)
    return epoch * PERSON_PROPORTION + min(offset, PERSON_PROPORTION - 1)


def _last_auction(event_number: int) -> int:
    """The newest auction id (base 0) created at or before ``event_number``."""
    epoch, offset = divmod(event_number, EPOCH_EVENTS)
    if offset < PERSON_PROPORTION:
        return epoch * AUCTION_PROPORTION - 1
    return epoch * AUCTION_PROPORTION + min(offset - PERSON_PROPORTION, AUCTION_PROPORTION - 1)


def _recent(last: int, window: int, rng: random.Random) -> int:
    low = max(last - window, 0)
    return low + rng.randrange(last - low + 1 + ID_LEAD)


def _price(rng: random.Random) -> int:
    return round(10 ** (rng.random() * 6) * 100)


def event(config: NexmarkConfig, event_number: int) -> dict[str, Any]:
    """The event numbered ``event_number`` (from 0)."""
    rng = random.Random((config.seed << 40) ^ event_number)
    time_ms = BASE_TIME_MS + event_number * 1000 // config.events_per_second
    offset = event_number % EPOCH_EVENTS
    if offset < PERSON_PROPORTION:
        person = FIRST_PERSON_ID + _last_person(event_number)
        return {
            "kind": "person",
            "id": person,
            "name": f"person-{person}",
            "city": rng.choice(CITIES),
            "state": rng.choice(US_STATES),
            "date_time": time_ms,
        }
    if offset < PERSON_PROPORTION + AUCTION_PROPORTION:
        auction = FIRST_AUCTION_ID + _last_auction(event_number)
        seller = _hot_or_recent(_last_person(event_number), PERSONS_ACTIVE, 4, rng)
        initial = _price(rng)
        return {
            "kind": "auction",
            "id": auction,
            "seller": FIRST_PERSON_ID + seller,
            "category": FIRST_CATEGORY_ID + rng.randrange(CATEGORIES),
            "initial_bid": initial,
            "reserve": initial + _price(rng),
            "date_time": time_ms,
            "expires": time_ms + AUCTION_LENGTH_MS,
        }
    auction = _hot_or_recent(
        _last_auction(event_number), AUCTIONS_IN_FLIGHT, config.hot_auction_ratio, rng
    )
    bidder = _hot_or_recent(
        _last_person(event_number), PERSONS_ACTIVE, config.hot_bidder_ratio, rng
    )
    return {
        "kind": "bid",
        "auction": FIRST_AUCTION_ID + auction,
        "bidder": FIRST_PERSON_ID + bidder + 1,
        "price": _price(rng),
        "date_time": time_ms,
    }


def _hot_or_recent(last: int, window: int, hot_ratio: int, rng: random.Random) -> int:
    """A hot id (the first of the newest block) except one time in ``hot_ratio``."""
    if rng.randrange(hot_ratio) > 0:
        return max(last, 0) // HOT_BLOCK * HOT_BLOCK
    return _recent(max(last, 0), window, rng)


def events(config: NexmarkConfig) -> Iterator[dict[str, Any]]:
    """Every event of ``config``, in event-number (and event-time) order."""
    for event_number in range(config.events):
        yield event(config, event_number)


def write_events(config: NexmarkConfig, out_dir: Path, files: int = 4) -> list[Path]:
    """Write the events once into ``files`` JSON-lines files of consecutive events, and a
    manifest of the config; a directory whose manifest holds the same config is reused."""
    manifest = out_dir / MANIFEST
    paths = [out_dir / f"events-{part:03d}.jsonl" for part in range(files)]
    wanted = {"config": asdict(config), "files": [p.name for p in paths]}
    if manifest.exists() and json.loads(manifest.read_text()) == wanted:
        return paths
    out_dir.mkdir(parents=True, exist_ok=True)
    per_file = -(-config.events // files)
    stream = events(config)
    for part, path in enumerate(paths):
        count = min(per_file, config.events - part * per_file)
        with path.open("w") as out:
            for _ in range(max(count, 0)):
                out.write(json.dumps(next(stream), separators=(",", ":")) + "\n")
    manifest.write_text(json.dumps(wanted, indent=2) + "\n")
    return paths


def read_events(paths: Sequence[Path]) -> Iterator[dict[str, Any]]:
    """The events of ``paths``, in file order and line order."""
    for path in paths:
        with path.open() as lines:
            for line in lines:
                yield json.loads(line)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=NexmarkConfig.events)
    parser.add_argument("--seed", type=int, default=NexmarkConfig.seed)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    paths = write_events(NexmarkConfig(seed=args.seed, events=args.events), args.out, args.files)
    print(f"{args.events} events in {len(paths)} files under {args.out}")


if __name__ == "__main__":
    main()
