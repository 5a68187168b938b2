"""The source's figures for the autoscale controller: a mapper tier that knows its input
(the rate arriving at it, and how far behind it is) writes them to ``source.json`` in the
cluster directory; the controller reads them each round.

A saturated ring holds the mappers back, so the nodes see only what they manage to apply:
the workload beyond that, and the lag it builds, are visible only at the source (Daedalus
reads Kafka's consumer lag for the same reason). Without a fresh report the controller
decides on the nodes' figures alone.

The file is written whole, then renamed, so a reader never sees half of it.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Final

from smr.autoscale.observe import SourceReport

SOURCE_FILE: Final = "source.json"
# A report older than this is not used: the source stopped, or stopped reporting.
SOURCE_AGE_S_MAX: Final = 3.0


def write_source(cluster_dir: Path, offered_per_s: float, backlog_tuples: int) -> None:
    """Publish the source's figures now (``offered_per_s`` >= 0, ``backlog_tuples`` >= 0)."""
    if not (math.isfinite(offered_per_s) and offered_per_s >= 0 and backlog_tuples >= 0):
        raise ValueError(
            f"source figures must be finite and >= 0, not {offered_per_s} and {backlog_tuples}"
        )
    body = {
        "offered_per_s": offered_per_s,
        "backlog_tuples": int(backlog_tuples),
        "at_unix_s": time.time(),
    }
    path = cluster_dir / SOURCE_FILE
    temporary = path.with_suffix(".tmp-source")
    temporary.write_text(json.dumps(body))
    temporary.replace(path)


def read_source(cluster_dir: Path, age_s_max: float = SOURCE_AGE_S_MAX) -> SourceReport | None:
    """The source's last figures, if written within ``age_s_max``; None without a file or
    with a stale one. A file that is not a source report is a clear error."""
    path = cluster_dir / SOURCE_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        body = json.loads(text)
        offered = float(body["offered_per_s"])
        backlog = int(body["backlog_tuples"])
        at = float(body["at_unix_s"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path} is not a source report: {error!r}") from None
    if not (math.isfinite(offered) and offered >= 0 and backlog >= 0):
        raise ValueError(f"{path}: figures must be finite and >= 0, not {offered}, {backlog}")
    if time.time() - at > age_s_max:
        return None
    return SourceReport(offered, backlog)
