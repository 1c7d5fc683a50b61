"""``reward_signals:`` (config/own_keys/reward_signals.py, training/build/modules/reward_signals.py):
ML-Agents' keys and defaults, the run's gamma as a signal's default, and one line for each mistake."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from envsdk import substitutions
from envsdk.config.mlagents import schema
from envsdk.config.own_keys.reward_signals import PER_MODULE, parse, take
from envsdk.config.yamlio import LineDict
from envsdk.errors import UserError
from envsdk.networks.reward_signals import signals_module_id
from tests.helpers import built_config, run_train


def test_ml_agents_defaults_and_the_runs_gamma() -> None:
    signals = parse({"extrinsic": {}, "curiosity": {"encoding_size": 64}, "rnd": {"gamma": 0.9}}, "f:1", 0.97)
    extrinsic, curiosity, rnd = signals.signals
    assert (extrinsic.gamma, extrinsic.strength) == (0.97, 1.0)  # RLlib YAML: the run's gamma
    assert (curiosity.learning_rate, curiosity.hidden_units, curiosity.num_layers) == (3e-4, 64, 2)
    assert (rnd.gamma, rnd.learning_rate, rnd.hidden_units) == (0.9, 1e-4, 128)
    assert [s.ignore_done for s in signals.signals] == [False, True, True]
    width = parse({"curiosity": {"encoding_size": 64, "network_settings": {"hidden_units": 32}}}, "f:1", 0.99)
    assert width.signals[0].hidden_units == 32  # network_settings wins, as in ML-Agents
    assert parse({"rnd": {}}, "f:1", 0.99).names == ["rnd"]  # no extrinsic: no env reward
    # mlagents-learn's translated blocks carry every default, network_settings included
    filled = {"encoding_size": 64, "network_settings": dict(schema.checked(None, schema.NETWORK, "n", "f:1"))}
    assert parse({"rnd": filled}, "f:1", 0.99).signals[0].hidden_units == 64


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"curiousity": {}}, "'curiousity' is no reward signal"),
        ({"curiosity": {"strenght": 0.1}}, "'strenght' is no setting"),
        ({"rnd": {"strength": "high"}}, "reward_signals.rnd.strength is 'high', but it takes a number"),
        ({"rnd": {"network_settings": {"hiden_units": 3}}}, "'hiden_units' is no setting"),
        ({"extrinsic": {"gamma": 1.5}}, "reward_signals.extrinsic.gamma is 1.5"),
        ({"gail": {"strength": 0.1}}, "reward_signals.gail needs demo_path"),
        (
            {"gail": {"demo_path": "nowhere.demo"}},
            "reward_signals.gail.demo_path 'nowhere.demo' is not there",
        ),
        ([], "reward_signals must be a mapping"),
    ],
)
def test_a_mistake_is_one_line_naming_the_key(given: object, said: str) -> None:
    with pytest.raises(UserError) as caught:
        parse(given, "exp.yaml:7", 0.99)
    assert said in str(caught.value.problem)
    assert "exp.yaml:7" in caught.value.problem
    if "'" in said and "no " in said:
        assert "did you mean" in (caught.value.hint or "")


def test_a_policys_own_signals_are_taken_out_of_rllibs_overrides() -> None:
    values = LineDict(
        gamma=0.95,
        reward_signals={"extrinsic": {}, "curiosity": {}},
        **{PER_MODULE: {"blue": {"gamma": 0.9}, "red": {"lr": 1e-3, "reward_signals": {"rnd": {}}}}},
    )
    plan = take(values, 0.99)
    assert "reward_signals" not in values and values[PER_MODULE]["red"] == {"lr": 1e-3}
    red, blue, green = plan.of("red"), plan.of("blue"), plan.of("green")
    assert red is not None and blue is not None and green is not None
    assert red.names == ["rnd"] and red.signals[0].gamma == 0.95
    assert blue.signals[0].gamma == 0.9  # the run's signals at the policy's own gamma
    assert green.names == ["extrinsic", "curiosity"]


@pytest.mark.substitution(substitutions.PPO_LEARNER)
def test_the_config_gets_value_heads_and_a_learner_only_signals_module(tmp_path: Path) -> None:
    built = built_config(
        tmp_path, "PPO", "box", "discrete", False, minibatch_size=8,
        reward_signals={"extrinsic": {}, "curiosity": {"strength": 0.1}},
    )  # fmt: skip
    specs = built.config.rl_module_spec.rl_module_specs
    heads = specs["default_policy"].model_config["value_heads"]  # (the helper's YAML sorts the keys)
    assert sorted(heads) == ["curiosity", "extrinsic"]
    assert specs[signals_module_id("default_policy")].learner_only
    assert any(f"a value per reward signal: {', '.join(heads)}" in line for line in built.models)


@pytest.mark.parametrize(
    ("run", "extra", "said"),
    [
        ("SAC", {"stock": True}, "reward_signals is computed by envsdk's SAC learner, which stock:"),
        ("PPO", {"stock": True}, "reward_signals is computed by envsdk's PPO learner, which stock:"),
    ],
)
def test_what_cannot_train_with_signals_is_refused_before_start(
    tmp_path: Path, run: str, extra: dict, said: str
) -> None:
    with pytest.raises(UserError) as caught:
        built_config(tmp_path, run, "box", "box", False, reward_signals={"curiosity": {}}, **extra)
    assert said in caught.value.problem


def test_train_exits_2_with_the_line_and_a_suggestion(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    experiment = {
        "exp": {
            "run": "PPO",
            "env": "CartPole-v1",
            "config": {"reward_signals": {"rnd": {"lerning_rate": 1}}},
        }
    }
    path.write_text(yaml.safe_dump(experiment))
    out = run_train(
        ["-f", str(path), "--stop-iters", "1", "--local-dir", str(tmp_path / "results")], timeout=120
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"{path}:5" in out.stderr and "'lerning_rate' is no setting" in out.stderr
    assert "did you mean 'learning_rate'?" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("given", "plain"),
    [
        ({"extrinsic": {}}, True),
        ({"extrinsic": {"strength": 1.0, "gamma": 0.95}}, True),  # the run's gamma below
        ({"extrinsic": {"strength": 1.0, "gamma": 0.9}}, False),
        ({"extrinsic": {"strength": 0.5}}, False),
        ({"extrinsic": {}, "rnd": {}}, False),
    ],
)
def test_only_the_envs_reward_at_strength_1_and_the_policys_gamma_is_plain_ppo(given, plain) -> None:
    """Anything else (another gamma, another strength) takes value heads and GAE per signal."""
    signals = parse(given, "x.yaml:1", 0.95)
    assert signals.only_extrinsic_at_one(0.95) is plain
