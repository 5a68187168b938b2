"""A node's Prometheus endpoint: what ``status`` reports, as metrics named by Prometheus'
conventions (``_total`` counters, ``_seconds``, ``_bytes``), each labelled with the node.

The apply loop pays nothing for it: no metric is updated on the hot path. A scrape asks the
loop for its status (``status_on_loop``) and turns that one snapshot into metric families
(``families``, a pure function). A loop that does not answer within
``STATUS_WAIT_S`` (a reduce call that does not return) still gets scraped: the last
snapshot is served, with ``smr_status_age_seconds`` saying how old it is and
``smr_loop_stalled_seconds`` how long the loop has read nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

STATUS_WAIT_S: Final = 1.0
"""How long a scrape waits for the loop's fresh status before serving the last one."""

COUNTERS: Final[tuple[tuple[str, str, str], ...]] = (
    # (metric name without _total, status key, help)
    ("smr_tuples_applied", "tuples_applied", "Tuples applied to the state as their primary."),
    ("smr_tuples_duplicate", "tuples_duplicate", "Tuples dropped as repeats (at or below hwm)."),
    ("smr_tuples_failed", "tuples_failed", "Tuples whose reduce raised; the state is unchanged."),
    ("smr_tuples_replayed", "tuples_replayed", "Backed-up tuples replayed at takeovers."),
    ("smr_batches_applied", "batches", "Tuple batches applied as their primary."),
    ("smr_batches_resent_to_us", "batches_resent_to_us", "Batches a mapper sent again."),
    ("smr_bad_frames", "bad_frames", "Messages refused as malformed."),
    ("smr_handler_errors", "handler_errors", "Messages whose handler raised (logged)."),
    ("smr_checkpoints", "checkpoints", "Checkpoints taken as a primary."),
    ("smr_checkpoints_early", "checkpoints_early", "Early checkpoints a full backup asked for."),
    ("smr_checkpoint_sent_bytes", "checkpoint_bytes_sent", "Checkpoint bytes sent to replicas."),
    ("smr_checkpoints_applied", "checkpoints_applied", "Checkpoints applied as a secondary."),
    ("smr_backup_batches", "backup_batches", "Batches kept as a secondary (peer backup)."),
    ("smr_snapshots_sent", "snapshots_sent", "Full state snapshots sent to a replica."),
    ("smr_snapshots_received", "snapshots_received", "Full state snapshots received."),
    ("smr_takeovers", "takeovers", "Ranges of dead nodes this node took over."),
    ("smr_slots_lost", "slots_lost", "Slots found with no surviving copy (loss reported)."),
    ("smr_slots_restored", "slots_restored", "Lost slots restored from a fenced node's copy."),
    ("smr_views_refused", "views_refused", "Views refused as unsafe to apply."),
    ("smr_reads_unleased", "reads_unleased", "Reads refused: the read lease had run out."),
    ("smr_peer_sent_bytes", "peer_bytes_sent", "Bytes of peer messages handed to links."),
    ("smr_peer_messages_dropped", "peer_messages_dropped", "Peer messages dropped (link full)."),
    ("smr_replies_dropped", "replies_dropped", "Replies that could not be sent."),
    ("smr_fenced", "fenced", "Times this node was declared dead while alive."),
    ("smr_suspicions", "suspicions", "Suspicions of a peer this node began."),
    ("smr_handshakes_refused", "handshakes_refused", "Connections refused: key not accepted."),
    ("smr_apply_seconds", "apply_seconds", "Seconds spent in apply turns."),
    ("smr_mappers_retired", "mappers_retired_total", "Finished mappers retired after a lease."),
    ("smr_retired_hwms_dropped", "retired_hwms_dropped", "Hwm entries retirements dropped."),
    ("smr_batches_of_finished_mappers", "batches_of_finished_mappers", "Resends acked."),
    ("smr_disk_errors", "disk_errors", "Writes of the state to disk that failed."),
    ("smr_disk_snapshots_written", "disk_snapshots_written", "Full snapshots written to disk."),
    ("smr_disk_checkpoints_written", "disk_checkpoints_written", "Checkpoints written to disk."),
    ("smr_checkpoints_held", "checkpoints_held", "Checkpoints held: the output table failed."),
    ("smr_output_records", "output_records", "Records emitted to the output files."),
    ("smr_output_table_records", "output_table_records", "Records the output table took."),
    ("smr_output_table_repeats", "output_table_repeats", "Replayed records the table dropped."),
    ("smr_output_table_errors", "output_table_errors", "Output table commits that failed."),
)
"""The plain counters: one status key each (``apply_seconds`` is a float)."""

