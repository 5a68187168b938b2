"""The start of a node process (:func:`smr.node.loop.serve`, steps 1 and 2): the spec and
the job read, the output and the sockets opened, the state restored from the data directory
(if any) and the core built on it. Every failure is one actionable line, and the process
exits with code 2.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from smr.api import Job, load_job
from smr.native import keep_slots_compact
from smr.node.core import NodeCore
from smr.node.disk import DiskError, DiskState, Restored
from smr.node.settings import NodeSettings
from smr.output.files import OutputSink, output_path
from smr.output.table import TableSink
from smr.ring.ids import NodeId
from smr.spec.model import ClusterSpec, NodeSpec
from smr.spec.parse import read_spec
from smr.transport.netfilter import FilteredLinks
from smr.windows import refuse_in_cluster

if TYPE_CHECKING:
    from smr.transport.security import Keys
    from smr.transport.zeromq import Inbox, Publisher, ZmqNodeLinks

log = logging.getLogger("smr.node")


@dataclass
class Opened:
    """What a node process opens before it builds its core: the spec and the node's own
    entry, the job, the output and the sockets (the inbox, the output's publisher, the links
    to its peers; closed together, and the transport's security with them)."""

    spec: ClusterSpec
    me: NodeSpec
    job: Job
    output: OutputSink
    keys: Keys | None
    inbox: Inbox
    publisher: Publisher
    zmq_links: ZmqNodeLinks

    def close_sockets(self) -> None:
        from smr.transport.zeromq import stop_security

        self.inbox.close()
        self.publisher.close()
        self.zmq_links.close()
        stop_security()


def open_node(cluster_dir: Path, node_id: str, newcomer: NodeSpec | None) -> Opened | None:
    """Step 1 of ``smr.node.loop.serve``: None (logged in one actionable line) if the node
    cannot start."""
    from smr.transport.zeromq import Inbox, Publisher, ZmqNodeLinks, use_keys_of

    try:
        spec = read_spec(cluster_dir)
        if newcomer is not None and node_id not in {node.id for node in spec.nodes}:
            spec.nodes.append(newcomer)
        me = spec.node(node_id)
        table = spec.output_table()
        job = refuse_in_cluster(load_job(spec.job), table=table is not None)
        # A lone count or sum keeps master's keys in compiled tables (before a restore
        # makes the first store).
        keep_slots_compact(
            None if job.aggregation is None or job.windowed else job.aggregation.compact_field
        )
        # A cluster with keys (DIR/keys, or $SMR_KEYS): the inbox and the output accept only
        # its clients, and this node reaches its peers as one.
        keys = use_keys_of(cluster_dir)
        output_file = output_path(cluster_dir / "output", node_id)
        inbox = Inbox(me.bind_addr)
        publisher = Publisher(me.pub_bind_addr)
    except Exception as error:  # every start-up failure is a one-line, actionable error
        log.error("cannot start: %s", error)
        return None
    output = OutputSink(
        node_id,
        output_file,
        publisher.publish,
        None if table is None else TableSink(table),
    )
    return Opened(spec, me, job, output, keys, inbox, publisher, ZmqNodeLinks(inbox))


def build_core(
    opened: Opened, node_id: str, join_after_start_ms: int | None
) -> tuple[NodeCore, FilteredLinks, DiskState | None] | None:
    """Step 2 of ``smr.node.loop.serve``: the core, its links and its disk; None (logged) if
    the state on disk cannot be restored or started."""
    spec = opened.spec
    links = FilteredLinks(opened.zmq_links)
    disk, restored = None, None
    data_dir = spec.data_dir()
    if data_dir is not None:
        disk = DiskState(data_dir / node_id, spec.incarnation)
        try:
            restored = disk.restore()
        except DiskError as error:
            log.error("cannot start: %s", error)
            return None
    settings = NodeSettings(
        replication=spec.replication,
        checkpoint_interval_ms=spec.checkpoint_interval_ms,
        rejoin_after_fence_ms=spec.rejoin_after_fence_ms(),
        apply_rate_cap_per_s=spec.apply_rate_cap_per_s(),
        balance_above=spec.balance_above(),
        join_after_start_ms=join_after_start_ms,
        mapper_lease_ms=spec.mapper_lease_ms(),
        restart_left_out=spec.restart_left_out(),
    )
    core = NodeCore(
        NodeId(node_id),
        opened.job,
        spec.initial_view() if restored is None else restored.view,
        spec.slot_bits,
        links,
        opened.output,
        settings=settings,
        store=None if restored is None else restored.store,
        restored_from_crash=restored is not None and not restored.stopped,
    )
    core.disk = disk
    if disk is not None and not start_disk(core, disk, restored):
        return None
    return core, links, disk


def start_disk(core: NodeCore, disk: DiskState, restored: Restored | None) -> bool:
    """Serve the restored state on (its checkpoints go on in its log), saying what was
    restored; or, with nothing restored, write a first generation at once, so that a node
    without one lost it (``smr.cluster.local.state_missing``). False (logged) if it cannot."""
    own_range = core.ring.range_of(core.node_id)
    if restored is None:
        try:
            disk.write_snapshot(core.store, core.view, own_range)
        except OSError as error:
            log.error("cannot start: cannot write the state to %s: %s", disk.directory, error)
            return False
        return True
    disk.serving(own_range)
    log.info(
        "restored %d keys from %s (generation %d and %d checkpoint records) in %.2f s",
        restored.keys,
        disk.directory,
        restored.generation,
        restored.checkpoints,
        restored.seconds,
    )
    if disk.unverified:
        log.warning(
            "%s was written before state files had manifests: restored unchecked (a file "
            "cut or removed there cannot be seen); its first checkpoint writes a "
            "generation with a manifest",
            disk.directory,
        )
    return True
