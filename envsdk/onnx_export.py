"""``rollout.py --export-onnx FILE``: the trained policy network as an ONNX model.

Inputs: ``observations`` (batch x observation shape, float32) and, for envs
with action masks, ``action_mask`` (batch x actions, float32, 1 = allowed).
Output: ``logits`` for discrete actions or ``means`` for continuous ones
(the greedy action is their argmax or the means themselves).  The inputs are
what the network sees: with RLlib's default connectors, the env's
observation as it is.

RLlib's own ONNX export covers old-stack policies only (ray #45526); here a
small torch wrapper calls the RLModule's inference forward pass (or the
ModelV2's forward) and is exported with torch's TorchScript-based exporter.
After writing, the file is run with onnxruntime on sampled observations and
compared with torch; a mismatch is an error, not a silent bad file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from envsdk.base import MASK_KEY, OBS_KEY
from envsdk.errors import UserError
from envsdk.restore import Restored

OPSET = 17


class _Network(torch.nn.Module):
    """Observations (+ mask) -> action distribution inputs, as one plain forward."""

    def __init__(self, net: Any, new_stack: bool, masked: bool, action_size: int | None):
        super().__init__()
        self.net = net
        self.new_stack = new_stack
        self.masked = masked
        self.action_size = action_size  # continuous: keep the means, drop the log-stds

    def forward(self, observations: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        obs: Any = {OBS_KEY: observations, MASK_KEY: action_mask} if self.masked else observations
        if self.new_stack:
            from ray.rllib.core.columns import Columns

            out = self.net.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
        else:
            out, _ = self.net({"obs": obs}, [], None)
        return out if self.action_size is None else out[:, : self.action_size]


def _networks(restored: Restored) -> dict[str, tuple[torch.nn.Module, gym.Space, gym.Space]]:
    """policy id -> (torch network, observation space, action space)."""
    if restored.new_stack:
        from ray.rllib.core.rl_module.rl_module import RLModule

        found = sorted(p for p in restored.module_dir.iterdir() if (p / "module_state.pkl").is_file())
        modules = {p.name: RLModule.from_checkpoint(p) for p in found}
        return {pid: (m, m.observation_space, m.action_space) for pid, m in modules.items()}
    from ray.rllib.policy.policy import Policy

    policies = Policy.from_checkpoint(restored.checkpoint)
    return {
        pid: (p.model, getattr(p.observation_space, "original_space", p.observation_space), p.action_space)
        for pid, p in policies.items()
    }


def _inputs(obs_space: gym.Space, batch: int, seed: int) -> tuple[dict[str, np.ndarray], bool]:
    masked = isinstance(obs_space, gym.spaces.Dict) and set(obs_space.spaces) == {OBS_KEY, MASK_KEY}
    inner = obs_space[OBS_KEY] if masked else obs_space
    if not isinstance(inner, gym.spaces.Box):
        raise UserError(
            f"--export-onnx handles Box observations (optionally with an action mask), not {inner}",
            "export the network yourself with torch.onnx.export",
        )
    inner.seed(seed)
    feeds = {"observations": np.stack([inner.sample() for _ in range(batch)]).astype(np.float32)}
    if masked:
        rng = np.random.default_rng(seed)
        mask = (rng.random((batch, *obs_space[MASK_KEY].shape)) < 0.6).astype(np.float32)
        mask[np.arange(batch), rng.integers(mask.shape[1], size=batch)] = 1.0
        feeds["action_mask"] = mask
    return feeds, masked


def export(restored: Restored, path: Path, seed: int = 0) -> dict[str, Path]:
    """Write one ONNX file per policy (``FILE`` itself for a single policy); verified."""
    networks = _networks(restored)
    written: dict[str, Path] = {}
    for pid, (net, obs_space, act_space) in networks.items():
        target = path if len(networks) == 1 else path.with_name(f"{path.stem}_{pid}{path.suffix}")
        if hasattr(net, "eval"):
            net.eval()
        continuous = isinstance(act_space, gym.spaces.Box)
        feeds, masked = _inputs(obs_space, 8, seed)
        size = int(np.prod(act_space.shape)) if continuous else None
        wrapper = _Network(net, restored.new_stack, masked, size)
        names = list(feeds)
        output = "means" if continuous else "logits"
        args = tuple(torch.from_numpy(feeds[n]) for n in names)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.part")
        with torch.no_grad():
            torch.onnx.export(
                wrapper,
                args,
                str(tmp),
                input_names=names,
                output_names=[output],
                dynamic_axes={n: {0: "batch"} for n in [*names, output]},
                opset_version=OPSET,
                dynamo=False,
            )
            expected = wrapper(*args).numpy()
        check_parity(tmp, feeds, expected, continuous)
        os.replace(tmp, target)
        written[pid] = target
    return written


def check_parity(path: Path, feeds: dict[str, np.ndarray], expected: np.ndarray, continuous: bool) -> None:
    """onnxruntime must reproduce torch's greedy actions on the same inputs."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, feeds)[0]
    same = (
        np.allclose(got, expected, atol=1e-4)
        if continuous
        else np.array_equal(got.argmax(-1), expected.argmax(-1))
    )
    if not same:
        raise RuntimeError(f"ONNX export {path} disagrees with torch on the same inputs")
