"""Each stage of build_config on its own (envsdk.training.build: YAML -> AlgorithmConfig)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from envsdk.config.experiment import Experiment, load_experiments
from envsdk.errors import UserError
from envsdk.substitutions import TABLE
from envsdk.training.build import stages as ac
from envsdk.training.build.parts import Keys
from envsdk.training.hooks.faults import arm_action_check


def _experiment(tmp_path: Path, config: str, run: str = "PPO", env: str = "CartPole-v1") -> Experiment:
    path = tmp_path / "exp.yaml"
    body = textwrap.indent(textwrap.dedent(config).strip(), "    ") if config.strip() else "    {}"
    path.write_text(f"exp:\n  run: {run}\n  env: {env}\n  config:\n{body}\n")
    (exp,) = load_experiments(path)
    return exp


def _translated(exp: Experiment, overrides: dict[str, Any] | None = None) -> Keys:
    return ac.stage_translate(exp, ac.algorithm_class(exp.run), overrides or {})


def test_translate_renames_ray_1_keys_keeps_override_lines_and_takes_search_spaces_out(tmp_path):
    keys = _translated(
        _experiment(tmp_path, "num_workers: 2\nlr: {grid_search: [0.001, 0.01]}\n"), {"gamma": 0.9}
    )
    assert keys.values["num_env_runners"] == 2 and keys.spelled["num_env_runners"] == "num_workers"
    assert keys.values.where("num_env_runners").endswith(":5") and keys.values["gamma"] == 0.9
    assert ("lr",) in keys.search and keys.values["lr"] == 0.001  # the first value stands in for the checks
    assert keys.user_keys == {"num_env_runners", "lr", "gamma"}


def test_values_parse_our_own_blocks_and_size_auto_runners_later(tmp_path):
    exp = _experiment(
        tmp_path, "num_env_runners: auto\nenv_checks: {observation_bounds: error}\nsampler: rllib\n"
    )
    keys = _translated(exp)
    own = ac.stage_values(exp, keys)
    assert own.auto_runners and keys.values["num_env_runners"] == 0
    assert own.env_checks.observation_bounds == "error" and own.sampler == "rllib"
    assert "env_checks" not in keys.values and "sampler" not in keys.values  # taken: not RLlib's keys


def test_values_refuse_a_wrong_value_by_its_line(tmp_path):
    exp = _experiment(tmp_path, "train_batch_size: lots\n")
    keys = _translated(exp)
    with pytest.raises(UserError, match=r"exp.yaml:5: config key 'train_batch_size' is 'lots'"):
        ac.stage_values(exp, keys)


def test_env_applies_horizon_and_dropped_keys_as_wrappers(tmp_path):
    exp = _experiment(tmp_path, "horizon: 50\n")
    keys = _translated(exp)
    own = ac.stage_values(exp, keys)
    plan = ac.stage_env(exp, keys, own)
    assert plan.resolved.name == "CartPole-v1@50-steps" and plan.hooks is not None
    assert "horizon" not in keys.values and plan.evaluation_env is None


def test_each_stage_returns_a_frozen_record_of_its_own():
    """What a stage produces is its return value, not fields it fills on a shared record."""
    import dataclasses

    from envsdk.training.build import parts

    records = [parts.Keys, parts.OwnKeys, parts.EnvPlan, parts.StartedEnv, parts.Networks]
    for record in records:
        assert dataclasses.is_dataclass(record) and record.__dataclass_params__.frozen, record


@pytest.mark.substitution(*TABLE)
def test_the_later_stages_build_a_checked_config_with_our_hooks(tmp_path):
    exp = _experiment(tmp_path, "train_batch_size: 256\n")
    algo_class = ac.algorithm_class(exp.run)
    keys = ac.stage_translate(exp, algo_class, {})
    own = ac.stage_values(exp, keys)
    plan = ac.stage_env(exp, keys, own)
    with ac.stage_start_env(plan, keys.values, own, dry_run=False) as started:
        assert started.env is not None and started.info.first_obs is not None
        ac.stage_evaluation_env(plan, started, keys.values, own)
        networks = ac.stage_models(exp, keys, plan, started)
        assert keys.values["normalize_actions"] is False  # CartPole's actions are discrete
        config = ac.stage_assemble(exp, keys, own, plan, started, networks)
        assert config.train_batch_size_per_learner == 256
        assert keys.default_config.train_batch_size_per_learner != 256  # the defaults stay as they were
        ac.stage_hooks(config, own, plan, networks, keys.values)
        assert arm_action_check in config.callbacks_on_episode_created
        assert ac.stage_sampler(config, own, networks, plan) == "batched"
        models = ac.stage_check_modules(config, started, networks)
        assert models and models[0].startswith("default_policy: Box(4,)")
    built = ac.stage_finish(
        exp, algo_class, config, keys, own, plan, started, sampler="batched", models=models
    )
    assert built.config.algo_class is built.algo_class and built.env_info is started.info


@pytest.mark.substitution("sac-learner", "transition-replay")
def test_finish_puts_our_sac_in_place_of_rllibs(tmp_path):
    built = ac.build_config(_experiment(tmp_path, "", run="SAC", env="Pendulum-v1"), dry_run=True)
    assert built.algo_class.__module__ == "envsdk.training.substitutes.replay.training_step"
    assert built.config.learner_class is ac.SACTorchLearner


@pytest.mark.parametrize(
    ("run", "env", "moved"),
    [("SAC", "Pendulum-v1", True), ("DQN", "CartPole-v1", False), ("PPO", "CartPole-v1", False)],
)
def test_train_batch_size_reaches_the_batch_the_algorithm_reads(tmp_path, capsys, run, env, moved):
    """RLlib 2.60's SAC (and CQL) config sets train_batch_size_per_learner and reads only that one;
    DQN and PPO derive it from train_batch_size."""
    built = ac.build_config(_experiment(tmp_path, "train_batch_size: 256\n", run=run, env=env))
    assert built.config.total_train_batch_size == 256
    said = "config key 'train_batch_size' is 'train_batch_size_per_learner'" in capsys.readouterr().err
    assert said == moved


def test_a_train_batch_size_search_moves_with_it_and_several_learners_are_refused(tmp_path):
    exp = _experiment(tmp_path, "train_batch_size: {grid_search: [64, 128]}\n", run="SAC", env="Pendulum-v1")
    keys = _translated(exp)
    ac.stage_values(exp, keys)
    assert ("train_batch_size_per_learner",) in keys.search and ("train_batch_size",) not in keys.search
    exp = _experiment(tmp_path, "train_batch_size: 64\nnum_learners: 2\n", run="SAC", env="Pendulum-v1")
    keys = _translated(exp)
    with pytest.raises(UserError, match="reads only train_batch_size_per_learner"):
        ac.stage_values(exp, keys)


@pytest.mark.substitution("ppo-learner")
def test_advantage_normalization_reaches_ppos_learner_and_is_refused_elsewhere(tmp_path, monkeypatch):
    built = ac.build_config(_experiment(tmp_path, "advantage_normalization: minibatch\n", run="PPO"))
    assert built.config.learner_config_dict["advantage_normalization"] == "minibatch"
    assert built.config.learner_class is ac.PPOTorchLearner
    exp = _experiment(tmp_path, "advantage_normalization: {grid_search: [batch, minibatch]}\n", run="PPO")
    keys = _translated(exp)
    ac.stage_values(exp, keys)
    assert keys.search[("learner_config_dict", "advantage_normalization")] == {
        "grid_search": ["batch", "minibatch"]
    }
    for config, run, error in [
        ("advantage_normalization: episode\n", "PPO", "must be one of batch, minibatch, got 'episode'"),
        ("advantage_normalization: minibatch\n", "APPO", "a setting of RLlib's PPO learner"),
        ("advantage_normalization: minibatch\n", "DQN", "a setting of RLlib's PPO learner"),
    ]:
        exp = _experiment(tmp_path, config, run=run)
        keys = _translated(exp)
        with pytest.raises(UserError, match=error):
            ac.stage_values(exp, keys)
    monkeypatch.setenv("ENVSDK_STOCK", "ppo-learner")
    exp = _experiment(tmp_path, "advantage_normalization: minibatch\n", run="PPO")
    with pytest.raises(UserError, match="'minibatch' is computed by envsdk's PPO learner, which stock"):
        ac.stage_values(exp, _translated(exp))
    exp = _experiment(tmp_path, "advantage_normalization: batch\n", run="PPO")  # RLlib's own
    ac.stage_values(exp, _translated(exp))


@pytest.mark.substitution("sac-learner")
def test_critic_loss_reaches_sacs_learner_a_search_too_and_is_refused_elsewhere(tmp_path):
    built = ac.build_config(_experiment(tmp_path, "critic_loss: squared\n", run="SAC", env="Pendulum-v1"))
    assert built.config.learner_config_dict["critic_loss"] == "squared"
    assert built.config.learner_class is ac.SACTorchLearner
    exp = _experiment(
        tmp_path, "critic_loss: {grid_search: [huber, squared]}\n", run="SAC", env="Pendulum-v1"
    )
    keys = _translated(exp)
    ac.stage_values(exp, keys)
    assert keys.search[("learner_config_dict", "critic_loss")] == {"grid_search": ["huber", "squared"]}
    for config, run, error in [
        ("critic_loss: mse\n", "SAC", "critic_loss must be one of huber, squared, got 'mse'"),
        ("critic_loss: {grid_search: [huber, l1]}\n", "SAC", "got 'l1'"),
        ("critic_loss: squared\n", "PPO", "critic_loss is a setting of RLlib's SAC learner"),
        ("critic_loss: squared\n", "DQN", "critic_loss is a setting of RLlib's SAC learner"),
    ]:
        exp = _experiment(tmp_path, config, run=run, env="Pendulum-v1")
        keys = _translated(exp)
        with pytest.raises(UserError, match=error):
            ac.stage_values(exp, keys)
