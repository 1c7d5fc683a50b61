"""SAC: the ``q_network: concat`` critic and the learner's single backward pass.

Both are checked on spaces they were not written around (tests/data/envs/matrix_env.py),
against RLlib's own computation where there is one.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner as RLlibSACTorchLearner
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from envsdk import internals
from envsdk.errors import UserError
from envsdk.networks.encoder import TorchObsActionEncoder
from envsdk.training.substitutes.replay.buffers import TransitionReplayBuffer
from envsdk.training.substitutes.sac.learner import SACTorchLearner
from tests.helpers import built_algorithm, built_config

CONCAT = {"model_config": {"fcnet_hiddens": [16, 8], "q_network": "concat"}}


def _learner_and_batch(algo: Any, size: int = 16, random_actions: bool = True) -> tuple[Any, Any]:
    """The algorithm's learner and one replayed batch in its tensors (from uniformly random actions,
    which are blind to action masks as RLlib's are, or from the module's)."""
    replay = TransitionReplayBuffer(100, seed=0)
    replay.add(algo.env_runner.sample(num_timesteps=40, random_actions=random_actions))
    learner = internals.local_learner(algo.learner_group)
    columns = replay.sample(size)
    batch = internals.learner_batch(
        learner, MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(columns)}, env_steps=size)
    )
    return learner, batch.policy_batches


def _gradients(learner: Any, batch: Any, compute: Any) -> dict:
    torch.manual_seed(0)  # the same reparameterised action samples for both ways
    fwd = learner.module.forward_train(batch)
    losses = learner.compute_losses(fwd_out=fwd, batch=batch)
    return {pid: g.clone() for pid, g in compute(losses).items() if g is not None}


def _both_ways(learner: Any, batch: Any) -> tuple[dict, dict]:
    """The gradients of one batch by RLlib's passes (one per optimizer) and by our single pass."""
    rllib = _gradients(learner, batch, lambda losses: RLlibSACTorchLearner.compute_gradients(learner, losses))
    ours = _gradients(learner, batch, lambda _: learner._single_pass({DEFAULT_MODULE_ID}))
    learner.metrics.reduce()  # drop what the two loss computations logged
    return rllib, ours


# ---- q_network: concat ---------------------------------------------------------------------------


@pytest.mark.slow  # builds an Algorithm
@pytest.mark.parametrize("obs", ["box", "box2d", "discrete", "dict", "tuple"])
def test_concat_q_networks_read_observation_and_action_through_one_mlp(tmp_path, obs):
    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "SAC", obs, "box", False, **CONCAT)
        try:
            module = internals.local_learner(algo.learner_group).module[DEFAULT_MODULE_ID]
            for name in ("qf_encoder", "qf_twin_encoder", "target_qf_encoder", "target_qf_twin_encoder"):
                encoder = getattr(module, name)
                assert isinstance(encoder, TorchObsActionEncoder), name
                linears = [m for m in encoder.mlp.modules() if isinstance(m, torch.nn.Linear)]
                assert [m.out_features for m in linears] == [16, 8]
            _, batch = _learner_and_batch(algo)
            rows = batch[DEFAULT_MODULE_ID]
            q = module.compute_q_values(
                {Columns.OBS: rows[Columns.OBS], Columns.ACTIONS: rows[Columns.ACTIONS]}
            )
            assert q.shape == (16,) and torch.isfinite(q).all()
            result = algo.train()
            assert result["learners"][DEFAULT_MODULE_ID]["qf_loss"] >= 0
        finally:
            algo.stop()


def _policy_shapes(module: Any) -> list[tuple[int, ...]]:
    return [tuple(p.shape) for net in (module.pi_encoder, module.pi) for p in net.parameters()]


