"""Which life of the cluster a Spark checkpoint fed (docs/design/architecture.md#spark).

A Structured Streaming checkpoint remembers which input it already processed, not where it
went. After ``smr cluster down`` and ``smr cluster up`` on the same directory the nodes start
empty, while the checkpoint still says the input is done: resumed as is, the query would
feed nothing and say nothing. So ``smr spark-feed`` keeps, next to the checkpoint directory,
a small file naming the cluster incarnation it feeds (``ClusterSpec.incarnation``), and
before Spark starts:

1. A checkpoint with no progress yet, or one that fed this incarnation: go on (resume).
2. A checkpoint that fed another incarnation (or that has no record of one while the cluster
   has one), or, where neither names one (a cluster spec written by hand, as the compose
   cluster's), a checkpoint with progress while the ring holds no key at all: refuse with
   :class:`StaleCheckpoint`, one line saying what happened and what to do, unless
   ``from_start``: then move the old checkpoint aside (``NAME.old-INCARNATION``) and feed
   everything again. (Without incarnations, a ring started again that already holds keys
   from another feed cannot be told from the one the checkpoint fed.)
3. When the query has started: write this incarnation into the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

INCARNATION_SUFFIX: Final = ".incarnation"
"""The file beside checkpoint ``DIR/NAME`` is ``DIR/NAME.incarnation``."""

UNKNOWN: Final = "unknown"
"""How a checkpoint without an incarnation file (or a cluster without one) is named."""


class StaleCheckpoint(Exception):
    """A Spark checkpoint fed an earlier life of the cluster."""


def incarnation_file(checkpoint_dir: Path) -> Path:
    """The file naming the incarnation that ``checkpoint_dir`` fed."""
    return checkpoint_dir.with_name(checkpoint_dir.name + INCARNATION_SUFFIX)


def fed_incarnation(checkpoint_dir: Path) -> str | None:
    """The incarnation ``checkpoint_dir`` fed, or None if it has no record of one."""
    try:
        return incarnation_file(checkpoint_dir).read_text().strip() or None
    except FileNotFoundError:
        return None


def has_progress(checkpoint_dir: Path) -> bool:
    """Whether Spark wrote anything into ``checkpoint_dir`` yet."""
    return checkpoint_dir.is_dir() and any(checkpoint_dir.iterdir())


def claim(
    checkpoint_dir: Path,
    incarnation: str | None,
    cluster_dir: Path,
    from_start: bool,
    ring_keys: int | None = None,
) -> str | None:
    """Steps 1 and 2: check that ``checkpoint_dir`` may feed ``incarnation`` of a ring that
    holds ``ring_keys`` keys (None: not counted); StaleCheckpoint if not. Returns a line to
    show when the old checkpoint was moved aside, else None."""
    # 1.
    if not has_progress(checkpoint_dir):
        return None
    fed = fed_incarnation(checkpoint_dir)
    unknown_empty_ring = fed is None and incarnation is None and ring_keys == 0
    if fed == incarnation and not unknown_empty_ring:
        return None
    # 2.
    if not from_start and unknown_empty_ring:
        raise StaleCheckpoint(
            f"checkpoint {checkpoint_dir} says input was fed already, but the ring holds no "
            "key (started again since, empty: a compose `down` without -v keeps the "
            "checkpoint volume): resuming would skip that input; run again with "
            "--from-start to feed everything, or give another --checkpoint"
        )
    if not from_start:
        raise StaleCheckpoint(
            f"checkpoint {checkpoint_dir} fed cluster incarnation {fed or UNKNOWN}, but the "
            f"cluster in {cluster_dir} is incarnation {incarnation or UNKNOWN} (started again "
            "since, empty): resuming would skip the input already done; run again with "
            "--from-start to feed everything, or give another --checkpoint"
        )
    aside = _free_name(checkpoint_dir, f".old-{fed or UNKNOWN}")
    checkpoint_dir.rename(aside)
    record = incarnation_file(checkpoint_dir)
    if record.exists():
        record.rename(incarnation_file(aside))
    return f"checkpoint of incarnation {fed or UNKNOWN} moved to {aside}; feeding from the start"


def record(checkpoint_dir: Path, incarnation: str | None) -> None:
    """Step 3: note that ``checkpoint_dir`` feeds ``incarnation`` (atomically)."""
    path = incarnation_file(checkpoint_dir)
    if incarnation is None:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(incarnation + "\n")
    temporary.replace(path)


def _free_name(path: Path, suffix: str) -> Path:
    """``path`` with ``suffix``, and a number after it if that name is taken."""
    candidate = path.with_name(path.name + suffix)
    number = 1
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.name}{suffix}.{number}")
    return candidate
