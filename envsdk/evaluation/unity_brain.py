"""``rollout.py CKPT --export-unity DIR``: trained policies as ML-Agents brains that a Unity project runs.

One ``DIR/<policy id>.onnx`` per policy that acts for a behavior of the game,
in ML-Agents' model format version 3 (what its Inference Engine / Sentis /
Barracuda loaders read), plus ``DIR/brains.json``: behavior -> file, with the
spec each was exported for.

Inputs (float32, batch axis first and dynamic): ``obs_0``, ``obs_1``, ... in
the order and shape the game declared its observations, and
``action_masks`` (1 = allowed) when the behavior has discrete actions.
Outputs: ``version_number`` (3), ``memory_size`` (0 without memory), and for continuous
actions ``continuous_actions`` (sampled), ``continuous_action_output_shape``,
``deterministic_continuous_actions``; for discrete ones
``discrete_actions`` (sampled, int64, masks honoured),
``discrete_action_output_shape`` and ``deterministic_discrete_actions``.
Continuous actions come out in [-1, 1] by the mapping the game's actions went through in
training (env_config ``continuous_actions``: ``mlagents`` clamps to [-3, 3] and divides
by 3, ``clip`` clips; a squashed policy's are inside already), recorded in brains.json:
Unity passes actions on as received.

A recurrent policy (``use_lstm``) is a brain with memory, as ML-Agents' exporter writes one: the input
``recurrent_in`` ``[batch, 1, memory_size]`` and the output ``recurrent_out`` of the same shape, the
memory the agent carries to its next decision (Unity feeds zeros at an agent's episode start), with
``memory_size`` = 2 x the LSTM's cell size: the hidden state ``h`` then the cell state ``c``, as
ML-Agents' ``LSTM`` module packs them (its ``memories[:, :, :hidden]`` is ``h0``).  Only the actor's
memory is in it; a separate critic's does not act.  The network's own preprocessing
(image scaling, one-hot, the MeanStdFilter's statistics) is inside the
graph: the game feeds raw observations, as Unity does.

:class:`BrainPlayer` runs such a folder with onnxruntime; the stand-in
player uses it for ``--brain``, as a Unity build with an embedded model.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from envsdk.errors import UserError
from envsdk.evaluation.onnx_export import PolicyNet, allowing_masks, policy_nets
from envsdk.evaluation.restore import Restored
from envsdk.training.hooks.self_play import SelfPlayMapping
from unity_bridge.brains import INDEX, MASKS
from unity_bridge.settings import CLIP, LaunchSettings, continuous_mapping, to_unity_range
from unity_bridge.targets import DEFAULT_TARGET, TARGETS, UnityTarget, target_problems

MODEL_VERSION = 3
SUBJECT = "Unity brain export"  # what refuses, in this layer's words; the command line names its flag
FORBIDDEN = -1e9  # a masked choice's logit: never the argmax, never sampled
MEMORY_IN, MEMORY_OUT = "recurrent_in", "recurrent_out"  # ML-Agents' names for an agent's memory
_ALLOWED_INPUTS = ("action_masks", MEMORY_IN, "prev_action", "epsilon", "sequence_length")


@dataclass(frozen=True)
class BrainSpec:
    """What one behavior declared, and the policy that acts for it."""

    behavior: str
    policy: str
    observations: tuple[tuple[str, tuple[int, ...]], ...]  # (name, shape) in the game's order
    continuous: int
    branches: tuple[int, ...]
    continuous_actions: str = CLIP  # how continuous actions are brought into [-1, 1] (settings.py)
    memory_size: int = 0  # the policy's: 2 x its LSTM's cell size (h then c); 0 without memory

    @property
    def input_names(self) -> list[str]:
        names = [f"obs_{i}" for i in range(len(self.observations))]
        names += [MASKS] if self.branches else []
        return [*names, MEMORY_IN] if self.memory_size else names

    @property
    def output_names(self) -> list[str]:
        names = ["version_number", "memory_size"]
        if self.continuous:
            names += [
                "continuous_actions",
                "continuous_action_output_shape",
                "deterministic_continuous_actions",
            ]
        if self.branches:
            names += ["discrete_actions", "discrete_action_output_shape", "deterministic_discrete_actions"]
        return [*names, MEMORY_OUT] if self.memory_size else names


class UnityBrain(torch.nn.Module):
    """The game's observations (+ masks) -> ML-Agents' outputs, around one trained policy network."""

    def __init__(self, net: PolicyNet, spec: BrainSpec):
        super().__init__()
        self.net, self.spec = net, spec
        layout = net.layout
        names = [name for name, _ in spec.observations]
        # Our observation is the one part, or a Dict keyed by the game's names (sorted by gymnasium).
        self.feed_order = [0] if len(names) == 1 else [names.index(leaf.path[0]) for leaf in layout.obs]
        leaves = layout.actions if not layout.q_values else []
        self.box = next((a for a in leaves if not a.discrete), None)
        self.discrete = [a for a in leaves if a.discrete]

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        spec, layout = self.spec, self.net.layout
        observed = inputs[: len(spec.observations)]
        mask = inputs[len(spec.observations)] if spec.branches else None
        parts = [observed[i] for i in self.feed_order]
        if layout.masked and mask is not None:
            parts.append(mask)
        state = None
        if spec.memory_size:  # slices, not torch.split: Split-13's input is what Barracuda lacks
            memory, half = inputs[-1], spec.memory_size // 2
            state = (memory[:, 0, :half], memory[:, 0, half:])
        raw, state_out = self.net.dist_inputs(*parts, state=state)
        out = [torch.tensor([float(MODEL_VERSION)]), torch.tensor([float(spec.memory_size)])]
        if spec.continuous:
            out += self._continuous(raw)
        if spec.branches:
            out += self._discrete(raw, mask)
        if state_out is not None:
            out.append(torch.cat(state_out, dim=-1).reshape(-1, 1, spec.memory_size))  # its size static
        return tuple(out)

    def _continuous(self, raw: torch.Tensor) -> list[torch.Tensor]:
        n, box = self.spec.continuous, self.box
        assert box is not None, "a behavior with continuous actions has a Box part"
        mean = raw[..., box.start : box.start + n]
        log_std = raw[..., box.start + n : box.start + 2 * n]
        sampled = mean + torch.exp(log_std) * torch.randn_like(mean)
        mapping = self.spec.continuous_actions
        if self.net.squashed:
            mean, sampled, mapping = torch.tanh(mean), torch.tanh(sampled), CLIP
        shape = torch.tensor([float(n)])
        return [to_unity_range(sampled, mapping), shape, to_unity_range(mean, mapping)]

    def _discrete(self, raw: torch.Tensor, mask: torch.Tensor | None) -> list[torch.Tensor]:
        if self.net.layout.q_values:  # DQN: one branch of Q-values, acted on greedily
            logits = [raw]
        else:
            columns = torch.cat([raw[..., a.start : a.start + a.width] for a in self.discrete], dim=-1)
            logits = list(torch.split(columns, list(self.spec.branches), dim=-1))
        if mask is not None:  # the game's masks again: a plugin network may not read them
            allowed = torch.split(mask, list(self.spec.branches), dim=-1)
            logits = [
                torch.where(m > 0.5, lg, torch.full_like(lg, FORBIDDEN))
                for lg, m in zip(logits, allowed, strict=True)
            ]
        greedy = torch.stack([lg.argmax(-1) for lg in logits], dim=-1)
        if self.net.layout.q_values:
            sampled = greedy
        else:  # Gumbel-max: argmax(logits + Gumbel noise) is a sample of softmax(logits)
            noise = [torch.rand_like(lg).clamp(1e-7, 1.0 - 1e-7) for lg in logits]
            sampled = torch.stack(
                [(lg - torch.log(-torch.log(u))).argmax(-1) for lg, u in zip(logits, noise, strict=True)], -1
            )
        shape = torch.tensor([[float(b) for b in self.spec.branches]])
        return [sampled.to(torch.int64), shape, greedy.to(torch.int64)]


def _require_unity(restored: Restored) -> None:
    from envsdk.envs.unity.rllib_env import UnityEnv, UnityGymEnv

    target = getattr(restored.env.creator, "target", None)
    if not (isinstance(target, type) and issubclass(target, UnityEnv | UnityGymEnv)):
        raise UserError(
            f"this checkpoint's env ({restored.env.name}) is not a Unity game",
            "use --export-onnx for a plain ONNX file",
            SUBJECT,
        )


def brain_specs(restored: Restored) -> dict[str, BrainSpec]:
    """Behavior -> spec, read from the game itself (started once, with no graphics when it can)."""
    from envsdk.envs.unity.rllib_env import UnityGymEnv, agent_key

    mapping = getattr(restored.config, "policy_mapping_fn", None)
    setting = LaunchSettings.from_config(restored.env_config).continuous_actions
    actions = continuous_mapping(setting, restored.algorithm)  # `auto`: checkpoints from before the key
    env = restored.env.make(dict(restored.env_config))
    try:
        multi = env.multi if isinstance(env, UnityGymEnv) else env
        out = {}
        for behavior, spec in multi.game.specs.items():
            if isinstance(env, UnityGymEnv):
                policy = "default_policy"
            elif isinstance(mapping, SelfPlayMapping):  # both teams' behaviors: the policy they train
                policy = mapping.policy_of(agent_key(behavior, 0))
            else:
                policy = multi.policy_mapping_fn(agent_key(behavior, 0))
            observations = tuple((o.name, tuple(int(d) for d in o.shape)) for o in spec.observations)
            out[behavior] = BrainSpec(
                behavior, policy, observations, spec.continuous, tuple(spec.branches), actions
            )
        return out
    finally:
        env.close()


def export_brains(
    restored: Restored, folder: Path, seed: int = 0, target: UnityTarget = TARGETS[DEFAULT_TARGET]
) -> dict[str, Path]:
    """Write one brain per policy that acts for a behavior, for ``target`` (the package that loads
    it: :mod:`unity_bridge.targets`), and brains.json; behavior -> file."""
    _require_unity(restored)
    if not restored.new_stack:
        raise UserError(
            "brains are exported from new API stack checkpoints",
            "retrain with RLlib's new API stack",
            SUBJECT,
        )
    nets = policy_nets(restored)
    specs = {  # the game's specs, with the memory of the policy that plays each behavior
        b: replace(s, memory_size=_memory_size(nets.get(s.policy))) for b, s in brain_specs(restored).items()
    }
    folder.mkdir(parents=True, exist_ok=True)
    exported: dict[str, Path] = {}  # policy id -> file (behaviors with one policy share it)
    for spec in specs.values():
        if spec.policy in exported:
            continue
        found = nets.get(spec.policy)
        if not isinstance(found, PolicyNet):
            raise UserError(
                f"behavior '{spec.behavior}' is played by policy '{spec.policy}', "
                "which the checkpoint does not hold",
                f"the checkpoint has: {', '.join(nets)}",
                SUBJECT,
            )
        path = folder / f"{spec.policy}.onnx"
        _export_one(UnityBrain(found, spec).eval(), spec, path, seed, target)
        exported[spec.policy] = path
    files = {b: exported[s.policy] for b, s in specs.items()}
    index = {
        "format": 1,
        "model_version": MODEL_VERSION,
        "unity_target": target.name,
        "opset": target.opset,
        "loads_in": target.loads_in,
        "checkpoint": str(restored.checkpoint),
        "behaviors": {b: {"file": files[b].name, **asdict(s)} for b, s in specs.items()},
    }
    tmp = folder / f".{INDEX}.part"
    tmp.write_text(json.dumps(index, indent=2) + "\n")
    os.replace(tmp, folder / INDEX)
    return files


def _memory_size(net: torch.nn.Module | None) -> int:
    """ML-Agents' memory_size of a policy: its LSTM's h and c side by side (0 without memory)."""
    return 2 * net.layout.state_size if isinstance(net, PolicyNet) else 0


def sample_feeds(spec: BrainSpec, batch: int, seed: int) -> dict[str, np.ndarray]:
    """Observations in [0, 1) and masks that leave at least one choice per branch."""
    rng = np.random.default_rng(seed)
    feeds = {
        f"obs_{i}": rng.random((batch, *shape), dtype=np.float32)
        for i, (_, shape) in enumerate(spec.observations)
    }
    if spec.branches:
        feeds[MASKS] = allowing_masks(list(spec.branches), batch, rng)
    if spec.memory_size:  # memories as play leaves them, within (-1, 1)
        feeds[MEMORY_IN] = np.tanh(rng.normal(0.0, 0.7, (batch, 1, spec.memory_size))).astype(np.float32)
    return feeds


def _export_one(brain: UnityBrain, spec: BrainSpec, path: Path, seed: int, target: UnityTarget) -> None:
    feeds = sample_feeds(spec, 8, seed)
    args = tuple(torch.from_numpy(feeds[n]) for n in spec.input_names)
    batched = [n for n in spec.output_names if not n.endswith(("_shape", "version_number", "memory_size"))]
    tmp = path.with_name(f".{path.name}.part")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's own deprecation notes; the checks below are real
        torch.onnx.export(
            brain,
            args,
            str(tmp),
            input_names=spec.input_names,
            output_names=spec.output_names,
            dynamic_axes={n: {0: "batch"} for n in [*spec.input_names, *batched]},
            opset_version=target.opset,
            dynamo=False,
        )
        expected = dict(zip(spec.output_names, (t.numpy() for t in brain(*args)), strict=True))
    if spec.memory_size:
        _declare_memory_shape(tmp, spec.memory_size)
    problems = check_brain(tmp, spec, target)
    got = _run(tmp, feeds)
    for name in ("deterministic_discrete_actions", "deterministic_continuous_actions", MEMORY_OUT):
        if name in expected and not np.allclose(got[name], expected[name], atol=1e-5):
            problems.append(f"{name} disagrees with torch on the same inputs")
    if problems:
        tmp.unlink()
        raise UserError(
            f"{path.name}: " + "; ".join(problems),
            f"the network uses what {target.name} does not load; the other Unity target may take it"
            " (unity_bridge/targets.py lists each one's operators)",
            SUBJECT,
        )
    os.replace(tmp, path)


def _declare_memory_shape(path: Path, size: int) -> None:
    """Write ``recurrent_out``'s shape, ``[batch, 1, size]``, into the graph's outputs: torch's exporter
    leaves the Reshape's dimensions symbolic, and Unity's loader reads the declared shape.  What the
    graph computes is checked against it after (``_output_problems``)."""
    import onnx

    model = onnx.load(str(path))
    (output,) = [o for o in model.graph.output if o.name == MEMORY_OUT]
    dims = output.type.tensor_type.shape.dim
    dims[1].dim_value, dims[2].dim_value = 1, size
    onnx.save(model, str(path))


def _run(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    taken = {i.name for i in session.get_inputs()}  # a feed the graph lacks is reported by _graph_problems
    return dict(zip(names, session.run(None, {k: v for k, v in feeds.items() if k in taken}), strict=True))


def check_brain(path: Path, spec: BrainSpec, target: UnityTarget = TARGETS[DEFAULT_TARGET]) -> list[str]:
    """What Unity's model loader checks, as a list of problems (empty: the file loads).

    Written from ML-Agents' loader rules: the version and memory constants, each observation input's
    shape against the game's, the action outputs' names, types, ranks and constants, and no input
    the loader does not know; and from ``target``'s operator table: the opset, every node's
    operator and attributes (:func:`~unity_bridge.targets.target_problems`).
    """
    import onnx

    model = onnx.load(str(path))
    return target_problems(model, target) + _graph_problems(model, spec) + _output_problems(path, spec)


def _graph_problems(model: Any, spec: BrainSpec) -> list[str]:
    """The graph's inputs and outputs against the game's observations and actions."""
    problems = []
    inputs = {i.name: i for i in model.graph.input}
    outputs = {o.name: o for o in model.graph.output}
    for name in inputs:
        if not (name.startswith("obs_") or name in _ALLOWED_INPUTS):
            problems.append(f"input '{name}' is not one Unity feeds")
    for i, (_, shape) in enumerate(spec.observations):
        got = _shape(inputs.get(f"obs_{i}"))
        if got != ["batch", *shape]:
            problems.append(f"obs_{i} is {got}, the game declares [batch, {', '.join(map(str, shape))}]")
    if spec.branches and _shape(inputs.get(MASKS)) != ["batch", sum(spec.branches)]:
        problems.append(f"{MASKS} is {_shape(inputs.get(MASKS))}, wanted [batch, {sum(spec.branches)}]")
    problems += _memory_problems(inputs.get(MEMORY_IN), outputs.get(MEMORY_OUT), spec.memory_size)
    wanted_types = {"discrete_actions": 7, "deterministic_discrete_actions": 7}  # 7: int64, 1: float32
    for name in spec.output_names:
        if name not in outputs:
            problems.append(f"output '{name}' is missing")
        elif outputs[name].type.tensor_type.elem_type != wanted_types.get(name, 1):
            problems.append(f"output '{name}' has element type {outputs[name].type.tensor_type.elem_type}")
    return problems


def _memory_problems(memory_in: Any, memory_out: Any, size: int) -> list[str]:
    """ML-Agents' memory: with ``memory_size`` > 0, ``recurrent_in`` and ``recurrent_out`` of
    ``[batch, 1, memory_size]``, what Unity feeds and reads back for each agent; else neither."""
    if not size:
        return [
            f"'{v.name}' is there, but memory_size is 0" for v in (memory_in, memory_out) if v is not None
        ]
    problems = []
    for name, value in ((MEMORY_IN, memory_in), (MEMORY_OUT, memory_out)):
        if value is None:
            problems.append(f"'{name}' is missing (memory_size {size})")
        elif _shape(value) != ["batch", 1, size]:
            problems.append(f"{name} is {_shape(value)}, wanted [batch, 1, {size}]")
    return problems


def _output_problems(path: Path, spec: BrainSpec) -> list[str]:
    """The brain run on a batch of 3: its constants and its action outputs' shapes."""
    problems = []
    values = _run(path, sample_feeds(spec, 3, 0))
    constants: dict[str, list[Any]] = {"version_number": [MODEL_VERSION], "memory_size": [spec.memory_size]}
    if spec.continuous:
        constants["continuous_action_output_shape"] = [spec.continuous]
    if spec.branches:
        constants["discrete_action_output_shape"] = [list(spec.branches)]
    for name, value in constants.items():
        if name in values and values[name].tolist() != value:
            problems.append(f"{name} is {values[name].tolist()}, wanted {value}")
    for name, width in (("continuous_actions", spec.continuous), ("discrete_actions", len(spec.branches))):
        for variant in (name, f"deterministic_{name}"):
            if width and variant in values and values[variant].shape != (3, width):
                problems.append(f"{variant} has shape {values[variant].shape}, wanted (batch, {width})")
    if MEMORY_OUT in values and values[MEMORY_OUT].shape != (3, 1, spec.memory_size):
        wanted = f"(batch, 1, {spec.memory_size})"
        problems.append(f"{MEMORY_OUT} has shape {values[MEMORY_OUT].shape}, wanted {wanted}")
    return problems


def _shape(value: Any) -> list[Any] | None:
    if value is None:
        return None
    dims = value.type.tensor_type.shape.dim
    return [d.dim_param if d.dim_param else d.dim_value for d in dims]
