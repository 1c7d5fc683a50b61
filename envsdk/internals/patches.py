"""The speed-up patches (envsdk/speedups.py installs them; envsdk/substitutions.py lists them),
and the private RLlib methods our classes override (:data:`OVERRIDDEN`)."""

from __future__ import annotations

import functools
import inspect
import sys
import types
from typing import Any


def convert_done_episodes_once() -> None:
    """Make a repeat ``MultiAgentEpisode.to_numpy()`` on an ended, converted episode a no-op.

    RLlib 2.60's ``MultiAgentEnvRunner._sample`` converts every episode that ended so far in a
    ``sample()`` call again at each env step (the loop sits inside the step loop), so a call's cost
    grows with the square of the episodes it ends: games with short episodes and many agents
    sampled several times slower.  An ended episode takes no more data, and converting one twice
    changes nothing (tests/base/test_internals.py checks both), so the repeat is skipped.  Idempotent;
    :mod:`envsdk.speedups` installs it (``episodes-converted-once``).

    Upstream: RLlib 2.60.0, no upstream issue found (searched 2026-11-28).
    """
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    original = MultiAgentEpisode.to_numpy
    if getattr(original, "converts_once", False):
        return

    @functools.wraps(original)
    def to_numpy(self: Any) -> Any:
        if self.is_done and all(
            sa.observations.finalized and (sa.rewards.finalized or len(sa) == 0)
            for sa in self.agent_episodes.values()
        ):
            return self  # what a conversion would leave as it is (episodes have __slots__: no flag)
        return original(self)

    to_numpy.converts_once = True  # type: ignore[attr-defined]
    MultiAgentEpisode.to_numpy = to_numpy  # type: ignore[method-assign]


class _FramesOnlyInspect:
    """``inspect`` as ``connector_v2`` uses it, with a ``stack()`` that lists frames and nothing else."""

    def __getattr__(self, name: str) -> Any:
        return getattr(inspect, name)

    @staticmethod
    def stack(context: int = 1) -> list[inspect.FrameInfo]:
        frames = []
        frame: types.FrameType | None = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            frames.append(
                inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name, None, None)
            )
            frame = frame.f_back
        return frames


def connectors_find_their_caller_cheaply() -> None:
    """Let ``ConnectorV2.__init__`` find its caller's frame without reading every frame's source.

    RLlib 2.60's ``ConnectorV2.__init__`` records a subclass's constructor arguments (for
    checkpoints) from ``inspect.stack()[1].frame``.  ``inspect.stack()`` reads the source lines of
    every frame on the stack, to be thrown away, for each connector piece, in every process that
    builds connectors (benchmarks/speedups.py, ``connector-frames``).  The module's ``inspect`` is
    swapped for one whose ``stack()`` gives the same frames, names and line numbers without source
    context; everything else is ``inspect``'s own.  Idempotent; :mod:`envsdk.speedups` installs it.

    Upstream: RLlib 2.60.0, no upstream issue found (searched 2026-11-28).
    """
    from ray.rllib.connectors import connector_v2

    if not isinstance(getattr(connector_v2, "inspect"), _FramesOnlyInspect):  # noqa: B009 (not re-exported)
        setattr(connector_v2, "inspect", _FramesOnlyInspect())  # noqa: B010


def _polyak_in_place(main_net: Any, target_net: Any, tau: float) -> None:
    """RLlib's ``update_target_network`` (``tau * main + (1 - tau) * target``), in place."""
    import torch

    slots = _blend_slots(main_net, target_net)
    if slots is None:
        _RLLIB_POLYAK(main_net, target_net, tau)  # what RLlib does with integer buffers: its own way
        return
    with torch.no_grad():
        for target_slot, main_slot, name in slots:
            target_slot[name].lerp_(main_slot[name], tau)


# (main, target) -> where each state entry lives: (target's dict, main's dict, name), or None where
# RLlib's own update applies.  The tensors are looked up at each call, so a loaded state (copied in
# place, or new Parameter objects) is blended as it is now; only a network's layout is remembered.
_SLOTS: dict[tuple[int, int], tuple[Any, Any, list[tuple[dict, dict, str]] | None]] = {}


def _blend_slots(main_net: Any, target_net: Any) -> list[tuple[dict, dict, str]] | None:
    key = (id(main_net), id(target_net))
    known = _SLOTS.get(key)
    if known is not None and known[0]() is main_net and known[1]() is target_net:
        return known[2]
    import weakref

    main, target = _state_slots(main_net), _state_slots(target_net)
    fits = main.keys() == target.keys() and all(t[0][t[1]].is_floating_point() for t in target.values())
    slots = [(target[k][0], main[k][0], target[k][1]) for k in target] if fits else None
    _SLOTS[key] = (weakref.ref(main_net), weakref.ref(target_net), slots)
    return slots