@pytest.mark.slow  # builds an Algorithm
def test_concat_changes_only_the_q_networks(tmp_path):
    """The policy network is the one RLlib builds; the critic has fewer layers than its streams."""
    with internals.without_object_store():
        streams = built_algorithm(
            tmp_path, "SAC", "box", "box", False, model_config={"fcnet_hiddens": [16, 8]}
        )
        concat = built_algorithm(tmp_path, "SAC", "box", "box", False, **CONCAT)
        try:
            a, b = (
                internals.local_learner(x.learner_group).module[DEFAULT_MODULE_ID] for x in (streams, concat)
            )
            assert _policy_shapes(a) == _policy_shapes(b)
            count = lambda net: sum(isinstance(m, torch.nn.Linear) for m in net.modules())  # noqa: E731
            assert count(b.qf_encoder) == 2 < count(a.qf_encoder)
            # obs (4) and action (2) side by side into the first layer
            assert next(b.qf_encoder.mlp.parameters()).shape == (16, 4 + 2)
        finally:
            streams.stop()
            concat.stop()


@pytest.mark.parametrize(
    ("run", "act", "model_config", "says"),
    [
        ("SAC", "box", {"q_network": "concats"}, "'concats' is not a Q-network"),
        ("PPO", "box", {"q_network": "concat"}, "PPO's model has none"),
        ("SAC", "discrete", {"q_network": "concat"}, "concat reads Box actions"),
        ("SAC", "box", {"q_network": "concat", "fusionnet_hiddens": [8]}, "fusionnet_hiddens has no effect"),
    ],
)
def test_q_network_mistakes_are_named_before_anything_starts(tmp_path, run, act, model_config, says):
    with pytest.raises(UserError, match=says):
        built_algorithm(tmp_path, run, "box", act, False, model_config=model_config)


@pytest.mark.parametrize("algo", ["CQL", "IQL"])
def test_cql_and_iql_modules_take_the_concat_critic(algo):
    """CQL and IQL train offline (no quick run here); their default modules build and compute Q."""
    import dataclasses

    import gymnasium as gym
    import numpy as np
    from ray.rllib.algorithms.cql.torch.default_cql_torch_rl_module import DefaultCQLTorchRLModule
    from ray.rllib.algorithms.iql.torch.default_iql_torch_rl_module import DefaultIQLTorchRLModule
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from envsdk.networks.catalogs import AnySpaceSACCatalog

    module_class = {"CQL": DefaultCQLTorchRLModule, "IQL": DefaultIQLTorchRLModule}[algo]
    obs = gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (3,), np.float32), "b": gym.spaces.Discrete(4)})
    spec = RLModuleSpec(
        module_class=module_class,
        catalog_class=AnySpaceSACCatalog,
        observation_space=obs,
        action_space=gym.spaces.Box(-1, 1, (2,), np.float32),
        model_config={**dataclasses.asdict(DefaultModelConfig()), "twin_q": True, "q_network": "concat"},
    )
    module = spec.build()
    assert isinstance(module.qf_encoder, TorchObsActionEncoder)
    batch = {Columns.OBS: {"a": torch.zeros(5, 3), "b": torch.ones(5, dtype=torch.long)}}
    q = module.compute_q_values({**batch, Columns.ACTIONS: torch.zeros(5, 2)})
    assert q.shape == (5,)


@pytest.mark.slow  # builds an Algorithm
def test_streams_is_rllibs_default_critic(tmp_path):
    from ray.rllib.core.models.torch.encoder import TorchMultiStreamEncoder

    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "SAC", "dict", "box", False, model_config={"q_network": "streams"})
        try:
            assert isinstance(
                internals.local_learner(algo.learner_group).module[DEFAULT_MODULE_ID].qf_encoder,
                TorchMultiStreamEncoder,
            )
        finally:
            algo.stop()


# ---- the learner's single backward pass ----------------------------------------------------------

CASES = [
    ("box", "box", {}),
    ("box", "box", CONCAT),
    ("dict", "box", {}),
    ("tuple", "discrete", {}),
    ("box", "box", {"twin_q": False}),
]


@pytest.mark.slow  # builds an Algorithm
@pytest.mark.parametrize("case", CASES, ids=["streams", "concat", "dict-obs", "discrete", "single-q"])
def test_one_backward_pass_gives_rllibs_gradients(tmp_path, case):
    obs, act, config = case
    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "SAC", obs, act, False, **config)
        try:
            learner, batch = _learner_and_batch(algo)
            assert type(learner) is SACTorchLearner
            rllib, ours = _both_ways(learner, batch)
            assert rllib.keys() == ours.keys() and len(ours) > 5
            for pid in rllib:
                torch.testing.assert_close(ours[pid], rllib[pid], rtol=1e-5, atol=1e-7)
            algo.train()
            algo.train()
            assert learner.single_pass == {DEFAULT_MODULE_ID: True}
        finally:
            algo.stop()


