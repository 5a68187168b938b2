"""The reducer node: one process that owns a range of slots and keeps their state.

:class:`NodeCore` (:mod:`smr.node.core`) is the node's logic with no I/O, split by role into
the modules of this package; :func:`serve` (:mod:`smr.node.loop`) is the process around it.

Each name here is imported from its module when first used (a module ``__getattr__``), so
importing one module of the package (``smr.node.disk``, ``smr.node.settings``) does not load
the core, its roles and the loop: the package imports nothing of its own.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from smr.node.core import TICK_MS, NodeCore, Timer
    from smr.node.loop import serve
    from smr.node.settings import NodeCounters, NodeSettings

# Each public name and the module it comes from.
_HOMES: Final = {
    "TICK_MS": "smr.node.core",
    "NodeCore": "smr.node.core",
    "Timer": "smr.node.core",
    "serve": "smr.node.loop",
    "NodeCounters": "smr.node.settings",
    "NodeSettings": "smr.node.settings",
}

__all__ = ["TICK_MS", "NodeCore", "NodeCounters", "NodeSettings", "Timer", "serve"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'smr.node' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: the next use is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
