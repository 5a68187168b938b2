"""The hand-picked fault scenarios (``smr.faults.scenarios``) are sound data: each is within
tolerance, and expects to lose only nodes its schedule may lose. Running them is the job of
``test_simulation.py`` and ``tests/e2e/test_faults.py``."""

from __future__ import annotations

import pytest

from smr.faults.scenarios import SCENARIOS, Expectation, Scenario
from smr.faults.tolerance import lost_nodes, within_tolerance


def test_scenario_names_are_unique() -> None:
    names = [scenario.name for scenario in SCENARIOS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_every_scenario_is_within_tolerance(scenario: Scenario) -> None:
    reason = within_tolerance(scenario.schedule, scenario.node_ids, scenario.replication)
    assert reason is None, reason


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_a_scenario_expects_to_lose_only_nodes_its_schedule_may_lose(scenario: Scenario) -> None:
    lost = set(scenario.node_ids) - set(scenario.owners_at_end)
    assert lost <= set(lost_nodes(scenario.schedule, scenario.node_ids))


def test_a_scenario_whose_takeovers_miss_a_killed_node_is_refused() -> None:
    kill_two = next(s for s in SCENARIOS if len(s.killed) == 2)
    with pytest.raises(ValueError, match="must be exactly the killed"):
        Scenario(
            "takes_over_one_of_two_killed",
            kill_two.nodes,
            kill_two.replication,
            kill_two.schedule,
            Expectation(takeovers=kill_two.expect.takeovers[:1]),
        )
