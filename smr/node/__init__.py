"""The reducer node: one process that owns a range of slots and keeps their state.

:class:`NodeCore` (:mod:`smr.node.core`) is the node's logic with no I/O, split by role into
the modules of this package; :func:`serve` (:mod:`smr.node.loop`) is the process around it.
"""

from smr.node.core import TICK_MS, NodeCore, Timer
from smr.node.loop import serve
from smr.node.settings import NodeCounters, NodeSettings

__all__ = ["TICK_MS", "NodeCore", "NodeCounters", "NodeSettings", "Timer", "serve"]
