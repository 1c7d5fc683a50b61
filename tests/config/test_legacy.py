"""Ray 0.8-2.x experiment files translated to RLlib 2.60, each change announced (no Ray started)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import gymnasium as gym
import pytest

from envsdk import internals, substitutions
from envsdk.cli.train import main
from envsdk.config import legacy
from envsdk.config.experiment import load_experiments
from envsdk.config.unread import UNREAD
from envsdk.envs.registry import current_version
from envsdk.errors import run_cli
from envsdk.training.build import build_config, valid_keys


def build(tmp_path, text: str, capsys=None):
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    (exp,) = load_experiments(path)
    built = build_config(exp)
    notices = capsys.readouterr().err.splitlines() if capsys else []
    return exp, built.config, [n for n in notices if n.startswith("notice:")]


def experiment(run: str, env: str, config: str) -> str:
    lines = "".join(f"    {line}\n" for line in config.strip().splitlines())
    return f"exp:\n  run: {run}\n  env: {env}\n  config:\n{lines}"


@pytest.mark.parametrize(
    ("config", "notice"),
    [
        ("framework: tf", "framework 'tf' runs as torch"),
        ("framework: tf2", "framework 'tf2' runs as torch"),
        ("framework: tfe", "framework 'tfe' runs as torch"),
        ("use_pytorch: false", "use_pytorch"),
    ],
)
def test_tensorflow_files_run_as_torch(tmp_path, capsys, config, notice):
    _, cfg, notices = build(tmp_path, experiment("PPO", "CartPole-v1", config), capsys)
    assert cfg.framework_str == "torch"
    assert any(notice in n for n in notices), notices


def test_framework_flag_runs_as_torch(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text(experiment("PPO", "CartPole-v1", "num_workers: 0"))
    assert run_cli(main, ["-f", str(path), "--framework", "tf", "--dry-run"]) == 0
    assert "--framework tf" in capsys.readouterr().err


def test_every_retired_id_maps_to_gymnasiums_newest():
    """From gymnasium's registry: in each registered family, every older version maps to the newest."""
    families: dict[str, list[int]] = {}
    for env_id in gym.registry:
        match = re.fullmatch(r"(.+)-v(\d+)", env_id)
        if match:
            families.setdefault(match.group(1), []).append(int(match.group(2)))
    assert len(families) > 10
    for name, versions in families.items():
        newest = f"{name}-v{max(versions)}"
        for old in range(max(versions)):
            assert current_version(f"{name}-v{old}") == newest
    for old, new in [
        ("Pendulum-v0", "Pendulum-v1"),
        ("FrozenLake-v0", "FrozenLake-v1"),
        ("Taxi-v2", "Taxi-v3"),
    ]:
        assert current_version(old) == new
    assert current_version("NoSuchEnv-v0") is None


def test_retired_env_id_trains_under_its_current_name(tmp_path, capsys):
    _, cfg, notices = build(tmp_path, experiment("PPO", "Pendulum-v0", "num_workers: 0"), capsys)
    assert cfg.env == "Pendulum-v1"
    assert any("'Pendulum-v0' is retired: using 'Pendulum-v1'" in n for n in notices), notices


def test_horizon_is_a_time_limit_and_soft_horizon_is_dropped(tmp_path, capsys):
    text = experiment("PPO", "Pendulum-v1", "horizon: 20\nsoft_horizon: true\nno_done_at_end: true")
    _, cfg, notices = build(tmp_path, text, capsys)
    assert cfg.env != "Pendulum-v1"  # our creator with the time limit, registered under its own name
    made = internals.registered_env_creator(cfg.env)(cfg.env_config)
    made.reset(seed=0)
    ends = [made.step(made.action_space.sample())[3] for _ in range(20)]  # Pendulum's own limit is 200
    assert ends == [False] * 19 + [True]
    assert any("time limit of 20 steps" in n for n in notices)
    assert any("'soft_horizon' dropped" in n for n in notices)
    assert any("'no_done_at_end' dropped" in n for n in notices)


def test_new_stack_switches_of_ray_2_x_are_dropped(tmp_path, capsys):
    text = experiment(
        "PPO", "CartPole-v1",
        "_enable_new_api_stack: true\n_enable_learner_api: true\n_enable_rl_module_api: true\n"
        "_disable_execution_plan_api: true\nenable_connectors: true",
    )  # fmt: skip
    _, cfg, notices = build(tmp_path, text, capsys)
    assert cfg.enable_rl_module_and_learner and cfg.enable_env_runner_and_connector_v2
    for key in ("_enable_new_api_stack", "_enable_learner_api", "_enable_rl_module_api", "enable_connectors"):
        assert any(f"'{key}' dropped" in n for n in notices), key


