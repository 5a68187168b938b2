"""smr: a fault-tolerant, stateful streaming MapReduce engine.

The user API is :class:`Job`; see ``smr.api`` for the contract of ``map``, ``reduce`` and
``combine`` and their bulk forms (``map_batch``, ``reduce_batch``), and ``smr.agg`` for the
built-in aggregators.
"""

from smr import agg
from smr.api import Job, JobLoadError, load_job

__all__ = ["Job", "JobLoadError", "agg", "load_job"]
