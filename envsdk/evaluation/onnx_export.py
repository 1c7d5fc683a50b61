"""``rollout.py --export-onnx FILE``: the trained policy network as an ONNX model.

Inputs, one per part of the observation as the env returns it (see
:func:`~envsdk.envs.spaces.observation_leaves`): ``observations``
for a plain observation, else the Dict keys (``camera``, ``sensors.depth``)
or ``obs_0``, ``obs_1``... for Tuple parts, each in the env's dtype (int64
for Discrete parts); plus ``action_mask`` (float32, 1 = allowed) for envs
with action masks.  The network does its own preprocessing (one-hot,
image scaling), so raw observations go in.

Outputs, one per part of the action:

* a discrete part: ``logits`` (``logits_<part>`` for Tuple/Dict actions), one
  output per branch of a MultiDiscrete (``logits_0``, ``logits_1``...;
  ``logits_<part>.0``... inside a Tuple/Dict): each output's argmax is one
  greedy choice; forbidden choices are at -1e9;
* a continuous part: ``means`` (``means_<part>``): the greedy action as the
  env receives it, mapped to the action bounds and clipped exactly as
  training's ``normalize_actions``/``clip_actions`` did;
* DQN: ``q_values`` (forbidden actions at -inf); the argmax is the action.

A recurrent policy (``use_lstm``) also takes its memory, the LSTM's states
``state_in_h`` and ``state_in_c`` (float32 ``[batch, lstm_cell_size]``; zeros at
an episode's start), and gives the next step's as ``state_out_h`` and
``state_out_c``, after the action outputs: feed them back at the next step.
These are RLlib's ``h`` and ``c`` of the policy's own encoder (a PPO critic's
separate memory does not act, so it is left out), and each input is one step.

RLlib's own ONNX export covers old-stack policies only (ray #45526); here a
small torch wrapper calls the RLModule's inference forward pass (or the
ModelV2's forward, Box observations only) and is exported with torch's
TorchScript-based exporter.  After writing, the file is run with
onnxruntime on sampled observations and compared with torch; a mismatch is
an error, not a silent bad file.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from torch.onnx.symbolic_helper import parse_args

from envsdk.envs.base import MASK_KEY, OBS_KEY, has_action_mask
from envsdk.envs.spaces import (
    ActLeaf,
    ObsLeaf,
    SpaceError,
    action_leaves,
    branch_sizes,
    inner_space,
    mask_size,
    nest,
    observation_leaves,
)
from envsdk.errors import UserError
from envsdk.evaluation.restore import Restored
from envsdk.internals import MODULE_STATE_FILE
from envsdk.networks.poca import policy_of_critic
from envsdk.networks.reward_signals import policy_of_signals
from envsdk.training.hooks.observation_filter import Statistics, saved_statistics
from envsdk.training.hooks.self_play import is_self_play_module

OPSET = 17
SUBJECT = "ONNX export"  # what refuses, in this layer's words; the command line names its flag
MASK_INPUT = "action_mask"
STATE_INPUTS = ("state_in_h", "state_in_c")  # a recurrent policy's memory, RLlib's h and c
STATE_OUTPUTS = ("state_out_h", "state_out_c")


@dataclass(frozen=True)
class Output:
    """One action output: a continuous part's means, or one discrete branch's logits."""

    name: str
    leaf: ActLeaf
    start: int  # first column in the action distribution inputs
    size: int  # its columns there (a Box's means: half the leaf's columns)


@dataclass(frozen=True)
class Layout:
    """How one policy's observations and actions map to ONNX inputs and outputs."""

    observation_space: gym.Space
    action_space: gym.Space
    obs: list[ObsLeaf]
    actions: list[ActLeaf]
    masked: bool
    q_values: bool  # DQN: one output of Q-values instead of distribution inputs
    state_size: int = 0  # a recurrent policy's h (and c) width, its layers' together; 0: no memory

    @property
    def input_names(self) -> list[str]:
        """The observation parts' inputs and the mask's (a recurrent policy's state follows them)."""
        plain = len(self.obs) == 1 and not self.obs[0].path
        names = ["observations"] if plain else [leaf.name for leaf in self.obs]
        return [*names, MASK_INPUT] if self.masked else names

    @property
    def outputs(self) -> list[Output]:
        """The action outputs: one per continuous part, one per branch of a discrete part (a
        MultiDiscrete's branches apart, so that each output's argmax is one choice)."""
        found = []
        for leaf in self.actions:
            kind = "logits" if leaf.discrete else "means"
            sizes = branch_sizes(leaf.space) if leaf.discrete else [leaf.width // 2]
            several = isinstance(leaf.space, gym.spaces.MultiDiscrete)
            start = leaf.start
            for i, size in enumerate(sizes):
                path = [*map(str, leaf.path), *([str(i)] if several else [])]
                found.append(Output(f"{kind}_{'.'.join(path)}" if path else kind, leaf, start, size))
                start += size
        return found

    @property
    def output_names(self) -> list[str]:
        return ["q_values"] if self.q_values else [out.name for out in self.outputs]

    @property
    def all_input_names(self) -> list[str]:
        return [*self.input_names, *STATE_INPUTS] if self.state_size else self.input_names

    @property
    def all_output_names(self) -> list[str]:
        return [*self.output_names, *STATE_OUTPUTS] if self.state_size else self.output_names


class LSTMState:
    """Where a recurrent RLModule keeps the memory that acts, and how it maps to two ``[batch, width]``
    tensors (``h``, ``c``) and back.

    RLlib's LSTM encoders keep ``{"h": [batch, layers, cell], "c": ...}``; an actor-critic module with
    separate encoders (PPO's default) keeps one such pair per encoder, under ``actor`` and ``critic``.
    Only the actor's acts: the critic's state goes in as zeros and its output is dropped (the export
    leaves its nodes out of the graph, as nothing reads them).
    """

    def __init__(self, initial: dict[str, Any], pid: str):
        from ray.rllib.core.models.base import ACTOR, CRITIC

        self.actor, self.critic = ACTOR, CRITIC
        self.split = set(initial) == {ACTOR, CRITIC}
        mine = initial[ACTOR] if self.split else initial
        if set(mine) != {"h", "c"} or (self.split and set(initial[CRITIC]) != {"h", "c"}):
            raise UserError(
                f"policy '{pid}' keeps a memory of {sorted(mine)}, not an LSTM's h and c",
                "export the network yourself with torch.onnx.export",
                SUBJECT,
            )
        self.layers, self.cell = (int(d) for d in mine["h"].shape)

    @property
    def size(self) -> int:
        return self.layers * self.cell

    def state_in(self, h: torch.Tensor, c: torch.Tensor) -> dict[str, Any]:
        """``[batch, size]`` tensors -> the module's ``STATE_IN`` (batch first)."""
        mine = {key: x.reshape(x.shape[0], self.layers, self.cell) for key, x in (("h", h), ("c", c))}
        if not self.split:
            return mine
        return {self.actor: mine, self.critic: {key: torch.zeros_like(x) for key, x in mine.items()}}

    def state_out(self, state: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        mine = state[self.actor] if self.split else state
        return mine["h"].reshape(-1, self.size), mine["c"].reshape(-1, self.size)


class PolicyNet(torch.nn.Module):
    """Raw observation parts (+ mask) -> one output per action part, as one plain forward."""

    def __init__(
        self,
        module: Any,
        layout: Layout,
        bounds: tuple[bool, bool],
        squashed: bool,
        obs_filter: Statistics | None,
        memory: LSTMState | None = None,
    ):
        super().__init__()
        self.module = module
        self.layout = layout
        self.normalize, self.clip = bounds
        self.squashed = squashed
        self.obs_filter = obs_filter
        self.memory = memory

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        layout = self.layout
        count = len(layout.input_names)
        state = (inputs[count], inputs[count + 1]) if self.memory is not None else None
        raw, state_out = self.dist_inputs(*inputs[:count], state=state)
        if layout.q_values:
            outputs: tuple[torch.Tensor, ...] = (raw,)
        else:
            outputs = tuple(self._output(raw, out) for out in layout.outputs)
        return outputs + (state_out or ())

    def dist_inputs(
        self, *inputs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """The action distribution's inputs for all action parts (DQN: the Q-values), masks applied;
        and for a recurrent policy, given its ``state`` (h, c), the next one.

        A recurrent module reads sequences: each input becomes a sequence of one step, as RLlib's
        env-to-module connector makes it when sampling, and the step is taken out again.
        """
        from ray.rllib.core.columns import Columns

        layout = self.layout
        paths = [leaf.path for leaf in layout.obs]
        if self.obs_filter is not None:  # the env-to-module connector of training, baked in
            inputs = tuple(self.obs_filter.apply(p, x) for p, x in zip(paths, inputs, strict=False)) + tuple(
                inputs[len(paths) :]
            )
        parts = dict(zip(paths, inputs, strict=False))
        obs: Any = nest(inner_space(layout.observation_space), parts)
        if layout.masked:
            obs = {OBS_KEY: obs, MASK_KEY: inputs[-1]}
        batch: dict[str, Any] = {Columns.OBS: obs}
        if layout.q_values:
            from ray.rllib.algorithms.dqn.default_dqn_rl_module import QF_PREDS

            q_values: torch.Tensor = self.module.compute_q_values(batch)[QF_PREDS]
            return q_values, None
        if self.memory is None or state is None:
            raw: torch.Tensor = self.module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS]
            return raw, None
        import tree

        batch[Columns.OBS] = tree.map_structure(lambda x: x.unsqueeze(1), batch[Columns.OBS])
        batch[Columns.STATE_IN] = self.memory.state_in(*state)
        out = self.module.forward_inference(batch)
        return out[Columns.ACTION_DIST_INPUTS][:, 0], self.memory.state_out(out[Columns.STATE_OUT])

    def _output(self, raw: torch.Tensor, out: Output) -> torch.Tensor:
        columns = raw[..., out.start : out.start + out.size]
        if out.leaf.discrete:
            return columns
        means = torch.tanh(columns) if self.squashed else columns
        space = cast(gym.spaces.Box, out.leaf.space)  # a continuous leaf
        low = torch.as_tensor(space.low, dtype=torch.float32)
        high = torch.as_tensor(space.high, dtype=torch.float32)
        bounded = bool(space.is_bounded("both"))
        if self.normalize and bounded:  # as RLlib's unsquash_action: onto the bounds, clipped
            means = low + (means + 1.0) * (high - low) / 2.0
        if (self.normalize and bounded) or (self.clip and not self.normalize):
            means = torch.maximum(torch.minimum(means, high), low)
        return means


class _ModelV2Policy(torch.nn.Module):
    """Old API stack: Box observations (+ mask) -> the ModelV2's outputs."""

    def __init__(self, model: Any, layout: Layout):
        super().__init__()
        self.model = model
        self.layout = layout

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        obs: Any = {OBS_KEY: inputs[0], MASK_KEY: inputs[1]} if self.layout.masked else inputs[0]
        out, _ = self.model({"obs": obs}, [], None)
        return tuple(out[..., o.start : o.start + o.size] for o in self.layout.outputs)


@parse_args("v", "is", "i", "none")
def _nanmean(g: Any, x: Any, dim: list[int], keep: int, dtype: Any) -> Any:
    """ONNX for ``torch.nanmean`` (RLlib's dueling DQN head uses it): sum of non-NaN / their count."""
    axes = g.op("Constant", value_t=torch.tensor(dim, dtype=torch.long))
    nan = g.op("IsNaN", x)
    zero = g.op("Constant", value_t=torch.tensor(0.0))
    total = g.op("ReduceSum", g.op("Where", nan, zero, x), axes, keepdims_i=keep)
    count = g.op("ReduceSum", g.op("Cast", g.op("Not", nan), to_i=1), axes, keepdims_i=keep)  # 1: float
    return g.op("Div", total, count)


def layout_for(obs_space: gym.Space, act_space: gym.Space, q_values: bool = False) -> Layout:
    try:
        return Layout(
            obs_space,
            act_space,
            observation_leaves(inner_space(obs_space)),
            action_leaves(act_space),
            has_action_mask(obs_space),
            q_values,
        )
    except SpaceError as err:
        raise UserError(str(err), "export the network yourself with torch.onnx.export", SUBJECT) from err


def policy_nets(restored: Restored) -> dict[str, torch.nn.Module]:
    """policy id -> a torch module taking the ONNX inputs, in eval mode."""
    if not restored.new_stack:
        from ray.rllib.policy.policy import Policy

        out: dict[str, torch.nn.Module] = {}
        policies = cast(dict[str, Policy], Policy.from_checkpoint(str(restored.checkpoint)))  # all of them
        for pid, policy in policies.items():
            if policy.is_recurrent():
                raise UserError(
                    f"policy '{pid}' is an old-stack (ModelV2) recurrent policy",
                    "retrain with RLlib's new API stack, whose recurrent policies are exported",
                    SUBJECT,
                )
            space = getattr(policy.observation_space, "original_space", policy.observation_space)
            layout = layout_for(space, policy.action_space)
            if [leaf.kind for leaf in layout.obs] != ["flat"] or len(layout.actions) != 1:
                raise UserError(
                    f"old-stack (ModelV2) policies are exported with one Box observation, not {space}",
                    "export the network yourself with torch.onnx.export",
                    SUBJECT,
                )
            out[pid] = _ModelV2Policy(policy.model, layout).eval()  # type: ignore[attr-defined]  # TorchPolicyV2
        return out
    from ray.rllib.core.rl_module.rl_module import RLModule
    from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule

    found = sorted(
        p
        for p in restored.module_dir.iterdir()
        if (p / MODULE_STATE_FILE).is_file()
        and not is_self_play_module(p.name)  # trained policies only
        and policy_of_signals(p.name) is None  # (not their reward signals' models
        and policy_of_critic(p.name) is None  # nor their POCA group critics)
    )
    config = restored.config
    bounds = (bool(config.normalize_actions), bool(config.clip_actions))
    out = {}
    for path in found:
        module = cast(TorchRLModule, RLModule.from_checkpoint(path))
        out[path.name] = module_net(module, path.name, bounds, saved_statistics(restored, module, path.name))
    return out


def module_net(
    module: Any, pid: str, bounds: tuple[bool, bool], obs_filter: Statistics | None = None
) -> PolicyNet:
    """A new-stack policy's RLModule (policy ``pid``'s) as the export's torch module, in eval mode.
    ``bounds``: training's ``normalize_actions`` and ``clip_actions``."""
    from ray.rllib.algorithms.dqn.default_dqn_rl_module import DefaultDQNRLModule
    from ray.rllib.core.distribution.torch.torch_distribution import TorchSquashedGaussian

    module.eval()
    q_values = isinstance(module, DefaultDQNRLModule)
    assert module.observation_space is not None and module.action_space is not None  # saved with it
    memory = LSTMState(module.get_initial_state(), pid) if module.is_stateful() else None
    layout = layout_for(module.observation_space, module.action_space, q_values=q_values)
    if memory is not None:
        if q_values:
            raise UserError(
                f"policy '{pid}' is a recurrent DQN policy; recurrent policies are exported"
                " from PPO, APPO and IMPALA",
                "train DQN without use_lstm, or export the network yourself with torch.onnx.export",
                SUBJECT,
            )
        layout = replace(layout, state_size=memory.size)
    dist = module.get_inference_action_dist_cls() if not layout.q_values else None
    squashed = isinstance(dist, type) and issubclass(dist, TorchSquashedGaussian)
    return PolicyNet(module, layout, bounds, squashed, obs_filter, memory).eval()


def sample_inputs(layout: Layout, batch: int, seed: int) -> dict[str, np.ndarray]:
    """Random feeds: sampled observation parts, and masks that allow at least one choice per branch."""
    feeds = {}
    for name, leaf in zip(layout.input_names, layout.obs, strict=False):
        leaf.space.seed(seed)
        values = np.stack([np.asarray(leaf.space.sample()) for _ in range(batch)])
        feeds[name] = values.astype(np.float32) if values.dtype == np.float64 else values
    if layout.masked:  # the discrete parts' branches lie side by side in the mask, in order
        branches = [size for act in layout.actions if act.discrete for size in branch_sizes(act.space)]
        assert sum(branches) == mask_size(layout.action_space)
        feeds[MASK_INPUT] = allowing_masks(branches, batch, np.random.default_rng(seed))
    if layout.state_size:  # memories as a few steps of play leave them: within (-1, 1), c a little wider
        rng = np.random.default_rng(seed + 1)
        for name, scale in zip(STATE_INPUTS, (0.5, 1.0), strict=True):
            feeds[name] = np.tanh(rng.normal(0.0, scale, (batch, layout.state_size))).astype(np.float32)
    return feeds


def allowing_masks(branches: list[int], batch: int, rng: np.random.Generator) -> np.ndarray:
    """Random float32 masks (1 = allowed) over consecutive branches, each allowing at least one choice."""
    mask = (rng.random((batch, sum(branches))) < 0.6).astype(np.float32)
    start = 0
    for size in branches:
        mask[np.arange(batch), start + rng.integers(size, size=batch)] = 1.0
        start += size
    return mask


def greedy(outputs: list[np.ndarray], layout: Layout) -> list[np.ndarray]:
    """What the outputs choose, one array per action part: the argmax of each discrete branch (a
    MultiDiscrete's stacked), the values of continuous ones."""
    if layout.q_values:
        return [outputs[0].argmax(-1)]
    parts: dict[int, list[np.ndarray]] = {}
    for values, out in zip(outputs, layout.outputs, strict=True):
        parts.setdefault(out.leaf.start, []).append(values.argmax(-1) if out.leaf.discrete else values)
    return [
        np.stack(parts[leaf.start], axis=-1)
        if isinstance(leaf.space, gym.spaces.MultiDiscrete)
        else parts[leaf.start][0]
        for leaf in layout.actions
    ]


def export(restored: Restored, path: Path, seed: int = 0) -> dict[str, Path]:
    """Write one ONNX file per policy of the checkpoint (``FILE`` itself for a single policy); verified."""
    return write(policy_nets(restored), path, seed)


def write(policies: dict[str, torch.nn.Module], path: Path, seed: int = 0) -> dict[str, Path]:
    """Write one ONNX file per policy net (:func:`policy_nets`, :func:`module_net`); each is run
    with onnxruntime and compared with torch before it takes its name."""
    torch.onnx.register_custom_op_symbolic("aten::nanmean", _nanmean, OPSET)  # type: ignore[attr-defined]
    written: dict[str, Path] = {}
    for pid, policy in policies.items():
        layout: Layout = policy.layout  # type: ignore[assignment]
        target = path if len(policies) == 1 else path.with_name(f"{path.stem}_{pid}{path.suffix}")
        feeds = sample_inputs(layout, 8, seed)
        names = layout.all_input_names
        args = tuple(torch.from_numpy(feeds[n]) for n in names)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.part")
        outputs = layout.all_output_names
        # torch's exporter warns about its own deprecation and about tracing details that
        # the parity check below verifies for real.
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                policy,
                args,
                str(tmp),
                input_names=names,
                output_names=outputs,
                dynamic_axes={n: {0: "batch"} for n in [*names, *outputs]},
                opset_version=OPSET,
                dynamo=False,
            )
            expected = [t.numpy() for t in policy(*args)]
        check_parity(tmp, feeds, expected, layout)
        os.replace(tmp, target)
        written[pid] = target
    return written


def check_parity(
    path: Path, feeds: dict[str, np.ndarray], expected: list[np.ndarray], layout: Layout
) -> None:
    """onnxruntime must reproduce torch's greedy actions (and a recurrent policy's next state) on the
    same inputs."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outputs = session.run(None, feeds)
    actions = len(layout.output_names)
    pairs = list(zip(greedy(outputs[:actions], layout), greedy(expected[:actions], layout), strict=True))
    pairs += list(zip(outputs[actions:], expected[actions:], strict=True))
    for g, want in pairs:
        same = np.array_equal(g, want) if g.dtype.kind in "iu" else np.allclose(g, want, atol=1e-4)
        if not same:
            raise UserError(
                f"{path} disagrees with torch on the same inputs",
                "export the network yourself with torch.onnx.export, and report the checkpoint to envsdk",
                SUBJECT,
            )