def test_renamed_keys_land_on_their_2_60_settings(tmp_path, capsys):
    _, sac, _ = build(
        tmp_path,
        experiment(
            "SAC", "Pendulum-v1",
            "optimization: {actor_learning_rate: 0.001, critic_learning_rate: 0.002,\n"
            "  entropy_learning_rate: 0.003}\n"
            "timesteps_per_iteration: 500\nlearning_starts: 100\nsample_batch_size: 4",
        ),
    )  # fmt: skip
    assert (sac.actor_lr, sac.critic_lr, sac.alpha_lr) == (0.001, 0.002, 0.003)
    assert sac.min_sample_timesteps_per_iteration == 500
    assert sac.num_steps_sampled_before_learning_starts == 100
    assert sac.rollout_fragment_length == 4
    _, appo, notices = build(
        tmp_path,
        experiment("APPO", "CartPole-v1", "minibatch_buffer_size: 3\nvtrace: false\nnum_workers: 0"),
        capsys,
    )
    assert appo.circular_buffer_num_batches == 3 and appo.vtrace is True
    assert any("vtrace: false" in n for n in notices)
    _, _, notices = build(tmp_path, experiment("IMPALA", "CartPole-v1", "minibatch_buffer_size: 3"), capsys)
    assert any("'minibatch_buffer_size' dropped: IMPALA in RLlib 2.60 has no" in n for n in notices), notices


def test_exploration_config_becomes_the_closest_setting(tmp_path, capsys):
    _, dqn, notices = build(
        tmp_path,
        experiment(
            "DQN", "CartPole-v1",
            "exploration_config: {type: EpsilonGreedy, initial_epsilon: 1.0, final_epsilon: 0.05, "
            "epsilon_timesteps: 5000}",
        ),
        capsys,
    )  # fmt: skip
    assert dqn.epsilon == [[0, 1.0], [5000, 0.05]]
    assert not any("dropped" in n for n in notices), notices
    _, ppo, notices = build(
        tmp_path, experiment("PPO", "CartPole-v1", "exploration_config: {type: StochasticSampling}"), capsys
    )
    assert ppo.explore is True
    assert not any("dropped" in n for n in notices), notices


@pytest.mark.substitution(substitutions.PPO_LEARNER)
def test_ray_1_curiosity_becomes_the_curiosity_reward_signal(tmp_path, capsys):
    _, config, notices = build(
        tmp_path,
        experiment(
            "PPO", "CartPole-v1",
            "exploration_config: {type: Curiosity, eta: 0.2, lr: 0.002, feature_dim: 64, beta: 0.3,"
            " forward_net_hiddens: [64], sub_exploration: {type: StochasticSampling}}",
        ),
        capsys,
    )  # fmt: skip
    (line,) = [n for n in notices if "Curiosity exploration" in n]
    assert (
        "curiosity: {strength: 0.2 (eta), learning_rate: 0.002 (lr), encoding_size: 64 (feature_dim)}" in line
    )
    assert "dropped beta (" in line and "forward_net_hiddens (" in line and "sub_exploration (" in line
    signals = config.rl_module_spec.rl_module_specs["default_policy@reward_signals"].model_config
    (curiosity,) = [s for s in signals["reward_signals"] if s["name"] == "curiosity"]
    assert (curiosity["strength"], curiosity["learning_rate"], curiosity["hidden_units"]) == (0.2, 0.002, 64)


@pytest.mark.parametrize(
    ("run", "exploration", "dropped"),
    [
        (
            "DQN",
            "{type: ParameterNoise, random_timesteps: 10000, initial_stddev: 1.0}",
            "initial_stddev, random_",
        ),
        ("DQN", "{type: EpsilonGreedy, epsilon_timesteps: 500, warmup_timesteps: 100}", "warmup_timesteps"),
    ],
)
def test_exploration_settings_with_no_new_stack_equivalent_are_named(
    tmp_path, capsys, run, exploration, dropped
):
    env = "Pendulum-v1" if run == "SAC" else "CartPole-v1"
    _, _, notices = build(tmp_path, experiment(run, env, f"exploration_config: {exploration}"), capsys)
    assert any(f"dropped {dropped}" in n for n in notices), notices


