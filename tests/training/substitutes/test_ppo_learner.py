"""The PPO learner (envsdk/training/substitutes/ppo/learner.py) against RLlib's: the same train
batch, its rows in one random order, on spaces it was not written around (tests/data/envs/matrix_env.py)."""

from __future__ import annotations

import copy
import re
from typing import Any

import numpy as np
import pytest
import torch
import tree
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner as RLlibPPOTorchLearner
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.minibatch_utils import MiniBatchCyclicIterator

from envsdk import internals
from envsdk.training.substitutes.ppo.learner import PPOTorchLearner, ShuffleRows
from tests.helpers import built_algorithm, built_config

PPO = {"minibatch_size": 8, "num_epochs": 2, "train_batch_size": 32}


def test_rllibs_iterator_takes_its_first_epoch_in_batch_order() -> None:
    """Why the PPO learner exists: RLlib 2.60 shuffles a batch only once it has gone through it.
    When this fails, RLlib shuffles the first epoch itself and ppo-learner can go."""
    batch = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch({"row": np.arange(32)})}, env_steps=32)
    np.random.seed(0)
    seen = [
        mb.policy_batches[DEFAULT_MODULE_ID]["row"].tolist()
        for mb in MiniBatchCyclicIterator(batch, num_epochs=2, minibatch_size=8, shuffle_batch_per_epoch=True)
    ]
    first, second = np.concatenate(seen[:4]).tolist(), np.concatenate(seen[4:]).tolist()
    assert first == list(range(32))  # the first epoch: consecutive slices
    assert sorted(second) == list(range(32)) != second  # the second: shuffled


def _batches(tmp_path: Any, obs: str, act: str, **config: Any) -> tuple[Any, dict, dict]:
    """Our learner and RLlib's on one algorithm's episodes, the same weights: both train batches,
    ours built after ``np.random.seed(7)``."""
    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "PPO", obs, act, False, **{**PPO, **config})
        try:
            learner = internals.local_learner(algo.learner_group)
            episodes = algo.env_runner.sample(num_timesteps=40)
            spec = learner.config.get_multi_rl_module_spec(spaces=algo.env_runner.get_spaces())
            theirs = RLlibPPOTorchLearner(config=learner.config, module_spec=spec)
            theirs.build()
            theirs.module.set_state(learner.module.get_state())

            def run(one: Any) -> dict:
                pipeline, copied = internals.learner_connector(one), copy.deepcopy(episodes)
                out = pipeline(rl_module=one.module, batch={}, episodes=copied, shared_data={}, metrics=None)
                return out[DEFAULT_MODULE_ID]

            rllib_batch = run(theirs)
            np.random.seed(7)
            return learner, run(learner), rllib_batch
        finally:
            algo.stop()


def _leaves(batch: dict) -> dict[str, Any]:
    return {f"{key}/{i}": leaf for key in sorted(batch) for i, leaf in enumerate(tree.flatten(batch[key]))}


CASES = [("box", "discrete"), ("dict", "box"), ("box2d", "multidiscrete"), ("tuple", "hybrid")]


@pytest.mark.slow  # builds an Algorithm
@pytest.mark.substitution("ppo-learner")
@pytest.mark.parametrize(("obs", "act"), CASES, ids=["-".join(c) for c in CASES])
def test_the_learner_shuffles_rllibs_batch_rows_together(tmp_path: Any, obs: str, act: str) -> None:
    """Every column of our batch is RLlib's, rows in one shared random order (the loss mask, the
    advantages and value targets with the observations and actions they belong to)."""
    learner, ours, rllib = _batches(tmp_path, obs, act)
    assert isinstance(learner, PPOTorchLearner)
    ours_leaves, rllib_leaves = _leaves(ours), _leaves(rllib)
    assert ours_leaves.keys() == rllib_leaves.keys()
    rows = len(rllib["loss_mask"])
    np.random.seed(7)
    order = torch.from_numpy(np.random.permutation(rows))
    assert not torch.equal(order, torch.arange(rows))
    for name, leaf in rllib_leaves.items():
        torch.testing.assert_close(ours_leaves[name], leaf[order], msg=name)


@pytest.mark.slow  # builds an Algorithm
@pytest.mark.substitution("ppo-learner")
@pytest.mark.parametrize(
    "config",
    [{"model": {"use_lstm": True, "max_seq_len": 4}}, {"num_epochs": 1}, {"shuffle_batch_per_epoch": False}],
    ids=["recurrent", "one-epoch", "no-shuffle"],
)
def test_where_rllib_would_not_shuffle_the_batch_is_rllibs(tmp_path: Any, config: dict) -> None:
    _, ours, rllib = _batches(tmp_path, "box", "discrete", **config)
    ours_leaves, rllib_leaves = _leaves(ours), _leaves(rllib)
    for name, leaf in rllib_leaves.items():
        torch.testing.assert_close(ours_leaves[name], leaf, msg=name)


def test_shuffle_rows_leaves_a_batch_with_uneven_columns_alone() -> None:
    batch = {"p": {"obs": torch.arange(6), "seq_lens": torch.tensor([4, 2])}, "q": {"obs": np.arange(5)}}
    np.random.seed(3)
    out = ShuffleRows()(rl_module={}, batch=copy.deepcopy(batch))
    assert torch.equal(out["p"]["obs"], batch["p"]["obs"])  # seq_lens: not a row per step
    assert sorted(out["q"]["obs"].tolist()) == list(range(5)) != out["q"]["obs"].tolist()


