"""SAC's lean module (envsdk/training/substitutes/sac/module.py) against RLlib's own training pass.

Same weights, same batch, same random draws: the outputs, RLlib's losses on them and the
gradients of those losses must be RLlib's, on spaces the module was not written around
(tests/data/envs/matrix_env.py), along both of its paths (critics read as layers, and RLlib's helper).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ray.rllib.algorithms.cql import CQLConfig
from ray.rllib.algorithms.cql.torch.default_cql_torch_rl_module import DefaultCQLTorchRLModule
from ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module import DefaultSACTorchRLModule
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner as RLlibSACTorchLearner
from ray.rllib.core import DEFAULT_MODULE_ID

from envsdk import internals
from envsdk.training.substitutes.sac.module import LeanSACTorchRLModule, critic_layers, lean_sac_module
from tests.helpers import built_algorithm, built_config
from tests.training.substitutes.test_sac import CONCAT, _learner_and_batch

CASES = {  # obs, actions, config, whether the critics are read as layers
    "concat": ("box", "box", CONCAT, True),
    "concat-box2d": ("box2d", "box", CONCAT, True),
    "concat-single-q": ("box", "box", {**CONCAT, "twin_q": False}, True),
    "concat-tanh": (
        "box",
        "box",
        {"model_config": {**CONCAT["model_config"], "fcnet_activation": "tanh"}},
        True,
    ),
    "concat-dict-obs": ("dict", "box", CONCAT, False),
    "streams": ("box", "box", {}, False),
    "discrete": ("box", "discrete", {}, False),
}


def _pass(learner: Any, batch: Any, forward: Any) -> tuple[dict, dict, dict]:
    """One training pass: its outputs, RLlib's losses on them, and their gradients."""
    module = learner.module[DEFAULT_MODULE_ID]
    rows = batch[DEFAULT_MODULE_ID]
    torch.manual_seed(0)  # the same reparameterised draws for both passes
    out = forward(module, rows)
    total = RLlibSACTorchLearner.compute_loss_for_module(
        learner, module_id=DEFAULT_MODULE_ID, config=learner.config, batch=rows, fwd_out=out
    )
    losses = {key[1]: loss for key, loss in internals.sac_losses(learner).items()}
    internals.sac_losses(learner).clear()
    module.zero_grad(set_to_none=True)
    total.backward()
    grads = {name: p.grad.clone() for name, p in module.named_parameters() if p.grad is not None}
    module.zero_grad(set_to_none=True)
    values = {k: v.detach().clone() for k, v in out.items() if isinstance(v, torch.Tensor)}
    return values, {k: v.detach() for k, v in [*losses.items(), ("total", total)]}, grads


@pytest.mark.slow  # builds an Algorithm
@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_the_lean_pass_gives_rllibs_outputs_losses_and_gradients(tmp_path, case):
    obs, act, config, by_layers = case
    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "SAC", obs, act, False, **config)
        try:
            learner, batch = _learner_and_batch(algo)
            module = learner.module[DEFAULT_MODULE_ID]
            assert type(module) is LeanSACTorchRLModule
            assert (module._critics() is not None) is (by_layers and act == "box")
            rllib = _pass(learner, batch, lambda m, rows: DefaultSACTorchRLModule.forward_train(m, rows))
            ours = _pass(learner, batch, lambda m, rows: m.forward_train(rows))
            learner.metrics.reduce()  # drop what the loss computations logged
            for theirs, mine in zip(rllib, ours, strict=True):
                assert theirs.keys() == mine.keys() and theirs
                for key in theirs:
                    torch.testing.assert_close(mine[key], theirs[key], rtol=1e-5, atol=1e-6, msg=key)
            assert len(ours[2]) > 5  # the gradients reached the networks
            module.pi_encoder.eval()  # as TorchRLModule.forward_train, the pass trains every submodule
            module.forward_train(batch[DEFAULT_MODULE_ID])
            assert all(m.training for m in module.modules())
            result = algo.train()
            result = algo.train()
            assert result["learners"][DEFAULT_MODULE_ID]["qf_loss"] >= 0
        finally:
            algo.stop()


@pytest.mark.slow  # builds an Algorithm
def test_a_lean_modules_state_is_rllibs(tmp_path):
    """A checkpoint of the lean module loads into RLlib's own module, which acts the same."""
    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "SAC", "box", "box", False, **CONCAT)
        try:
            algo.train()
            module = internals.local_learner(algo.learner_group).module[DEFAULT_MODULE_ID]
            plain = DefaultSACTorchRLModule(
                observation_space=module.observation_space,
                action_space=module.action_space,
                model_config=module.model_config,
                catalog_class=type(module.catalog),
            )
            plain.make_target_networks()
            plain.set_state(module.get_state())
            assert plain.get_state().keys() == module.get_state().keys()
            obs = torch.randn(5, *module.observation_space.shape)
            with torch.no_grad():
                torch.testing.assert_close(
                    plain.forward_inference({"obs": obs})["action_dist_inputs"],
                    module.forward_inference({"obs": obs})["action_dist_inputs"],
                )
        finally:
            algo.stop()


@pytest.mark.substitution("sac-module")
def test_only_rllibs_default_sac_module_is_replaced(tmp_path):
    assert built_config(tmp_path, "SAC", "box", "box", False).config.rl_module_spec.module_class is (
        LeanSACTorchRLModule
    )
    stock = built_config(tmp_path, "SAC", "box", "box", False, stock=["sac-module"]).config
    assert stock.rl_module_spec.module_class is DefaultSACTorchRLModule
    dqn = built_config(tmp_path, "DQN", "box", "discrete", False).config
    assert dqn.rl_module_spec.module_class is not LeanSACTorchRLModule
    cql = CQLConfig()  # its module subclasses RLlib's SAC module: not replaced
    lean_sac_module(cql)
    assert cql.rl_module_spec.module_class is DefaultCQLTorchRLModule


def test_a_critic_is_read_as_layers_only_where_it_is_a_plain_mlp():
    import dataclasses

    import gymnasium as gym
    from ray.rllib.core.models.base import ENCODER_OUT
    from ray.rllib.core.models.configs import MLPHeadConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from torch import nn

    from envsdk.networks.encoder import ObsActionEncoderConfig
    from envsdk.training.substitutes.sac.module import run_layers

    pair = gym.spaces.Tuple((gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,))))
    defaults = dataclasses.asdict(DefaultModelConfig())  # fcnet_activation: tanh
    encoder = ObsActionEncoderConfig.from_model_config(pair, {**defaults, "fcnet_hiddens": [8, 4]})
    encoder = encoder.build("torch")
    head = MLPHeadConfig(input_dims=[4], hidden_layer_dims=[], output_layer_dim=1).build("torch")
    normed = MLPHeadConfig(input_dims=[4], hidden_layer_dims=[4], hidden_layer_use_layernorm=True,
                           output_layer_dim=1).build("torch")  # fmt: skip
    layers = critic_layers(encoder, head)
    assert layers is not None
    assert [type(m).__name__ for m in layers] == ["Linear", "Tanh", "Linear", "Tanh", "Linear"]
    obs, action = torch.randn(5, 3), torch.randn(5, 2)
    torch.testing.assert_close(
        run_layers(layers, torch.cat([obs, action], -1), detach=False),
        head(encoder({"obs": obs, "actions": action})[ENCODER_OUT]),
    )
    assert critic_layers(encoder, normed) is None  # a layer norm: RLlib's helper
    assert critic_layers(nn.Linear(5, 4), head) is None  # not the concat critic