@pytest.mark.substitution(substitutions.TRANSITION_REPLAY, substitutions.BATCHED_SAMPLER)
@pytest.mark.parametrize(
    ("run", "kind"), [("SAC", "StochasticSampling"), ("DQN", "EpsilonGreedy"), ("SAC", "")]
)
def test_random_timesteps_are_random_steps(tmp_path, capsys, run, kind):
    """Ray 1.x's warm-up (its policy's own exploration after N steps of uniformly random actions)."""
    from envsdk.training.substitutes.replay.training_step import RANDOM_STEPS

    env = "Pendulum-v1" if run == "SAC" else "CartPole-v1"
    exploration = f"{{type: {kind}, random_timesteps: 1000}}" if kind else "{random_timesteps: 1000}"
    _, cfg, notices = build(tmp_path, experiment(run, env, f"exploration_config: {exploration}"), capsys)
    assert cfg.learner_config_dict[RANDOM_STEPS] == 1000
    assert any("random_timesteps is random_steps: 1000" in n for n in notices), notices


def test_mean_std_filter_is_a_connector(tmp_path, capsys):
    import functools

    from envsdk.training.hooks.observation_filter import mean_std_filter

    _, cfg, notices = build(
        tmp_path, experiment("PPO", "CartPole-v1", "observation_filter: MeanStdFilter"), capsys
    )
    made = internals.env_to_module_connector(cfg)
    assert isinstance(made, functools.partial) and made.func is mean_std_filter
    assert any("observation_filter: MeanStdFilter" in n for n in notices)


def test_settable_properties_are_config_keys():
    from ray.rllib.algorithms.bc import BCConfig

    keys = valid_keys(BCConfig())
    assert "train_batch_size_per_learner" in keys and "_train_batch_size_per_learner" not in keys


@pytest.mark.parametrize(("old", "new"), [("A2C", "PPO"), ("PG", "PPO"), ("A3C", "APPO"), ("DDPG", "SAC"),
                                          ("TD3", "SAC"), ("APEX", "DQN"), ("SIMPLEQ", "DQN")])  # fmt: skip
def test_translate_algo_runs_the_nearest_algorithm(tmp_path, capsys, old, new):
    env = "Pendulum-v1" if new == "SAC" else "CartPole-v1"
    path = tmp_path / "exp.yaml"
    path.write_text(experiment(old, env, "num_workers: 0\nlr: 0.001"))
    assert run_cli(main, ["-f", str(path), "--dry-run"]) == 2
    assert f"the nearest is {new}" in capsys.readouterr().err
    assert run_cli(main, ["-f", str(path), "--dry-run", "--translate-algo"]) == 0
    assert f"'run: {old}' runs as {new}" in capsys.readouterr().err


def test_legacy_table_lists_every_translation():
    table = legacy.legacy_table_markdown()
    for key in [
        *legacy.CONFIG_KEYS,
        *legacy.DROPPED_CONFIG_KEYS,
        *legacy.REWRITES,
        *legacy.REMOVED_ALGORITHMS,
    ]:
        assert f"`{key}`" in table or f"`run: {key}`" in table, key
    from tests.helpers import ROOT

    assert table.strip() in (ROOT / "docs" / "yaml.md").read_text(), (
        "docs/yaml.md's table: python -m envsdk legacy-table"
    )


# ---- Ray 1.x ModelV2 `model:` options -------------------------------------------------------


def test_every_modelv2_option_has_a_new_stack_answer():
    """Each key of RLlib's ModelV2 MODEL_DEFAULTS is a DefaultModelConfig field, renamed, dropped, or
    refused unless ModelV2's default; a key RLlib adds later fails here until it has its row."""
    import dataclasses

    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.models.catalog import MODEL_DEFAULTS

    fields = {f.name for f in dataclasses.fields(DefaultModelConfig)}
    answered = (
        fields
        | set(legacy.MODEL_OPTIONS)
        | set(legacy.DROPPED_MODEL_OPTIONS)
        | set(legacy.UNSUPPORTED_MODEL_OPTIONS)
        | {"lstm_use_prev_action_reward", "custom_model", "custom_model_config"}
    )
    assert set(MODEL_DEFAULTS) <= answered, set(MODEL_DEFAULTS) - answered
    assert set(legacy.MODEL_OPTIONS.values()) <= fields
    assert not (set(legacy.MODEL_OPTIONS) | set(legacy.DROPPED_MODEL_OPTIONS)) & fields
    for key, unsupported in legacy.UNSUPPORTED_MODEL_OPTIONS.items():
        assert MODEL_DEFAULTS[key] == unsupported.default, key


