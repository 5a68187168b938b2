"""smr: a fault-tolerant, stateful streaming MapReduce engine.

The user API is :class:`Job`; see ``smr.api`` for the contract of ``map``, ``reduce`` and
``combine`` and their bulk forms (``map_batch``, ``reduce_batch``), ``smr.agg`` for the
built-in aggregators and ``smr.windows`` for event-time windows. A program feeds a cluster,
reads its state and follows its output through :func:`connect` (``smr.connection``;
``smr.aio`` for asyncio); ``smr.testing`` runs a job in-process, for a job's own tests.

The errors a program meets through :func:`connect` are exported here too (each says what it
means in its docstring, and the programs guide lists them): :class:`ClusterError` (no such
cluster, or none of its nodes answers), :class:`Unreachable`, :class:`DeliveryError`,
:class:`EmitError`, :class:`MapperIdReused`, :class:`HistoryUnknown`, :class:`SlotsLost`
(with the warning :class:`LostSlotsSkipped`), :class:`KeysError` and :class:`JobLoadError`.

``import smr`` is light: each name is imported from its module when first used (a module
``__getattr__``), so a program or a command that needs only ``Job`` does not load the
client, its sockets and the aggregators. The names' types are in the stub beside this file
(``__init__.pyi``): this module names their homes as strings only, so no module of ``smr``,
which all run this file first, is imported back from it.

``__version__`` is the installed distribution's version (semantic versioning; the changes
of each are in ``CHANGELOG.md``), the one ``smr --version`` prints.
"""

from __future__ import annotations

import importlib
from typing import Any, Final

# The installed distribution whose version ``__version__`` is.
DISTRIBUTION: Final = "smr-ring"

# Each public name and the module it comes from.
_HOMES: Final = {
    "Job": "smr.api",
    "JobLoadError": "smr.api",
    "load_job": "smr.api",
    "Cluster": "smr.connection",
    "connect": "smr.connection",
    "DeliveryError": "smr.connection",
    "EmitError": "smr.connection",
    "HistoryUnknown": "smr.connection",
    "MapperIdReused": "smr.connection",
    "LostSlotsSkipped": "smr.connection",
    "SlotsLost": "smr.connection",
    "Unreachable": "smr.connection",
    "ClusterError": "smr.spec.model",
    "KeysError": "smr.transport.security",
}

__all__ = [
    "Cluster",
    "ClusterError",
    "DeliveryError",
    "EmitError",
    "HistoryUnknown",
    "Job",
    "JobLoadError",
    "KeysError",
    "LostSlotsSkipped",
    "MapperIdReused",
    "SlotsLost",
    "Unreachable",
    "__version__",
    "agg",
    "connect",
    "load_job",
    "windows",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib import metadata

        try:
            version = metadata.version(DISTRIBUTION)
        except metadata.PackageNotFoundError:  # a source tree never installed
            version = "0+unknown"
        globals()["__version__"] = version
        return version
    if name in ("agg", "windows"):
        return importlib.import_module(f"smr.{name}")
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'smr' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: the next use is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
