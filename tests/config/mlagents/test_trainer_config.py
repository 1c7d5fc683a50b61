"""mlagents-learn's trainer configs read as RLlib experiments: ML-Agents' own example files (tests/data/
mlagents_configs, each accepted by mlagents 1.1.0's loader), every key's meaning, the refusals, the pre-1.0
form and mlagents-learn's flags (no Ray started), and one real run on the stand-in player."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envsdk.cli.train import main
from envsdk.config.experiment import load_experiments
from envsdk.config.mlagents import schema, upgrade
from envsdk.config.mlagents.translate import RULES
from envsdk.config.yamlio import load_yaml_file
from envsdk.errors import UserError, run_cli
from tests.helpers import ROOT

CONFIGS = ROOT / "tests" / "data" / "mlagents_configs"
FILES = sorted(p for p in CONFIGS.glob("*.yaml") if not p.name.endswith(".pre1.yaml"))


def _raw(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _refusal(raw: dict) -> str | None:
    """Why a file is refused (a feature another issue builds), read from the file itself."""
    for settings in raw["behaviors"].values():
        if settings.get("trainer_type") == "sac" and (settings.get("network_settings") or {}).get("memory"):
            return "RLlib's SAC has no recurrent policy"
    return None


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_each_example_config_becomes_the_experiment_its_keys_say(path):
    raw = _raw(path)
    why = _refusal(raw)
    if why is not None:
        with pytest.raises(UserError, match=re.escape(why)) as err:
            load_experiments(path)
        assert str(path) in str(err.value)  # file:line of the key
        return
    (exp,) = load_experiments(path)
    behaviors = raw["behaviors"]
    first = next(iter(behaviors.values()))
    hyper = first.get("hyperparameters", {})
    config = exp.config
    assert exp.env == "unity" and exp.name == "ppo"  # mlagents-learn's default run id
    assert exp.run == first["trainer_type"].upper()
    assert config["count_steps_by"] == "agent_steps"
    assert set(config["policy_max_steps"]) == {re.sub(r"[^A-Za-z0-9_.-]+", "_", b) for b in behaviors}
    assert exp.stop == {"policy_progress/all": 1.0}
    assert config["gamma"] == first["reward_signals"]["extrinsic"]["gamma"]
    network = first.get("network_settings", {})
    hidden = network.get("hidden_units", 128)
    assert config["model"]["fcnet_hiddens"] == [hidden] * network.get("num_layers", 2)
    assert ("observation_filter" in config) == bool(network.get("normalize", False))
    assert config["model"].get("use_lstm", False) == ("memory" in network)
    steps = int(float(first.get("max_steps", 500000)))
    if exp.run in ("PPO", "POCA"):  # POCA's hyperparameters are PPO's
        assert config["train_batch_size"] == hyper["buffer_size"]
        assert config["minibatch_size"] == hyper["batch_size"]
        assert config["num_epochs"] == hyper.get("num_epoch", 3)
        lr = config["lr"]
        if hyper.get("learning_rate_schedule", "linear") == "linear":
            assert lr == [[0, hyper["learning_rate"]], [steps, 1e-10]]
        else:
            assert lr == hyper["learning_rate"]
        assert config["time_horizon"] == first.get("time_horizon", 64)  # per agent: training/build/rules.py
    else:
        assert config["train_batch_size"] == hyper["batch_size"]
        assert config["replay_buffer_config"]["capacity"] == hyper["buffer_size"]
        assert config["training_intensity"] == hyper["batch_size"] / hyper.get("steps_per_update", 1)
    every = math.ceil(first.get("checkpoint_interval", 500000) / first.get("summary_freq", 50000))
    assert exp.checkpoint_freq == every and exp.keep_checkpoints_num == first.get("keep_checkpoints", 5)
    plays = {b: s["self_play"] for b, s in behaviors.items() if s.get("self_play")}
    if plays:  # the first behavior's block for all, the others' differences as their policies' own
        first_play = next(iter(plays.values()))
        assert {k: config["self_play"][k] for k in first_play} == first_play
        for behavior, block in plays.items():
            own = {k: v for k, v in block.items() if v != first_play[k]}
            assert config["self_play"].get("policies", {}).get(behavior, {}) == own
    if "environment_parameters" in raw:
        assert config["environment_parameters"] == raw["environment_parameters"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("behaviors: {B: {trainer_type: ppo, hyperparameters: {batchsize: 5}}}", "did you mean 'batch_size'"),
        ("behaviors: {B: {trainer_type: ppo, hyperparameters: {batch_size: five}}}", "takes an integer"),
        ("behaviors: {B: {hyperparameters: {batch_size: 5}}}", "without a trainer_type"),
        ("behaviors: {B: {trainer_type: dqn}}", "one of ppo, sac, poca"),
        ("behaviors: {B: {network_settings: {vis_encode_type: vit}}}", "one of simple"),
        ("behaviors: {B: {network_settings: {vis_encode_type: resnet}}}", "no default network"),
        ("behaviors: {B: {network_settings: {memory: {memory_size: 7}}}}", "even number"),
        ("behaviors: {B: {network_settings: {memory: {sequence_length: 4000}}}}", "longer than batch_size"),
        ("behaviors: {B: {reward_signals: {curiousity: {}}}}", "did you mean 'curiosity'"),
        ("behaviors: {B: {init_path: x.pt}}", "an mlagents-learn model, which RLlib's policies cannot read"),
        ("behaviors: {B: {}}\nenv_setings: {}", "did you mean 'env_settings'"),
        ("behaviors: {B: {}}\ncheckpoint_settings: {inference: true}", "rollout.py"),
        ("behaviors: {A: {trainer_type: ppo}, B: {trainer_type: sac}}", "different trainer types"),
        ("behaviors: {A: {time_horizon: 5}, B: {time_horizon: 6}}", "differ in time_horizon"),
        ("behaviors: []", "must map each behavior"),
    ],
)
def test_what_mlagents_learn_refuses_or_we_cannot_honour_is_refused_with_its_line(tmp_path, text, message):
    path = tmp_path / "trainer.yaml"
    path.write_text(text + "\n")
    with pytest.raises(UserError, match=re.escape(message)) as err:
        load_experiments(path)
    assert str(path) in str(err.value)


def test_default_settings_sit_under_every_behavior_and_a_behavior_wins(tmp_path):
    path = tmp_path / "trainer.yaml"
    path.write_text(
        "default_settings: {trainer_type: ppo, max_steps: 9,"
        " hyperparameters: {batch_size: 32, buffer_size: 320}}\n"
        "behaviors:\n  A: {max_steps: 100}\n  B: {}\n"
    )
    (exp,) = load_experiments(path)
    assert exp.config["minibatch_size"] == 32 and exp.config["train_batch_size"] == 320
    assert exp.config["policy_max_steps"] == {"A": 100, "B": 9}


def test_beta_and_epsilon_schedules_follow_the_learning_rate_schedule_as_mlagents_learn_does(tmp_path):
    path = tmp_path / "trainer.yaml"
    path.write_text(
        "behaviors: {B: {trainer_type: ppo, hyperparameters: {learning_rate_schedule: constant}}}\n"
    )
    (exp,) = load_experiments(path)
    assert exp.config["entropy_coeff"] == 5e-3 and exp.config["lr"] == 3e-4  # both constant


def test_every_rule_names_a_key_of_the_schema():
    keys = {f"{s}.{k}" for s, ks in schema.SECTIONS.items() for k in ks} | set(schema.TRAINER) | schema.TOP
    keys |= {f"hyperparameters.{k}" for ks in schema.HYPERPARAMETERS.values() for k in ks}
    keys |= {f"network_settings.{k}" for k in schema.NETWORK}
    for rule in RULES:
        first = rule.split(",")[0].replace(".NAME", "").replace(".*", "").replace(".extrinsic.", ".")
        base = first.split(".")[0]
        assert first in keys or base in keys or first.startswith("reward_signals"), rule


PRE_1_0 = """\
default:
  trainer: ppo
  batch_size: 1024
  beta: 5.0e-3
  buffer_size: 10240
  hidden_units: 128
  max_steps: 5.0e5
  num_layers: 2
  time_horizon: 64
  use_recurrent: false
  summary_freq: 10000
  memory_size: 128
