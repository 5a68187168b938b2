"""Event-time windows for a job: the specs, and where windowed jobs may run.

    from smr import Job, agg, windows

    job = Job(
        "clicks",
        map=lambda click, emit: emit(click["page"], 1),
        reduce=agg.count(),
        event_time=lambda click: click["time_ms"],
        window=windows.tumbling(size_ms=60_000, allowed_lateness_ms=5_000),
    )

Each tuple a record maps to takes the record's event time (integer milliseconds); ``reduce``
(or its aggregators) folds it into its key's state per window. A window's result leaves when
the watermark passes its end; a tuple within ``allowed_lateness_ms`` behind the watermark
updates its window and sends a correction; a later one is dropped, counted and, with
``Job(late_side_output=True)``, kept in a side output. The rules: docs/design/windows.md.

Tumbling, hopping and session windows run in a cluster (``smr cluster up``, ``smr feed``,
``smr node``, ``smr.connect(job=...)`` with ``emit(..., event_time=...)``), their results in
the nodes' output files (docs/design/windows.md#in-the-ring); an output table and ``smr
spark-feed`` refuse a windowed job with one line (:func:`refuse_in_cluster`,
:func:`refuse_windowed`). Every job runs in :func:`smr.testing.run_job`.
"""

from __future__ import annotations

from typing import Final

from smr.api import Job, JobLoadError

# The types a windowed job's test meets, importable from here (their home is checkpoint/).
from smr.checkpoint.window_state import WindowResult as WindowResult
from smr.checkpoint.windows import Window as Window
from smr.checkpoint.windows import WindowSpec as WindowSpec

__all__ = ["hopping", "refuse_in_cluster", "refuse_windowed", "session", "tumbling"]

TABLE_REFUSAL: Final = (
    "a windowed job's results go to the output files only in this version, not to an output "
    "table (drop --output-postgres; docs/design/windows.md#in-the-ring)"
)


def tumbling(
    size_ms: int, *, allowed_lateness_ms: int = 0, out_of_orderness_ms: int = 0
) -> WindowSpec:
    """Windows of ``size_ms`` side by side: ``[k * size_ms, (k + 1) * size_ms)``."""
    return WindowSpec(
        "tumbling",
        size_ms=size_ms,
        allowed_lateness_ms=allowed_lateness_ms,
        out_of_orderness_ms=out_of_orderness_ms,
    )


def hopping(
    size_ms: int, slide_ms: int, *, allowed_lateness_ms: int = 0, out_of_orderness_ms: int = 0
) -> WindowSpec:
    """Windows of ``size_ms`` starting every ``slide_ms`` (``slide_ms <= size_ms``): each
    tuple falls in about ``size_ms / slide_ms`` of them."""
    return WindowSpec(
        "hopping",
        size_ms=size_ms,
        slide_ms=slide_ms,
        allowed_lateness_ms=allowed_lateness_ms,
        out_of_orderness_ms=out_of_orderness_ms,
    )


def session(
    gap_ms: int, *, allowed_lateness_ms: int = 0, out_of_orderness_ms: int = 0
) -> WindowSpec:
    """Per key, runs of tuples less than ``gap_ms`` apart: a tuple opens ``[t, t + gap_ms)``
    and windows of one key that overlap merge."""
    return WindowSpec(
        "session",
        gap_ms=gap_ms,
        allowed_lateness_ms=allowed_lateness_ms,
        out_of_orderness_ms=out_of_orderness_ms,
    )


def refuse_in_cluster(job: Job, *, table: bool = False) -> Job:
    """``job`` if a cluster's nodes can run it (``table``: with an output table); otherwise
    :class:`smr.api.JobLoadError` with the one line the commands print (exit 2): a windowed
    job with an output table."""
    if job.windowed and table:
        raise JobLoadError(f"job {job.name!r}: {TABLE_REFUSAL}")
    return job


def refuse_windowed(job: Job, entry: str) -> Job:
    """``job`` unless it is windowed; for a windowed job, :class:`smr.api.JobLoadError` with
    one line: ``entry`` (a command, an API) does not stamp event times in this version."""
    if job.windowed:
        raise JobLoadError(
            f"job {job.name!r}: {entry} does not feed windowed jobs in this version; feed "
            "them with smr feed or smr.connect, or run them in smr.testing.run_job "
            "(docs/design/windows.md)"
        )
    return job
