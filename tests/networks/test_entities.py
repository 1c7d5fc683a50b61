"""The default reader of sets of entities (EntitySet, a Unity BufferSensor's observation): entity
attention that ignores the entities' order and the padding rows, concatenated with the other parts'
encodings, picklable with its space, and learning in a short PPO run."""

from __future__ import annotations

import dataclasses
import pickle
import re
import shutil

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

from envsdk.envs.spaces import ENTITIES, EntitySet, describe_space, observation_leaves
from envsdk.networks.choice import describe
from envsdk.networks.encoder import SpaceEncoderConfig
from envsdk.networks.entities import EMBEDDING, EntityAttention
from tests.helpers import ROOT, progress_rows

ROWS, SIZE = 8, 5
SPACES = {
    "set alone": EntitySet(ROWS, SIZE),
    "set and vector": gym.spaces.Dict(
        {"vector": gym.spaces.Box(-1, 1, (3,), np.float32), "set": EntitySet(ROWS, SIZE)}
    ),
    "two sets": gym.spaces.Dict(
        {"a": EntitySet(ROWS, SIZE), "b": EntitySet(4, 2), "n": gym.spaces.Discrete(3)}
    ),
}


def encoder(space: gym.Space, hidden: list[int] | None = None):
    model = {
        **dataclasses.asdict(DefaultModelConfig()),
        "fcnet_hiddens": hidden if hidden is not None else [32],
    }
    return SpaceEncoderConfig.from_model_config(space, model).build()


def sample(space: gym.Space, batch: int, rng: np.random.Generator) -> dict | torch.Tensor:
    """A batch of observations whose sets hold 1 to all rows of entities, the rest zeros."""
    if isinstance(space, gym.spaces.Dict):
        return {key: sample(sub, batch, rng) for key, sub in space.spaces.items()}
    if isinstance(space, EntitySet):
        rows, size = space.shape
        values = rng.normal(size=(batch, rows, size)).astype(np.float32)
        for b in range(batch):
            values[b, int(rng.integers(1, rows + 1)) :] = 0.0
        return torch.as_tensor(values)
    if isinstance(space, gym.spaces.Discrete):
        return torch.as_tensor(rng.integers(0, space.n, batch))
    return torch.as_tensor(rng.uniform(-1, 1, (batch, *space.shape)).astype(np.float32))


def shuffled(obs, rng: np.random.Generator):
    """Every set's rows in another order (its padding among them)."""
    if isinstance(obs, dict):
        return {k: shuffled(v, rng) for k, v in obs.items()}
    if obs.ndim != 3:
        return obs
    return torch.stack([rows[torch.as_tensor(rng.permutation(len(rows)))] for rows in obs])


def run(enc, obs) -> torch.Tensor:
    with torch.no_grad():
        return enc({Columns.OBS: obs})[ENCODER_OUT]


@pytest.mark.parametrize("name", list(SPACES))
def test_the_order_of_the_entities_does_not_change_the_encoding(name):
    space, rng = SPACES[name], np.random.default_rng(0)
    enc, obs = encoder(space), sample(space, 16, rng)
    torch.testing.assert_close(run(enc, shuffled(obs, rng)), run(enc, obs), atol=1e-5, rtol=0)


@pytest.mark.parametrize("extra", [0, 3, 12])
def test_padding_rows_do_not_change_the_encoding(extra):
    """The same entities in sets of 4, 7 or 16 rows (ML-Agents' maximum differs between games)."""
    rng = np.random.default_rng(1)
    entities = torch.as_tensor(rng.normal(size=(5, 3, SIZE)).astype(np.float32))
    torch.manual_seed(0)
    small = EntityAttention(2, [SIZE])
    own = torch.as_tensor(rng.normal(size=(5, 2)).astype(np.float32))
    padded = torch.cat([entities, torch.zeros(5, 1 + extra, SIZE)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(small(own, [padded]), small(own, [entities]), atol=1e-5, rtol=0)


def test_the_encoding_reads_the_entities_and_the_other_parts():
    space, rng = SPACES["set and vector"], np.random.default_rng(2)
    enc, obs = encoder(space, hidden=[]), sample(space, 4, rng)
    out = run(enc, obs)
    assert out.shape == (4, 3 + EMBEDDING)  # the vector flattened, then the attention's output
    torch.testing.assert_close(out[:, :3], obs["vector"])
    moved = {**obs, "set": obs["set"] + (obs["set"] != 0) * 0.5}  # the same rows padded, other values
    assert not torch.allclose(run(enc, moved)[:, 3:], out[:, 3:])
    empty = {**obs, "set": torch.zeros_like(obs["set"])}  # no entity at all: zeros
    assert torch.count_nonzero(run(enc, empty)[:, 3:]) == 0


def test_the_space_is_a_set_to_the_models_and_pickles_as_itself():
    space = SPACES["two sets"]
    again = pickle.loads(pickle.dumps(space))
    assert again == space and isinstance(again["a"], EntitySet)
    assert [leaf.kind for leaf in observation_leaves(space)] == [ENTITIES, ENTITIES, "onehot"]
    assert describe_space(space["a"]) == f"set of up to {ROWS} entities x {SIZE}"
    line = describe(space, gym.spaces.Discrete(2))
    assert line.startswith(
        f"n Discrete(3) one-hot + a set of up to {ROWS} entities x {SIZE} + b set of up to 4"
    )
    assert f"-> entity attention {EMBEDDING}" in line


@pytest.mark.slow
def test_a_short_ppo_run_learns_to_read_a_set(train, tmp_path):
    """Whether an entity of the asked kind is in the set: random answers score 4 of 8."""
    shutil.copy(ROOT / "tests" / "data" / "envs" / "sets_env.py", tmp_path / "sets_env.py")
    experiment = {
        "sets": {
            "run": "PPO",
            "env": "sets_env.SetsEnv",
            "stop": {"training_iteration": 6},
            "config": {
                "num_env_runners": 0, "train_batch_size": 512, "minibatch_size": 128, "num_epochs": 8,
                "lr": 0.001, "model_config": {"fcnet_hiddens": [64]},
            },
        }
    }  # fmt: skip
    (tmp_path / "sets.yaml").write_text(yaml.safe_dump(experiment))
    out = train("-f", "sets.yaml", cwd=tmp_path, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"model default_policy: .*entity attention", out.stdout), out.stdout[-2000:]
    (trial,) = [p.parent for p in train.results.glob("sets/*/progress.csv")]
    returns = [float(r["env_runners/episode_return_mean"]) for r in progress_rows(trial)]
    assert returns[-1] > 5.5, returns