def _critic_sharing_module() -> type:
    """A user's SAC module whose critic loss also reaches the policy (its Q-value has a policy term).

    RLlib's passes zero the policy's gradients before the actor's pass, so the
    policy steps on the actor loss alone; one pass over the sum would add the
    critic's share: the learner must notice and keep RLlib's passes.
    """
    from ray.rllib.algorithms.sac.sac_learner import QF_PREDS
    from ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module import DefaultSACTorchRLModule

    class SharingSAC(DefaultSACTorchRLModule):
        def _forward_train_continuous(self, batch: dict) -> dict:
            out = super()._forward_train_continuous(batch)
            out[QF_PREDS] = out[QF_PREDS] + 0.1 * out["logp_resampled"]
            return out

    return SharingSAC


@pytest.mark.slow  # builds an Algorithm
def test_a_module_whose_losses_share_parameters_keeps_rllibs_passes(tmp_path, capsys):
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "SAC", "box", "box", False)
        spec = RLModuleSpec(module_class=_critic_sharing_module())
        algo.stop()
        config = algo.config.copy(copy_frozen=False).rl_module(rl_module_spec=spec)
        algo = config.algo_class(config=config)
        try:
            learner, batch = _learner_and_batch(algo)
            rllib, ours = _both_ways(learner, batch)
            assert any(not torch.allclose(ours[pid], rllib[pid]) for pid in rllib)  # the case is real
            algo.train()
            algo.train()
            assert learner.single_pass == {DEFAULT_MODULE_ID: False}
            assert "keeping RLlib's passes" in capsys.readouterr().err
        finally:
            algo.stop()


# ---- critic_loss: squared -------------------------------------------------------------------------


class _HalfSquared(torch.nn.HuberLoss):
    """The oracle: RLlib's own critic loss, with a Huber delta no TD error reaches (0.5 x^2 exactly)."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction, delta=1e12)


def _losses(learner: Any, batch: Any) -> dict:
    torch.manual_seed(0)  # the same reparameterised action samples each time
    totals = learner.compute_losses(fwd_out=learner.module.forward_train(batch), batch=batch)
    found = {key: loss.detach().clone() for key, loss in internals.sac_losses(learner).items()}
    found.update({(module_id, "total"): loss.detach().clone() for module_id, loss in totals.items()})
    internals.sac_losses(learner).clear()
    return found


@pytest.mark.slow  # builds an Algorithm
@pytest.mark.parametrize("case", CASES[2:], ids=["dict-obs", "discrete", "single-q"])
def test_a_squared_critic_loss_is_half_the_squared_td_error(tmp_path, monkeypatch, case):
    obs, act, config = case
    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "SAC", obs, act, False, critic_loss="squared", **config)
        try:
            learner, batch = _learner_and_batch(algo)
            assert learner.squared_critic_loss
            # TD errors far past Huber's delta of 1, where the two losses differ
            batch[DEFAULT_MODULE_ID][Columns.REWARDS] = 50 * batch[DEFAULT_MODULE_ID][Columns.REWARDS] + 20
            ours = _losses(learner, batch)
            learner.squared_critic_loss = False
            huber = _losses(learner, batch)
            monkeypatch.setattr(torch.nn, "HuberLoss", _HalfSquared)
            oracle = _losses(learner, batch)
            learner.metrics.reduce()
            critics = {key for key in ours if key[1] in ("qf_loss", "qf_twin_loss")}
            assert len(critics) == (2 if config.get("twin_q", True) else 1)
            assert ours.keys() == oracle.keys()
            for key in ours:
                torch.testing.assert_close(ours[key], oracle[key], rtol=1e-5, atol=1e-5)
            for key in critics:
                assert ours[key] > 2 * huber[key]  # the case is real
        finally:
            algo.stop()


@pytest.mark.substitution("sac-learner", "transition-replay")
def test_sac_runs_get_the_single_pass_learner(tmp_path):
    assert built_config(tmp_path, "SAC", "box", "box", False).config.learner_class is SACTorchLearner
