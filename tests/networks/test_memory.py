"""The default model with memory (``use_lstm``) on every observation kind, masks and hybrid actions.

Every case trains 2 PPO iterations in one train.py process (single-agent on
tests/data/envs/matrix_env.py, multi-agent on two of them, a policy each),
through RLlib's own sequence handling; its checkpoint's modules then run a
batch of sequences, and rollout.py plays it with an env that raises on any
masked action.  A cue shown at the first step only (tests/data/envs/memory_env.py)
is learnt with memory and not without.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import tree
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.configs import RecurrentEncoderConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.utils.torch_utils import convert_to_torch_tensor

from envsdk import internals
from envsdk.networks.catalogs import AnySpacePPOCatalog
from envsdk.networks.encoder import RecurrentSpaceEncoderConfig
from envsdk.networks.masking import FORBIDDEN_LOGIT
from tests.helpers import ROOT, progress_rows, rollout_in_process, train_experiments

ENVS = ROOT / "tests" / "data" / "envs"
CELL = 16
# name -> matrix_env's (obs, act, mask)
KINDS = {
    "dict": ("dict", "discrete", False),  # camera + vector
    "tuple": ("tuple", "multidiscrete", False),
    "masked-discrete": ("box", "discrete", True),
    "masked-multidiscrete": ("depth", "multidiscrete", True),
    "hybrid": ("dict", "hybrid", True),
}
AGENTS = {"single": ["default_policy"], "multi": ["policy_a", "policy_b"]}
CASES = [(kind, agents) for kind in KINDS for agents in AGENTS]
MODEL = {"fcnet_hiddens": [32], "use_lstm": True, "lstm_cell_size": CELL, "max_seq_len": 4}
PPO = {"num_env_runners": 0, "train_batch_size": 128, "minibatch_size": 64, "num_epochs": 1}


def _case(kind: str, agents: str, **config: object) -> dict:
    obs, act, mask = KINDS[kind]
    multi = {"policies": AGENTS["multi"], "policy_mapping_fn": "memory_env.policy_mapping"}
    return {
        "run": "PPO",
        "env": "memory_env.MatrixPairEnv" if agents == "multi" else "matrix_env.MatrixEnv",
        "stop": {"training_iteration": 2},
        "checkpoint_at_end": True,
        "config": {
            **PPO,
            "env_config": {"obs": obs, "act": act, "mask": mask},
            "model_config": MODEL,
            **(multi if agents == "multi" else {}),
            **config,
        },
    }


def _cue(memory: bool) -> dict:
    model = MODEL if memory else {"fcnet_hiddens": [32]}
    return {
        "run": "PPO",
        "env": "memory_env.CueEnv",
        "stop": {"training_iteration": 12},
        "config": {
            **PPO,
            "seed": 1,
            "train_batch_size": 256,
            "num_epochs": 6,
            "lr": 0.003,
            "model_config": model,
        },
    }


def _folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    folder = tmp_path_factory.mktemp(name)
    for env in ("matrix_env.py", "memory_env.py"):
        shutil.copy(ENVS / env, folder / env)
    return folder


@pytest.fixture(scope="module")
def trained(ray_address, tmp_path_factory):
    """One train.py process: every case, and the cue learnt with and without memory."""
    experiments = {f"{kind}-{agents}": _case(kind, agents) for kind, agents in CASES}
    experiments.update({"cue-memory": _cue(True), "cue-no-memory": _cue(False)})
    out, results = train_experiments(_folder(tmp_path_factory, "memory"), experiments, ray_address)
    return out.stdout, results


def _sequences(space: gym.Space, batch: int, steps: int) -> dict:
    """``batch`` sequences of ``steps`` sampled observations, as RLlib's learner connectors pad them."""
    space.seed(0)
    samples = [space.sample() for _ in range(batch * steps)]
    stacked = tree.map_structure(lambda *xs: np.stack(xs).reshape(batch, steps, *np.shape(xs[0])), *samples)
    return convert_to_torch_tensor(stacked)


def _initial_states(state: dict, batch: int) -> dict:
    """A module's (or encoder's) initial state, once per sequence of the batch."""
    return tree.map_structure(lambda s: torch.as_tensor(s)[None].repeat(batch, *[1] * np.ndim(s)), state)