REFUSALS: Final[tuple[tuple[str, str], ...]] = (
    ("not_owner", "not_owner"),
    ("offline", "batches_refused_offline"),
    ("moving", "batches_refused_moving"),
    ("backup_full", "backup_refused_full"),
    ("mapper_finished", "batches_refused_finished"),
)
"""``smr_batches_refused_total`` by ``reason``: (label, status key)."""

MOVES: Final[tuple[tuple[str, str], ...]] = (
    ("given", "moves_given"),
    ("received", "moves_received"),
    ("called_off", "moves_called_off"),
)
"""``smr_moves_total`` by ``outcome``: (label, status key)."""

GAUGES: Final[tuple[tuple[str, str, str], ...]] = (
    ("smr_keys", "keys", "Keys in the state this node serves."),
    ("smr_inbox_tuples", "inbox_tuples", "Tuples received and not yet applied."),
    ("smr_inbox_peak_tuples", "inbox_peak", "The most tuples the inbox has held."),
    ("smr_slots_owned", "slots_owned", "Slots of the ring this node is primary for."),
    ("smr_slots_under_replicated", "under_replicated_slots", "Own slots with < r copies."),
    ("smr_slots_offline", "offline_slots", "Slots lost and not yet accepted or restored."),
    ("smr_backup_bytes", "backup_bytes", "Raw batch bytes held for primaries."),
    ("smr_hwm_entries", "hwm_entries", "(mapper, slot) high-water marks held (dedup memory)."),
    ("smr_mappers_finishing", "mappers_finishing", "Finished mappers whose lease runs."),
    ("smr_mapper_notices_ignored", "mapper_notices_ignored", "Finish notices past the cap."),
    ("smr_mappers_retired_held", "mappers_retired", "Retired mappers' last seqs held."),
    ("smr_disk_log_bytes", "disk_log_bytes", "Bytes of checkpoints on disk since the snapshot."),
    ("smr_disk_snapshot_bytes", "disk_snapshot_bytes", "Bytes of the snapshot on disk."),
    ("smr_disk_snapshot_seconds_max", "disk_snapshot_s_max", "Longest snapshot write."),
    ("smr_view_epoch", "epoch", "The epoch of this node's view of the ring."),
    ("smr_apply_tuples_per_second", "tuples_per_s", "Tuples applied per second, decayed."),
    ("smr_utilization_ratio", "utilization", "Share of the node's capacity in use, 0 to 1."),
    ("smr_checkpoint_age_seconds", "checkpoint_age_s", "Seconds since the last checkpoint."),
    ("smr_snapshot_stall_seconds_max", "snapshot_stall_s_max", "Longest loop hold by a chunk."),
    ("smr_moves_under_way", "moves_under_way", "Range moves this node takes part in now."),
    ("smr_output_table_backlog", "output_table_backlog", "Records not committed to the table."),
)
"""The plain gauges: (name, status key, help)."""