3DBall:
  normalize: true
  batch_size: 64
  buffer_size: 12000
  summary_freq: 12000
  time_horizon: 1000
  lambd: 0.99
Hallway:
  use_recurrent: true
  sequence_length: 64
  num_layers: 2
  hidden_units: 128
  memory_size: 128
  beta: 1.0e-2
  num_epoch: 3
  buffer_size: 1024
  batch_size: 128
  max_steps: 1.0e7
  summary_freq: 10000
  time_horizon: 64
"""


def test_a_pre_1_0_file_reads_as_mlagents_upgrade_config_converts_it(tmp_path, capsys):
    path = tmp_path / "trainer_config.yaml"
    path.write_text(PRE_1_0)
    data = load_yaml_file(path)
    assert upgrade.is_pre_1_0(data) and not schema.is_trainer_config(data)
    with pytest.raises(UserError, match="differ in hyperparameters"):  # RLlib's batch sizes are one per run
        load_experiments(path)
    assert "pre-1.0 trainer config" in capsys.readouterr().err
    path.write_text(PRE_1_0.split("Hallway:")[0])
    (exp,) = load_experiments(path)
    assert exp.config["policy_max_steps"] == {"3DBall": 500000}
    assert exp.config["train_batch_size"] == 12000 and exp.config["time_horizon"] == 1000
    upgraded = upgrade.upgrade(data)["behaviors"]
    assert upgraded["3DBall"]["hyperparameters"]["lambd"] == 0.99
    assert upgraded["3DBall"]["network_settings"]["normalize"] is True
    assert upgraded["Hallway"]["network_settings"]["memory"] == {"sequence_length": 64, "memory_size": 128}
    assert "memory" not in upgraded["3DBall"]["network_settings"]


def test_pre_1_0_curriculum_and_samplers_become_environment_parameters(tmp_path):
    path = tmp_path / "walljump.yaml"
    path.write_text(
        "behaviors: {BigWallJump: {trainer_type: ppo}}\n"
        "parameter_randomization:\n  resampling-interval: 5000\n"
        "  mass: {sampler-type: uniform, min_value: 0.5, max_value: 10}\n"
        "curriculum:\n  BigWallJump:\n    measure: progress\n    thresholds: [0.1, 0.3]\n"
        "    min_lesson_length: 100\n    signal_smoothing: true\n"
        "    parameters: {big_wall_min_height: [0.0, 4.0, 6.0]}\n"
    )
    converted = upgrade.upgrade(load_yaml_file(path))["environment_parameters"]
    assert converted["mass"] == {
        "sampler_type": "uniform",
        "sampler_parameters": {"min_value": 0.5, "max_value": 10},
    }
    lessons = converted["big_wall_min_height"]["curriculum"]
    assert [lesson["value"] for lesson in lessons] == [0.0, 4.0, 6.0]
    assert [lesson.get("completion_criteria", {}).get("threshold") for lesson in lessons] == [0.1, 0.3, None]
    assert lessons[0]["completion_criteria"]["behavior"] == "BigWallJump"


# ---- mlagents-learn's flags ------------------------------------------------------------------------


def _trainer_file(tmp_path: Path) -> Path:
    """A small trainer config; constant schedules (no clip schedule: it runs on stock RLlib too)."""
    path = tmp_path / "trainer.yaml"
    path.write_text(
        "behaviors: {Chase: {trainer_type: ppo, max_steps: 800, summary_freq: 200, time_horizon: 50,"
        " hyperparameters: {batch_size: 50, buffer_size: 200, learning_rate_schedule: constant}}}\n"
        "env_settings: {num_areas: 2}\nengine_settings: {time_scale: 5}\n"
    )
    return path


def test_mlagents_learn_flags_override_the_files_settings(tmp_path, capsys):
    path = _trainer_file(tmp_path)
    argv = [str(path), "--env", "game/Player", "--run-id", "first", "--num-areas", "3", "--time-scale", "9"]
    argv += ["--results-dir", str(tmp_path / "out"), "--seed", "4", "--num-envs", "2", "--torch", "--dry-run"]
    argv += ["--env-args", "--agents", "4"]
    from envsdk.cli import train

    args, overrides = train._parse(argv, "train.py")
    (exp,) = train.load(args, overrides)
    env_config = exp.config["env_config"]
    assert exp.name == "first" and exp.storage_path == str(tmp_path / "out")
    assert env_config["file_name"] == "game/Player" and env_config["num_areas"] == 3
    assert env_config["time_scale"] == 9 and env_config["seed"] == 4
    assert env_config["additional_args"] == ["--agents", "4"]
    assert exp.config["num_env_runners"] == 2 and exp.config["seed"] == 4
    assert "--torch does nothing" in capsys.readouterr().err


def test_an_mlagents_flag_with_an_rllib_experiment_is_refused(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text("exp:\n  run: PPO\n  env: CartPole-v1\n")
    assert run_cli(main, ["-f", str(path), "--num-areas", "2", "--dry-run"]) == 2
    assert "--num-areas is mlagents-learn's flag" in capsys.readouterr().err


def test_a_run_id_with_results_asks_for_resume_or_force_as_mlagents_learn_does(tmp_path, capsys):
    path = _trainer_file(tmp_path)
    (tmp_path / "results" / "ppo").mkdir(parents=True)
    argv = [str(path), "--env", "x", "--results-dir", str(tmp_path / "results")]
    from envsdk.cli import train

    args, overrides = train._parse(argv, "train.py")
    with pytest.raises(UserError, match="--resume to continue it, --force to replace"):
        train.load(args, overrides)
    args, overrides = train._parse([*argv, "--force"], "train.py")
    train.load(args, overrides)
    assert not (tmp_path / "results" / "ppo").exists()


def test_a_missing_game_is_named_before_anything_starts(tmp_path, capsys):
    path = _trainer_file(tmp_path)
    assert run_cli(main, [str(path), "--env", str(tmp_path / "NoGame"), "--dry-run"]) == 2
    assert "NoGame" in capsys.readouterr().err


def test_dry_run_prints_the_translation_key_by_key(tmp_path, standin_builds):
    path = _trainer_file(tmp_path)
    result = subprocess.run(
        [sys.executable, "train.py", str(path), "--env", str(standin_builds / "Chase"), "--no-graphics",
         "--dry-run"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "mlagents-learn's keys in" in result.stdout
    assert re.search(r"hyperparameters\.buffer_size +-> config\.train_batch_size: 200", result.stdout)
    assert re.search(
        r"env_settings\.num_areas|env_settings, engine_settings +-> config\.env_config", result.stdout
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_trainer_config_trains_on_the_standin_to_max_steps_in_agent_steps(tmp_path, standin_builds):
    """Real training: 4 agents in one scene, max_steps 800 agent steps = 200 scene steps; stops there."""
    path = _trainer_file(tmp_path)
    out = tmp_path / "results"
    result = subprocess.run(
        [sys.executable, "train.py", str(path), "--env", str(standin_builds / "Chase"), "--no-graphics",
         "--results-dir", str(out), "--run-id", "chase", "--env-args", "--agents", "4"],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (progress,) = out.glob("chase/*/progress.csv")
    import csv

    rows = list(csv.DictReader(progress.open()))
    agent_steps = [float(r["env_runners/num_agent_steps_sampled_lifetime"]) for r in rows]
    assert agent_steps[-1] >= 800 and (len(agent_steps) == 1 or agent_steps[-2] < 800)
    assert all(
        float(r["env_runners/num_agent_steps_sampled"]) >= 200 for r in rows
    )  # buffer_size, agent steps
    assert list(out.glob("chase/*/checkpoint_*/algorithm_state.*")) or list(out.glob("chase/*/checkpoint_*"))


def test_an_example_of_the_pre_1_0_form_runs_with_its_samplers():
    """ML-Agents' own 0.17-era 3DBall_randomize.yaml (flat keys under behaviors:, parameter_randomization),
    which mlagents-learn 1.1.0 refuses."""
    (exp,) = load_experiments(CONFIGS / "3DBall_randomize.ppo.pre1.yaml")
    parameters = exp.config["environment_parameters"]
    assert set(parameters) == {"mass", "gravity", "scale"}
    assert parameters["mass"] == {
        "sampler_type": "uniform",
        "sampler_parameters": {"min_value": 0.5, "max_value": 10},
    }
    assert exp.config["train_batch_size"] == 12000 and exp.config["observation_filter"] == "MeanStdFilter"


def test_the_docs_table_is_the_codes():
    docs = (ROOT / "docs" / "mlagents-learn.md").read_text()
    for key, becomes in RULES.items():
        assert f"| `{key}` | {becomes} |" in docs, f"docs/mlagents-learn.md: regenerate the row of {key}"


def test_a_behaviors_own_learning_rate_beta_and_epsilon_go_to_its_policy(tmp_path):
    """What RLlib's PPO learners read per policy may differ between behaviors (RLlib's per-module
    overrides, checked on a real run in tests/unity_bridge); the rest is refused."""
    path = tmp_path / "trainer.yaml"
    path.write_text(
        "behaviors:\n"
        "  A: {trainer_type: ppo, max_steps: 1000}\n"
        "  B?team=1: {trainer_type: ppo, max_steps: 4000,"
        " hyperparameters: {learning_rate: 0.001, epsilon: 0.3}}\n"
    )
    (exp,) = load_experiments(path)
    assert exp.config["lr"] == [[0, 3e-4], [1000, 1e-10]]
    own = exp.config["algorithm_config_overrides_per_module"]
    assert own == {
        "B_team_1": {
            "lr": [[0, 0.001], [4000, 1e-10]],
            "entropy_coeff": [[0, 5e-3], [4000, 1e-5]],
            "clip_param": 0.3,  # mlagents' epsilon_schedule follows learning_rate_schedule: linear
            "learner_config_dict": {"clip_param_schedule": [[0, 0.3], [4000, 0.1]]},
        }
    }
    path.write_text(
        "behaviors:\n  A: {trainer_type: ppo}\n  B: {trainer_type: ppo, hyperparameters: {buffer_size: 64}}\n"
    )
    with pytest.raises(UserError, match="differ in hyperparameters"):
        load_experiments(path)


def test_initialize_from_and_init_path_name_runs_of_ours(tmp_path, monkeypatch):
    """mlagents-learn's --initialize-from RUN_ID (a run in --results-dir) and a behavior's init_path
    (a path from the working directory): the policies' initialize_from."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "trainer.yaml"
    path.write_text("behaviors:\n  A: {}\n  B?team=1: {init_path: old/B}\n")
    from envsdk.cli import train

    args, overrides = train._parse([str(path), "--env", "x", "--initialize-from", "first"], "train.py")
    (exp,) = train.load(args, overrides)
    assert exp.config["initialize_from"] == {
        "*": str(tmp_path / "results" / "first"),
        "B_team_1": str(tmp_path / "old" / "B"),
    }


