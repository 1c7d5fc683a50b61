"""The ecosystem's environments, from the packages users install (the ``ecosystem`` extra):
Gymnasium ids that a package registers (MiniGrid, ale-py, highway-env), MuJoCo, PettingZoo's
AEC and Parallel games, and env files that import them.  Each family trains from the YAML a
user writes first, with the env runner in the driver and on a remote worker, and rolls out.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import yaml
from ray import cloudpickle

from envsdk.envs.base import MASK_KEY, OBS_KEY
from envsdk.envs.observation_layout import lay_out
from envsdk.envs.registry import EnvFactory, config_style, resolve_env
from envsdk.errors import UserError
from tests.helpers import progress_rows, rollout_in_process, train_experiments

# ---- ids that packages register, gymnasium's module:id, and how env_config reaches a class --------


@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ("MiniGrid-Empty-5x5-v0", "minigrid:MiniGrid-Empty-5x5-v0"),
        ("BabyAI-GoToRedBall-v0", "minigrid:BabyAI-GoToRedBall-v0"),
        ("ALE/Pong-v5", "ale_py:ALE/Pong-v5"),
        ("PongNoFrameskip-v4", "ale_py:PongNoFrameskip-v4"),  # the Ray 1.x tutorials' id
        ("highway-fast-v0", "highway_env:highway-fast-v0"),
        ("ale_py:ALE/Breakout-v5", "ale_py:ALE/Breakout-v5"),  # gymnasium's own form, RLlib's examples'
        ("HalfCheetah-v5", "HalfCheetah-v5"),
    ],
)
def test_package_ids_resolve_to_a_name_every_runner_can_make(spec, name):
    resolved = resolve_env(spec)
    assert (resolved.name, resolved.creator) == (name, None)
    # What an env runner does with it, in a process that imported nothing: gymnasium imports the module.
    code = f"import gymnasium as gym; e = gym.make({name!r}); print(e.observation_space.shape); e.close()"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_an_id_of_a_package_not_installed_names_the_package():
    with pytest.raises(UserError) as caught:
        resolve_env("PandaReach-v3")
    assert "panda-gym" in caught.value.message and "not installed" in caught.value.message
    with pytest.raises(UserError) as caught:
        resolve_env("MiniGrid-Emptyy-5x5-v0")  # a typo of a registered id: the closest ids
    assert "MiniGrid-Empty-5x5-v0" in caught.value.hint


def test_module_colon_id_whose_module_registers_nothing_is_refused():
    with pytest.raises(UserError, match="registered no env 'Nope-v0'"):
        resolve_env("minigrid:Nope-v0")


class _Config:
    def __init__(self, config):
        self.config = config


class _Keywords:
    def __init__(self, size=5, color="red"):
        self.size, self.color = size, color


def _factory(env_config):
    return env_config


def _kwargs_only(**kwargs):
    return kwargs


@pytest.mark.parametrize(
    ("target", "style"),
    [
        (_Config, "dict"),  # the seed tutorials' __init__(self, config)
        (_factory, "dict"),
        (_Keywords, "kwargs"),  # minigrid.envs.EmptyEnv(size=5)
        (_kwargs_only, "kwargs"),  # PettingZoo's env(**kwargs)
        (object, "none"),
    ],
)
def test_env_config_goes_in_as_the_target_takes_it(target, style):
    assert config_style(target) == style


def test_keyword_classes_get_env_config_as_keywords_and_a_typo_is_named():
    import minigrid.envs

    env = EnvFactory(minigrid.envs.EmptyEnv, "EmptyEnv")({"size": 6})
    assert env.unwrapped.width == 6
    with pytest.raises(UserError) as caught:
        EnvFactory(_Keywords, "K")({"colour": "blue"})
    assert "'colour'" in caught.value.message and "color" in caught.value.hint


# ---- an env file's own imports travel with it ---------------------------------------------------


def test_an_env_files_imports_are_made_in_a_process_that_unpickles_it(tmp_path):
    """A remote runner unpickles the factory (the file by value) but never runs the file's top: the
    factory imports what the file imported, or gymnasium cannot find the id."""
    (tmp_path / "unpickled_grid_file.py").write_text(
        textwrap.dedent(
            """
            import gymnasium as gym
            import minigrid  # registers the MiniGrid ids

            def make(config):
                return gym.make("MiniGrid-Empty-5x5-v0", **config)
            """
        )
    )
    resolved = resolve_env("unpickled_grid_file:make", [tmp_path])  # a name of its own: imports are cached
    assert resolved.creator is not None and "minigrid" in resolved.creator.imports
    blob = tmp_path / "factory.pkl"
    blob.write_bytes(cloudpickle.dumps(resolved.creator))
    code = (
        f"import pickle; e = pickle.load(open({str(blob)!r}, 'rb'))({{}}); print(type(e.unwrapped).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")
    assert out.returncode == 0 and "EmptyEnv" in out.stdout, out.stderr[-2000:]
    resolved.creator.imports = ()  # as before: the id is unknown in the new process
    blob.write_bytes(cloudpickle.dumps(resolved.creator))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")
    assert out.returncode != 0 and "NameNotFound" in out.stderr


# ---- masks: used as masks, or refused; never features ----------------------------------------------


class _DictEnv(gym.Env):
    def __init__(self, parts: dict, action_space: gym.Space):
        self.observation_space = gym.spaces.Dict(parts)
        self.action_space = action_space

    def reset(self, *, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


MASK9 = gym.spaces.Box(0, 1, (9,), np.int8)
BOARD = gym.spaces.Box(0, 1, (3, 3, 2), np.int8)


@pytest.mark.parametrize(
    ("parts", "action", "inner"),
    [
        ({"observation": BOARD, MASK_KEY: MASK9}, gym.spaces.Discrete(9), BOARD),  # PettingZoo classic
        ({MASK_KEY: MASK9, "obs": BOARD}, gym.spaces.Discrete(9), BOARD),
        (
            {"board": BOARD, "turn": gym.spaces.Discrete(2), MASK_KEY: gym.spaces.MultiBinary(5)},
            gym.spaces.MultiDiscrete([3, 2]),
            gym.spaces.Dict({"board": BOARD, "turn": gym.spaces.Discrete(2)}),
        ),
    ],
)
def test_an_action_mask_beside_other_keys_becomes_the_mask(parts, action, inner):
    env = lay_out(_DictEnv(parts, action), ())
    assert env.observation_space == gym.spaces.Dict({OBS_KEY: inner, MASK_KEY: parts[MASK_KEY]})
    obs, _ = env.reset()
    assert env.observation_space.contains(obs)


def test_our_own_mask_layout_is_left_alone():
    env = _DictEnv({OBS_KEY: BOARD, MASK_KEY: MASK9}, gym.spaces.Discrete(9))
    assert lay_out(env, ()) is env


@pytest.mark.parametrize(
    ("mask", "action", "why"),
    [
        (MASK9, gym.spaces.Box(-1, 1, (2,)), "no discrete choice"),
        (gym.spaces.Box(0, 1, (4,), np.int8), gym.spaces.Discrete(9), "need a flat mask of 9"),
    ],
)
def test_a_mask_that_fits_no_action_is_refused(mask, action, why):
    with pytest.raises(UserError, match=why):
        lay_out(_DictEnv({"observation": BOARD, MASK_KEY: mask}, action), ())


def test_dropped_keys_and_a_text_part_named_by_its_key():
    from envsdk.envs.spaces import SpaceError, observation_leaves

    parts = {"image": BOARD, "mission": gym.spaces.Text(20)}
    with pytest.raises(SpaceError) as caught:
        observation_leaves(gym.spaces.Dict(parts))
    assert "'mission'" in str(caught.value) and "drop_observation_keys: [mission]" in str(caught.value)
    env = lay_out(_DictEnv(parts, gym.spaces.Discrete(3)), ("mission",))
    assert env.observation_space == gym.spaces.Dict({"image": BOARD})
    with pytest.raises(UserError, match="no part 'missing'"):
        lay_out(_DictEnv(parts, gym.spaces.Discrete(3)), ("missing",))


class _Missions(gym.Space):
    """A space of strings of another package (MiniGrid's MissionSpace is one)."""

    def sample(self, mask=None, probability=None):
        return "go to the red ball"

    def contains(self, x):
        return isinstance(x, str)


@pytest.mark.parametrize("text", [gym.spaces.Text(24, charset="abcdefghijklmnopqrstuvwxyz "), _Missions()])
def test_a_text_part_is_read_as_characters_and_missions_read_apart(text):
    import torch

    from envsdk.envs.spaces import TEXT, TextTokens, observation_leaves
    from envsdk.networks.encoder import SpaceEncoderConfig

    env = lay_out(_DictEnv({"image": BOARD, "mission": text}, gym.spaces.Discrete(3)), ())
    tokens = env.observation_space["mission"]
    assert isinstance(tokens, TextTokens)
    assert [leaf.kind for leaf in observation_leaves(env.observation_space)][-1] == TEXT
    missions = ["go to the red ball", "go to the blue key", "go to the red ball"]
    encoded = np.stack([tokens.encode(m) for m in missions])
    assert tokens.contains(encoded[0]) and (encoded[0] == encoded[2]).all()
    assert (encoded[0][len(missions[0]) :] == 0).all() and (encoded[0][: len(missions[0])] > 0).all()
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    model = {**dataclasses.asdict(DefaultModelConfig()), "fcnet_hiddens": [8]}
    config = SpaceEncoderConfig.from_model_config(env.observation_space, model)
    encoder = config.build()
    batch = {"image": torch.zeros(3, *BOARD.shape), "mission": torch.as_tensor(encoded)}
    with torch.no_grad():
        out = encoder({"obs": batch})["encoder_out"]
    assert torch.allclose(out[0], out[2]) and not torch.allclose(out[0], out[1])


# ---- PettingZoo ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "kind", "agents"),
    [
        ("pettingzoo.classic.tictactoe_v3", "TurnBasedGame", ["player_1", "player_2"]),
        ("pettingzoo.classic.connect_four_v3.env", "TurnBasedGame", ["player_0", "player_1"]),
        ("pettingzoo.classic.connect_four_v3:raw_env", "TurnBasedGame", ["player_0", "player_1"]),
        ("pettingzoo.classic.rps_v2", "SimultaneousGame", ["player_0", "player_1"]),
        (
            "pettingzoo:classic/tictactoe-v3",
            "TurnBasedGame",
            ["player_1", "player_2"],
        ),  # PettingZoo's registry
        ("pettingzoo:butterfly/pistonball-v6", "SimultaneousGame", None),
        ("pettingzoo.butterfly.knights_archers_zombies_v11", "SimultaneousGame", None),
    ],
)
def test_pettingzoo_modules_and_functions_become_multi_agent_envs(spec, kind, agents):
    from ray.rllib.env.multi_agent_env import MultiAgentEnv

    env = resolve_env(spec).make({})
    inner = getattr(env, "env", env)
    assert type(inner).__name__ == kind and isinstance(env, MultiAgentEnv)
    if agents is not None:
        assert env.possible_agents == agents
    obs, _ = env.reset(seed=0)
    assert obs
    for agent, value in obs.items():
        space = env.get_observation_space(agent)
        assert space.contains(value)
        if (
            spec.startswith("pettingzoo.classic") and kind == "TurnBasedGame"
        ):  # {"observation", "action_mask"}
            assert set(value) == {OBS_KEY, MASK_KEY}
    env.close()


