"""Every YAML value is checked before anything starts; the review's bug list (issue 12), each with a test.

Mistakes exit with status 2 and one or two lines, in seconds, with no Ray, no
game and no results folder started.  The bugs a) to j) of the review each
have a test here (or, for the Unity ones, in test_unity_training.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from envsdk.cli.train import load, main, parser
from envsdk.config.experiment import load_experiments
from envsdk.errors import run_cli
from envsdk.training.build.translate import SHAPES
from tests.helpers import PLAYERS, ROOT, player_pids, progress_rows, trial_dirs

BASE = "x:\n  run: PPO\n  env: CartPole-v1\n"

MISTAKES = {
    "misspelt-stop-key": (BASE + "  stop: {episode_reward_meen: 100}\n",
                          ["bad.yaml:4", "unknown metric 'episode_reward_meen'", "'episode_reward_mean'"]),
    "misspelt-new-stop-key": (BASE + "  stop: {env_runners/episode_return_meen: 1}\n",
                              ["'env_runners/episode_return_mean'"]),
    "duplicate-key": (BASE + "  config:\n    lr: 0.001\n    lr: 0.01\n",
                      ["bad.yaml:5", "'lr' is given twice", "line 6"]),
    "duplicate-experiment-key": (BASE + "  run: DQN\n", ["'run' is given twice"]),
    "word-for-a-count": (BASE + "  config: {num_workers: two}\n",
                         ["'num_workers' (now 'num_env_runners') is 'two'", "an integer"]),
    "bool-for-a-count": (BASE + "  config: {num_env_runners: true}\n", ["is True, but it takes an integer"]),
    "negative-batch": (BASE + "  config: {train_batch_size: -5}\n", ["'train_batch_size' is -5", ">= 1"]),
    "gamma-above-one": (BASE + "  config: {gamma: 1.5}\n", ["'gamma' is 1.5", "<= 1.0"]),
    "lr-a-word": (BASE + "  config: {lr: fast}\n", ["'lr' is 'fast'", "a number or a schedule"]),
    "bad-lr-schedule": (BASE + "  config: {lr: [[0, 0.1], [100]]}\n", ["a number or a schedule"]),
    "minibatch-over-batch": (BASE + "  config: {train_batch_size: 100, minibatch_size: 500}\n",
                             ["RLlib rejected the config"]),
    "unknown-scheduler-setting": (BASE + "  scheduler: {type: ASHA, grace_periood: 3}\n",
                                  ["scheduler 'asha' has no setting 'grace_periood'", "'grace_period'"]),
    "scheduler-time-attr": (BASE + "  scheduler: {type: ASHA, time_attr: training_iteraton}\n",
                            ["unknown metric 'training_iteraton'", "'training_iteration'"]),
    "uniform-bounds": (BASE + "  config: {lr: {uniform: [0.1, 0.01]}}\n", ["'uniform' needs lower < upper"]),
    "loguniform-zero": (BASE + "  config: {lr: {loguniform: [0, 0.1]}}\n", ["lower bound > 0"]),
    "grid-of-wrong-type": (BASE + "  config: {num_epochs: {grid_search: [1, many]}}\n",
                           ["'num_epochs' is 'many'"]),
    "score-attr-typo": (BASE + "  checkpoint_score_attr: min-episode_reward_maen\n",
                        ["unknown metric 'episode_reward_maen' for checkpoint_score_attr"]),
    "stop-value-a-word": (BASE + "  stop: {training_iteration: ten}\n",
                          ["stop value of 'training_iteration'"]),
    "zero-samples": (BASE + "  num_samples: 0\n", ["'num_samples' is 0", "an integer >= 1"]),
    "negative-checkpoint-freq": (BASE + "  checkpoint_freq: -1\n", ["'checkpoint_freq' is -1"]),
    "keep-zero-checkpoints": (BASE + "  keep_checkpoints_num: 0\n", ["'keep_checkpoints_num' is 0"]),
    "two-different-envs": (BASE + "  config: {env: Pendulum-v1}\n",
                           ["env 'CartPole-v1' here, but 'Pendulum-v1'"]),
    "stop-not-a-mapping": (BASE + "  stop: 100\n", ["'stop' must be a mapping"]),
    "misspelt-model-config-key": (BASE + "  config: {model_config: {fcnet_hiddenz: [8]}}\n",
                                  ["unknown model_config key 'fcnet_hiddenz'", "'fcnet_hiddens'"]),
    "layer-sizes-a-number": (BASE + "  config:\n    model_config:\n      fcnet_hiddens: 64\n",
                             ["bad.yaml:6", "'fcnet_hiddens' is 64", "a list of layer sizes"]),
    "old-model-activation-typo": (BASE + "  config:\n    model:\n      fcnet_activation: rellu\n",
                                  ["bad.yaml:6", "'fcnet_activation' is 'rellu'", "'relu'"]),
    "activation-class-lower-case": (BASE + "  config: {model_config: {fcnet_activation: leaky_relu}}\n",
                                    ["'fcnet_activation' is 'leaky_relu'", "write 'LeakyReLU'"]),
    "initializer-not-in-place": (BASE + "  config: {model_config: {fcnet_kernel_initializer: orthogonal}}\n",
                                 ["in-place initializer", "'orthogonal_'"]),
    "conv-filters-flat": (BASE + "  config: {model_config: {conv_filters: [16, 4, 2]}}\n",
                          ["[out_channels, kernel, stride]"]),
    "grid-of-wrong-layer-sizes": (BASE + "  config: {model_config: {fcnet_hiddens: {grid_search: [[8], 8]}}}",
                                  ["'fcnet_hiddens' is 8"]),
    "lstm-cell-zero": (BASE + "  config: {model_config: {use_lstm: true, lstm_cell_size: 0}}\n",
                       ["model_config key 'lstm_cell_size' is 0", ">= 1"]),
    "eval-config-value": (BASE + "  config:\n    lr: 0.001\n    evaluation_config: {explore: often}\n",
                          ["bad.yaml:6", "'explore' is 'often'", "a boolean", "'explore: true'"]),
    "eval-config-model": (BASE + "  config:\n    evaluation_config: {model: {fcnet_hiddens: [8]}}\n",
                          ["bad.yaml:5", "evaluation_config.model: evaluation runs the trained network",
                           "set the network under config.model"]),
    "eval-config-model-config": (BASE + "  config:\n    evaluation_config:\n      model_config: {}\n",
                                 ["bad.yaml:5", "evaluation_config.model_config:"]),
    "eval-env-other-spaces": (BASE + "  config:\n    evaluation_config: {env: Acrobot-v1}\n",
                              ["bad.yaml:5", "evaluation_config.env 'Acrobot-v1' has observations Box(6,),",
                               "but the trained network's are Box(4,)"]),
    "eval-env-unknown": (BASE + "  config:\n    evaluation_config: {env: CartPol-v1}\n",
                         ["bad.yaml:5: evaluation_config.env: unknown env 'CartPol-v1'", "CartPole-v1"]),
    "batch-mode-word": (BASE + "  config: {batch_mode: complete}\n",
                        ["'batch_mode' is 'complete'", "truncate_episodes or complete_episodes"]),
    "policies-for-one-agent": (BASE + "  config:\n    multiagent: {policies: [red, blue]}\n",
                               ["bad.yaml:5", "policies ['blue', 'red'] need a multi-agent env"]),
    "stop-at-zero-steps": (BASE + "  stop: {timesteps_total: 0}\n",
                           ["bad.yaml:4", "'num_env_steps_sampled_lifetime' counts up from 0"]),
    "q-network-with-ppo": (BASE + "  config: {model_config: {q_network: concat}}\n",
                           ["model_config.q_network is a setting of SAC, CQL and IQL's Q-functions"]),
    "gpus-where-none": (BASE + "  config: {num_gpus_per_learner: 1}\n",
                        ["asks for 1 GPU(s) but the local Ray", "--ray-num-gpus"]),
}  # fmt: skip


def write(tmp_path: Path, text: str, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_mistakes_exit_2_with_one_or_two_lines(tmp_path, capsys, case):
    text, expected = MISTAKES[case]
    code = run_cli(main, ["-f", str(write(tmp_path, text)), "--local-dir", str(tmp_path / "results")])
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("notice:")]
    assert code == 2, err
    assert 1 <= len(err) <= 2, err
    message = "\n".join(err)
    for fragment in expected:
        assert fragment in message, (fragment, message)
    assert "Traceback" not in message
    assert not (tmp_path / "results").exists()  # nothing was started


@pytest.mark.parametrize("flag", ["--stop-iters", "--stop-timesteps", "--stop-time"])
def test_a_stop_flag_of_zero_exits_2(tmp_path, capsys, flag):
    """A count that starts at 0 would be met by the first result: one iteration, then "done"."""
    path = write(tmp_path, BASE + "  stop: {training_iteration: 5}\n")
    code = run_cli(main, ["-f", str(path), flag, "0", "--local-dir", str(tmp_path / "results")])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and err[0].startswith(f"error: {flag} is 0, but '") and "counts up from 0" in err[0], err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("key", sorted(SHAPES))
def test_a_mapping_list_or_path_key_of_the_wrong_form_exits_2(tmp_path, capsys, key):
    """Every key handled outside RLlib's type check (env_config, model, policies, input, ...):
    a number instead exits 2 naming the key and its line, before the value is used."""
    setting = f"model: {{{key}: 5}}" if key == "custom_model_config" else f"{key}: 5"
    path = write(tmp_path, BASE + f"  config:\n    lr: 0.001\n    {setting}\n")
    code = run_cli(main, ["-f", str(path), "--local-dir", str(tmp_path / "results")])
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("notice:")]
    assert code == 2 and err == [f"error: {path}:6: '{key}' is 5, but it takes {SHAPES[key][1]}"], err


def _default_model_fields() -> dict[str, tuple[object, object]]:
    """Each DefaultModelConfig key -> (a value RLlib builds with, a value of the wrong kind)."""
    import dataclasses

    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    out = {}
    for f in dataclasses.fields(DefaultModelConfig):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if f.name.endswith("_hiddens"):
            out[f.name] = ([8, 3], [8, 0])
        elif f.name.endswith("_activation"):
            out[f.name] = ("silu", "swishy")
        elif f.name.endswith("_initializer"):
            out[f.name] = ("xavier_uniform_", "xavier_uniform")
        elif f.name.endswith("_kwargs"):
            out[f.name] = ({"gain": 2.0}, 2.0)
        elif f.name == "conv_filters":
            out[f.name] = ([[16, [4, 4], 2], [32, 3, [1, 2], "valid"]], [[16, 4, 2, "full"]])
        else:  # booleans, counts and numbers: RLlib's default, and a word
            assert isinstance(default, bool | int | float), f"{f.name}: no check for {default!r}"
            out[f.name] = (default, "some")
    return out


@pytest.mark.parametrize(("key", "values"), sorted(_default_model_fields().items()))
def test_every_default_model_key_is_checked_by_its_kind(key, values):
    """Every key of RLlib's DefaultModelConfig: a good value passes unchanged, a wrong one is
    refused naming the key (a field RLlib adds later fails the listing above until it has a check)."""
    from envsdk.config.validation import check_model_config_value
    from envsdk.errors import UserError

    good, wrong = values
    assert check_model_config_value(key, good, "f.yaml:3") == good
    with pytest.raises(
        UserError, match=rf"^f\.yaml:3: model_config key '{key}' is {re.escape(repr(wrong))}, but"
    ):
        check_model_config_value(key, wrong, "f.yaml:3")


def _default_module(tmp_path: Path, obs: str, model_config: dict) -> Any:
    """PPO's default module, as train.py configures it, on matrix_env's ``obs`` space and 3 actions."""
    from tests.data.envs.matrix_env import ACT, OBS
    from tests.helpers import built_config

    built = built_config(tmp_path, "PPO", obs, "discrete", False, minibatch_size=8, model_config=model_config)
    spec = built.config.get_rl_module_spec()
    spec.observation_space, spec.action_space = OBS[obs], ACT["discrete"]
    return spec.build()


def _action_logits(module: Any, obs: Any) -> Any:
    from ray.rllib.core.columns import Columns

    return module.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]


ACCEPTED_ACTIVATIONS = ["linear", "relu", "tanh", "elu", "swish", "silu", "softmax", "Sigmoid", "GELU"]


@pytest.mark.parametrize("name", ACCEPTED_ACTIVATIONS)
def test_every_activation_the_check_accepts_builds_a_network(tmp_path, name):
    """The names the message lists, and torch.nn class names: RLlib builds and runs the default module."""
    import torch

    from envsdk.config.validation import ACTIVATIONS, check_model_config_value

    assert name in ACTIVATIONS or name[0].isupper()
    assert check_model_config_value("fcnet_activation", name, "f.yaml:3") == name
    settings = {"fcnet_activation": name, "head_fcnet_activation": name, "fcnet_hiddens": [5]}
    module = _default_module(tmp_path, "box", settings)
    assert _action_logits(module, torch.zeros(2, 4)).shape == (2, 3)
    layers = {type(m).__name__.lower() for m in module.modules()}
    assert name == "linear" or {"swish": "silu"}.get(name.lower(), name.lower()) in layers, layers


@pytest.mark.parametrize(
    "filters", [[[8, 4, 2]], [[8, [3, 5], [2, 1]], [4, 3, 2, "valid"]], [[8, 4, 2, "same"], [8, 2, 1]]]
)
def test_conv_filters_the_check_accepts_build_the_image_encoder(tmp_path, filters):
    """Every form the check takes (square or [h, w] kernels and strides, an optional padding word)
    builds the default module's CNN on an image and runs it."""
    import torch
    from torch import nn

    from envsdk.config.validation import check_model_config_value
    from tests.data.envs.matrix_env import OBS

    assert check_model_config_value("conv_filters", filters, "f.yaml:3") == filters
    module = _default_module(tmp_path, "image", {"conv_filters": filters, "fcnet_hiddens": [8]})
    convs = [m for m in module.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs[: len(filters)]] == [f[0] for f in filters]
    images = torch.zeros(2, *OBS["image"].shape, dtype=torch.uint8)
    assert _action_logits(module, images).shape == (2, 3)


