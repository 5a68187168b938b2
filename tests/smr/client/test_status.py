"""``smr status``'s table fits the terminal and keeps reduce errors and bad frames apart."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from smr.cli import status_view
from smr.client import status
from smr.ring.ids import NodeId
from smr.ring.view import Member, Status, View

UP: dict[str, Any] = {
    "node": "n0",
    "state": "up",
    "token": 12288,
    "range_share": 0.5,
    "keys": 123_456,
    "tuples_per_s": 250_000.0,
    "tuples_applied": 12_345_678,
    "tuples_failed": 7,
    "bad_frames": 300,
    "under_replicated_slots": 4096,
}
DOWN: dict[str, Any] = {
    "node": "n1",
    "state": "unreachable",
    "addr": "tcp://127.0.0.1:9",
    "pid": 1,
    "error": "node at tcp://127.0.0.1:9 accepts no connection",
}


def _printed(width: int) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO())
    status_view.print_table([UP, DOWN], "smr cluster /tmp/some/cluster", console)
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [80, 60, 40])
def test_status_table_fits_the_terminal_width(width: int) -> None:
    lines = _printed(width)
    assert max(len(line) for line in lines) <= width
    assert not any("…" in line for line in lines), "\n".join(lines)


def test_status_shows_reduce_errors_and_bad_frames_in_columns_of_their_own() -> None:
    lines = _printed(80)
    header = " ".join(lines)
    assert "reduce" in header and "errors" in header and "frames" in header
    n0 = next(line.split() for line in lines if line.split()[:1] == ["n0"])
    assert "7" in n0 and "300" in n0 and "307" not in n0


def test_status_at_80_columns_leaves_out_the_least_useful_columns_and_says_so() -> None:
    lines = _printed(80)
    assert any(line.startswith("not shown at this width: ") for line in lines)
    assert any("n1" in line and "unreachable" in line for line in lines)


def test_unreachable_line_names_each_node_that_did_not_answer() -> None:
    assert status.unreachable_line([UP]) is None
    line = status.unreachable_line([UP, DOWN])
    assert line is not None
    assert "1 of 2 nodes unreachable" in line and "n1 (tcp://127.0.0.1:9)" in line


def test_refused_start_line_names_each_node_that_refused_to_start_and_why() -> None:
    assert status.refused_start_line([UP, DOWN]) is None
    why = "n1: /data/n1/log-1.smr holds 0 of 19 checkpoints; refusing to restore in part"
    line = status.refused_start_line([UP, {**DOWN, "refused_start": why}])
    assert line == f"smr: n1 refused to start: {why}"


def _report(stuck: bool, heard_ms_ago: int) -> dict[str, Any]:
    return {
        "busy": True,
        "stuck": stuck,
        "stalled_ms": 42_000,
        "inbox_tuples": 0,
        "applied_per_s": 0,
        "heard_ms_ago": heard_ms_ago,
    }


def test_a_silent_node_that_still_beats_shows_as_stuck_not_unreachable() -> None:
    rows = [{**UP, "peers": {"n1": _report(stuck=True, heard_ms_ago=90)}}, dict(DOWN)]
    status.heard_through_peers(rows)
    assert rows[1]["state"] == "stuck"
    line = status.unreachable_line(rows)
    assert line is not None and "n1 (stuck: it beats" in line and "42.0 s" in line


def test_a_stale_heartbeat_report_leaves_a_silent_node_unreachable() -> None:
    rows = [{**UP, "peers": {"n1": _report(stuck=True, heard_ms_ago=5000)}}, dict(DOWN)]
    status.heard_through_peers(rows)
    assert rows[1]["state"] == "unreachable"


def test_an_ordinary_heartbeat_left_by_a_node_killed_a_moment_ago_is_no_sign_of_life() -> None:
    report = {**_report(stuck=False, heard_ms_ago=40), "stalled_ms": 0}
    rows = [{**UP, "peers": {"n1": report}}, dict(DOWN)]
    status.heard_through_peers(rows)
    assert rows[1]["state"] == "unreachable"


def test_zones_line_names_the_ranges_the_newest_view_keeps_in_one_zone() -> None:
    older = {**UP, "epoch": [1, 4], "zone": "a", "one_zone_ranges": []}
    newer = {**UP, "node": "n2", "epoch": [1, 5], "zone": "a", "one_zone_ranges": ["n2"]}
    line = status.zones_line([older, newer, DOWN])
    assert line is not None
    assert line.startswith("smr: 1 ranges keep every copy in one zone: n2 (a);"), line
    assert status.zones_line([older, DOWN]) is None
    assert status.zones_line([DOWN]) is None


def _view(n0_status: Status, n0_incarnation: int = 1) -> View:
    return View(
        [
            Member(NodeId("n0"), n0_incarnation, "tcp://a", 0, "", n0_status, 3),
            Member(NodeId("n1"), 1, "tcp://b", 8192, "", Status.UP, 1),
        ]
    )


def _serving(node: str, incarnation: int = 1, role: str = "serving") -> dict[str, Any]:
    return {**UP, "node": node, "incarnation": incarnation, "role": role}


def test_a_node_that_answers_but_its_peers_declared_dead_shows_as_dead() -> None:
    # A partition: n0 cut off still answers and serves by its own view; n1 took it over.
    rows = [_serving("n0"), _serving("n1")]
    status.declared_dead(rows, _view(Status.DEAD))
    assert [row["role"] for row in rows] == ["dead", "serving"]
    assert status.dead_line(rows) == (
        "smr: declared dead by the other nodes, yet answering: n0 (cut off from them? the "
        "ring serves their slots elsewhere; each rejoins empty once it hears)"
    )
    console = Console(width=80, record=True, file=io.StringIO())
    status_view.print_table(rows, "smr cluster c", console)
    states = {line.split()[0]: line.split()[1] for line in console.export_text().splitlines()
              if line.split()[:1] in (["n0"], ["n1"])}  # fmt: skip
    assert states == {"n0": "dead", "n1": "serving"}


def test_a_node_back_as_a_new_incarnation_or_fenced_is_not_shown_dead() -> None:
    rejoined = [_serving("n0", incarnation=2, role="standby"), _serving("n1")]
    status.declared_dead(rejoined, _view(Status.DEAD, n0_incarnation=1))
    fenced = [_serving("n0", role="fenced"), _serving("n1")]
    status.declared_dead(fenced, _view(Status.DEAD))
    alive = [_serving("n0"), _serving("n1")]
    status.declared_dead(alive, _view(Status.UP))
    for rows in (rejoined, fenced, alive):
        assert "declared_dead" not in rows[0] and status.dead_line(rows) is None
    assert [rejoined[0]["role"], fenced[0]["role"], alive[0]["role"]] == [
        "standby",
        "fenced",
        "serving",
    ]
