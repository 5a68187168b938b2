"""A feed's mapper id names (cluster life, job, inputs): the same feed gets the same id."""

from __future__ import annotations

import os
from pathlib import Path

from smr.feed.run import feed_mapper_id


def book(tmp_path: Path, name: str = "book.txt", text: str = "the cat\n") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_same_cluster_job_and_inputs_give_the_same_mapper_id(tmp_path: Path) -> None:
    path = book(tmp_path)
    assert feed_mapper_id("life1", "jobs:wc", [path]) == feed_mapper_id("life1", "jobs:wc", [path])


def test_a_relative_path_names_the_same_input_as_its_absolute_path(tmp_path: Path) -> None:
    path = book(tmp_path)
    relative = os.path.relpath(path)
    assert feed_mapper_id("life1", "j:w", [relative]) == feed_mapper_id("life1", "j:w", [path])


def test_touching_an_input_gives_a_new_mapper_id(tmp_path: Path) -> None:
    path = book(tmp_path)
    before = feed_mapper_id("life1", "jobs:wc", [path])
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert feed_mapper_id("life1", "jobs:wc", [path]) != before


def test_a_changed_size_gives_a_new_mapper_id(tmp_path: Path) -> None:
    path = book(tmp_path)
    stat = os.stat(path)
    before = feed_mapper_id("life1", "jobs:wc", [path])
    Path(path).write_text("the cat sat\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert feed_mapper_id("life1", "jobs:wc", [path]) != before


def test_another_cluster_life_job_input_order_or_combine_batch_gives_a_new_mapper_id(
    tmp_path: Path,
) -> None:
    one, two = book(tmp_path, "one.txt"), book(tmp_path, "two.txt")
    base = feed_mapper_id("life1", "jobs:wc", [one, two])
    assert feed_mapper_id("life2", "jobs:wc", [one, two]) != base
    assert feed_mapper_id(None, "jobs:wc", [one, two]) != base
    assert feed_mapper_id("life1", "jobs:other", [one, two]) != base
    assert feed_mapper_id("life1", "jobs:wc", [two, one]) != base
    assert feed_mapper_id("life1", "jobs:wc", [one]) != base
    assert feed_mapper_id("life1", "jobs:wc", [one, two], combine_batch_size=1000) != base


def test_standard_input_gets_a_new_random_mapper_id_every_time(tmp_path: Path) -> None:
    assert feed_mapper_id("life1", "jobs:wc", ["-"]) != feed_mapper_id("life1", "jobs:wc", ["-"])