def test_an_old_pettingzoo_version_names_the_current_one():
    with pytest.raises(UserError, match="use knights_archers_zombies_v11"):
        resolve_env("pettingzoo.butterfly.knights_archers_zombies_v10")
    with pytest.raises(UserError) as caught:
        resolve_env("pettingzoo:classic/tictactoe-v2")
    assert "classic/tictactoe-v3" in caught.value.hint


# ---- training from YAML, in the driver and on a remote env runner ----------------------------------

PPO = {
    "train_batch_size": 200,
    "minibatch_size": 100,
    "num_epochs": 1,
    "model_config": {"fcnet_hiddens": [16]},
}
FAMILIES = {
    "minigrid-id": {"env": "MiniGrid-Empty-5x5-v0", "config": {}},  # its mission text read as characters
    "minigrid-class": {
        "env": "minigrid.envs.EmptyEnv",
        "config": {"env_config": {"size": 5}, "drop_observation_keys": ["mission"]},
    },
    "minigrid-file": {"env": "grid_file:make", "config": {}},  # an env file that imports minigrid
    "atari": {"env": "ALE/Pong-v5", "config": {"atari_preprocessing": {"dim": 42, "framestack": 2}}},
    "highway": {"env": "highway-fast-v0", "config": {}},
    "mujoco": {"env": "HalfCheetah-v5", "config": {}},
    "pettingzoo-aec": {"env": "pettingzoo.classic.tictactoe_v3", "config": {}},
    "pettingzoo-aec-function": {"env": "pettingzoo.classic.connect_four_v3.env", "config": {}},
    "pettingzoo-parallel": {
        "env": "pettingzoo.butterfly.knights_archers_zombies_v11",
        "config": {"env_config": {"max_cycles": 40}},
    },
}
GRID_FILE = """
import gymnasium as gym
import minigrid  # registers MiniGrid-* ids: a remote runner must import it too
from minigrid.wrappers import ImgObsWrapper


def make(config):
    return ImgObsWrapper(gym.make("MiniGrid-Empty-5x5-v0", **config))
"""


