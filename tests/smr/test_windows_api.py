"""Windowed jobs through the user API: ``run_job`` folds per window as plain Python does,
advances event time by batch and by marker, counts and keeps late tuples, and what a
cluster cannot run of them (session windows, an output table, spark-feed) is
refused with one line (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smr import Job, agg, windows
from smr.cli.root import main
from smr.ring.ids import NodeId, Token
from smr.spec.model import ClusterSpec, NodeSpec
from smr.spec.parse import write_spec
from smr.testing import Watermark, run_job
from smr.windows import Window, WindowSpec

Click = tuple[str, int]  # (page, event time ms)


def page_of(click: Click, emit: Any) -> None:
    emit(click[0], 1)


def time_of(click: Click) -> int:
    return click[1]


def plain_counts(clicks: list[Click], size_ms: int, slide_ms: int) -> dict[Any, Any]:
    """Counts per (page, window) in plain Python, for input whose watermark never passes a
    tuple (every tuple is taken)."""
    counts: dict[Any, Any] = {}
    for page, t in clicks:
        for start in range(t - t % slide_ms - size_ms, t + 1, slide_ms):
            if start <= t < start + size_ms:
                key = (page, Window(start, start + size_ms))
                counts[key] = {"count": counts.get(key, {"count": 0})["count"] + 1}
    return counts


clicks_in_order = st.lists(
    st.tuples(st.sampled_from(["home", "cart", "buy"]), st.integers(0, 5_000)), max_size=80
).map(lambda clicks: sorted(clicks, key=lambda c: c[1]))


@settings(max_examples=150, deadline=None)
@given(
    clicks_in_order, st.sampled_from([(1000, 1000), (1000, 250), (3000, 1000)]), st.integers(1, 9)
)
def test_counts_per_hopping_window_equal_plain_python(clicks, size_slide, batch_size):
    size_ms, slide_ms = size_slide
    job = Job(
        "clicks",
        map=page_of,
        reduce=agg.count(),
        event_time=time_of,
        window=windows.hopping(size_ms, slide_ms),
    )
    run = run_job(job, clicks, batch_size=batch_size)
    assert run.windows == plain_counts(clicks, size_ms, slide_ms)
    assert run.late_dropped == 0 and run.tuples == len(clicks)
    assert all(result.is_final for result in run.window_results)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3_000)), max_size=60),
    st.integers(0, 1_500),
    st.integers(0, 1_500),
)
def test_out_of_order_input_takes_what_lateness_allows_and_counts_the_rest(
    clicks, out_of_orderness_ms, allowed_lateness_ms
):
    """One record a batch: the watermark after each record is the largest event time so far
    minus the out-of-orderness, minus 1; a record is taken if its time plus the lateness is
    above the watermark before it. Taken records read back as plain counts, the rest are kept
    aside."""
    job = Job(
        "clicks",
        map=page_of,
        reduce=agg.count(),
        event_time=time_of,
        window=windows.tumbling(
            1000, allowed_lateness_ms=allowed_lateness_ms, out_of_orderness_ms=out_of_orderness_ms
        ),
        late_side_output=True,
    )
    run = run_job(job, clicks, batch_size=1)
    watermark, taken, late = -(2**63), [], []
    for page, t in clicks:
        (taken if t + allowed_lateness_ms > watermark else late).append((page, t))
        watermark = max(watermark, t - out_of_orderness_ms - 1)
    assert run.windows == plain_counts(taken, 1000, 1000)
    assert run.late_dropped == len(late)
    assert [(key, t) for key, _value, t in run.late] == late


def test_a_watermark_marker_closes_windows_and_an_unfinished_run_keeps_the_open_ones():
    def spend(order: dict[str, Any], emit: Any) -> None:
        emit(order["user"], order["amount"])

    def total(user: Any, amount: int, state: dict[str, Any], emit: Any) -> None:
        state["total"] = state.get("total", 0) + amount

    job = Job(
        "spend",
        map=spend,
        reduce=total,
        event_time=lambda order: order["t"],
        window=windows.tumbling(10_000, out_of_orderness_ms=60_000),
    )
    orders = [
        {"user": "ann", "amount": 5, "t": 1_000},
        {"user": "ann", "amount": 7, "t": 9_999},
        Watermark(9_999),
        {"user": "ann", "amount": 1, "t": 10_000},
    ]
    run = run_job(job, orders, finish=False)
    assert run.windows == {("ann", Window(0, 10_000)): {"total": 12}}  # [10 s, 20 s) still open
    finished = run_job(job, orders)
    assert finished.windows[("ann", Window(10_000, 20_000))] == {"total": 1}


def test_session_windows_merge_per_user():
    job = Job(
        "visits",
        map=page_of,
        reduce=agg.fields(n=agg.count()),
        event_time=time_of,
        window=windows.session(gap_ms=100),
    )
    run = run_job(job, [("u", 0), ("u", 250), ("u", 80), ("u", 170), ("v", 60)])
    assert run.windows == {
        ("u", Window(0, 350)): {"n": 4},
        ("v", Window(60, 160)): {"n": 1},
    }


def test_a_windowed_reduce_cannot_emit_and_a_bad_event_time_names_its_record():
    def emitting(key: Any, value: Any, state: dict[str, Any], emit: Any) -> None:
        emit(key, value)

    job = Job("e", map=page_of, reduce=emitting, event_time=time_of, window=windows.tumbling(10))
    with pytest.raises(RuntimeError, match="cannot emit"):
        run_job(job, [("a", 1)])
    floats = Job(
        "f",
        map=page_of,
        reduce=agg.count(),
        event_time=lambda c: c[1] / 2,
        window=windows.tumbling(10),
    )
    with pytest.raises(ValueError, match="must be an int of milliseconds"):
        run_job(floats, [("a", 1)])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"window": windows.tumbling(10)}, "needs both event_time= and window="),
        ({"event_time": time_of}, "needs both event_time= and window="),
        ({"late_side_output": True}, "late_side_output= needs a window="),
    ],
)
def test_a_half_windowed_job_is_refused(arguments, message):
    with pytest.raises(TypeError, match=message):
        Job("half", map=page_of, reduce=agg.count(), **arguments)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: windows.tumbling(0), "size_ms >= 1"),
        (lambda: windows.hopping(1000, 2000), "must not exceed its size_ms"),
        (lambda: windows.session(gap_ms=-1), "non-negative int"),
        (lambda: windows.tumbling(1.5), "non-negative int"),  # type: ignore[arg-type]
    ],
)
def test_a_window_spec_that_makes_no_sense_names_the_value(make, message):
    with pytest.raises(ValueError, match=message):
        make()


WINDOWED_JOB = """
from smr import Job, agg, windows
job = Job("w", map=lambda r, emit: emit(r, 1), reduce=agg.count(),
          event_time=lambda r: 0, window=windows.tumbling(1000))
