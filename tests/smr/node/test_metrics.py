"""The node's metrics from a status snapshot (smr.node.metrics): Prometheus' naming rules, one
sample per status figure, nothing made up for what a status lacks, and a scrape of a stuck
loop answered from the last snapshot."""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from smr.node import metrics
from smr.node.metrics import COUNTERS, GAUGES, StatusCollector, families

STATUS: dict[str, Any] = {
    "node": "n1",
    "role": "serving",
    "zone": "rack-a",
    **{key: 7 for _, key, _ in COUNTERS},
    **{key: 3 for _, key, _ in GAUGES},
    "apply_seconds": 1.5,
    "takeovers": 2,
    "takeover_seconds": 0.25,
    "not_owner": 4,
    "batches_refused_offline": 5,
    "batches_refused_moving": 6,
    "moves_given": 1,
}


def exposition(collector: Any) -> dict[str, Any]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


class Fixed:
    def __init__(self, status: dict[str, Any]) -> None:
        self.status = status

    def collect(self) -> Any:
        return families(self.status, 0.0, 0.0)


def test_every_figure_is_one_sample_named_by_prometheus_rules() -> None:
    by_name = exposition(Fixed(STATUS))
    for family in by_name.values():
        assert family.name.startswith("smr_")
        for sample in family.samples:
            assert sample.labels["node"] == "n1"
            if family.type == "counter":
                assert sample.name.endswith("_total")
    assert by_name["smr_apply_seconds"].type == "counter"
    assert by_name["smr_apply_seconds"].samples[0].value == 1.5
    refused = {s.labels["reason"]: s.value for s in by_name["smr_batches_refused"].samples}
    assert refused == {"not_owner": 4, "offline": 5, "moving": 6}
    moves = {s.labels["outcome"]: s.value for s in by_name["smr_moves"].samples}
    assert moves == {"given": 1}
    takeovers = {s.name: s.value for s in by_name["smr_takeover_duration_seconds"].samples}
    assert takeovers == {
        "smr_takeover_duration_seconds_count": 2,
        "smr_takeover_duration_seconds_sum": 0.25,
    }
    for name, _, _ in GAUGES:
        assert by_name[name].type == "gauge"
    assert by_name["smr_node_info"].samples[0].labels["zone"] == "rack-a"


def test_a_figure_the_status_lacks_is_left_out_not_zero() -> None:
    status = {k: v for k, v in STATUS.items() if k not in ("keys", "checkpoint_bytes_sent")}
    status["checkpoint_age_s"] = None  # no checkpoint yet
    by_name = exposition(Fixed(status))
    assert "smr_keys" not in by_name
    assert "smr_checkpoint_sent_bytes" not in by_name
    assert "smr_checkpoint_age_seconds" not in by_name
    assert "smr_inbox_tuples" in by_name


def test_a_stuck_loop_is_scraped_from_the_last_status(monkeypatch: Any) -> None:
    monkeypatch.setattr(metrics, "STATUS_WAIT_S", 0.05)
    answers: list[concurrent.futures.Future[dict[str, Any]]] = []

    def status_on_loop() -> concurrent.futures.Future[dict[str, Any]]:
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        if not answers:
            future.set_result(STATUS)  # the first scrape finds the loop answering
        answers.append(future)
        return future

    read_at = time.monotonic()
    collector = StatusCollector(status_on_loop, lambda: read_at)
    assert exposition(collector)["smr_status_age_seconds"].samples[0].value < 0.05
    time.sleep(0.1)
    stuck = exposition(collector)  # this one's status never comes
    assert len(answers) == 2
    exposition(collector)  # the loop still holds: the request already queued is waited on
    assert len(answers) == 2
    assert stuck["smr_tuples_applied"].samples[0].value == 7
    assert stuck["smr_status_age_seconds"].samples[0].value >= 0.1
    assert stuck["smr_loop_stalled_seconds"].samples[0].value >= 0.15


def test_a_loop_that_never_answered_gives_no_node_metrics(monkeypatch: Any) -> None:
    monkeypatch.setattr(metrics, "STATUS_WAIT_S", 0.01)
    collector = StatusCollector(concurrent.futures.Future, time.monotonic)
    assert exposition(collector) == {}
