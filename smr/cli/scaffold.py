"""``smr init DIR``: a new job project to start from, whose test passes as written.

The project holds a job module (a word count with typed ``map``, ``reduce`` and ``combine``,
each with a docstring saying its contract), a small sample input, a test that runs the job
in-process (:func:`smr.testing.run_job`) against plain Python, and a README with the
commands that run it on a local cluster.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

__all__ = ["ScaffoldError", "write_project"]


class ScaffoldError(Exception):
    """The project cannot be written where asked; the message says why."""


JOB_TEMPLATE: Final = '''\
"""The {name} job: how often each word occurs, kept as ``state["count"]``.

Edit ``map_line``, ``reduce_count`` and ``combine_counts`` to make the job yours, then run
``python test_job.py``. README.md has the commands that run it on a local
cluster.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from smr import Job

Emit = Callable[[str, Any], None]

WORD = re.compile(r"[a-z0-9']+")


def map_line(line: str, emit: Emit) -> None:
    """Turn one input record (a line of text) into tuples: ``emit(key, value)`` once per
    word. Keys are ``str`` or ``int``; values anything msgpack encodes. A ``map`` that
    raises skips its record (``smr feed`` counts and reports it)."""
    for word in WORD.findall(line.lower()):
        emit(word, 1)


def reduce_count(word: str, count: int, state: dict[str, Any], emit: Emit) -> None:
    """Fold one tuple into its key's ``state``, a dict of fields the nodes keep, back up
    and move. Each tuple is applied exactly once; a reduce that raises changes nothing.
    Keep fields to None, bool, int, float, str, bytes, and lists, tuples and dicts of
    those. ``emit(key, value)`` publishes an output record (``smr tail`` shows them)."""
    state["count"] = state.get("count", 0) + count


def combine_counts(a: int, b: int) -> int:
    """Merge two values of one key before they travel (a feeder folds a batch's tuples per
    key). It must agree with ``reduce``: reducing the combined value has the effect of
    reducing both. Leave ``combine`` out of the Job if no such merge exists."""
    return a + b


job = Job("{name}", map=map_line, reduce=reduce_count, combine=combine_counts)
'''

TEST_TEMPLATE: Final = '''\
"""The job's tests: run it in-process on the sample input and compare with plain Python.

    python test_job.py
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

from smr.testing import run_job

from job import job

SAMPLE = Path(__file__).with_name("sample.txt")


def sample_lines() -> list[str]:
    return SAMPLE.read_text(encoding="utf-8").splitlines()


def plain_python_counts(lines: list[str]) -> dict[str, int]:
    """What the job must compute, written apart from it."""
    words = (word for line in lines for word in re.findall(r"[a-z0-9']+", line.lower()))
    return dict(collections.Counter(words))


def test_counts_equal_plain_python() -> None:
    lines = sample_lines()
    run = run_job(job, lines)
    assert {{word: state["count"] for word, state in run.states.items()}} == (
        plain_python_counts(lines)
    )


def test_combine_agrees_with_reduce() -> None:
    lines = sample_lines()
    assert run_job(job, lines, combine=False).states == run_job(job, lines, batch_size=7).states


if __name__ == "__main__":
    test_counts_equal_plain_python()
    test_combine_agrees_with_reduce()
    print("2 tests passed")
'''

SAMPLE_TEXT: Final = """\
The whale rose beside the boat, and for a long moment nobody in the crew said a word.
A whale is not a fish, the mate said, whatever the old books and the old sailors say.
The harbour was grey at dawn; gulls argued over the nets and the tide came in slowly.
She counted the words in every letter she received, and kept the counts in a ledger.
The ledger grew, page by page, until the counts of one year filled a shelf of its own.
Nobody asked her why; the town was used to her, and to the ledger, and to the shelf.
Far out, past the point, the whale blew once more and went down into the cold water.
The boat turned for home. The crew talked of the whale all the way back to the harbour.
"""

README_TEMPLATE: Final = """\
# {name}

A job for smr: `job.py` (edit `map_line`, `reduce_count`, `combine_counts`), a sample input
`sample.txt`, and `test_job.py`, which runs the job in-process and compares it with plain
Python.

```sh
python test_job.py
smr cluster up --cluster cluster --nodes 3 --replication 1 --job job.py:job
smr feed --cluster cluster sample.txt
smr query --cluster cluster whale
smr cluster down --cluster cluster
```

`smr status --cluster cluster` shows the nodes; `smr dump --cluster cluster --out counts.jsonl`
writes every key's state.
"""

FILES: Final = {
    "job.py": JOB_TEMPLATE,
    "test_job.py": TEST_TEMPLATE,
    "sample.txt": SAMPLE_TEXT,
    "README.md": README_TEMPLATE,
}


def job_name(directory: Path) -> str:
    """The job's name from the directory's: lower case, runs of other characters as ``_``
    (``"My Words"`` -> ``"my_words"``)."""
    name = re.sub(r"[^a-z0-9]+", "_", directory.resolve().name.lower()).strip("_")
    return name or "job"


def write_project(directory: Path) -> list[Path]:
    """Write the project's files into ``directory`` (created if missing) and return them.

    ScaffoldError if ``directory`` is a file or already holds any of the files: nothing a
    user wrote is ever overwritten, and on that error nothing is written at all.
    """
    if directory.exists() and not directory.is_dir():
        raise ScaffoldError(f"{str(directory)!r} exists and is not a directory")
    clashes = [name for name in FILES if (directory / name).exists()]
    if clashes:
        raise ScaffoldError(
            f"{str(directory)!r} already holds {', '.join(clashes)}: choose a new directory"
        )
    name = job_name(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name, template in FILES.items():
        path = directory / file_name
        text = template.format(name=name) if file_name != "sample.txt" else template
        with path.open("x", encoding="utf-8") as out:  # "x": never over a file that appeared
            out.write(text)
        written.append(path)
    return written