def test_a_model_config_key_nothing_reads_is_passed_on_with_a_notice(tmp_path, capsys):
    from envsdk.training.build import build_config

    (exp,) = load_experiments(write(tmp_path, BASE + "  config: {model_config: {my_own_setting: 3}}\n"))
    built = build_config(exp, dry_run=True)
    assert built.config.model_config["my_own_setting"] == 3
    assert "model_config key 'my_own_setting' is not one of RLlib's" in capsys.readouterr().err


def test_a_mistake_is_answered_before_ray_starts(tmp_path):
    """No Ray session, no results folder (a bound on the wall time would be a timed test: the
    machines are shared; the timeout only keeps a hang from holding the suite)."""
    bad = write(tmp_path, BASE + "  stop: {episode_reward_meen: 100}\n")
    out = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-f", str(bad), "--local-dir", str(tmp_path / "results"),
         "--temp-dir", str(tmp_path / "ray")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "did you mean 'episode_reward_mean'?" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "ray").exists()  # no Ray, no folder


# ---- a) to c): score attribute, --env, the best checkpoint ------------------------------------


def test_a_score_attr_prefix_is_parsed_once(tmp_path):
    cfg = write(tmp_path, BASE, "ok.yaml")
    args, _ = parser().parse_known_args(
        ["-f", str(cfg), "--checkpoint-score-attr", "min-episode_reward_mean"]
    )
    (exp,) = load(args, {})
    assert (exp.score_metric, exp.score_mode) == ("env_runners/episode_return_mean", "min")
    (from_yaml,) = load_experiments(write(tmp_path, BASE + "  checkpoint_score_attr: max-episode_len_mean\n"))
    assert (from_yaml.score_metric, from_yaml.score_mode) == ("env_runners/episode_len_mean", "max")


