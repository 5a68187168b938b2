"""The ``smr`` command line: the entry point and the root command group (``root``), which
imports a command's module only when that command runs; beside it, one module per command
group (``data``: feed, query, dump, status, recover, tail; ``spark``, ``cluster``, ``ring``,
``autoscale``, ``faults``, ``node``, ``top``, ``keys``, ``output``, ``init``), the options they
share and the user errors (``errors``). May import: any package of ``smr`` below it.

``smr --version`` and ``smr COMMAND`` pay for the modules of that one command (``smr query``
does not import the autoscaler, Spark's setup or the fault tooling), so a short command
starts in a fraction of a second. ``smr --help`` and the reference pages load every
command, to print each one's summary.

``smr.cli.main`` is ``smr.cli.root.main``, loaded on first use: the console script of an
install made before the entry point moved to ``smr.cli.root`` still finds it here. This
file imports no module of ``smr.cli``, which all run it first.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    if name != "main":
        raise AttributeError(f"module 'smr.cli' has no attribute {name!r}")
    return importlib.import_module("smr.cli.root").main
