"""smr: a fault-tolerant, stateful streaming MapReduce engine.

The user API is :class:`Job`; see ``smr.api`` for the contract of ``map``, ``reduce`` and
``combine`` and their bulk forms (``map_batch``, ``reduce_batch``), and ``smr.agg`` for the
built-in aggregators. A program feeds a cluster, reads its state and follows its output
through :func:`connect` (``smr.connection``; ``smr.aio`` for asyncio).
"""

from smr import agg
from smr.api import Job, JobLoadError, load_job
from smr.connection import Cluster, connect

__all__ = ["Cluster", "Job", "JobLoadError", "agg", "connect", "load_job"]
