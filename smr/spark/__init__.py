"""Spark as the mapper tier: a Structured Streaming query runs the job's ``map`` and emits
into the ring (docs/design/architecture.md#spark). ``query.py`` is the only module that
imports pyspark; ``partitions.py`` emits one partition of a micro-batch; ``setup.py`` and
``checkpoint.py`` load without pyspark, for ``smr spark-feed``'s checks.

The public names below are imported from their module when first used (a module
``__getattr__``), so ``import smr.spark`` needs no pyspark; using one of them without
pyspark raises :class:`smr.spark.setup.SparkMissing`, saying what to install. Their
types are in the stub beside this file (``__init__.pyi``): this module names their homes as
strings only, so ``smr.spark.query``, which runs this file first, is not imported back.

May import: ``smr.mapper``, ``smr.client``, ``smr.spec``, ``smr.api``, ``smr.transport``.
"""

from __future__ import annotations

import importlib
from typing import Any, Final

# Each public name and the module it comes from.
_PUBLIC: Final = {
    "BatchReport": "smr.spark.query",
    "FeedSettings": "smr.spark.partitions",
    "SparkQueryError": "smr.spark.query",
    "await_query": "smr.spark.query",
    "check_input_dir": "smr.spark.query",
    "check_java": "smr.spark.query",
    "check_workers": "smr.spark.query",
    "emit": "smr.spark.query",
    "feed_settings": "smr.spark.query",
    "java_major_version": "smr.spark.query",
    "parse_socket_ref": "smr.spark.query",
    "root_cause": "smr.spark.query",
    "session": "smr.spark.query",
    "socket_lines": "smr.spark.query",
    "text_files": "smr.spark.query",
}

__all__ = [
    "BatchReport",
    "FeedSettings",
    "SparkQueryError",
    "await_query",
    "check_input_dir",
    "check_java",
    "check_workers",
    "emit",
    "feed_settings",
    "java_major_version",
    "parse_socket_ref",
    "root_cause",
    "session",
    "socket_lines",
    "text_files",
]


def __getattr__(name: str) -> Any:
    home = _PUBLIC.get(name)
    if home is None:
        raise AttributeError(f"module 'smr.spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: the next use is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
