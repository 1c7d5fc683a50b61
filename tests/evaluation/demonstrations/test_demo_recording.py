"""rollout.py --out FILE.demo and --policy: a scripted player recorded as an ML-Agents demonstration;
the spaces a .demo file holds laid out, the others refused before anything is played."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from envsdk.errors import UserError
from envsdk.evaluation.demonstrations.recording import demonstration, layout
from envsdk.evaluation.evaluator import EpisodeRecord, Trace
from tests.helpers import ROOT, rollout_here
from unity_bridge.demo_files import read_demo

LEAN = ROOT / "tests" / "data" / "demos" / "cartpole_lean.py"
Box = gym.spaces.Box


def test_scripted_player_is_recorded_as_a_demo(tmp_path: Path) -> None:
    out = tmp_path / "lean.demo"
    done = rollout_here(
        "--policy", f"{LEAN}:push", "--env", "CartPole-v1", "--episodes", 2, "--seed", 0, "--out", out
    )
    assert done.returncode == 0, done.stderr
    assert f"policy: {LEAN}:push (scripted) on CartPole-v1" in done.stdout
    demo = read_demo(out)
    assert demo.behavior_name == "CartPole-v1"
    assert (demo.observation_shapes, demo.continuous_size, demo.discrete_branches) == (((4,),), 0, (2,))
    assert demo.episode_returns() == [500.0, 500.0]  # the lean player keeps the pole up to the time limit
    assert demo.dones.sum() == 2 and demo.max_step_reached.sum() == 2  # each ended by the limit
    pushes = [int(o[2] + 0.5 * o[3] > 0) for o in demo.observations[0]]
    assert demo.discrete_actions[:, 0].tolist() == pushes
    assert f"demonstration: {out} (behavior CartPole-v1: 1000 steps, 2 episodes" in done.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["--policy", f"{LEAN}:out_of_space", "--env", "CartPole-v1"],
            "out_of_space returned 7, which is not in the action space Discrete(2)",
        ),
        (
            ["--policy", f"{LEAN}:NOT_A_FUNCTION", "--env", "CartPole-v1"],
            "NOT_A_FUNCTION is a int, not a function",
        ),
        (["--policy", f"{LEAN}:missing", "--env", "CartPole-v1"], "has no scripted policy 'missing'"),
        (["--policy", "nowhere.py:push", "--env", "CartPole-v1"], "nowhere.py does not exist"),
        (["--policy", "push", "--env", "CartPole-v1"], "'push' names no function"),
        (["--policy", f"{LEAN}:push"], "needs the env it plays"),
        (
            ["--policy", f"{LEAN}:push", "--env", "CartPole-v1", "--export-onnx", "p.onnx"],
            "--export-onnx needs a checkpoint",
        ),
        (
            ["--policy", f"{LEAN}:zero", "--env", "FrozenLake-v1", "--out", "f.demo"],
            "observation is Discrete(16)",
        ),
        (
            ["--policy", f"{LEAN}:push", "--env", "CartPole-v1", "--out", "f.csv"],
            ".npz archive or an ML-Agents .demo file",
        ),
        ([], "no CHECKPOINT given"),
    ],
)
def test_refused_before_playing(tmp_path: Path, args: list[str], words: str) -> None:
    done = rollout_here(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and words in lines[0] and lines[1].startswith("  fix: ")
    assert "episode 1" not in done.stdout and not list(tmp_path.iterdir())


MASKED_GAME = gym.spaces.Dict(
    {"observations": gym.spaces.Dict({"camera": Box(0, 1, (6, 8, 3)), "vector": Box(-1, 1, (5,))}),
     "action_mask": Box(0, 1, (5,), np.int8)}
)  # fmt: skip
HYBRID = gym.spaces.Tuple((Box(-1, 1, (2,)), gym.spaces.MultiDiscrete([2, 3])))


@pytest.mark.parametrize(
    ("obs_space", "act_space", "shapes", "continuous", "branches", "masked"),
    [
        (Box(-1, 1, (4,)), gym.spaces.Discrete(3), ((4,),), 0, (3,), False),
        (
            gym.spaces.Tuple((Box(-1, 1, (2,)), Box(0, 1, (3, 4)))),
            Box(-1, 1, (2, 2)),
            ((2,), (3, 4)),
            4,
            (),
            False,
        ),
        (MASKED_GAME, HYBRID, ((6, 8, 3), (5,)), 2, (2, 3), True),
    ],
)
def test_layout_of_spaces(obs_space, act_space, shapes, continuous, branches, masked) -> None:
    plan = layout({"Ball?team=0/3": (obs_space, act_space)}, "unity", unity=True)
    assert plan.behavior_name == "Ball?team=0"
    assert tuple(shape for _, shape in plan.observations) == shapes
    assert (plan.continuous_size, plan.branches, plan.mask is not None) == (continuous, branches, masked)


@pytest.mark.parametrize(
    ("spaces", "words"),
    [
        ({"a": (gym.spaces.Discrete(4), gym.spaces.Discrete(2))}, "observation is Discrete(4)"),
        ({"a": (Box(0, 1, (2, 3, 4, 5)), gym.spaces.Discrete(2))}, "1 to 3 dimensions"),
        ({"a": (Box(0, 1, (2,)), gym.spaces.MultiBinary(3))}, "has a part MultiBinary(3)"),
        (
            {"a": (Box(0, 1, (2,)), gym.spaces.Discrete(2)), "b": (Box(0, 1, (3,)), gym.spaces.Discrete(2))},
            "2 different spaces",
        ),
    ],
)
def test_spaces_a_demo_cannot_hold_are_refused(spaces, words) -> None:
    with pytest.raises(UserError) as error:
        layout(spaces, "env", unity=False)
    assert words in error.value.message and "\n" not in error.value.message and ".npz" in error.value.hint


def test_unity_behaviors_one_per_file() -> None:
    spaces = (Box(0, 1, (2,)), gym.spaces.Discrete(2))
    with pytest.raises(UserError, match=r"behaviors \['Blue\?team=0', 'Red\?team=1'\]"):
        layout({"Blue?team=0/0": spaces, "Red?team=1/1": spaces}, "unity", unity=True)


def _trace(rng, steps: int, terminated: bool) -> Trace:
    obs = {
        "observations": {"camera": rng.random((steps + 1, 6, 8, 3)), "vector": rng.random((steps + 1, 5))},
        "action_mask": rng.integers(0, 2, (steps + 1, 5)).astype(np.int8),
    }
    actions = (rng.random((steps, 2)).astype(np.float32), rng.integers(0, 2, (steps, 2)))
    return Trace(obs, actions, rng.random(steps), [{}] * (steps + 1), terminated, not terminated)


def test_records_become_rows_agent_by_agent() -> None:
    """Two agents of one behavior over two episodes (the second cut by --steps): rows in record order,
    each agent's part ending its episode in the file, at the step limit where the env did not end it."""
    rng = np.random.default_rng(0)
    first = {"Ball?team=0/0": _trace(rng, 3, True), "Ball?team=0/1": _trace(rng, 2, False)}
    second = {"Ball?team=0/2": _trace(rng, 4, False)}
    records = [EpisodeRecord(first, 3, True), EpisodeRecord(second, 4, False)]
    plan = layout({"Ball?team=0/0": (MASKED_GAME, HYBRID)}, "unity", unity=True)
    demo = demonstration(records, plan)
    traces = [*first.values(), *second.values()]
    assert demo.steps == 9 and demo.episodes == 3
    assert demo.dones.tolist() == [False, False, True, False, True, False, False, False, True]
    assert demo.max_step_reached.tolist() == [False] * 4 + [True] + [False] * 3 + [True]
    np.testing.assert_allclose(
        demo.observations[0], np.concatenate([t.obs["observations"]["camera"][:-1] for t in traces])
    )
    np.testing.assert_allclose(
        demo.final_observations[1], np.stack([t.obs["observations"]["vector"][-1] for t in traces])
    )
    np.testing.assert_array_equal(
        demo.action_masks, np.concatenate([t.obs["action_mask"][:-1] for t in traces]).astype(bool)
    )
    np.testing.assert_array_equal(demo.discrete_actions, np.concatenate([t.actions[1] for t in traces]))
    np.testing.assert_allclose(demo.rewards, np.concatenate([t.rewards for t in traces]), rtol=1e-6)


