"""YAML features: legacy keys, overrides, search spaces, env registry, old gym API."""

from __future__ import annotations

import textwrap

import gymnasium as gym
import numpy as np
import pytest

from envsdk import internals
from envsdk.cli.train import main, parse_overrides
from envsdk.config.experiment import load_experiments
from envsdk.envs.registry import resolve_env
from envsdk.errors import run_cli
from envsdk.training.build import build_config

SEED_STYLE = """
cartpole-seed:
  env: CartPole-v1
  run: PPO
  local_dir: {local}
  checkpoint_freq: 5
  keep_checkpoints_num: 2
  checkpoint_score_attr: episode_reward_mean
  stop:
    timesteps_total: 10000
    episode_reward_mean: 190
  config:
    framework: torch
    num_workers: 1
    num_envs_per_worker: 2
    sgd_minibatch_size: 64
    num_sgd_iter: 3
    lambda: 0.9
    lr: 5e-4
    ignore_worker_failures: true
    rollout_fragment_length: 100
    train_batch_size: 400
    model:
      fcnet_hiddens: [32, 32]
"""


def test_seed_era_yaml_translates(tmp_path, capsys):
    path = tmp_path / "seed.yaml"
    path.write_text(SEED_STYLE.format(local=tmp_path / "out"))
    (exp,) = load_experiments(path)
    built = build_config(exp)
    cfg = built.config
    assert exp.storage_path == str(tmp_path / "out")
    assert exp.stop == {"num_env_steps_sampled_lifetime": 10000, "env_runners/episode_return_mean": 190}
    assert (exp.score_metric, exp.score_mode) == ("env_runners/episode_return_mean", "max")
    assert (cfg.num_env_runners, cfg.num_envs_per_env_runner) == (1, 2)
    assert (cfg.minibatch_size, cfg.num_epochs, cfg.lambda_) == (64, 3, 0.9)
    assert cfg.lr == 5e-4 and isinstance(cfg.lr, float)
    assert cfg.ignore_env_runner_failures is True
    assert cfg.model_config["fcnet_hiddens"] == [32, 32]
    notices = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("notice:")]
    for old in (
        "num_workers",
        "num_envs_per_worker",
        "sgd_minibatch_size",
        "num_sgd_iter",
        "lambda",
        "timesteps_total",
        "episode_reward_mean",
        "ignore_worker_failures",
        "local_dir",
    ):
        assert sum(f"'{old}'" in n for n in notices) >= 1, old


def test_overrides_and_search_spaces(tmp_path, capsys):
    assert parse_overrides(["--config.lr=0.005", "--config.model_config.fcnet_hiddens=[8, 8]"]) == {
        "lr": 0.005,
        "model_config": {"fcnet_hiddens": [8, 8]},
    }
    path = tmp_path / "search.yaml"
    path.write_text(
        textwrap.dedent("""
        s:
          run: PPO
          env: CartPole-v1
          config:
            lr: {loguniform: [0.0001, 0.01]}
            gamma: {grid_search: [0.9, 0.99]}
            model_config: {fcnet_hiddens: {choice: [[8], [16]]}}
    """)
    )
    (exp,) = load_experiments(path)
    space = build_config(exp, {"num_epochs": 2}).param_space()
    assert type(space["lr"]).__name__ == "Float"
    assert space["gamma"] == {"grid_search": [0.9, 0.99]}
    assert type(space[internals.MODEL_CONFIG_FIELD]["fcnet_hiddens"]).__name__ == "Categorical"
    assert space["num_epochs"] == 2
    assert run_cli(main, ["-f", str(path), "--dry-run", "--config.num_epochs=7"]) == 0
    assert "num_epochs: 7" in capsys.readouterr().out


def test_env_config_takes_grid_search_only(tmp_path):
    """Inside env_config, a grid is a search space (as Tune reads it anywhere); other one-key
    mappings are the env's own settings and reach it unchanged, at any depth."""
    from envsdk.training.build.translate import extract_search_spaces

    values = {
        "env_config": {"size": {"grid_search": [3, 5]}, "noise": {"uniform": [0, 1]},
                       "nested": {"level": {"grid_search": ["a", "b"]}, "pick": {"choice": [1, 2]}}},
        "lr": {"uniform": [0.001, 0.01]},
        "evaluation_config": {"env_config": {"size": {"grid_search": [7, 9]}, "noise": {"uniform": [2, 3]}},
                              "explore": {"grid_search": [True, False]}},
    }  # fmt: skip
    found = extract_search_spaces(values, lambda key: f"f.yaml:{key}")
    assert set(found) == {
        ("env_config", "size"), ("env_config", "nested", "level"), ("lr",),
        ("evaluation_config", "env_config", "size"), ("evaluation_config", "explore"),
    }  # fmt: skip
    assert values["evaluation_config"] == {
        "env_config": {"size": 7, "noise": {"uniform": [2, 3]}},
        "explore": True,
    }
    assert values["env_config"] == {
        "size": 3, "noise": {"uniform": [0, 1]}, "nested": {"level": "a", "pick": {"choice": [1, 2]}}
    }  # fmt: skip


