"""ONNX exports say their layout: one output per action part and per MultiDiscrete branch, and the
snippet docs/commands.md shows (taken from the file, so the two cannot drift) acts as the policy
does in torch, on every kind of action space we export, with memory or without.

The policies are RLlib's default RLModules built for each pair of spaces (untrained: the layout,
not the skill, is tested), exported as ``rollout.py --export-onnx`` exports a checkpoint's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import tree

from tests.helpers import ROOT

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
STEPS = 4
CELL = 8

# case -> (algorithm, action space, use_lstm, output name -> where its action sits in RLlib's greedy one)
CASES: dict[str, tuple[str, gym.Space, bool, dict[str, tuple]]] = {
    "discrete": ("PPO", gym.spaces.Discrete(3), False, {"logits": ()}),
    "multidiscrete": ("PPO", gym.spaces.MultiDiscrete([3, 2]), False, {"logits_0": (0,), "logits_1": (1,)}),
    "box": ("PPO", gym.spaces.Box(-2.0, 3.0, (2,), np.float32), False, {"means": ()}),
    "tuple": (
        "PPO",
        gym.spaces.Tuple((gym.spaces.Box(-1.0, 1.0, (2,), np.float32), gym.spaces.Discrete(3))),
        False,
        {"means_0": (0,), "logits_1": (1,)},
    ),
    "dict": (
        "PPO",
        gym.spaces.Dict(
            {"move": gym.spaces.MultiDiscrete([2, 4]), "turn": gym.spaces.Box(-1.0, 1.0, (1,), np.float32)}
        ),
        False,
        {"logits_move.0": ("move", 0), "logits_move.1": ("move", 1), "means_turn": ("turn",)},
    ),
    "dqn": ("DQN", gym.spaces.Discrete(4), False, {"q_values": ()}),
    "lstm-discrete": ("PPO", gym.spaces.Discrete(3), True, {"logits": ()}),
    "lstm-multidiscrete": (
        "PPO",
        gym.spaces.MultiDiscrete([3, 2]),
        True,
        {"logits_0": (0,), "logits_1": (1,)},
    ),
}


def documented_snippet() -> str:
    """The ONNX snippet of docs/commands.md: the python block that opens ``policy.onnx``."""
    text = (ROOT / "docs" / "commands.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if '"policy.onnx"' in b]
    return block


def _module(algo: str, action_space: gym.Space, memory: bool) -> Any:
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    config = (PPOConfig() if algo == "PPO" else DQNConfig()).rl_module(
        model_config=DefaultModelConfig(
            fcnet_hiddens=[16, 16], use_lstm=memory, lstm_cell_size=CELL, max_seq_len=STEPS
        )
    )
    spec = config.get_default_rl_module_spec()
    spec.observation_space, spec.action_space = OBS, action_space
    spec.model_config = config.model_config  # with the algorithm's own entries (DQN's num_atoms, ...)
    torch.manual_seed(0)
    return spec.build()


def _greedy_in_torch(module: Any, observations: np.ndarray) -> list[Any]:
    """RLlib's greedy action at each step (explore=False), actions mapped onto the bounds as its
    module-to-env connector does with normalize_actions; a recurrent module steps with its state."""
    from ray.rllib.core.columns import Columns
    from ray.rllib.utils.spaces.space_utils import get_base_struct_from_space, unsquash_action

    state = tree.map_structure(lambda s: torch.as_tensor(s)[None], module.get_initial_state())
    struct = get_base_struct_from_space(module.action_space)
    taken = []
    for obs in observations:
        batch: dict[str, Any] = {Columns.OBS: torch.from_numpy(obs[None])}
        if module.is_stateful():
            batch = {Columns.OBS: batch[Columns.OBS][:, None], Columns.STATE_IN: state}
        with torch.no_grad():
            out = module.forward_inference(batch)
        if Columns.ACTIONS in out:  # DQN: its greedy action
            action: Any = out[Columns.ACTIONS]
        else:
            inputs = out[Columns.ACTION_DIST_INPUTS]
            inputs = inputs[:, 0] if module.is_stateful() else inputs
            dist = module.get_inference_action_dist_cls().from_logits(inputs)
            action = dist.to_deterministic().sample()
        state = out.get(Columns.STATE_OUT)
        taken.append(unsquash_action(tree.map_structure(lambda a: a.numpy()[0], action), struct))
    return taken


def _at(action: Any, where: tuple) -> Any:
    for part in where:
        action = action[part]
    return action


@pytest.mark.parametrize("case", list(CASES))
def test_the_documented_snippet_acts_as_the_policy_in_torch(case, tmp_path, monkeypatch):
    from envsdk.evaluation.onnx_export import module_net, write

    algo, action_space, memory, where = CASES[case]
    module = _module(algo, action_space, memory)
    assert module.is_stateful() == memory
    target = tmp_path / "policy.onnx"
    assert write({"default_policy": module_net(module, "default_policy", (True, False))}, target) == {
        "default_policy": target
    }
    OBS.seed(3)
    observations = np.stack([OBS.sample() for _ in range(STEPS)])
    want = _greedy_in_torch(module, observations)

    monkeypatch.chdir(tmp_path)  # the snippet opens "policy.onnx"
    found: dict[str, Any] = {"obs": observations[0]}
    exec(compile(documented_snippet(), "docs/commands.md", "exec"), found)
    action, state = found["action"], found["memory"]
    assert sorted(state) == (["state_in_c", "state_in_h"] if memory else [])
    for step, obs in enumerate(observations):
        if step:  # the next steps as the snippet's last line says, its memory fed back
            action, state = found["act"]({"observations": obs[None].astype("float32"), **state})
        assert list(action) == list(where), action  # the outputs, in order
        for name, path in where.items():
            got, expected = action[name][0], np.asarray(_at(want[step], path))
            if name.startswith("means"):
                np.testing.assert_allclose(got, expected, atol=1e-5)
            else:
                assert got == expected, (step, name)


def test_a_multidiscrete_output_per_branch_is_that_branch_alone(tmp_path):
    """The split is where RLlib's distribution splits the inputs: each branch's output has its own
    number of choices."""
    import onnxruntime

    from envsdk.evaluation.onnx_export import module_net, write

    module = _module("PPO", gym.spaces.MultiDiscrete([3, 2, 5]), False)
    write({"default_policy": module_net(module, "default_policy", (True, False))}, tmp_path / "p.onnx")
    session = onnxruntime.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    assert [(o.name, o.shape[-1]) for o in session.get_outputs()] == [
        ("logits_0", 3),
        ("logits_1", 2),
        ("logits_2", 5),
    ]
    Path(tmp_path / "p.onnx").unlink()
