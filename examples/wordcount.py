"""The word count of the documentation, as ``examples.wordcount`` in a clone: the jobs live in
:mod:`smr.examples.wordcount`, installed with the package (``smr.examples.wordcount:job``
from the wheel); this module names the same objects, so both references are one job."""

from smr.examples.wordcount import (
    WORD,
    add,
    batched,
    count,
    count_and_emit_n,
    count_and_emit_total,
    count_batch,
    counted,
    fast,
    job,
    published,
    split_lines,
    split_words,
)

__all__ = [
    "WORD",
    "add",
    "batched",
    "count",
    "count_and_emit_n",
    "count_and_emit_total",
    "count_batch",
    "counted",
    "fast",
    "job",
    "published",
    "split_lines",
    "split_words",
]
