"""A Spark checkpoint resumes only into the cluster incarnation it fed."""

from __future__ import annotations

from pathlib import Path

import pytest

from smr.spark_checkpoint import StaleCheckpoint, claim, fed_incarnation, record


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
