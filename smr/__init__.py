"""smr: a fault-tolerant, stateful streaming MapReduce engine.

The user API is :class:`Job`; see ``smr.api`` for the contract of ``map``, ``reduce`` and
``combine`` and their bulk forms (``map_batch``, ``reduce_batch``), ``smr.agg`` for the
built-in aggregators and ``smr.windows`` for event-time windows. A program feeds a cluster,
reads its state and follows its output through :func:`connect` (``smr.connection``;
``smr.aio`` for asyncio); ``smr.testing`` runs a job in-process, for a job's own tests.

``__version__`` is the installed distribution's version (semantic versioning; the changes
of each are in ``CHANGELOG.md``), the one ``smr --version`` prints.
"""

from importlib import metadata

from smr import agg, windows
from smr.api import Job, JobLoadError, load_job
from smr.connection import Cluster, LostSlotsSkipped, MapperIdReused, SlotsLost, connect

try:
    __version__ = metadata.version("smr")
except metadata.PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Cluster",
    "Job",
    "JobLoadError",
    "LostSlotsSkipped",
    "MapperIdReused",
    "SlotsLost",
    "__version__",
    "agg",
    "connect",
    "load_job",
    "windows",
]
