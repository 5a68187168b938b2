"""What the Spark tier needs before PySpark is imported: the defaults of ``smr spark-feed``,
its user errors, and the one-line error for a machine without the ``spark`` extra.

The engine, the CLI and the client install without PySpark (``pip install smr-ring``); the
Spark tier needs ``pip install 'smr-ring[spark]'``. The CLI reads its options' defaults from
here, so ``smr --help`` and every other command work without PySpark, and ``smr spark-feed``
says in one line what to install (exit 2).
"""

from __future__ import annotations

from typing import Final

# Local mode with up to 4 attempts per task (plain local[N] never retries a task).
MASTER_DEFAULT: Final = "local[*,4]"
MAX_FILES_PER_TRIGGER_DEFAULT: Final = 4
INSTALL_HINT: Final = "pip install 'smr-ring[spark]'"


class SparkFeedError(Exception):
    """Spark cannot run the feed; the message says what to do."""


class SparkMissing(ImportError):
    """PySpark (or what the Spark tier needs beside it) is not installed; the message says
    how to install it."""

    def __init__(self, module: str) -> None:
        super().__init__(
            f"the Spark tier needs {module}, which is not installed: {INSTALL_HINT}",
            name=module,
        )