def _state_slots(net: Any) -> dict[str, tuple[dict, str]]:
    """Each entry of ``net.state_dict()``: the module's dict that holds it, and its name there."""
    found: dict[str, tuple[dict, str]] = {}
    for prefix, module in net.named_modules():
        lead = f"{prefix}." if prefix else ""
        for name, param in module._parameters.items():
            if param is not None:
                found[lead + name] = (module._parameters, name)
        for name, buffer in module._buffers.items():
            if buffer is not None and name not in module._non_persistent_buffers_set:
                found[lead + name] = (module._buffers, name)
    return found


_RLLIB_POLYAK: Any = None


def polyak_updates_in_place() -> None:
    """Make RLlib's target-network update (DQN, SAC, APPO) blend the weights in place.

    ``ray.rllib.utils.torch_utils.update_target_network`` builds both networks'
    state dicts, a third from them, and loads it back, at every update with
    SAC's default ``tau`` (benchmarks/speedups.py, ``polyak-in-place``).  The
    replacement blends each weight of the target network in place (``lerp_``),
    the same formula.  RLlib looks the function up in that
    module at every call (``ray.rllib.core.learner.utils``), so swapping it
    there reaches every learner.  Idempotent; :mod:`envsdk.speedups` installs it.

    Upstream: RLlib 2.60.0, no upstream issue found (searched 2026-11-28).
    """
    global _RLLIB_POLYAK
    from ray.rllib.utils import torch_utils

    if torch_utils.update_target_network is not _polyak_in_place:
        _RLLIB_POLYAK = torch_utils.update_target_network
        torch_utils.update_target_network = _polyak_in_place


def _fused_on_cpu(optimizer: Any) -> Any:
    """``optimizer`` as a fused Adam where it is torch's default Adam over CPU float weights."""
    import torch

    defaults = optimizer.defaults
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if (
        type(optimizer) is not torch.optim.Adam
        or optimizer.state
        or defaults.get("fused") is not None  # stated by whoever built it: theirs to choose
        or defaults.get("foreach") is not None
        or defaults.get("differentiable")
        or defaults.get("capturable")
        or not params
        or not all(p.device.type == "cpu" and p.dtype in (torch.float32, torch.float64) for p in params)
    ):
        return optimizer
    groups = [{**group, "fused": True, "foreach": None} for group in optimizer.param_groups]
    return torch.optim.Adam(groups, **{**defaults, "fused": True, "foreach": None})


def _builds_defaults(learner_class: type) -> bool:
    """Whether a learner's optimizers come from RLlib's (or envsdk's) own
    ``configure_optimizers_for_module``, not a user's."""
    builder = getattr(learner_class, "configure_optimizers_for_module", None)
    return str(getattr(builder, "__module__", "")).startswith(("ray.rllib.", "envsdk."))


def optimizers_fused_on_cpu() -> None:
    """Let every RLlib learner step torch's fused Adam where it registers a default one on CPU.

    RLlib's learners build ``torch.optim.Adam`` with torch's defaults, which on CPU is the
    per-tensor Python loop, several times slower than the fused kernel for small networks, at
    every minibatch update (benchmarks/speedups.py, ``fused-adam``; SAC registers four).  The
    fused kernel computes the same update (tests/base/test_internals.py compares them).  An optimizer
    that states ``fused`` or ``foreach``, any other class, and weights on a GPU are left as they
    are, and so are the optimizers of a learner whose ``configure_optimizers_for_module`` is a
    user's.  Wraps ``Learner.register_optimizer``, which every learner's
    ``configure_optimizers_for_module`` calls.  Idempotent; :mod:`envsdk.speedups` installs it.

    Upstream: RLlib 2.60.0, no upstream issue found (searched 2026-11-28).
    """
    from ray.rllib.core.learner.learner import Learner

    original = Learner.register_optimizer
    if getattr(original, "fuses_on_cpu", False):
        return

    @functools.wraps(original)
    def register_optimizer(self: Any, *, optimizer: Any, **kwargs: Any) -> None:
        if self.framework == "torch" and _builds_defaults(type(self)):
            optimizer = _fused_on_cpu(optimizer)
        original(self, optimizer=optimizer, **kwargs)

    register_optimizer.fuses_on_cpu = True  # type: ignore[attr-defined]
    Learner.register_optimizer = register_optimizer  # type: ignore[method-assign]


