"""Each stage of build_config on its own (envsdk.training.build: YAML -> AlgorithmConfig)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from envsdk.config.experiment import load_experiments
from envsdk.errors import UserError
from envsdk.substitutions import TABLE
from envsdk.training.build import stages as ac
from envsdk.training.guards import arm_action_check


def _build(tmp_path: Path, config: str, run: str = "PPO", env: str = "CartPole-v1") -> ac.Build:
    path = tmp_path / "exp.yaml"
    body = textwrap.indent(textwrap.dedent(config).strip(), "    ") if config.strip() else "    {}"
    path.write_text(f"exp:\n  run: {run}\n  env: {env}\n  config:\n{body}\n")
    (exp,) = load_experiments(path)
    return ac.Build(exp=exp, algo_class=ac.algorithm_class(run))


def test_translate_renames_ray_1_keys_keeps_override_lines_and_takes_search_spaces_out(tmp_path):
    b = _build(tmp_path, "num_workers: 2\nlr: {grid_search: [0.001, 0.01]}\n")
    ac.stage_translate(b, {"gamma": 0.9})
    assert b.values["num_env_runners"] == 2 and b.spelled["num_env_runners"] == "num_workers"
    assert b.values.where("num_env_runners").endswith(":5") and b.values["gamma"] == 0.9
    assert ("lr",) in b.search and b.values["lr"] == 0.001  # the first value stands in for the checks
    assert b.user_keys == {"num_env_runners", "lr", "gamma"}


def test_values_parse_our_own_blocks_and_size_auto_runners_later(tmp_path):
    b = _build(tmp_path, "num_env_runners: auto\nenv_checks: {observation_bounds: error}\n")
    ac.stage_translate(b, {})
    ac.stage_values(b)
    assert b.auto_runners and b.values["num_env_runners"] == 0
    assert b.env_checks.observation_bounds == "error" and "env_checks" not in b.values


def test_values_refuse_a_wrong_value_by_its_line(tmp_path):
    b = _build(tmp_path, "train_batch_size: lots\n")
    ac.stage_translate(b, {})
    with pytest.raises(UserError, match=r"exp.yaml:5: config key 'train_batch_size' is 'lots'"):
        ac.stage_values(b)


def test_env_applies_horizon_and_dropped_keys_as_wrappers(tmp_path):
    b = _build(tmp_path, "horizon: 50\n")
    ac.stage_translate(b, {})
    ac.stage_values(b)
    ac.stage_env(b)
    assert b.resolved.name == "CartPole-v1@50-steps" and b.env_hooks is not None
    assert "horizon" not in b.values and b.evaluation_env is None


@pytest.mark.substitution(*TABLE)
def test_the_later_stages_build_a_checked_config_with_our_hooks(tmp_path):
    b = _build(tmp_path, "train_batch_size: 256\n")
    ac.stage_translate(b, {})
    ac.stage_values(b)
    ac.stage_env(b)
    with ac.stage_start_env(b):
        assert b.env is not None and b.info.first_obs is not None
        ac.stage_evaluation_env(b)
        ac.stage_models(b)
        assert b.values["normalize_actions"] is False  # CartPole's actions are discrete
        ac.stage_assemble(b)
        assert b.config.train_batch_size_per_learner == 256
        ac.stage_hooks(b)
        assert arm_action_check in b.config.callbacks_on_episode_created
        ac.stage_check_modules(b)
        assert b.models and b.models[0].startswith("default_policy: Box(4,)")
    built = ac.stage_finish(b)
    assert built.config.algo_class is built.algo_class and built.env_info is b.info


@pytest.mark.substitution("sac-learner", "transition-replay")
def test_finish_puts_our_sac_in_place_of_rllibs(tmp_path):
    built = ac.build_config(_build(tmp_path, "", run="SAC", env="Pendulum-v1").exp, dry_run=True)
    assert built.algo_class.__module__ == "envsdk.training.off_policy"
    assert built.config.learner_class is ac.SACTorchLearner


@pytest.mark.parametrize(
    ("run", "env", "moved"),
    [("SAC", "Pendulum-v1", True), ("DQN", "CartPole-v1", False), ("PPO", "CartPole-v1", False)],
)
def test_train_batch_size_reaches_the_batch_the_algorithm_reads(tmp_path, capsys, run, env, moved):
    """RLlib 2.60's SAC (and CQL) config sets train_batch_size_per_learner and reads only that one;
    DQN and PPO derive it from train_batch_size."""
    b = _build(tmp_path, "train_batch_size: 256\n", run=run, env=env)
    ac.stage_translate(b, {})
    ac.stage_values(b)
    ac.stage_env(b)
    with ac.stage_start_env(b):
        ac.stage_evaluation_env(b)
        ac.stage_models(b)
        ac.stage_assemble(b)
    assert b.config.total_train_batch_size == 256
    said = "config key 'train_batch_size' is 'train_batch_size_per_learner'" in capsys.readouterr().err
    assert said == moved


def test_a_train_batch_size_search_moves_with_it_and_several_learners_are_refused(tmp_path):
    b = _build(tmp_path, "train_batch_size: {grid_search: [64, 128]}\n", run="SAC", env="Pendulum-v1")
    ac.stage_translate(b, {})
    ac.stage_values(b)
    assert ("train_batch_size_per_learner",) in b.search and ("train_batch_size",) not in b.search
    b = _build(tmp_path, "train_batch_size: 64\nnum_learners: 2\n", run="SAC", env="Pendulum-v1")
    ac.stage_translate(b, {})
    with pytest.raises(UserError, match="reads only train_batch_size_per_learner"):
        ac.stage_values(b)


@pytest.mark.substitution("sac-learner")
def test_critic_loss_reaches_sacs_learner_a_search_too_and_is_refused_elsewhere(tmp_path):
    built = ac.build_config(_build(tmp_path, "critic_loss: squared\n", run="SAC", env="Pendulum-v1").exp)
    assert built.config.learner_config_dict["critic_loss"] == "squared"
    assert built.config.learner_class is ac.SACTorchLearner
    b = _build(tmp_path, "critic_loss: {grid_search: [huber, squared]}\n", run="SAC", env="Pendulum-v1")
    ac.stage_translate(b, {})
    ac.stage_values(b)
    assert b.search[("learner_config_dict", "critic_loss")] == {"grid_search": ["huber", "squared"]}
    for config, run, error in [
        ("critic_loss: mse\n", "SAC", "critic_loss must be one of huber, squared, got 'mse'"),
        ("critic_loss: {grid_search: [huber, l1]}\n", "SAC", "got 'l1'"),
        ("critic_loss: squared\n", "PPO", "critic_loss is a setting of RLlib's SAC learner"),
        ("critic_loss: squared\n", "DQN", "critic_loss is a setting of RLlib's SAC learner"),
    ]:
        b = _build(tmp_path, config, run=run, env="Pendulum-v1")
        ac.stage_translate(b, {})
        with pytest.raises(UserError, match=error):
            ac.stage_values(b)