def test_register_decorator_makes_env_available_everywhere():
    import envsdk

    @envsdk.register("UnitTestEnv-v0", max_episode_steps=3)
    class UnitTestEnv(envsdk.Env):
        def __init__(self, config=None):
            super().__init__(config)
            self.observation_space = gym.spaces.Discrete(2)
            self.action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return 0, {"size": self.config.get("size")}

        def step(self, action):
            return 1, 0.0, False, False, {}

    resolved = resolve_env("UnitTestEnv-v0")
    assert resolved.kind == "registered"
    env = resolved.make({"size": 5})
    assert env.reset()[1] == {"size": 5}
    truncated = [env.step(0)[3] for _ in range(3)]
    assert truncated == [False, False, True]  # max_episode_steps applied
    assert gym.make("UnitTestEnv-v0", size=7).reset()[1] == {"size": 7}


def test_entry_point_group_registers_envs(tmp_path, monkeypatch):
    pkg = tmp_path / "ep_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import gymnasium as gym\n"
        "class PluginEnv(gym.Env):\n"
        "    observation_space = gym.spaces.Discrete(1)\n"
        "    action_space = gym.spaces.Discrete(1)\n"
        "    def reset(self, *, seed=None, options=None): return 0, {}\n"
        "    def step(self, a): return 0, 1.0, True, False, {}\n"
    )
    dist = tmp_path / "ep_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-pkg\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[envsdk.envs]\nPluginEnv-v0 = ep_pkg:PluginEnv\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    resolved = resolve_env("PluginEnv-v0")
    assert resolved.kind == "entry point"
    assert resolved.make().step(0)[1] == 1.0


def test_old_gym_api_adapter(capsys):
    from envsdk.envs.adapters.old_gym import LegacyGymAdapter, needs_adapter

    class Old:
        class Box:  # a gym.spaces look-alike, converted by its class name
            def __init__(self):
                self.low, self.high, self.shape, self.dtype = np.zeros(2), np.ones(2), (2,), np.float32

        observation_space = Box()
        action_space = gym.spaces.Discrete(2)

        def reset(self):
            return [0.5, 0.5]

        def step(self, action):
            return [1.0, 0.0], 1, True, {"TimeLimit.truncated": action == 1}

    assert needs_adapter(Old())
    env = LegacyGymAdapter(Old())
    obs, info = env.reset(seed=3)
    assert obs.dtype == np.float32 and obs.shape == (2,) and info == {}
    assert env.step(0)[2:4] == (True, False)
    assert env.step(1)[2:4] == (False, True)


class _NewReset(gym.Env):
    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def step(self, action):
        return 0, 0.0, True, False, {}


@pytest.mark.parametrize(
    ("reset", "old"),
    [
        ("def reset(self, *, seed=None, options=None): return 0, {}", False),
        ("def reset(self, seed=None, options=None): return 0, {}", False),
        ("def reset(self, **kwargs): return 0, {}", False),  # a wrapper's usual spelling
        ("def reset(self, *args, **kwargs): return 0, {}", False),
        ("def reset(self): return 0", True),  # the seed tutorials' gym.Env
    ],
)
def test_old_api_detection_by_reset_signature(reset, old):
    from envsdk.envs.adapters.old_gym import needs_adapter

    scope: dict = {}
    exec(reset, scope)
    env_class = type("Env", (_NewReset,), {"reset": scope["reset"]})
    assert needs_adapter(env_class()) is old
    wrapped = gym.Wrapper(env_class())
    assert needs_adapter(wrapped) is False  # gymnasium's Wrapper.reset takes seed


def test_action_normalisation_only_for_continuous_actions(tmp_path):
    """Discrete actions skip RLlib's normalise/clip connector; Box actions keep it; the YAML wins."""
    path = tmp_path / "envs.yaml"
    path.write_text(
        textwrap.dedent("""
        discrete: {run: PPO, env: CartPole-v1}
        continuous: {run: PPO, env: Pendulum-v1}
        told: {run: PPO, env: CartPole-v1, config: {normalize_actions: true}}
    """)
    )
    built = {exp.name: build_config(exp, {}).config for exp in load_experiments(path)}
    assert (built["discrete"].normalize_actions, built["discrete"].clip_actions) == (False, False)
    assert built["continuous"].normalize_actions is True
    assert built["told"].normalize_actions is True


BOX3 = gym.spaces.Box(0, 1, (3,), np.float32)


@pytest.mark.parametrize(
    ("trained", "seen", "fits"),
    [
        (BOX3, gym.spaces.Box(-5, 5, (3,), np.float32), True),  # other bounds: the network still takes it
        (BOX3, gym.spaces.Box(0, 1, (4,), np.float32), False),
        (BOX3, gym.spaces.Box(0, 1, (3,), np.uint8), False),
        (gym.spaces.Discrete(2), gym.spaces.Discrete(3), False),
        (gym.spaces.Dict({"a": BOX3, "b": gym.spaces.Discrete(2)}),
         gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (3,), np.float32), "b": gym.spaces.Discrete(2)}), True),
        (gym.spaces.Dict({"a": BOX3}), gym.spaces.Dict({"c": BOX3}), False),
        (gym.spaces.Tuple([BOX3, gym.spaces.MultiDiscrete([2, 3])]),
         gym.spaces.Tuple([BOX3, gym.spaces.MultiDiscrete([2, 4])]), False),
        (gym.spaces.Tuple([BOX3]), gym.spaces.Tuple([BOX3, BOX3]), False),
        (BOX3, gym.spaces.Discrete(3), False),
    ],
)  # fmt: skip
def test_an_evaluation_env_fits_the_trained_network_by_layout(trained, seen, fits):
    from envsdk.training.build.env_setup import same_layout

    assert same_layout(trained, seen) is fits