@pytest.mark.parametrize(("kind", "agents"), CASES, ids=[f"{k}-{a}" for k, a in CASES])
def test_memory_trains_on_every_observation_kind(trained, kind, agents):
    stdout, results = trained
    name = f"{kind}-{agents}"
    _, _, mask = KINDS[kind]
    (trial,) = [p.parent for p in (results / name).glob("*/progress.csv")]
    rows = progress_rows(trial)
    assert len(rows) == 2 and float(rows[-1]["num_env_steps_sampled_lifetime"]) > 0
    models = dict(re.findall(rf"^\[{name}\] model (\w+): (.*)$", stdout, re.M))
    assert sorted(models) == AGENTS[agents]
    for policy, model in models.items():
        assert f"-> LSTM {CELL}" in model and ("masked" in model) == mask, model
        for loss in ("policy_loss", "vf_loss", "total_loss"):
            assert math.isfinite(float(rows[-1][f"learners/{policy}/{loss}"])), (policy, loss)

    (checkpoint,) = trial.glob("checkpoint_*")
    for policy in models:
        module = RLModule.from_checkpoint(checkpoint / internals.MODULE_DIR / policy)
        batch, steps = 3, 4
        obs = _sequences(module.observation_space, batch, steps)
        state = _initial_states(module.get_initial_state(), batch)
        with torch.no_grad():
            out = module.forward_train({Columns.OBS: obs, Columns.STATE_IN: state})
        assert all(s.shape == (batch, 1, CELL) for s in tree.flatten(out[Columns.STATE_OUT]))
        logits = out[Columns.ACTION_DIST_INPUTS]
        assert logits.shape[:2] == (batch, steps)
        forbidden = int((logits <= FORBIDDEN_LOGIT / 2).sum())
        assert forbidden == (int((obs["action_mask"] == 0).sum()) if mask else 0)

    code, out = rollout_in_process(results / name, "--episodes", "1", "--no-out")
    assert code == 0, out
    assert re.search(r"^episode 1: return -?[\d.]+, length 8\b", out, re.M), out  # no masked action taken


def test_a_cue_is_remembered_only_with_memory(trained):
    _, results = trained

    def last_return(name: str) -> float:
        (trial,) = [p.parent for p in (results / name).glob("*/progress.csv")]
        return float(progress_rows(trial)[-1]["env_runners/episode_return_mean"])

    # +1 for the cue's action at the last step, -1 for the other: a guess averages 0
    assert last_return("cue-memory") > 0.8
    assert last_return("cue-no-memory") < 0.5


def test_memory_trains_on_stock_rllib(ray_address, tmp_path_factory):
    """``stock: true``: RLlib's own sampler and learner pieces (ENVSDK_STOCK=1's switch)."""
    experiment = _case("hybrid", "multi", stock=True)
    _, results = train_experiments(_folder(tmp_path_factory, "stock"), {"stock": experiment}, ray_address)
    (trial,) = [p.parent for p in (results / "stock").glob("*/progress.csv")]
    last = progress_rows(trial)[-1]
    assert all(math.isfinite(float(last[f"learners/{p}/total_loss"])) for p in AGENTS["multi"])


@pytest.mark.parametrize(
    ("space", "ours"),
    [
        (gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (3,)), "b": gym.spaces.Discrete(2)}), True),
        (gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,)))), True),
        (gym.spaces.Dict({"observations": gym.spaces.Discrete(3), "action_mask": gym.spaces.MultiBinary(2)}),
         True),
        (gym.spaces.Discrete(3, start=1), False),  # one tensor: RLlib's own LSTM encoder reads it
        (gym.spaces.Box(0, 255, (16, 16, 3), np.uint8), False),
    ],
)  # fmt: skip
def test_an_observation_of_parts_gets_its_own_reader_before_rllibs_lstm(space, ours):
    model = {**DefaultModelConfig().__dict__, **MODEL}
    catalog = AnySpacePPOCatalog(space, gym.spaces.Discrete(2), model)
    config = catalog.actor_critic_encoder_config.base_encoder_config
    assert isinstance(config, RecurrentEncoderConfig) and config.hidden_dim == CELL
    assert isinstance(config, RecurrentSpaceEncoderConfig) == ours
    encoder = config.build("torch")
    obs = _sequences(space, 2, 3)
    if not ours:  # RLlib pads sequences with zeros, below a Discrete's start
        obs = torch.zeros_like(obs)
    out = encoder({Columns.OBS: obs, Columns.STATE_IN: _initial_states(encoder.get_initial_state(), 2)})
    assert out["encoder_out"].shape == (2, 3, CELL)