session = Job("s", map=lambda r, emit: emit(r, 1), reduce=agg.count(),
              event_time=lambda r: 0, window=windows.session(1000))
"""


@pytest.fixture
def windowed_cluster(tmp_path: Path) -> Path:
    """A cluster directory (no node runs) whose job is a session-windowed count."""
    (tmp_path / "wjob.py").write_text(WINDOWED_JOB)
    node = NodeSpec(NodeId("n0"), "tcp://127.0.0.1:1", "tcp://127.0.0.1:2", Token(0))
    write_spec(tmp_path, ClusterSpec(8, 0, f"{tmp_path / 'wjob.py'}:session", [node]))
    (tmp_path / "input.txt").write_text("a\n")
    return tmp_path


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("cluster-up-table", "not to an output table"),
        ("spark-feed", "smr spark-feed does not feed windowed jobs in this version"),
    ],
)
def test_what_a_cluster_cannot_run_of_windows_is_refused_with_one_line(
    windowed_cluster: Path, command: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = f"{windowed_cluster / 'wjob.py'}"
    if command == "spark-feed":  # a cluster whose job is the tumbling one
        node = NodeSpec(NodeId("n0"), "tcp://127.0.0.1:1", "tcp://127.0.0.1:2", Token(0))
        write_spec(windowed_cluster, ClusterSpec(8, 0, f"{jobs}:job", [node]))
    new_dir = str(windowed_cluster / "new")
    args = {
        "cluster-up-table": [
            "cluster", "up", "--dir", new_dir, "--job", f"{jobs}:job",
            "--output-postgres", "host=127.0.0.1 port=1",
        ],
        "spark-feed": [
            "spark-feed", "--cluster", str(windowed_cluster), "--job", f"{jobs}:job",
            "--input", str(windowed_cluster),
        ],
    }[command]  # fmt: skip
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert message in err[0]
    assert not (windowed_cluster / "new" / "cluster.json").exists()


def test_a_cluster_takes_a_session_job_but_not_with_an_output_table(
    windowed_cluster: Path,
) -> None:
    from smr.api import JobLoadError, load_job
    from smr.windows import refuse_in_cluster

    job = load_job(f"{windowed_cluster / 'wjob.py'}:session")
    assert refuse_in_cluster(job) is job
    with pytest.raises(JobLoadError, match="not to an output table"):
        refuse_in_cluster(job, table=True)


def test_the_guides_example_runs_as_written():
    guide = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "windows.md").read_text()
    blocks = guide.split("```python\n")[1:]
    example = next(block.split("```", 1)[0] for block in blocks if "run_job(" in block)
    exec(compile(example, "docs/guide/windows.md", "exec"), {})  # its asserts must hold


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3_000)), max_size=60),
    st.sampled_from([windows.tumbling(500), windows.hopping(1000, 250), windows.hopping(900, 400)]),
    st.integers(0, 800),
    st.integers(1, 20),
)
def test_combining_per_key_and_slice_ends_in_the_same_windows(clicks, spec, lateness, batch_size):
    """Out-of-order clicks, late ones corrected or dropped: folding a batch's tuples per key
    and slice of event time first reads back exactly as folding each, drops counted alike."""
    window = WindowSpec(
        spec.kind,
        spec.size_ms,
        spec.slide_ms,
        allowed_lateness_ms=lateness,
        out_of_orderness_ms=300,
    )
    job = Job(
        "clicks",
        map=lambda click, emit: emit(click[0], click[1] % 7),
        reduce=agg.fields(n=agg.count(), total=agg.sum(), top=agg.max()),
        event_time=time_of,
        window=window,
    )
    combined = run_job(job, clicks, batch_size=batch_size)
    each = run_job(job, clicks, batch_size=batch_size, combine=False)
    assert combined.windows == each.windows
    assert combined.late_dropped == each.late_dropped