@pytest.fixture(scope="module", params=[0, 1], ids=["local-runner", "remote-runner"])
def families(request, ray_address, tmp_path_factory):
    """One train.py run of every family, 2 iterations each; returns (output, results folder, runners)."""
    runners = request.param
    folder = tmp_path_factory.mktemp(f"families-{runners}")
    (folder / "grid_file.py").write_text(GRID_FILE)
    experiments = {
        name: {
            "run": "PPO",
            "env": family["env"],
            "stop": {"training_iteration": 2},
            "checkpoint_at_end": True,
            "config": {**PPO, **family["config"], "num_env_runners": runners},
        }
        for name, family in FAMILIES.items()
    }
    out, results = train_experiments(folder, experiments, ray_address)
    return out.stdout + out.stderr, results, runners


@pytest.mark.parametrize("name", list(FAMILIES))
def test_each_family_trains_and_rolls_out(families, name, tmp_path):
    output, results, _ = families
    (trial,) = [p.parent for p in (results / name).glob("*/progress.csv")]
    rows = progress_rows(trial)
    assert len(rows) == 2 and float(rows[-1]["num_env_steps_sampled_lifetime"]) >= 400
    code, out = rollout_in_process(results / name, "--episodes", "1", "--out", tmp_path / "e.npz")
    assert code == 0, out
    assert re.search(r"^episode 1: return -?[\d.]+, length \d+", out, re.M), out
    if name.startswith("pettingzoo-aec"):  # PettingZoo's own word for a move its mask forbade
        assert "illegal" not in (output + out).lower()