@pytest.mark.parametrize(
    "path",
    [CONFIGS / "PyramidsRND.ppo.yaml", CONFIGS / "Hallway.imitation.yaml", CONFIGS / "Pyramids.ppo.yaml"],
    ids=lambda p: p.name,
)
def test_reward_signals_and_cloning_keep_their_keys_and_meaning(path, monkeypatch, tmp_path):
    """A behavior's signals become ``reward_signals`` with the same keys (unset ones left to the
    defaults), ``demo_path`` from the working directory as mlagents-learn opens it, and
    ``behavioral_cloning`` likewise; the game's reward alone stays RLlib's reward."""
    monkeypatch.chdir(tmp_path)
    raw = _raw(path)
    (exp,) = load_experiments(path)
    (settings,) = raw["behaviors"].values()
    given = settings["reward_signals"]
    signals = exp.config["reward_signals"]
    assert set(signals) == set(given)
    for name, block in given.items():
        for key, value in block.items():
            if key == "demo_path":
                assert signals[name][key] == str((tmp_path / value).resolve())
            elif key != "network_settings":
                assert signals[name][key] == value, (name, key)
    cloning = settings.get("behavioral_cloning")
    if cloning is None:
        assert "behavioral_cloning" not in exp.config
    else:
        assert exp.config["behavioral_cloning"]["demo_path"] == str(
            (tmp_path / cloning["demo_path"]).resolve()
        )
        assert exp.config["behavioral_cloning"]["strength"] == cloning["strength"]


