"""``time_horizon`` (mlagents-learn's): each agent's trajectory cut every N of its own steps, as
RLlib's ``rollout_fragment_length`` in the steps it counts, within RLlib's own batch rule."""

from __future__ import annotations

import math

import pytest

from envsdk.config.yamlio import LineDict
from envsdk.errors import UserError
from envsdk.training.build.rules import fragment_length, time_horizon


@pytest.mark.parametrize(
    ("horizon", "batch"), [(64, 200), (1000, 12000), (5, 256), (128, 2048), (3, 7), (500, 100)]
)
def test_fragment_length_is_the_longest_rllib_accepts_up_to_the_horizon(horizon, batch):
    sizes = range(1, min(horizon, batch) + 1)
    fits = [f for f in sizes if math.ceil(batch / f) * f - batch <= 0.1 * batch]
    assert fragment_length(horizon, batch) == max(fits)


@pytest.mark.parametrize(
    ("horizon", "agents", "batch", "runners", "fragment"),
    [
        (1000, 12, 12000, 0, 12000),  # ML-Agents' 3DBall: 12 agents, each cut at 1000 of its own steps
        (1000, 12, 12000, 3, 4000),  # three games: a third of the batch each, cut at its end
        (64, 1, 2048, 0, 64),  # one agent: the horizon itself
        (5, 9, 256, 0, 45),  # GridWorld's 9 agents, each every 5 of its steps
        (64, 4, 200, 0, 200),  # the batch is shorter than 64 steps of 4 agents: one fragment per batch
    ],
)
def test_the_fragment_is_the_horizon_in_every_agents_steps(horizon, agents, batch, runners, fragment, capsys):
    values = LineDict(time_horizon=horizon, train_batch_size=batch, num_env_runners=runners)
    time_horizon(values, agents, 4000)
    assert values["rollout_fragment_length"] == fragment and "time_horizon" not in values
    assert ("runs as rollout_fragment_length" in capsys.readouterr().err) == (fragment != horizon * agents)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"time_horizon": 0}, "positive integer"),
        ({"time_horizon": 8, "rollout_fragment_length": 8}, "both set"),
    ],
)
def test_a_wrong_time_horizon_is_refused(values, message):
    with pytest.raises(UserError, match=message):
        time_horizon(LineDict(values), 1, 4000)