def _all_finite(gradients: list[Any]) -> bool:
    """Whether every element of these tensors is finite, from one sum over them all.

    A nan or an infinity anywhere makes the sum nan or infinite; so does an overflow of finite
    values, which only sends the caller to the slower check, as do gradients on several devices.
    """
    import torch

    if len({g.device for g in gradients}) > 1:
        return False
    return bool(torch.isfinite(torch.stack([g.sum() for g in gradients]).sum()))


def gradients_checked_once() -> None:
    """Let RLlib's torch learners test their gradients for nan/inf once per update.

    RLlib 2.60's ``TorchLearner.apply_gradients`` (``torch_skip_nan_gradients`` off, its
    default) tests every gradient with ``isfinite().all()`` as it sets it, then every
    parameter of every optimizer again before stepping it: two full passes, a temporary tensor
    and a Python bool per tensor, at every minibatch update (SAC: 19 tensors, four optimizers).
    Where one sum over all the gradients is finite, none of those tests can fail: the gradients
    are set and the optimizers stepped as RLlib's method then does.  Anything else (a nan or an
    infinity, a ``None`` gradient, grad scalers, torch lr schedulers, the skip option) runs
    RLlib's own method.  Idempotent; :mod:`envsdk.speedups` installs it.

    Upstream: RLlib 2.60.0, no issue on the checks' cost found (searched 2026-11-28); they came with
    ray-project/ray PR #47452 "[RLlib] Add gradient checks to avoid `nan` gradients in `TorchLearner`."
    """
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner

    original = TorchLearner.apply_gradients
    if getattr(original, "checks_once", False):
        return

    @functools.wraps(original)
    def apply_gradients(self: Any, gradients_dict: Any) -> None:
        grads = list(gradients_dict.values())
        if (
            self.config.torch_skip_nan_gradients  # RLlib's method tests nothing then
            or self._grad_scalers is not None
            or self._lr_scheduler_classes is not None
            or not grads
            or any(g is None for g in grads)
            or not _all_finite(grads)
        ):
            original(self, gradients_dict)
            return
        for pid, grad in gradients_dict.items():
            self._params[pid].grad = grad
        for module_id, optimizer_names in self._module_optimizers.items():
            for optimizer_name in optimizer_names:
                self.get_optimizer(module_id, optimizer_name).step()

    apply_gradients.checks_once = True  # type: ignore[attr-defined]
    TorchLearner.apply_gradients = apply_gradients  # type: ignore[method-assign]


# Private RLlib methods our classes override, and why.
OVERRIDDEN = {
    "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._sample": (
        "training/substitutes/sampling/batched_runner.py: the sampling loop, batched "
        "(num_timesteps, num_episodes, explore, random_actions, force_reset)"
    ),
    "ray.rllib.core.models.catalog:Catalog._get_encoder_config": (
        "networks/catalogs.py: the one hook of RLlib's Catalogs that chooses the encoder "
        "(observation_space, model_config_dict, action_space)"
    ),
    "ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module:DefaultDQNTorchRLModule._qf_forward_helper": (
        "networks/masking.py: Q-values of masked actions set to -inf (batch, encoder, head)"
    ),
    # RLModule's passes: RLlib's documented way to write a module is to override these.
    "ray.rllib.core.rl_module.rl_module:RLModule._forward": (
        "networks/masking.py, evaluation/opponents.py, training/hooks/self_play.py, models/tinynet.py, "
        "models/dodgenet.py, tests/training/substitutes/test_sampling.py: a module's one pass (batch, kwargs)"
    ),
    "ray.rllib.core.rl_module.rl_module:RLModule._forward_inference": (
        "networks/masking.py: SAC's inference pass (its exploration pass too) masked (batch, kwargs)"
    ),
    "ray.rllib.core.rl_module.rl_module:RLModule._forward_train": (
        "networks/masking.py, training/substitutes/sac/module.py: the training pass (batch, kwargs)"
    ),
    "ray.rllib.core.models.base:Model._forward": (
        "networks/encoder.py: our encoders' pass, as RLlib's Catalog models write it (input_dict, kwargs)"
    ),
    "ray.rllib.core.models.torch.encoder:TorchLSTMEncoder._forward": (
        "networks/encoder.py: RLlib's LSTM pass, handed the steps our reader made vectors of (inputs, kwargs)"
    ),
    "ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module:DefaultSACTorchRLModule"
    "._forward_train_continuous": (
        "tests/training/substitutes/test_sac.py: a SAC module sharing its encoder, checked against"
        " RLlib's (batch)"
    ),
}