def test_modelv2_options_become_the_default_models_settings(tmp_path, capsys):
    """A Ray 1.x `model:` block (Atari preprocessor keys, post_fcnet layers, old initializer names,
    the combined LSTM switch) trains the default model with each setting where it now lives."""
    text = experiment(
        "PPO", "CartPole-v1",
        "model:\n"
        "  fcnet_hiddens: [32]\n"
        "  post_fcnet_hiddens: [16]\n"
        "  post_fcnet_activation: elu\n"
        "  fcnet_weights_initializer: orthogonal_\n"
        "  fcnet_weights_initializer_config: {gain: 0.5}\n"
        "  use_lstm: true\n"
        "  lstm_use_prev_action_reward: true\n"
        "  dim: 42\n"
        "  grayscale: true\n"
        "  _time_major: true\n"
        "  use_attention: false\n"
        "  attention_dim: 64\n"
        "  custom_model: null\n",
    )  # fmt: skip
    _, config, notices = build(tmp_path, text, capsys)
    mc = config.model_config
    assert mc["fcnet_hiddens"] == [32] and mc["head_fcnet_hiddens"] == [16]
    assert mc["head_fcnet_activation"] == "elu" and mc["fcnet_kernel_initializer"] == "orthogonal_"
    assert mc["fcnet_kernel_initializer_kwargs"] == {"gain": 0.5}
    assert mc["lstm_use_prev_action"] is True and mc["lstm_use_prev_reward"] is True
    for gone in ("dim", "grayscale", "_time_major", "use_attention", "attention_dim", "post_fcnet_hiddens"):
        assert gone not in mc, gone
    said = "\n".join(notices)
    for fragment in (
        "'post_fcnet_hiddens' is now 'head_fcnet_hiddens'",
        "'dim' dropped: with an Atari env it sizes atari_preprocessing",
        "'lstm_use_prev_action_reward' is now 'lstm_use_prev_action' and 'lstm_use_prev_reward'",
        "'use_attention: False' dropped",
        "'attention_dim' dropped",
    ):
        assert fragment in said, (fragment, said)
    (exp,) = load_experiments(tmp_path / "exp.yaml")  # the model line train.py prints reads them back
    (line,) = build_config(exp).models
    network = "Box(4,) -> MLP [32] tanh -> LSTM 256 -> heads MLP [16] elu"
    assert line == f"default_policy: {network}; actions Discrete(2)"


