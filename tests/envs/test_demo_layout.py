"""One layout of a space's parts in a .demo file (envsdk/envs/demo_layout.py): what rollout.py --out
FILE.demo writes, GAIL and behavioral cloning read back as the same values, and both sides refuse
the same spaces in the same words."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import tree
from ray.rllib.core.columns import Columns

from envsdk.envs.demo_layout import Layout
from envsdk.errors import UserError
from envsdk.evaluation.demonstrations.recording import demonstration, layout
from envsdk.evaluation.evaluator import EpisodeRecord, Trace
from envsdk.networks.reward_signals import demo_shapes, demonstration_batch

Box = gym.spaces.Box
MASKED = gym.spaces.Dict(
    {
        "observations": gym.spaces.Dict(
            {"camera": Box(0, 255, (8, 8, 3), np.uint8), "vector": Box(-1, 1, (5,))}
        ),
        "action_mask": Box(0, 1, (6,), np.int8),
    }
)
SPACES = {
    "box, discrete": (Box(-1, 1, (4,)), gym.spaces.Discrete(3, start=1)),
    "tuple, matrix": (gym.spaces.Tuple((Box(-1, 1, (2,)), Box(0, 1, (3, 4)))), Box(-1, 1, (2, 2))),
    "masked, hybrid": (
        MASKED,
        gym.spaces.Dict({"move": Box(-1, 1, (2,)), "pick": gym.spaces.MultiDiscrete([2, 4], start=[1, -1])}),
    ),
}


def _batched(space: gym.Space, rows: int) -> Any:
    """``rows`` samples of ``space`` stacked as a Trace holds them (rows first)."""
    return tree.map_structure(lambda *xs: np.stack(xs), *[space.sample() for _ in range(rows)])


@pytest.mark.parametrize("spaces", sorted(SPACES))
def test_what_the_writer_lays_out_the_reader_reads_back(spaces: str) -> None:
    obs_space, act_space = SPACES[spaces]
    obs_space.seed(0)
    act_space.seed(0)
    traces = {"a/0": Trace(_batched(obs_space, 4), _batched(act_space, 3), np.ones(3), [{}] * 4, True, False)}
    second = Trace(_batched(obs_space, 3), _batched(act_space, 2), np.ones(2), [{}] * 3, False, True)
    records = [EpisodeRecord(traces, 3, True), EpisodeRecord({"a/1": second}, 2, True)]
    plan = layout({"a/0": (obs_space, act_space)}, "env", unity=False)
    demo = demonstration(records, plan)
    batch = demonstration_batch(demo, obs_space, act_space)

    def steps(trace: Trace) -> Any:
        return tree.map_structure(lambda x: x[: len(trace.rewards)], trace.obs)

    seen = tree.map_structure(lambda *xs: np.concatenate(xs), *[steps(t) for t in (traces["a/0"], second)])
    acted = tree.map_structure(lambda *xs: np.concatenate(xs), traces["a/0"].actions, second.actions)
    tree.map_structure(
        lambda want, got: np.testing.assert_allclose(got.numpy(), want), seen, batch[Columns.OBS]
    )
    tree.map_structure(
        lambda want, got: np.testing.assert_array_equal(got.numpy(), want), acted, batch[Columns.ACTIONS]
    )
    assert demo_shapes(obs_space, act_space) == (list(plan.shapes), plan.continuous_size, list(plan.branches))
    # the first episode ended by the env, the second by a step limit
    assert batch[Columns.TERMINATEDS].tolist() == [0, 0, 1, 0, 0]
    assert batch[Columns.TRUNCATEDS].tolist() == [0, 0, 0, 0, 1]


def test_discrete_choices_are_counted_from_zero_in_the_file() -> None:
    """ML-Agents' branches count from 0 whatever gymnasium's ``start``: written so, read back so."""
    plan = Layout.of(Box(-1, 1, (1,)), gym.spaces.MultiDiscrete([2, 4], start=[1, -1]), "")
    _, discrete = plan.action_columns(np.array([[1, -1], [2, 2]]), 2)
    assert discrete.tolist() == [[0, 0], [1, 3]]


def test_a_mask_is_every_choice_allowed_where_the_file_holds_none() -> None:
    obs_space, act_space = SPACES["masked, hybrid"]
    plan = layout({"a/0": (obs_space, act_space)}, "env", unity=False)
    obs_space.seed(0)
    trace = Trace(_batched(obs_space, 3), _batched(act_space, 2), np.ones(2), [{}] * 3, True, False)
    demo = demonstration([EpisodeRecord({"a/0": trace}, 2, True)], plan)
    np.testing.assert_array_equal(demo.action_masks, trace.obs["action_mask"][:2].astype(bool))
    read = plan.observations_of(demo)["action_mask"]
    assert read.dtype == np.int8 and read.tolist() == trace.obs["action_mask"][:2].tolist()
    unmasked = plan.observations_of(replace(demo, action_masks=None), torch.as_tensor)["action_mask"]
    assert unmasked.dtype == torch.int8 and unmasked.tolist() == [[1] * 6] * 2


@pytest.mark.parametrize(
    ("obs_space", "act_space", "words"),
    [
        (gym.spaces.Discrete(4), gym.spaces.Discrete(2), "observation is Discrete(4)"),
        (
            gym.spaces.Dict({"a": Box(0, 1, (2,)), "b": gym.spaces.Discrete(2)}),
            gym.spaces.Discrete(2),
            "observation['b'] is Discrete(2)",
        ),
        (Box(0, 1, (2, 3, 4, 5)), gym.spaces.Discrete(2), "1 to 3 dimensions"),
        (Box(0, 1, (2,)), gym.spaces.MultiBinary(3), "has a part MultiBinary(3)"),
    ],
)
def test_writer_and_reader_refuse_the_same_spaces(
    obs_space: gym.Space, act_space: gym.Space, words: str
) -> None:
    with pytest.raises(UserError) as written:
        layout({"a": (obs_space, act_space)}, "env", unity=False)
    with pytest.raises(UserError) as read:
        demo_shapes(obs_space, act_space)
    assert words in written.value.message and written.value.message == read.value.message
    assert ".npz" in (written.value.hint or "") and "imitate" in (read.value.hint or "")


def test_an_older_files_discrete_values_outside_the_choices_are_one_line(tmp_path: Any) -> None:
    """An older writer stored a Discrete(3, start=1) action's values (1 to 3), not choices from 0:
    read now, 3 is outside the branch's choices; refused, never read shifted."""
    from unity_bridge.demo_files import Demonstration, read_demo, write_demo

    rows = 4
    path = tmp_path / "old.demo"
    write_demo(
        path,
        Demonstration(
            behavior_name="expert",
            observation_shapes=((4,),),
            continuous_size=0,
            discrete_branches=(3,),
            observations=(np.zeros((rows, 4), np.float32),),
            continuous_actions=np.zeros((rows, 0), np.float32),
            discrete_actions=np.array([[1], [2], [3], [1]], np.int64),
            rewards=np.zeros(rows, np.float32),
            dones=np.array([False, False, False, True]),
            max_step_reached=np.zeros(rows, bool),
        ),
    )
    obs_space, act_space = SPACES["box, discrete"]
    with pytest.raises(UserError) as caught:
        demonstration_batch(read_demo(str(path)), obs_space, act_space)
    assert str(caught.value) == (
        "a .demo file: its discrete branch 0 holds 3, outside 0 to 2\n"
        "  fix: record it again with this version (choices from 0)"
    )
