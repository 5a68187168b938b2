"""The cluster spec (``cluster.json``): the records (:mod:`smr.spec.model`) and reading and
writing them (:mod:`smr.spec.parse`), re-exported here. Nodes, clients and launchers all read
it, so it sits below all three (docs/design/architecture.md#deployment).

May import: ``smr.api``, ``smr.output`` (the table target).
"""

from __future__ import annotations

from smr.spec.model import (
    APPLY_RATE_CAP_KEY,
    BALANCE_ABOVE_KEY,
    CHECKPOINT_INTERVAL_MS_DEFAULT,
    CLUSTER_FILE,
    CLUSTER_FORMAT,
    DATA_DIR_KEY,
    MAPPER_LEASE_KEY,
    MAPPER_LEASE_MS_DEFAULT,
    METRICS_PORT_DEFAULT,
    NEWCOMER_PORT_DEFAULT,
    OUTPUT_TABLE_KEY,
    REJOIN_AFTER_FENCE_KEY,
    REJOIN_AFTER_FENCE_MS_DEFAULT,
    RESTART_LEFT_OUT_KEY,
    ClusterError,
    ClusterSpec,
    NodeSpec,
    newcomer,
)
from smr.spec.parse import (
    feeder_job,
    parse_spec,
    read_spec,
    spec_to_json,
    split_host_port,
    write_spec,
)

__all__ = [
    "APPLY_RATE_CAP_KEY",
    "BALANCE_ABOVE_KEY",
    "CHECKPOINT_INTERVAL_MS_DEFAULT",
    "CLUSTER_FILE",
    "CLUSTER_FORMAT",
    "DATA_DIR_KEY",
    "MAPPER_LEASE_KEY",
    "MAPPER_LEASE_MS_DEFAULT",
    "METRICS_PORT_DEFAULT",
    "NEWCOMER_PORT_DEFAULT",
    "OUTPUT_TABLE_KEY",
    "REJOIN_AFTER_FENCE_KEY",
    "REJOIN_AFTER_FENCE_MS_DEFAULT",
    "RESTART_LEFT_OUT_KEY",
    "ClusterError",
    "ClusterSpec",
    "NodeSpec",
    "feeder_job",
    "newcomer",
    "parse_spec",
    "read_spec",
    "spec_to_json",
    "split_host_port",
    "write_spec",
]
