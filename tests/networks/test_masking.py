"""SAC with action masks (envsdk/networks/masking.py's ``MaskedSACTorchRLModule``).

A forbidden action has probability 0 in sampling, inference and training, and adds nothing to the
soft values and entropies of RLlib's discrete SAC loss, which stays finite.  Training runs on
tests/data/envs/matrix_env.py, which raises on any masked action, and on the stand-in's Hallway
(a camera, a vector and a mask over ``Discrete(4)``), which exits on one.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from ray.rllib.algorithms.sac.sac_learner import (
    ACTION_LOG_PROBS,
    ACTION_LOG_PROBS_NEXT,
    ACTION_PROBS,
    ACTION_PROBS_NEXT,
    QF_TARGET_NEXT,
)
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.utils.metrics import LEARNER_RESULTS

from envsdk import internals
from envsdk.envs.keys import MASK_KEY
from envsdk.errors import UserError
from envsdk.networks.masking import MaskedSACTorchRLModule
from envsdk.training.substitutes.sac.learner import SACTorchLearner
from tests.helpers import ROOT, built_algorithm, built_config, progress_rows
from tests.training.substitutes.test_sac import _learner_and_batch

# name -> matrix_env's observation kind, the YAML's config
TRAINED = {
    "vector": ("box", {}),
    "camera-and-vector-squared-critic-loss": ("dict", {"critic_loss": "squared"}),
    "single-q": ("box", {"twin_q": False}),
    "stock": ("box", {"stock": True}),  # RLlib's own learner and sampler (ENVSDK_STOCK=1's switch)
}
LOSSES = ("policy_loss", "qf_loss", "alpha_loss")


@pytest.mark.slow  # builds an Algorithm
@pytest.mark.parametrize("case", TRAINED.values(), ids=list(TRAINED))
def test_masked_sac_trains_without_a_masked_action(tmp_path, case):
    obs, config = case
    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "SAC", obs, "discrete", True, **config)
        try:
            learner = internals.local_learner(algo.learner_group)
            assert type(learner.module[DEFAULT_MODULE_ID]) is MaskedSACTorchRLModule
            assert isinstance(learner, SACTorchLearner) != bool(config.get("stock"))
            for _ in range(2):  # the env raises on a masked action
                learned = algo.train()[LEARNER_RESULTS][DEFAULT_MODULE_ID]
            for key in LOSSES:
                assert math.isfinite(learned[key]), (key, learned[key])
            assert learned["num_module_steps_trained"] > 0
            if isinstance(learner, SACTorchLearner):  # the masked losses still allow one backward pass
                assert learner.single_pass == {DEFAULT_MODULE_ID: True}
        finally:
            algo.stop()


def _forbidden(observations: dict[str, torch.Tensor]) -> torch.Tensor:
    return observations[MASK_KEY] < 0.5


@pytest.mark.slow  # builds an Algorithm
def test_forbidden_actions_have_probability_zero_and_the_loss_stays_finite(tmp_path):
    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "SAC", "box", "discrete", True)
        try:
            learner, batch = _learner_and_batch(algo, size=64, random_actions=False)
            module = learner.module[DEFAULT_MODULE_ID]
            rows = batch[DEFAULT_MODULE_ID]
            last = [m for m in module.pi.modules() if isinstance(m, torch.nn.Linear)][-1]
            with torch.no_grad():  # logits 120 nats apart: exp() of the smallest is 0 in float32
                last.weight.zero_()
                last.bias.copy_(torch.tensor([60.0, -60.0, 0.0]))
            forbidden, forbidden_next = _forbidden(rows[Columns.OBS]), _forbidden(rows[Columns.NEXT_OBS])
            assert forbidden.any() and forbidden[:, 0].any() and not forbidden.all(-1).any()
            out = module.forward_train(rows)
            for probs, log_probs, masked in (
                (ACTION_PROBS, ACTION_LOG_PROBS, forbidden),
                (ACTION_PROBS_NEXT, ACTION_LOG_PROBS_NEXT, forbidden_next),
            ):
                assert (out[probs][masked] == 0).all()
                torch.testing.assert_close(out[probs].sum(-1), torch.ones(len(masked)))
                assert torch.isfinite(out[log_probs]).all()
            assert (out[QF_TARGET_NEXT][forbidden_next] == 0).all()
            loss = learner.compute_losses(fwd_out={DEFAULT_MODULE_ID: out}, batch=batch)[DEFAULT_MODULE_ID]
            loss.backward()
            assert torch.isfinite(loss)
            grads = [p.grad for p in module.parameters() if p.grad is not None]
            assert grads and all(torch.isfinite(g).all() for g in grads)
            learner.metrics.reduce()
            with torch.no_grad():
                greedy = module.forward_inference({Columns.OBS: rows[Columns.OBS]})
                explore = module.forward_exploration({Columns.OBS: rows[Columns.OBS]})
            assert not forbidden.gather(1, greedy[Columns.ACTION_DIST_INPUTS].argmax(-1, keepdim=True)).any()
            dist = module.get_exploration_action_dist_cls().from_logits(explore[Columns.ACTION_DIST_INPUTS])
            drawn = torch.stack([dist.sample() for _ in range(200)], dim=-1)
            assert not forbidden.gather(1, drawn).any()
        finally:
            algo.stop()


def test_sac_with_memory_is_refused(tmp_path):
    with pytest.raises(UserError, match=r"use_lstm: SAC's default model has no memory") as err:
        built_config(tmp_path, "SAC", "box", "discrete", True, model_config={"use_lstm": True})
    assert "PPO" in err.value.hint


# ---- ML-Agents' Hallway.sac.yaml on the stand-in's Hallway ----------------------------------------

HALLWAY = ROOT / "tests" / "data" / "mlagents_configs" / "Hallway.sac.yaml"
LEARN_SOON = [  # updates within the first iteration, on small batches
    "--config.num_steps_sampled_before_learning_starts=32",
    "--config.train_batch_size=32",
]


def _train_hallway(config: Path, build: Path, results: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "train.py", str(config), "--env", str(build), "--results-dir", str(results),
         "--no-graphics", "--force", "--config.min_sample_timesteps_per_iteration=0", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.slow  # starts a game
def test_hallway_sac_refuses_memory_and_trains_without_it(standin_builds, tmp_path):
    build = standin_builds / "Hallway"
    refused = _train_hallway(HALLWAY, build, tmp_path / "refused", "--stop-iters", "1")
    assert refused.returncode != 0
    assert re.search(r"^error: .*(use_lstm|memory)", refused.stderr, re.M), refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr
    settings: dict[str, Any] = yaml.safe_load(HALLWAY.read_text())
    del settings["behaviors"]["Hallway"]["network_settings"]["memory"]
    config = tmp_path / "Hallway.sac.yaml"
    config.write_text(yaml.safe_dump(settings))
    trained = _train_hallway(config, build, tmp_path / "results", "--stop-iters", "2", *LEARN_SOON)
    assert trained.returncode == 0, trained.stderr[-3000:]  # the stand-in exits on a masked action
    assert re.search(r"model Hallway: camera .* CNN .*; actions Discrete\(4\), masked", trained.stdout)
    (progress,) = (tmp_path / "results").glob("ppo/*/progress.csv")
    last = progress_rows(progress.parent)[-1]
    for key in LOSSES:
        assert math.isfinite(float(last[f"learners/Hallway/{key}"])), key