def test_a_min_score_keeps_the_lowest_checkpoint(train):
    out = train(
        "-f", "configs/cartpole-ppo.yaml", "--stop-iters", "4", "--checkpoint-freq", "1", "--seed", "1",
        "--keep-checkpoints-num", "1", "--checkpoint-score-attr", "min-episode_reward_mean",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    (trial,) = trial_dirs(train.results)
    returns = [float(r["env_runners/episode_return_mean"]) for r in progress_rows(trial)]
    kept = sorted(json.loads((c / "envsdk_checkpoint.json").read_text())["result"]["training_iteration"]
                  for c in trial.glob("checkpoint_*"))  # fmt: skip
    lowest = 1 + returns.index(min(returns))
    assert kept == sorted({lowest, 4}), (kept, returns)  # the lowest return, plus the latest
    best = re.search(r"best checkpoint: (\S+)", out.stdout).group(1)
    assert (
        json.loads((Path(best) / "envsdk_checkpoint.json").read_text())["result"]["training_iteration"]
        == lowest
    )


def test_b_command_line_env_wins_over_the_yaml(tmp_path):
    cfg = write(tmp_path, "x:\n  run: PPO\n  config: {env: CartPole-v1}\n", "ok.yaml")
    out = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-f", str(cfg), "--env", "Acrobot-v1", "--dry-run"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout)["x"]["env"] == "Acrobot-v1 (gymnasium)"


def test_c_best_checkpoint_is_the_one_rollout_picks_with_many_trials(train, tmp_path):
    from envsdk.training.run.checkpoints import locate

    cfg = write(tmp_path, textwrap.dedent("""\
        many:
          run: PPO
          env: CartPole-v1
          num_samples: 2
          checkpoint_freq: 1
          config: {num_env_runners: 0, train_batch_size: 256, minibatch_size: 128, num_epochs: 2}
    """), "many.yaml")  # fmt: skip
    out = train("-f", str(cfg), "--stop-iters", "2")
    assert out.returncode == 0, out.stderr[-2000:]
    reported = Path(re.search(r"best checkpoint: (\S+)", out.stdout).group(1))
    assert reported == locate(train.results / "many").checkpoint
    assert reported.name == "checkpoint_000001"  # no score attribute: the latest of the best trial


# ---- d) e) g): callbacks chained, checks that clean up, our own errors are ours -------------------


HOOKS = """
from pathlib import Path


def record(*, algorithm, result, **_):
    Path(__file__).with_name("seen.txt").open("a").write(f"{result['training_iteration']}\\n")
"""


def test_d_users_callbacks_run_beside_ours(train, tmp_path):
    (tmp_path / "my_hooks.py").write_text(HOOKS)
    cfg = ROOT / "configs" / "curriculum.yaml"
    spec = yaml.safe_load(cfg.read_text())
    (exp,) = spec.values()
    exp["config"]["callbacks_on_train_result"] = "my_hooks.record"
    exp["env"] = f"curriculum_env.{exp['env'].split('.')[-1]}"
    (tmp_path / "curriculum_env.py").write_text((ROOT / "configs" / "curriculum_env.py").read_text())
    path = tmp_path / "cur.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = train("-f", str(path), "--stop-iters", "3", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "seen.txt").read_text().split() == ["1", "2", "3"]  # the user's hook
    rows = progress_rows(trial_dirs(train.results)[0])
    assert all(r["curriculum/task"] for r in rows)  # and the curriculum hook


def test_g_our_own_bugs_are_not_reported_as_config_mistakes(tmp_path, monkeypatch):
    import envsdk.training.build.stages as config_module

    def broken(*args, **kwargs):
        raise TypeError("a bug in envsdk")

    monkeypatch.setattr(config_module, "add_callback", broken)
    (exp,) = load_experiments(ROOT / "configs" / "curriculum.yaml")
    with pytest.raises(TypeError, match="a bug in envsdk"):
        config_module.build_config(exp)


def test_e_check_env_closes_a_game_that_fails(tmp_path):
    from envsdk.envs.checkup.verdict import check_env
    from envsdk.envs.registry import resolve_env

    before = player_pids()
    config = {"file_name": str(PLAYERS / "builds" / "Chase"), "no_graphics": True, "max_restarts": 0,
              "additional_args": ["--crash-after", "5"], "log_folder": str(tmp_path)}  # fmt: skip
    report = check_env(resolve_env("unity-single"), config, steps=200)
    assert not report.ok and any("PlayerError" in p or "exited" in p for p in report.problems), (
        report.render()
    )
    deadline = time.time() + 15
    while player_pids() - before and time.time() < deadline:
        time.sleep(0.3)
    assert not player_pids() - before, "check_env left the game running"


# ---- h) and f): dry runs start no game; a game's own config mistake is a clear error -----------


@pytest.mark.parametrize("env", ["unity", "unity-single"])  # multi-agent, and a gymnasium env
def test_h_dry_run_starts_no_game(tmp_path, env):
    before = player_pids()
    out = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-f", "configs/unity-chase.yaml", "--dry-run", "--env", env,
         f"--config.env_config.log_folder={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "decided when the env starts" in out.stdout
    assert not list(tmp_path.glob("Player-*.log")) and not player_pids() - before


def test_a_grid_over_unity_players_finds_each_before_anything_starts(tmp_path, capsys):
    """Each trial of `file_name: {grid_search: [...]}` gets its player's absolute path (the env
    runners' working directory is not the YAML's), and one that is not there is exit 2 at once."""
    from envsdk.training.build import build_config

    grid = "{grid_search: [builds/Chase, builds/Dodgeball]}"
    yaml_text = f"x:\n  run: PPO\n  env: unity\n  config:\n    env_config: {{file_name: {grid}}}\n"
    (exp,) = load_experiments(write(tmp_path, yaml_text))
    built = build_config(exp, dry_run=True)
    found = [str(PLAYERS / "builds" / f"{name}.x86_64") for name in ("Chase", "Dodgeball")]
    assert built.search_space[("env_config", "file_name")] == {"grid_search": found}
    assert built.param_space()["env_config"]["file_name"] == {"grid_search": found}
    before = player_pids()
    path = write(tmp_path, yaml_text, "missing.yaml")
    for missing in [
        "--config.env_config.file_name={grid_search: [builds/Chase, builds/NoSuchGame]}",
        "--config.evaluation_config.env_config.file_name=builds/NoSuchGame",
        "--config.evaluation_config.env_config.file_name={grid_search: [builds/NoSuchGame]}",
    ]:
        assert run_cli(main, ["-f", str(path), "--dry-run", missing]) == 2, missing
        said = capsys.readouterr().err
        assert "Unity player 'builds/NoSuchGame' not found" in said
        assert "$ENVSDK_PLAYER_PATH" in said and "rollout.py" not in said  # where else it may be
    assert not player_pids() - before


def test_evaluation_env_config_is_prepared_over_trainings(tmp_path):
    """RLlib merges evaluation_config.env_config over env_config: evaluation's own keys get the same
    preparation (a Unity player found, its path absolute), grids in it included."""
    from envsdk.training.build import build_config

    evaluation = "{env_config: {file_name: builds/Dodgeball, time_scale: {grid_search: [1, 5]}}}"
    text = ("x:\n  run: PPO\n  env: unity\n  config:\n    env_config: {file_name: builds/Chase}\n"
            f"    evaluation_config: {evaluation}\n")  # fmt: skip
    (exp,) = load_experiments(write(tmp_path, text))
    built = build_config(exp, dry_run=True)
    assert built.config.env_config["file_name"] == str(PLAYERS / "builds" / "Chase.x86_64")
    own = built.config.evaluation_config["env_config"]
    assert own == {"file_name": str(PLAYERS / "builds" / "Dodgeball.x86_64"), "time_scale": 1}
    assert built.search_space == {("evaluation_config", "env_config", "time_scale"): {"grid_search": [1, 5]}}
    merged = built.config.get_evaluation_config_object().env_config
    assert merged["file_name"].endswith("Dodgeball.x86_64") and merged["time_scale"] == 1


def test_evaluation_env_config_merges_into_nested_settings_as_rllib_does(tmp_path):
    """RLlib merges evaluation_config.env_config over env_config key by key at any depth: the
    evaluation env checked before start gets that merge, not a top-level replacement."""
    from envsdk.training.build import build_config

    (tmp_path / "nested_env.py").write_text(
        "import gymnasium as gym\n"
        "class NestedEnv(gym.Env):\n"
        "    def __init__(self, config):\n"
        "        self.size = config['grid']['width'] * config['grid']['height']\n"
        "        self.observation_space = gym.spaces.Discrete(self.size)\n"
        "        self.action_space = gym.spaces.Discrete(2)\n"
        "    def reset(self, *, seed=None, options=None):\n"
        "        return 0, {}\n"
        "    def step(self, action):\n"
        "        return 0, 0.0, True, False, {}\n"
    )
    text = ("x:\n  run: PPO\n  env: nested_env.NestedEnv\n  config:\n"
            "    env_config: {grid: {width: 2, height: 3}}\n"
            "    evaluation_config:\n      env: nested_env.NestedEnv\n"
            "      env_config: {grid: {height: 3}}\n")  # fmt: skip
    (exp,) = load_experiments(write(tmp_path, text))
    built = build_config(exp)
    assert built.config.get_evaluation_config_object().env_config == {"grid": {"width": 2, "height": 3}}


def test_f_game_config_mistake_in_preflight_exits_2(train):
    out = train("-f", "configs/unity-seekwatch.yaml", "--stop-iters", "1",
                "--config.env_config.no_graphics=true",
                "--config.env_config.policy_mapping={Seeker: one, Watcher: one}")  # fmt: skip
    assert out.returncode == 2, out.stdout[-1500:] + out.stderr[-1500:]
    assert "policy_mapping sends behaviors with different spaces to policy 'one'" in out.stderr
    assert "Traceback" not in out.stderr


# ---- stop metrics only known at run time -------------------------------------------------


def test_custom_stop_metric_that_never_appears_fails_the_run(train, tmp_path):
    cfg = write(tmp_path, BASE + "  stop: {env_runners/my_custom_score: 10}\n"
                "  config: {num_env_runners: 0, train_batch_size: 200, minibatch_size: 100, num_epochs: 1}\n",
                "custom.yaml")  # fmt: skip
    out = train("-f", str(cfg))
    assert out.returncode == 2, out.stdout[-1500:]
    assert "stop key 'env_runners/my_custom_score' is not in any of the first 5 results" in out.stderr
    (trial,) = trial_dirs(train.results)
    assert len(progress_rows(trial)) == 5
