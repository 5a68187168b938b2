"""A combining feed is resumed only when its combined rows would carry the same contents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smr.feed.run import FeedNotResumable, _owners, check_combine_resumable
from smr.ring.hashing import even_tokens
from smr.ring.ids import Incarnation, NodeId
from smr.ring.view import Member, Status, View


def _view(*names: str) -> View:
    tokens = even_tokens(len(names), 8)
    return View(
        Member(NodeId(n), Incarnation(1), f"tcp://{n}", t, "", Status.UP, 1)
        for n, t in zip(names, tokens, strict=True)
    )


def test_a_first_run_of_a_combining_feed_passes(tmp_path: Path) -> None:
    check_combine_resumable(tmp_path / "feed-x.json", _view("a", "b"))


def test_a_rerun_under_the_same_unchanged_owners_passes(tmp_path: Path) -> None:
    record = tmp_path / "feed-x.json"
    view = _view("a", "b")
    record.write_text(json.dumps({"owners": _owners(view), "ring_changed": False}))
    check_combine_resumable(record, view)


@pytest.mark.parametrize("changed_during_the_run", [False, True])
def test_a_rerun_after_the_owners_changed_is_refused_saying_what_to_do(
    tmp_path: Path, changed_during_the_run: bool
) -> None:
    record = tmp_path / "feed-x.json"
    before = _view("a", "b", "c")
    now = before if changed_during_the_run else _view("a", "b")
    record.write_text(
        json.dumps({"owners": _owners(before), "ring_changed": changed_during_the_run})
    )
    with pytest.raises(FeedNotResumable, match="--no-combine"):
        check_combine_resumable(record, now)