def test_checkpoint_play_is_recorded_as_a_demo(tmp_path: Path) -> None:
    """A checkpoint a commit wrote (tests/data/checkpoints) plays on RLlib's env runner; its episodes
    are the demonstration's, step for step."""
    checkpoint = ROOT / "tests" / "data" / "checkpoints" / "62e04a5" / "cartpole-ppo"
    done = rollout_here(checkpoint, "--episodes", 2, "--seed", 0, "--out", tmp_path / "ppo.demo")
    assert done.returncode == 0, done.stderr
    lengths = [
        int(line.split("length ")[1]) for line in done.stdout.splitlines() if line.startswith("episode ")
    ]
    demo = read_demo(tmp_path / "ppo.demo")
    assert [stop - start for start, stop in demo.episode_bounds()] == lengths
    assert demo.episode_returns() == [float(n) for n in lengths]  # CartPole: 1 per step
    assert demo.dones.sum() == 2 and (demo.observation_shapes, demo.discrete_branches) == (((4,),), (2,))


def test_a_checkpoint_of_several_policies_is_refused_before_playing(tmp_path: Path) -> None:
    checkpoint = ROOT / "tests" / "data" / "checkpoints" / "62e04a5" / "multi-agent"
    done = rollout_here(checkpoint, "--episodes", 1, "--out", tmp_path / "two.demo", cwd=ROOT / "configs")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: --out: the checkpoint plays policies ['policy_0', 'policy_1']" in done.stderr
    assert "episode 1" not in done.stdout and not list(tmp_path.iterdir())
