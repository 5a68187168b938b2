"""A Spark checkpoint resumes only into the cluster incarnation it fed."""

from __future__ import annotations

from pathlib import Path

import pytest

from smr.spark.checkpoint import StaleCheckpoint, claim, fed_incarnation, record


def checkpoint_with_progress(tmp_path: Path, fed: str | None) -> Path:
    checkpoint = tmp_path / "spark-checkpoints" / "smr-wordcount"
    (checkpoint / "commits").mkdir(parents=True)
    (checkpoint / "commits" / "0").write_text("v1\n")
    record(checkpoint, fed)
    return checkpoint


def test_a_new_checkpoint_is_claimed_by_any_incarnation(tmp_path: Path) -> None:
    assert claim(tmp_path / "absent", "life2", tmp_path, from_start=False) is None


def test_a_checkpoint_of_this_incarnation_resumes(tmp_path: Path) -> None:
    checkpoint = checkpoint_with_progress(tmp_path, "life1")
    assert claim(checkpoint, "life1", tmp_path, from_start=False) is None
    assert (checkpoint / "commits" / "0").exists()


def test_a_checkpoint_of_an_older_incarnation_is_refused_saying_what_to_do(
    tmp_path: Path,
) -> None:
    checkpoint = checkpoint_with_progress(tmp_path, "life1")
    with pytest.raises(StaleCheckpoint, match=r"fed cluster incarnation life1.*--from-start"):
        claim(checkpoint, "life2", tmp_path, from_start=False)
    assert (checkpoint / "commits" / "0").exists()


def test_a_checkpoint_with_no_record_is_refused_by_a_cluster_with_an_incarnation(
    tmp_path: Path,
) -> None:
    checkpoint = checkpoint_with_progress(tmp_path, None)
    with pytest.raises(StaleCheckpoint, match="incarnation unknown"):
        claim(checkpoint, "life2", tmp_path, from_start=False)


def test_from_start_moves_the_old_checkpoint_aside_with_its_record(tmp_path: Path) -> None:
    checkpoint = checkpoint_with_progress(tmp_path, "life1")
    line = claim(checkpoint, "life2", tmp_path, from_start=True)
    aside = checkpoint.with_name("smr-wordcount.old-life1")
    assert line is not None and str(aside) in line
    assert not checkpoint.exists() and fed_incarnation(checkpoint) is None
    assert (aside / "commits" / "0").exists() and fed_incarnation(aside) == "life1"
    record(checkpoint, "life2")
    assert fed_incarnation(checkpoint) == "life2"


def test_with_no_incarnation_on_either_side_an_empty_ring_refuses_a_checkpoint_with_progress(
    tmp_path: Path,
) -> None:
    # A cluster spec written by hand (the compose cluster's) names no incarnation: a ring
    # started again, empty, is told by its emptiness.
    checkpoint = checkpoint_with_progress(tmp_path, None)
    with pytest.raises(StaleCheckpoint, match=r"the ring holds no key.*--from-start"):
        claim(checkpoint, None, tmp_path, from_start=False, ring_keys=0)
    assert claim(checkpoint, None, tmp_path, from_start=False, ring_keys=12) is None
    assert claim(checkpoint, None, tmp_path, from_start=False, ring_keys=None) is None
    line = claim(checkpoint, None, tmp_path, from_start=True, ring_keys=0)
    assert line is not None and not checkpoint.exists()  # moved aside: feeds from the start