def test_the_games_reward_alone_is_rllibs_reward_and_a_scaled_one_is_a_signal(tmp_path):
    path = tmp_path / "trainer.yaml"
    path.write_text("behaviors: {B: {reward_signals: {extrinsic: {gamma: 0.9}}}}\n")
    (exp,) = load_experiments(path)
    assert exp.config["gamma"] == 0.9 and "reward_signals" not in exp.config
    path.write_text("behaviors: {B: {reward_signals: {extrinsic: {strength: 2.0}}}}\n")
    (exp,) = load_experiments(path)
    assert exp.config["reward_signals"] == {"extrinsic": {"gamma": 0.99, "strength": 2.0}}


def test_a_behaviors_own_signals_are_its_policys(tmp_path):
    path = tmp_path / "trainer.yaml"
    path.write_text(
        "behaviors:\n"
        "  A: {reward_signals: {extrinsic: {}, curiosity: {strength: 0.02}}}\n"
        "  B: {reward_signals: {extrinsic: {}, rnd: {strength: 0.01}}}\n"
    )
    (exp,) = load_experiments(path)
    assert set(exp.config["reward_signals"]) == {"extrinsic", "curiosity"}
    own = exp.config["algorithm_config_overrides_per_module"]["B"]["reward_signals"]
    assert set(own) == {"extrinsic", "rnd"} and own["rnd"]["strength"] == 0.01
