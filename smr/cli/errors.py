"""The errors a command raises for a user's mistake: each is one line on standard error starting
with ``smr: error:`` and exit code 2, never a traceback. Imported when one is raised, so
that a short command does not load every module that defines one."""

from __future__ import annotations

from smr.api import JobLoadError
from smr.cli.scaffold import ScaffoldError
from smr.client.control import NodeRefused, NodeUnreachable
from smr.feed.records import InputError
from smr.feed.run import FeedNotResumable
from smr.mapper.channels import DeliveryError
from smr.spark import checkpoint as spark_checkpoint
from smr.spark.setup import (
    SparkFeedError,
    SparkMissing,
)
from smr.spec.model import ClusterError
from smr.transport.links import TransportError
from smr.transport.security import KeysError

USER_ERRORS = (
    spark_checkpoint.StaleCheckpoint,
    FeedNotResumable,
    SparkFeedError,
    SparkMissing,
    ScaffoldError,
    ClusterError,
    JobLoadError,
    NodeUnreachable,
    NodeRefused,
    DeliveryError,
    TransportError,
    KeysError,
    InputError,
    OSError,
    ValueError,
)