@pytest.mark.substitution("ppo-learner")
def test_only_rllibs_ppo_learner_is_replaced(tmp_path: Any) -> None:
    ours = built_config(tmp_path, "PPO", "box", "discrete", False, **PPO).config
    assert ours.learner_class is PPOTorchLearner
    stock = built_config(tmp_path, "PPO", "box", "discrete", False, stock=["ppo-learner"], **PPO).config
    assert stock.learner_class is RLlibPPOTorchLearner
    appo = built_config(tmp_path, "APPO", "box", "discrete", False).config  # its learner: RLlib's
    assert not issubclass(appo.learner_class, PPOTorchLearner)


@pytest.mark.slow  # builds an Algorithm
@pytest.mark.substitution("ppo-learner")
@pytest.mark.parametrize("normalization", ["batch", "minibatch"])
@pytest.mark.parametrize(("obs", "act"), CASES[:2], ids=["-".join(c) for c in CASES[:2]])
def test_the_loss_is_rllibs_on_advantages_normalized_as_asked(tmp_path, obs, act, normalization):
    """Our loss on a minibatch is RLlib's, on the advantages as given (batch) or standardized over
    the minibatch's counted rows (minibatch: SB3's mean and unbiased std)."""
    learner, ours, _ = _batches(tmp_path, obs, act, advantage_normalization=normalization)
    rows = tree.map_structure(lambda column: column[:12].clone(), dict(ours))  # one minibatch
    rows["loss_mask"][3] = False  # a padded row: not counted
    given = rows["advantages"].clone()
    with torch.no_grad():
        fwd = learner.module[DEFAULT_MODULE_ID].forward_train(rows)
        got = learner.compute_loss_for_module(
            module_id=DEFAULT_MODULE_ID, config=learner.config, batch=rows, fwd_out=fwd
        )
        expected_rows = dict(rows)
        if normalization == "minibatch":
            counted = given.numpy()[rows["loss_mask"].numpy()]
            expected_rows["advantages"] = torch.from_numpy(
                (given.numpy() - counted.mean()) / (counted.std(ddof=1) + 1e-8)
            )
        want = RLlibPPOTorchLearner.compute_loss_for_module(
            learner, module_id=DEFAULT_MODULE_ID, config=learner.config, batch=expected_rows, fwd_out=fwd
        )
    torch.testing.assert_close(got, want)
    assert torch.equal(rows["advantages"], given)  # the caller's batch is left as it was
    if normalization == "minibatch":
        plain = RLlibPPOTorchLearner.compute_loss_for_module(
            learner, module_id=DEFAULT_MODULE_ID, config=learner.config, batch=rows, fwd_out=fwd
        )
        assert not torch.allclose(plain, want)  # the case tells the two apart


@pytest.mark.slow  # builds an Algorithm
@pytest.mark.substitution("ppo-learner")
def test_a_clip_param_schedule_is_the_clip_the_loss_reads_at_each_timestep(tmp_path: Any) -> None:
    """``clip_param: [[0, 0.3], [64, 0.1]]`` (mlagents-learn's epsilon_schedule: linear): the loss uses
    the clip of the current timestep, the learner reports it, RLlib's own config keeps a number."""
    schedule = [[0, 0.3], [64, 0.1]]
    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "PPO", "box", "discrete", False, **PPO, clip_param=schedule)
        try:
            assert algo.config.clip_param == 0.3
            assert algo.config.learner_config_dict["clip_param_schedule"] == schedule
            clips, steps = [], []
            for _ in range(3):
                result = algo.train()
                clips.append(result["learners"][DEFAULT_MODULE_ID]["curr_clip_param"])
                steps.append(result["env_runners"]["num_env_steps_sampled_lifetime"])
            expected = [max(0.1, 0.3 - 0.2 * s / 64) for s in steps]
            np.testing.assert_allclose(clips, expected, rtol=1e-5)
            learner = internals.local_learner(algo.learner_group)
            episodes = algo.env_runner.sample(num_timesteps=16)
            pipeline = internals.learner_connector(learner)
            batch = pipeline(
                rl_module=learner.module, batch={}, episodes=episodes, shared_data={}, metrics=None
            )
            rows = batch[DEFAULT_MODULE_ID]
            with torch.no_grad():
                fwd = learner.module[DEFAULT_MODULE_ID].forward_train(rows)
                got = learner.compute_loss_for_module(
                    module_id=DEFAULT_MODULE_ID, config=learner.config, batch=rows, fwd_out=fwd
                )
                at_clip = copy.copy(learner.config)
                at_clip.clip_param = clips[-1]
                want = RLlibPPOTorchLearner.compute_loss_for_module(
                    learner, module_id=DEFAULT_MODULE_ID, config=at_clip, batch=rows, fwd_out=fwd
                )
            torch.testing.assert_close(got, want)
            assert learner.config.clip_param == 0.3  # the learner's own config is left as it was
        finally:
            algo.stop()


@pytest.mark.parametrize(
    ("run", "stock", "message"),
    [("APPO", None, "only envsdk's PPO learner reads"), ("PPO", ["ppo-learner"], "stock: (or ENVSDK_STOCK)")],
)
def test_a_clip_param_schedule_without_our_ppo_learner_is_refused(tmp_path: Any, run, stock, message) -> None:
    from envsdk.errors import UserError

    extra = {"stock": stock} if stock else {}
    with pytest.raises(UserError, match=re.escape(message)):
        built_config(tmp_path, run, "box", "discrete", False, clip_param=[[0, 0.2], [100, 0.1]], **extra)
