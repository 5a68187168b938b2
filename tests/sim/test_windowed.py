"""A windowed job in the simulation (``smr.sim.windowed``): the model of the windows, the
check of every window's result in the output files, and seeded runs under faults."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from smr.checkpoint.windows import assign
from smr.output.records import record_line
from smr.sim.config import SimConfig, SweepOptions
from smr.sim.simulation import Simulation, seed_simulation
from smr.sim.sweep import main as sweep_main
from smr.sim.windowed import WindowedFeed, check_windows, window_model, window_spec

WINDOWS = SweepOptions(windows=True)


@pytest.mark.parametrize("size_ms, slide_ms", [(20, 0), (100, 50), (100, 25), (90, 40)])
def test_the_models_windows_are_the_engines(size_ms: int, slide_ms: int) -> None:
    # The model counts by its own arithmetic; the engine's assign must agree on every time.
    spec = window_spec(SimConfig(window_size_ms=size_ms, window_slide_ms=slide_ms))
    times = random.Random(7).sample(range(0, 5000), 400)
    model = window_model(spec, {"m0": (["k"] * len(times), times)})
    engine: dict[tuple[str, int, int], int] = {}
    for time_ms in times:
        for window in assign(spec, time_ms):
            name = ("k", window.start_ms, window.end_ms)
            engine[name] = engine.get(name, 0) + 1
    assert dict(model) == engine


@dataclass
class PlantedRun:
    """A run's feed and output files, written by hand."""

    windowed: WindowedFeed | None
    output_files: Mapping[str, bytearray]


def _result(key: str, start: int, end: int, count: int, revision: int = 0) -> str:
    value = {"start_ms": start, "end_ms": end, "revision": revision, "state": {"count": count}}
    origin = [f"@{start}:{end}/{json.dumps(key)}", 3, revision, 0]
    return record_line({"node": "n0", "key": key, "value": value, "origin": origin})


def _planted(lines: list[str]) -> PlantedRun:
    feed = WindowedFeed(SimConfig(window_size_ms=100))
    feed.add_mapper("m0", ["a", "a", "b"], [10, 150, 20])
    return PlantedRun(feed, {"n0": bytearray("".join(f"{line}\n" for line in lines).encode())})


def test_the_check_passes_each_window_once_with_its_count() -> None:
    lines = [_result("a", 0, 100, 1), _result("a", 100, 200, 1), _result("b", 0, 100, 1)]
    # A window closed again after a takeover, with the same state, is read once.
    assert check_windows(_planted([*lines, lines[0]])) == 3


@pytest.mark.parametrize(
    "lines, said",
    [
        ([_result("a", 0, 100, 1), _result("b", 0, 100, 1)], "1 of 3 windows never closed"),
        (
            [_result("a", 0, 100, 2), _result("a", 100, 200, 1), _result("b", 0, 100, 1)],
            "('a', 0, 100): 2 != model 1",
        ),
        (
            [
                _result("a", 0, 100, 1),
                _result("a", 0, 100, 5),
                _result("a", 100, 200, 1),
                _result("b", 0, 100, 1),
            ],
            "left with 2 states",
        ),
        (
            [
                _result("a", 0, 100, 1),
                _result("a", 100, 200, 1),
                _result("b", 0, 100, 1),
                _result("b", 0, 100, 1, revision=1),
            ],
            "has a correction",
        ),
        (
            [
                _result("a", 0, 100, 1),
                _result("a", 100, 200, 1),
                _result("b", 0, 100, 1),
                _result("c", 0, 100, 1),
            ],
            "1 windows the model has not",
        ),
    ],
)
def test_the_check_names_what_went_wrong(lines: list[str], said: str) -> None:
    with pytest.raises(AssertionError, match="windows: ") as failure:
        check_windows(_planted(lines))
    assert said in str(failure.value)


def test_a_windowed_runs_mappers_finish_each_as_one_id_without_combine() -> None:
    plain = SimConfig.from_seed(5)
    config = SimConfig.from_seed(5, WINDOWS)
    assert config.windowed and config.keeps_output
    assert config.finish_mappers and config.mapper_parts == 1 and not config.combine
    # Every other draw of the plain run stays what it was.
    assert (config.nodes, config.replication, config.slot_bits, config.mappers) == (
        plain.nodes,
        plain.replication,
        plain.slot_bits,
        plain.mappers,
    )
    assert config.node_settings().window_idle_timeout_ms > config.feed_limit_ms


@pytest.mark.parametrize("seed", [0, 3, 11, 24])
def test_every_window_leaves_once_with_the_models_count_through_the_faults(seed: int) -> None:
    simulation = seed_simulation(seed, WINDOWS)
    assert simulation.schedule.faults, "the seed draws faults"
    simulation.run()
    checked = [event for event in simulation.events if "windows checked:" in event]
    assert checked and " 0 windows" not in checked[0]


def test_a_window_lost_to_a_node_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    # A node that never closes its windows leaves them missing: the run fails, naming them.
    from smr.node.windows import NodeWindows

    monkeypatch.setattr(NodeWindows, "close_due", lambda *args, **kwargs: None)
    simulation = Simulation(3, config=SimConfig.from_seed(3, WINDOWS))
    with pytest.raises(Exception, match="windows never closed"):
        simulation.run()


def test_windows_and_edges_do_not_go_together(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        sweep_main(["--windows", "--edges", "--seeds", "1"])
    assert exit_.value.code == 2
    assert "does not attack the edges" in capsys.readouterr().err