@pytest.mark.parametrize(
    ("option", "fix"),
    [
        ("use_attention: true", "use_lstm: true"),
        ("no_final_linear: true", "ends in a linear layer"),
        ("custom_action_dist: my_dist", "returns its own distribution"),
        ("custom_preprocessor: my_prep", "ObservationWrapper"),
    ],
)
def test_a_modelv2_option_the_default_model_cannot_honour_exits_2(tmp_path, capsys, option, fix):
    path = tmp_path / "exp.yaml"
    path.write_text(experiment("PPO", "CartPole-v1", f"model:\n  fcnet_hiddens: [8]\n  {option}"))
    assert run_cli(main, ["-f", str(path), "--dry-run"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("notice:")]
    key = option.split(":")[0]
    assert (
        err[0] == f"error: {path}:7: model option '{key}' has no equivalent on RLlib 2.60's new API stack"
    ), err
    assert fix in err[1]


def test_a_modelv2_option_and_its_new_name_together_exit_2(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text(
        experiment("PPO", "CartPole-v1", "model:\n  head_fcnet_hiddens: [8]\n  post_fcnet_hiddens: [4]")
    )
    assert run_cli(main, ["-f", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert (
        f"{path}:7: model option 'post_fcnet_hiddens' sets 'head_fcnet_hiddens', which {path}:6 sets" in err
    )


@pytest.mark.parametrize(
    ("in_file", "on_command_line"),
    [
        ("timesteps_per_iteration", "min_sample_timesteps_per_iteration"),
        ("min_sample_timesteps_per_iteration", "timesteps_per_iteration"),
    ],
)
def test_a_command_line_override_wins_over_the_files_spelling_of_its_setting(
    tmp_path, capsys, in_file, on_command_line
):
    path = tmp_path / "exp.yaml"
    path.write_text(experiment("DQN", "CartPole-v1", f"{in_file}: 1000\nlr: 0.001"))
    (exp,) = load_experiments(path)
    built = build_config(exp, {on_command_line: 300})
    assert built.config.min_sample_timesteps_per_iteration == 300
    assert f"notice: --config.{on_command_line} overrides {path}:5: '{in_file}' (the same setting)" in (
        capsys.readouterr().err
    )
    path.write_text(experiment("DQN", "CartPole-v1", f"{in_file}: 1000\n{on_command_line}: 300"))
    assert run_cli(main, ["-f", str(path), "--dry-run"]) == 2  # two spellings in one file: which?
    assert f"{path}:6: '{on_command_line}' sets 'min_sample_timesteps_per_iteration', which {path}:5" in (
        capsys.readouterr().err
    )


def test_a_renamed_modelv2_option_is_checked_under_its_new_name(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text(experiment("PPO", "CartPole-v1", "model:\n  post_fcnet_hiddens: 16"))
    assert run_cli(main, ["-f", str(path), "--dry-run"]) == 2
    assert f"{path}:6: model_config key 'head_fcnet_hiddens' is 16" in capsys.readouterr().err


def test_search_spaces_over_model_options_vary_the_new_stacks_model(tmp_path):
    """A Ray 1.x grid over `model:` keys reaches `model_config`, which the new stack's modules read
    (under `model` Tune varied a dict nothing read: every trial trained the same network)."""
    text = experiment(
        "PPO", "CartPole-v1",
        "model:\n"
        "  fcnet_hiddens: {grid_search: [[8], [16]]}\n"
        "  post_fcnet_hiddens: {choice: [[4], [2]]}\n"
        "  dim: {grid_search: [42, 84]}\n"
        "model_config:\n"
        "  fcnet_activation: {grid_search: [relu, tanh]}",
    )  # fmt: skip
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    (exp,) = load_experiments(path)
    built = build_config(exp)
    assert set(built.search_space) == {
        ("model_config", "fcnet_hiddens"), ("model_config", "head_fcnet_hiddens"),
        ("model_config", "fcnet_activation"),
    }  # fmt: skip
    space = built.param_space()
    assert space["_model_config"]["fcnet_hiddens"] == {"grid_search": [[8], [16]]}
    assert type(space["_model_config"]["head_fcnet_hiddens"]).__name__ == "Categorical"
    from envsdk.training.run.resources import trial_count

    assert trial_count(1, built.search_space) == 4  # dim's grid is dropped with dim


def test_a_grid_over_a_plugins_options_reaches_its_model_config(tmp_path):
    """custom_model_config of an RLModule plugin is its model_config: a grid there varies the module."""
    import shutil

    from tests.helpers import ROOT

    shutil.copytree(ROOT / "models", tmp_path / "models")
    options = "custom_model_config: {hidden: {grid_search: [8, 16]}}"
    text = experiment("PPO", "CartPole-v1", f"model:\n  custom_model: tinynet\n  {options}")
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    (exp,) = load_experiments(path)
    built = build_config(exp)
    assert built.search_space == {("model_config", "hidden"): {"grid_search": [8, 16]}}
    assert built.param_space()["_model_config"]["hidden"] == {"grid_search": [8, 16]}


def test_sac_networks_say_what_they_drop_and_which_wins(tmp_path, capsys):
    """Ray 1.x SAC's two network blocks become one model_config: a setting lost, or one block
    overriding the other, is said (ModelV2's empty defaults are dropped quietly)."""
    text = experiment(
        "SAC", "Pendulum-v1",
        "Q_model: {fcnet_hiddens: [32, 32], fcnet_activation: relu, post_fcnet_hiddens: [],\n"
        "  custom_model: null}\n"
        "policy_model: {fcnet_hiddens: [16], fcnet_activation: relu, post_fcnet_hiddens: [8]}",
    )  # fmt: skip
    _, config, notices = build(tmp_path, text, capsys)
    assert config.model_config["fcnet_hiddens"] == [16]
    said = "\n".join(notices)
    assert "'Q_model': Q_model/policy_model are one model_config on the new API stack\n" in said + "\n"
    assert "new API stack; ['post_fcnet_hiddens'] dropped" in said
    assert "'policy_model' sets model_config.fcnet_hiddens to [16], over [32, 32] from 'Q_model'" in said
    assert "fcnet_activation to" not in said  # the same value in both: nothing to say


# ---- keys RLlib 2.60 takes and its new API stack never reads ---------------------------------


@pytest.mark.parametrize(
    ("run", "config", "named"),
    [
        ("DQN", "noisy: true\nsigma0: 0.3", ["'noisy'", "'sigma0'"]),
        ("DQN", "exploration_config: {type: ParameterNoise}", ["'noisy' (the file's 'exploration_config')"]),
        ("IMPALA", "opt_type: rmsprop\ndecay: 0.9\nepsilon: 0.1", ["'decay'", "'epsilon'", "'opt_type'"]),
        ("APPO", "target_worker_clipping: 1.5\nlr: 0.001", ["'target_worker_clipping'"]),
    ],
)
def test_a_key_the_new_stack_never_reads_is_named(tmp_path, capsys, run, config, named):
    _, built, notices = build(tmp_path, experiment(run, "CartPole-v1", config), capsys)
    unread = [n for n in notices if "is not read on RLlib 2.60's new API stack" in n]
    assert [n.split("config key ")[1].split(" is not read")[0] for n in unread] == named
    assert getattr(built, named[0].split("'")[1]) is not None  # the value still reaches RLlib's config


def test_keys_the_new_stack_reads_say_nothing(tmp_path, capsys):
    """DQN's `epsilon` is its exploration schedule (read); IMPALA's is RMSProp's (unread)."""
    _, _, notices = build(
        tmp_path, experiment("DQN", "CartPole-v1", "epsilon: [[0, 1.0], [500, 0.1]]"), capsys
    )
    assert not [n for n in notices if "new API stack" in n]


# Readers the scan finds that run on the old API stack only, or read another key of the same name.
KNOWN_OLD_STACK_READERS: dict[str, set[tuple[str, str]]] = {
    "learner_queue_timeout": {("/algorithms/impala/impala.py", "make_learner_thread")},  # old stack's
    # IMPALA.setup reads it under `if not self.config.enable_rl_module_and_learner:`
    "replay_buffer_num_slots": {("/algorithms/impala/impala.py", "setup")},
    "epsilon": {("/algorithms/dqn/default_dqn_rl_module.py", "setup")},  # DQN's exploration epsilon
    "noisy": {("/utils/test_utils.py", "_test")},  # RLlib's test helper (policies)
}


@pytest.mark.parametrize("key", sorted(UNREAD))
def test_rllibs_new_stack_code_reads_none_of_the_unread_keys(key):
    """The table's assumption, for each key: no new-stack module of RLlib reads it from a config
    (``config.KEY``, ``config["KEY"]``, ``.get("KEY"``).  When this fails, RLlib reads the key
    again and its row in envsdk/config/unread.py goes."""
    known = KNOWN_OLD_STACK_READERS.get(key, set())
    readers = [r for r in _new_stack_reads()[key] if (r[0], r[1]) not in known]
    assert not readers, readers


@functools.cache
def _new_stack_reads() -> dict[str, list[tuple[str, str, int, str]]]:
    """key -> (file, function, line number, line) of each place in RLlib outside the old stack's
    modules and ``*_old_api_stack`` functions that reads it from a config."""
    import ray.rllib

    root = Path(ray.rllib.__file__).parent
    old_stack = re.compile(
        r"(_tf_|tf_|_policy|/policy/|/models/|/evaluation/|/execution/|/utils/exploration/|/tests/"
        r"|/examples/|_old_api_stack|dreamerv3)"
    )
    names = "|".join(UNREAD)
    read = re.compile(rf"(?:config\.|config\[[\"']|\.get\([\"']|\)\.)({names})\b")
    found: dict[str, list[tuple[str, str, int, str]]] = {key: [] for key in UNREAD}
    for path in root.rglob("*.py"):
        rel = "/" + str(path.relative_to(root))
        if old_stack.search(rel):
            continue
        text = path.read_text()
        if not read.search(text):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for match in read.finditer(line):
                function = _function_of(text, number)
                if "_old_api_stack" not in function:
                    found[match.group(1)].append((rel, function, number, line.strip()))
    return found


def _function_of(text: str, number: int) -> str:
    """The name of the innermost ``def`` above line ``number`` (old-stack code paths are named so)."""
    for line in reversed(text.splitlines()[:number]):
        found = re.match(r"\s*def (\w+)", line)
        if found:
            return found.group(1)
    return ""
