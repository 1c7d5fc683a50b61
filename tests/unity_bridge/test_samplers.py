"""Environment-parameter samplers: mlagents-learn's YAML form, its seeds, the wire bytes, the game's draws."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.helpers import PLAYERS
from unity_bridge import side_channels
from unity_bridge.environment import UnityEnvironment
from unity_bridge.errors import SettingsError
from unity_bridge.samplers import Sampler, parse_parameter, with_seeds
from unity_bridge.settings import LaunchSettings

CHASE = str(PLAYERS / "builds" / "Chase")


def uniform(low, high, **extra):
    return {"sampler_type": "uniform", "sampler_parameters": {"min_value": low, "max_value": high, **extra}}


# ---- mlagents-learn's form ---------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (3, 3.0),
        (0.5, 0.5),
        (uniform(0.5, 10), Sampler("uniform", (0.5, 10.0))),
        (uniform(2, 2, seed=9), Sampler("uniform", (2.0, 2.0), 9)),  # min == max: mlagents accepts it
        ({"sampler_type": "uniform", "sampler_parameters": {}}, Sampler("uniform", (0.0, 1.0))),
        (
            {"sampler_type": "gaussian", "sampler_parameters": {"mean": 2, "st_dev": 0.5}},
            Sampler("gaussian", (2.0, 0.5)),
        ),
        ({"sampler_type": "gaussian", "sampler_parameters": {"seed": 4}}, Sampler("gaussian", (1.0, 1.0), 4)),
        (
            {"sampler_type": "multirangeuniform", "sampler_parameters": {"intervals": [[1, 2], [5, 7]]}},
            Sampler("multirangeuniform", (1.0, 2.0, 5.0, 7.0)),
        ),
        ({"sampler_type": "constant", "sampler_parameters": {"value": 4}}, 4.0),
        (Sampler("gaussian", (0.0, 1.0), 3), Sampler("gaussian", (0.0, 1.0), 3)),
    ],
)
def test_numbers_and_samplers_parse_with_mlagents_defaults(given, expected):
    assert parse_parameter(given, "env_parameters.x") == expected


@pytest.mark.parametrize(
    ("given", "message", "fix"),
    [
        ("easy", "env_parameters.x must be a number or a sampler, got 'easy'", "sampler_type: uniform"),
        (True, "must be a number or a sampler, got True", "e.g. env_parameters.x: 1.0"),
        (
            uniform(10, 0.5),
            "env_parameters.x.sampler_parameters: the minimum 10 is greater than the maximum 0.5",
            "swap",
        ),
        (
            {"sampler_type": "uniform"},
            "a sampler needs 'sampler_parameters'",
            "sampler_parameters: {min_value",
        ),
        ({"sampler_parameters": {}}, "a sampler needs 'sampler_type'", "write it as"),
        ({"sampler_type": "beta", "sampler_parameters": {}}, "unknown sampler 'beta'", "uniform, gaussian"),
        (
            uniform(0, 1, mean=3),
            "'mean' is not a parameter of a uniform sampler",
            "min_value, max_value, seed",
        ),
        (uniform(0, 1, seed=1.5), "sampler_parameters.seed must be an integer, got 1.5", "seed: 1234"),
        (uniform("0", 1), "sampler_parameters.min_value must be a number, got '0'", "as a number"),
        (
            {"sampler_type": "multirangeuniform", "sampler_parameters": {"intervals": [[1, 2, 3]]}},
            "intervals[0]: the sampling interval [1, 2, 3] must contain exactly two values",
            "[min, max]",
        ),
        (
            {"sampler_type": "multirangeuniform", "sampler_parameters": {"intervals": [[3, 1]]}},
            "intervals[0]: the minimum 3 is greater than the maximum 1",
            "swap",
        ),
        (
            {"sampler_type": "multirangeuniform", "sampler_parameters": {"intervals": []}},
            "must be a list of [min, max] pairs",
            "intervals: [[0.5, 1], [2, 3]]",
        ),
        (
            {"sampler-type": "uniform", "min_value": 0, "max_value": 1},
            "pre-1.0 sampler format",
            "mlagents-upgrade-config",
        ),
        ({"curriculum": [{"Lesson0": {"value": 1}}]}, "is a curriculum of lessons", "environment_parameters"),
        ({**uniform(0, 1), "seed": 3}, "'seed' is not a key of a sampler", "under sampler_parameters"),
    ],
)
def test_a_wrong_parameter_names_itself_and_the_fix(given, message, fix):
    with pytest.raises(SettingsError) as err:
        parse_parameter(given, "env_parameters.x")
    assert message in err.value.message
    assert fix in (err.value.hint or "")


def test_launch_settings_parse_env_parameters_and_name_the_key():
    settings = LaunchSettings.from_config({"env_parameters": {"mass": uniform(0.5, 10), "gravity": 9}})
    assert settings.env_parameters == {"mass": Sampler("uniform", (0.5, 10.0)), "gravity": 9.0}
    with pytest.raises(SettingsError) as err:
        LaunchSettings.from_config({"env_parameters": {"mass": uniform(10, 0.5)}})
    assert str(err.value).startswith("env_config: env_parameters.mass.sampler_parameters: the minimum 10")
    assert "fix: swap them" in str(err.value)


@pytest.mark.parametrize(
    "sampler",
    [
        Sampler("uniform", (0.5, 10.0), 3),
        Sampler("gaussian", (1.0, 0.25)),
        Sampler("multirangeuniform", (1.0, 2.0, 5.0, 7.0), 12),
    ],
)
def test_to_yaml_reads_back_as_the_same_sampler(sampler):
    assert parse_parameter(sampler.to_yaml(), "x") == sampler


def test_seeds_follow_mlagents_learns_rule():
    """Expected values from mlagents 1.1.0 itself (the side venv's python):
    EnvironmentParameterManager(EnvironmentParameterSettings.structure(d, ...), 100, False) with d the
    four parameters below gives seeds {'a': 100, 'b': 101, 'c': 7, 'd': 102}: unseeded values, numbers
    included, take run_seed + 0, 1, 2 ... in order."""
    parameters = {
        "a": 1.0,
        "b": Sampler("uniform", (1.0, 2.0)),
        "c": Sampler("gaussian", (0.0, 1.0), 7),
        "d": Sampler("multirangeuniform", (0.0, 1.0, 2.0, 3.0)),
    }
    seeded = with_seeds(parameters, 100)
    assert seeded == {
        "a": 1.0,
        "b": Sampler("uniform", (1.0, 2.0), 101),
        "c": Sampler("gaussian", (0.0, 1.0), 7),
        "d": Sampler("multirangeuniform", (0.0, 1.0, 2.0, 3.0), 102),
    }


def test_draws_cover_the_range_and_multirange_weighs_intervals_by_length():
    rng = np.random.default_rng(0)
    values = [Sampler("uniform", (4.0, 10.0)).draw(rng) for _ in range(2000)]
    assert 4.0 <= min(values) < 4.1 and 9.9 < max(values) <= 10.0
    gaussian = [Sampler("gaussian", (2.0, 0.5)).draw(rng) for _ in range(2000)]
    assert abs(np.mean(gaussian) - 2.0) < 0.05 and abs(np.std(gaussian) - 0.5) < 0.05
    multi = np.array([Sampler("multirangeuniform", (0.0, 1.0, 10.0, 13.0)).draw(rng) for _ in range(4000)])
    assert set(np.unique(multi < 1.0)) == {False, True} and not ((multi > 1.0) & (multi < 10.0)).any()
    assert abs((multi >= 10.0).mean() - 0.75) < 0.03  # the second interval is 3 times longer


# ---- the wire --------------------------------------------------------------------

# Produced once with mlagents-envs 1.1.0 (CI has no side venv):
#   /root/.cache/envsdk/mlagents-1.1.0/bin/python -c "from mlagents_envs.side_channel.
#   environment_parameters_channel import EnvironmentParametersChannel as C; c = C();
#   c.set_float_parameter('gravity', 9.81); c.set_uniform_sampler_parameters('mass', 0.5, 10.0, 7);
#   c.set_gaussian_sampler_parameters('scale', 1.5, 0.25, -1);
#   c.set_multirangeuniform_sampler_parameters('big_wall_height', [(0.0, 4.0), (6.0, 8.0)], 12345);
#   print(*(m.hex() for m in c.message_queue), sep='\n')"
GOLDEN = [
    ("gravity", 9.81, "070000006772617669747900000000c3f51c41"),
    ("mass", Sampler("uniform", (0.5, 10.0), 7), "040000006d6173730100000007000000000000000000003f00002041"),
    ("scale", Sampler("gaussian", (1.5, 0.25)), "050000007363616c6501000000ffffffff010000000000c03f0000803e"),
    (
        "big_wall_height",
        Sampler("multirangeuniform", (0.0, 4.0, 6.0, 8.0), 12345),
        "0f0000006269675f77616c6c5f686569676874010000003930000002000000040000000000000000008040"
        "0000c04000000041",
    ),
]


@pytest.mark.parametrize(("key", "value", "golden"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_payloads_are_byte_exact_with_mlagents_envs_and_read_back(key, value, golden):
    payload = side_channels.parameter(key, value)
    assert payload.hex() == golden
    read_key, read_value = side_channels.read_parameter(payload)
    assert read_key == key
    assert read_value == (pytest.approx(value) if isinstance(value, float) else value)


# ---- through the bridge to the stand-in ---------------------------------------------------


def test_the_standin_draws_each_episode_from_the_samplers_sent(tmp_path):
    """Chase with 4 agents and a track_length sampler: every agent restart draws a fresh length."""
    settings = LaunchSettings.from_config(
        {
            "file_name": CHASE, "no_graphics": True, "timeout_wait": 20, "log_folder": str(tmp_path),
            "additional_args": ["--agents", "4", "--max-steps", "3"], "seed": 40,
            "env_parameters": {"track_length": uniform(4, 10), "unused": 2.5},
        }
    )  # fmt: skip
    game = UnityEnvironment(settings)
    try:
        assert game.parameters["track_length"] == Sampler(
            "uniform", (4.0, 10.0), 40
        )  # the seed: mlagents' rule
        game.wait_for_agents(game.reset())
        for _ in range(12):
            game.step()
        game.set_parameter("track_length", Sampler("multirangeuniform", (20.0, 21.0, 30.0, 31.0), 5))
        for _ in range(8):
            game.step()
    finally:
        game.close()
    log = (tmp_path / "Player-0.log").read_text()
    assert "environment parameter track_length sampler uniform 4..10 seed 40" in log
    assert "environment parameter unused = 2.5" in log
    drawn = [float(v) for v in re.findall(r"track_length drawn (\S+) \(uniform 4\.\.10\)", log)]
    assert len(drawn) >= 12 and all(4.0 <= v <= 10.0 for v in drawn)
    assert max(drawn) - min(drawn) > 3.0  # spread over the range, not one value
    later = [float(v) for v in re.findall(r"track_length drawn (\S+) \(multirangeuniform", log)]
    assert later and all(20.0 <= v <= 21.0 or 30.0 <= v <= 31.0 for v in later)
