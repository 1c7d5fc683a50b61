"""Recurrent policies exported: ``--export-onnx`` with the LSTM's state as inputs and outputs, and
``--export-unity`` brains with ML-Agents' memory (``recurrent_in`` / ``recurrent_out``, ``memory_size``).

One run on the stand-in Chase with a camera beside the vector and masked actions (the recurrent encoder
that reads several parts), trained for one iteration; then the files are stepped through sequences of
several agents with their memory fed back, against the RLModule itself stepping with its own state.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import tree

from tests.evaluation.test_unity_brain import BRIEF
from tests.helpers import ROOT, rollout_here, trial_dirs

CELL = 16  # lstm_cell_size: ML-Agents' memory_size is twice it
GAME = ["--visual", "16", "--max-steps", "30"]  # vector + camera, masked discrete actions
STEPS, AGENTS = 6, 3


@pytest.fixture(scope="module")
def recurrent(tmp_path_factory, ray_address) -> Path:
    """A use_lstm checkpoint of Chase with a camera: the trial folder."""
    from tests.conftest import run_train

    results = tmp_path_factory.mktemp("memory") / "results"
    args = ", ".join(f"'{a}'" for a in GAME)
    out = run_train(
        ["-f", "configs/unity-chase.yaml", f"--config.env_config.additional_args=[{args}]",
         "--config.model_config.use_lstm=true", f"--config.model_config.lstm_cell_size={CELL}",
         "--config.model_config.max_seq_len=8", *BRIEF, "--checkpoint-at-end",
         "--ray-address", ray_address, "--local-dir", str(results)],
        cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (trial,) = trial_dirs(results)
    return Path(trial)


def _rollout(trial: Path, *args: str) -> subprocess.CompletedProcess:
    return rollout_here(str(trial), "--no-out", "--episodes", "1", *args)


def _module(trial: Path):
    """The trained RLModule as RLlib restores it, in eval mode."""
    from ray.rllib.core.rl_module.rl_module import RLModule

    from envsdk.evaluation.restore import load
    from envsdk.training.run.checkpoints import locate

    restored = load(locate(trial).checkpoint)
    (path,) = [p for p in restored.module_dir.iterdir() if p.is_dir()]
    module = RLModule.from_checkpoint(path)
    module.eval()
    return module


class Stepper:
    """The RLModule stepping a batch of agents with its whole state (critic's too), one step at a time,
    as RLlib's env runner does: observations with a time axis of one step, ``STATE_IN`` batch first."""

    def __init__(self, module, agents: int):
        self.module = module
        self.state = tree.map_structure(
            lambda s: s.unsqueeze(0).repeat(agents, 1, 1), module.get_initial_state()
        )

    def step(self, vector: np.ndarray, camera: np.ndarray, mask: np.ndarray) -> np.ndarray:
        from ray.rllib.core.columns import Columns

        def timed(x: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(x).unsqueeze(1)

        obs = {"observations": {"camera": timed(camera), "vector": timed(vector)}, "action_mask": timed(mask)}
        with torch.no_grad():
            out = self.module.forward_inference({Columns.OBS: obs, Columns.STATE_IN: self.state})
        self.state = out[Columns.STATE_OUT]
        return out[Columns.ACTION_DIST_INPUTS][:, 0].numpy()

    @property
    def actor(self) -> dict:
        return self.state.get("actor", self.state)


def _inputs(step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A step's vector, camera and mask for AGENTS agents (each mask leaves a choice)."""
    from envsdk.evaluation.onnx_export import allowing_masks

    rng = np.random.default_rng(step)
    vector = rng.random((AGENTS, 3), dtype=np.float32)  # Chase's vector
    camera = rng.random((AGENTS, 16, 16, 1), dtype=np.float32)  # height, width, channels
    return vector, camera, allowing_masks([3], AGENTS, rng)  # 1 branch of 3


def _dims(value) -> list:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def _session(path: Path):
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(None, feeds), strict=True))


def test_plain_onnx_steps_with_its_state_as_the_module_does(recurrent, tmp_path):
    """--export-onnx: state_in_h/c -> state_out_h/c; fed back for several steps, the logits and the state
    are the module's own at every step."""
    import onnx

    out = _rollout(recurrent, "--export-onnx", str(tmp_path / "policy.onnx"))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    model = onnx.load(str(tmp_path / "policy.onnx"))
    assert [i.name for i in model.graph.input] == [
        "camera",
        "vector",
        "action_mask",
        "state_in_h",
        "state_in_c",
    ]
    assert [o.name for o in model.graph.output] == ["logits", "state_out_h", "state_out_c"]
    run = _session(tmp_path / "policy.onnx")
    torch_side = Stepper(_module(recurrent), AGENTS)
    h = c = np.zeros((AGENTS, CELL), np.float32)  # an episode's start
    for step in range(STEPS):
        vector, camera, mask = _inputs(step)
        got = run({"camera": camera, "vector": vector, "action_mask": mask, "state_in_h": h, "state_in_c": c})
        want = torch_side.step(vector, camera, mask)
        assert np.allclose(got["logits"], want, atol=1e-4), step
        h, c = got["state_out_h"], got["state_out_c"]
        assert np.allclose(h, torch_side.actor["h"][:, 0].numpy(), atol=1e-5), step
        assert np.allclose(c, torch_side.actor["c"][:, 0].numpy(), atol=1e-5), step
    assert np.abs(h).max() > 0.01  # the memory is in use


@pytest.mark.parametrize("target", ["sentis", "barracuda"])
def test_unity_brain_with_memory_follows_mlagents_and_steps_as_the_module_does(recurrent, tmp_path, target):
    """--export-unity: ML-Agents' memory convention (recurrent_in / recurrent_out [batch, 1, 2 x cell],
    h then c; memory_size = 2 x cell), the brain checks pass, and stepping several agents with the memory
    fed back chooses the module's greedy actions, with its h and c in the memory."""
    import onnx

    from envsdk.evaluation.unity_brain import BrainSpec, check_brain
    from unity_bridge.targets import TARGETS

    folder = tmp_path / "brains"
    out = _rollout(recurrent, "--export-unity", str(folder), "--unity-target", target)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (entry,) = json.loads((folder / "brains.json").read_text())["behaviors"].values()
    assert entry["memory_size"] == 2 * CELL
    fields = {k: v for k, v in entry.items() if k != "file"}
    fields["observations"] = tuple((n, tuple(s)) for n, s in fields["observations"])
    spec = BrainSpec(**{**fields, "branches": tuple(fields["branches"])})
    path = folder / entry["file"]
    assert check_brain(path, spec, TARGETS[target]) == []
    graph = onnx.load(str(path)).graph
    shapes = {v.name: _dims(v) for v in [*graph.input, *graph.output]}
    assert shapes["recurrent_in"] == shapes["recurrent_out"] == ["batch", 1, 2 * CELL]
    assert [o.name for o in graph.output][-1] == "recurrent_out"

    run = _session(path)
    torch_side = Stepper(_module(recurrent), AGENTS)
    memory = np.zeros((AGENTS, 1, 2 * CELL), np.float32)
    vector_first = [name for name, _ in spec.observations] == ["vector", "camera"]
    assert vector_first
    for step in range(STEPS):
        vector, camera, mask = _inputs(step)
        got = run({"obs_0": vector, "obs_1": camera, "action_masks": mask, "recurrent_in": memory})
        assert got["memory_size"].tolist() == [2 * CELL]
        logits = np.where(mask > 0.5, torch_side.step(vector, camera, mask), -np.inf)
        assert np.array_equal(got["deterministic_discrete_actions"][:, 0], logits.argmax(-1)), step
        memory = got["recurrent_out"]
        packed = np.concatenate([torch_side.actor["h"][:, 0], torch_side.actor["c"][:, 0]], axis=-1)
        assert np.allclose(memory[:, 0], packed, atol=1e-5), step  # h then c, as ML-Agents packs them
