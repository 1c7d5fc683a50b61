"""RLlib's default PPO module's policy pass as one chain of torch calls, for the batched sampler.

On an env runner, RLlib's default PPO module (also IMPALA's and APPO's) computes its action
distribution inputs through five levels of Python: ``_forward_exploration`` -> ``_forward`` ->
the actor-critic encoder -> the MLP encoder -> ``TorchMLP`` -> ``nn.Sequential``, then the pi
head the same way down.  For the small networks of vector-observation tasks that walk costs more
than the arithmetic: 45 us for CartPole's 64x64 network against 16 us for the same torch calls
in a row (``benchmarks/sampling.py`` measures the whole sampler).

:func:`policy_pass` returns that row of calls for a module whose pass is exactly RLlib's: its
class keeps RLlib's ``_forward`` and exploration/inference passes, its encoder and pi head are
RLlib's MLP classes, and nothing is recurrent.  Each ``nn.Linear`` becomes ``F.linear`` on the
layer's current weights, ``nn.Tanh``/``nn.ReLU``/``nn.Sigmoid`` their torch functions; any other
layer is called as it is; the pi head's log-std clip is RLlib's own.  Anything else (a CNN, a
custom model, a free log-std head) returns None, and the runner calls the module.
:class:`PolicyPass` also checks its first output against the module's own pass, and the runner
calls the module from then on if they differ at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.torch.encoder import TorchActorCriticEncoder, TorchMLPEncoder
from ray.rllib.core.models.torch.heads import TorchMLPHead

from envsdk import internals

logger = logging.getLogger(__name__)


def _mlp_layers(part: Any) -> list[torch.nn.Module] | None:
    """The layers of an RLlib MLP part (``part.net.mlp``, an ``nn.Sequential``), or None."""
    mlp = getattr(getattr(part, "net", None), "mlp", None)
    return list(mlp) if type(mlp) is torch.nn.Sequential else None


def _actor_encoder(module: Any) -> Any:
    """The MLP encoder that RLlib's actor-critic encoder runs for the actor, or None."""
    encoder = getattr(module, "encoder", None)
    if type(encoder) is not TorchActorCriticEncoder:
        return None
    config: Any = encoder.config  # an ActorCriticEncoderConfig
    actor = encoder.encoder if config.shared else encoder.actor_encoder
    return actor if type(actor) is TorchMLPEncoder else None


def policy_pass(module: Any) -> PolicyPass | None:
    """The module's action-distribution-input pass as a row of torch calls (module docstring),
    or None where the module's pass is not RLlib's default PPO one over MLPs."""
    cls = type(module)
    if not (
        isinstance(module, DefaultPPOTorchRLModule)
        and internals.keeps_forward_of(cls, DefaultPPOTorchRLModule)
        and internals.keeps_default_passes(module)
        and not module.is_stateful()
        and type(getattr(module, "pi", None)) is TorchMLPHead
    ):
        return None
    encoder = _actor_encoder(module)
    encoder_layers = _mlp_layers(encoder) if encoder is not None else None
    head_layers = _mlp_layers(module.pi)
    if encoder_layers is None or head_layers is None:
        return None
    return PolicyPass(module, encoder_layers + head_layers)


# Activation layers (of no parameters or settings) and the torch function each one calls.
FUNCTIONS: dict[type, Callable[[torch.Tensor], torch.Tensor]] = {
    torch.nn.Tanh: torch.tanh,
    torch.nn.ReLU: torch.relu,
    torch.nn.Sigmoid: torch.sigmoid,
}


def _call(layer: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """What computes a layer: its torch function where :data:`FUNCTIONS` has one, else the layer."""
    return FUNCTIONS.get(type(layer), layer)


class PolicyPass:
    """The pass itself: call it with the observation tensor, under ``torch.no_grad``."""

    def __init__(self, module: Any, layers: list[torch.nn.Module]) -> None:
        self.module = module
        self.head = module.pi
        self.layers = layers
        self.checked = False

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        return self.bind()(obs)

    def bind(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """The pass over the layers' weights as they are now, looked up once: a runner binds it
        at each ``sample()`` call, as the weights change only between calls."""
        calls = [
            (F.linear, (layer.weight, layer.bias)) if type(layer) is torch.nn.Linear else (_call(layer), ())
            for layer in self.layers
        ]
        bound = self.head.log_std_clip_param_const if self.head.clip_log_std else None

        def run(obs: torch.Tensor) -> torch.Tensor:
            out = obs
            for function, weights in calls:
                out = function(out, *weights)
            if bound is not None:  # TorchMLPHead._forward's clip of the log stds
                means, log_stds = torch.chunk(out, chunks=2, dim=-1)
                out = torch.cat((means, torch.clamp(log_stds, -bound, bound)), dim=-1)
            return out

        return run

    def same_as_module(self, batch: dict[str, Any], out: torch.Tensor, explore: bool) -> bool:
        """Whether the module's own pass gives exactly ``out`` for ``batch`` (checked once)."""
        self.checked = True
        own = internals.module_forward(self.module, explore)(batch)
        same = torch.equal(own[Columns.ACTION_DIST_INPUTS], out) and set(own) == {Columns.ACTION_DIST_INPUTS}
        if not same:
            logger.warning("sampler: the module's own pass gives other outputs; calling it instead")
        return same