def test_pettingzoo_policies_come_from_the_env(families):
    output, _, _ = families
    assert "[pettingzoo-aec] model shared_policy:" in output
    assert re.search(r"\[pettingzoo-aec\] model shared_policy: .*Discrete\(9\), masked", output)


def test_atari_frames_are_preprocessed(families):
    output, _, _ = families
    assert re.search(r"\[atari\] model default_policy: 42x42x2 float32 image -> CNN", output), output


class _RawFrames(gym.Wrapper):
    """The base ALE env, keeping the raw frames of the steps it took."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.frames: list[np.ndarray] = []

    def step(self, action):
        out = self.env.step(action)
        self.frames.append(out[0])
        return out


@pytest.mark.parametrize(("dim", "grayscale"), [(84, True), (42, False)])
def test_each_atari_frame_is_the_max_of_two_raw_frames_grayscaled_and_resized_once(dim, grayscale):
    """DeepMind's order, which SB3's AtariWrapper keeps: each step's new frame is the pixel max of
    the last two raw frames its action was repeated for, then grayscaled and resized (OpenCV, as
    RLlib's wrappers do), scaled to [-1, 1]."""
    import ale_py
    import cv2

    from envsdk.envs.adapters import atari

    gym.register_envs(ale_py)
    base = _RawFrames(gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0))
    env = atari.wrap(base, atari.AtariSettings(dim=dim, grayscale=grayscale, framestack=4))
    env.reset(seed=3)
    channels = 1 if grayscale else 3
    for step in range(40):
        base.frames.clear()
        obs, *_ = env.step(step % 6)
        assert len(base.frames) == 4 and obs.shape == (dim, dim, 4 * channels)
        top = np.maximum(base.frames[-2], base.frames[-1])
        frame = cv2.cvtColor(top, cv2.COLOR_RGB2GRAY) if grayscale else top
        frame = cv2.resize(frame, (dim, dim), interpolation=cv2.INTER_AREA).reshape(dim, dim, channels)
        np.testing.assert_array_equal(obs[..., -channels:], frame.astype(np.float32) / 128.0 - 1.0)


# ---- self-play on a turn-based game ----------------------------------------------------------------


def test_self_play_on_a_turn_based_game_takes_teams_from_the_players(train, tmp_path):
    """Only the player to move observes at reset; both players are known from the env's possible agents."""
    config = tmp_path / "ttt.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "ttt": {
                    "run": "PPO",
                    "env": "pettingzoo.classic.tictactoe_v3",
                    "stop": {"training_iteration": 2},
                    "checkpoint_at_end": True,
                    "config": {
                        **PPO,
                        "num_env_runners": 0,
                        "self_play": {"save_steps": 100, "swap_steps": 50},
                    },
                }
            }
        )
    )
    out = train("-f", str(config))
    assert out.returncode == 0, out.stdout[-2000:]
    assert "'player_1' is team 0, 'player_2' team 1" in out.stdout + out.stderr
    code, text = rollout_in_process(
        train.results / "ttt", "--episodes", "20", "--opponent", "random", "--team", "1"
    )
    assert code == 0, text
    assert "plays team 1" in text
    assert re.search(r"shared_policy against random: \d+ wins, \d+ draws, \d+ losses in 20 games", text), text
    assert "illegal" not in (out.stdout + out.stderr + text).lower()