def families(status: dict[str, Any], status_age_s: float, stalled_s: float) -> list[Metric]:
    """The metric families of one status snapshot (``Control.status``), labelled with the
    node; ``status_age_s`` is how old the snapshot is, ``stalled_s`` how long the loop has
    read nothing. Keys a status lacks are left out, never reported as zero."""
    node = str(status["node"])
    out: list[Metric] = []
    for name, key, help_text in COUNTERS:
        if key in status:
            counter = CounterMetricFamily(name, help_text, labels=["node"])
            counter.add_metric([node], float(status[key]))
            out.append(counter)
    for family, label, table, help_text in (
        ("smr_batches_refused", "reason", REFUSALS, "Tuple batches refused, by reason."),
        ("smr_moves", "outcome", MOVES, "Range moves, by how they ended here."),
    ):
        labelled = CounterMetricFamily(family, help_text, labels=["node", label])
        for value, key in table:
            if key in status:
                labelled.add_metric([node, value], float(status[key]))
        if labelled.samples:
            out.append(labelled)
    for name, key, help_text in GAUGES:
        if status.get(key) is not None:
            gauge = GaugeMetricFamily(name, help_text, labels=["node"])
            gauge.add_metric([node], float(status[key]))
            out.append(gauge)
    if "takeovers" in status and "takeover_seconds" in status:
        takeovers = SummaryMetricFamily(
            "smr_takeover_duration_seconds",
            "How long takeovers took, from death declared to serving.",
            labels=["node"],
        )
        takeovers.add_metric([node], int(status["takeovers"]), float(status["takeover_seconds"]))
        out.append(takeovers)
    info = GaugeMetricFamily(
        "smr_node_info", "Always 1: the node's role and zone.", labels=["node", "role", "zone"]
    )
    info.add_metric([node, str(status.get("role", "")), str(status.get("zone", ""))], 1.0)
    out.append(info)
    for name, seconds, help_text in (
        ("smr_status_age_seconds", status_age_s, "Age of the status these metrics come from."),
        ("smr_loop_stalled_seconds", stalled_s, "Seconds since the loop last read a message."),
    ):
        age = GaugeMetricFamily(name, help_text, labels=["node"])
        age.add_metric([node], seconds)
        out.append(age)
    return out


class StatusCollector(Collector):
    """Collects a node's metrics at scrape time, from the HTTP server's thread.

    Guarantees: a scrape never blocks the apply loop (it asks for a status between two
    turns) and always answers within about ``STATUS_WAIT_S``, with the last snapshot if the
    loop is stuck.
    """

    def __init__(
        self,
        status_on_loop: Callable[[], concurrent.futures.Future[dict[str, Any]]],
        read_at: Callable[[], float],
    ) -> None:
        self._status_on_loop = status_on_loop
        self._read_at = read_at
        self._lock = threading.Lock()
        self._last: dict[str, Any] | None = None
        self._pending: concurrent.futures.Future[dict[str, Any]] | None = None
        self._last_at = 0.0

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # one scrape at a time: they share the last snapshot
            # At most one status request waits on the loop: a scrape of a held loop waits on
            # the request already queued instead of queueing one more every scrape.
            if self._pending is None or self._pending.done():
                self._pending = self._status_on_loop()
            try:
                self._last = self._pending.result(timeout=STATUS_WAIT_S)
                self._last_at = time.monotonic()
            except concurrent.futures.TimeoutError:
                log.warning("metrics: the loop did not answer in %.1f s", STATUS_WAIT_S)
            except Exception:  # a scrape must not take the node's metrics away for good
                log.exception("metrics: the status failed")
            if self._last is None:
                return
            now = time.monotonic()
            yield from families(self._last, now - self._last_at, max(0.0, now - self._read_at()))


def serve_metrics(
    host: str,
    port: int,
    status: Callable[[], dict[str, Any]],
    read_at: Callable[[], float],
    loop: asyncio.AbstractEventLoop,
) -> int:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread (port 0: any free port);
    returns the port. ``status`` runs on ``loop``, between two of its turns."""

    def status_on_loop() -> concurrent.futures.Future[dict[str, Any]]:
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(status())
                except Exception as error:
                    future.set_exception(error)

        loop.call_soon_threadsafe(run)
        return future

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(status_on_loop, read_at))
    ProcessCollector(registry=registry)
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return int(server.server_port)
