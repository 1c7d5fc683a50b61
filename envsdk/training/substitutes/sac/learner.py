"""RLlib's SAC learner, with one backward pass per update where that gives RLlib's gradients.

RLlib 2.60's ``SACTorchLearner.compute_gradients`` runs one backward pass per
optimizer (policy, Q, twin Q, alpha), each over the whole graph with
``retain_graph=True``.  With RLlib's default SAC module every parameter gets
its gradient from exactly one of those losses: the actor loss reaches the
Q-networks' parameters with ``requires_grad`` switched off, and the critic and
alpha losses read detached targets and log-probabilities.  Then one backward
pass over the sum of the losses gives every parameter the same gradient, for
a quarter of the passes (benchmarks/replay.py times it).

Whether that holds is a property of the module, and a user's own SAC module
may differ, so it is checked, not assumed: a module's first update runs
RLlib's passes, then the single pass, and compares every gradient.  Equal:
that module takes the single pass from then on.  Different: RLlib's passes for
the rest of the run, with a notice.  With several learners (``num_learners`` > 1)
RLlib wraps each module in DDP, which averages the gradients across the learners
once per forward pass, in place, when every parameter has its own: RLlib's passes
get averaged gradients, a second pass over the same graph local ones.  They cannot
be compared, so those modules keep RLlib's passes, unchecked and without a notice.

The config's ``critic_loss`` (in RLlib's ``learner_config_dict``) picks the
critic's loss on the TD error: ``huber`` (RLlib's own, delta 1) or ``squared``
(the SAC paper's, and Stable-Baselines3's: half the squared error).  Rewards in
the hundreds put most TD errors far past Huber's delta, where its gradient is
clipped to 1: on HalfCheetah that held the return at a fifth of SB3's
(benchmarks/RESULTS.md).  With ``Discrete`` actions and ``twin_q: false``, RLlib's
actor loss reads the twin Q-values it has none of (a KeyError): it gets the one
Q-network's values in their place.  With ``reward_signals`` it learns from the signals' summed
rewards (:class:`~envsdk.training.substitutes.reward_signals.SummedSignalsLearner`), the signal
models' gradients from a backward pass of their own.  Everything else (losses, metrics, optimizers, target
updates, checkpoints) is RLlib's.
"""

from __future__ import annotations

from typing import Any, cast

import gymnasium as gym
import torch
from ray.rllib.algorithms.sac.sac_learner import (
    ACTION_LOG_PROBS_NEXT,
    ACTION_PROBS_NEXT,
    QF_LOSS_KEY,
    QF_PREDS,
    QF_TARGET_NEXT,
    QF_TWIN_LOSS_KEY,
    QF_TWIN_PREDS,
)
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner as RLlibSACTorchLearner
from ray.rllib.core import ALL_MODULES
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchDDPRLModule
from ray.rllib.utils.typing import ModuleID, ParamDict

from envsdk import internals
from envsdk.notices import notice
from envsdk.training.substitutes.reward_signals import SummedSignalsLearner

CRITIC_LOSS = "critic_loss"  # the learner_config_dict key
CRITIC_LOSSES = ("huber", "squared")


class SACTorchLearner(SummedSignalsLearner, RLlibSACTorchLearner):  # type: ignore[misc]  # RLlib: remove_module
    """RLlib's SAC learner; one backward pass per update for modules shown to allow it; reward
    signals summed."""

    def build(self) -> None:
        super().build()
        self.single_pass: dict[ModuleID, bool] = {}  # module -> checked on its first update
        self.squared_critic_loss = self.config.learner_config_dict.get(CRITIC_LOSS, "huber") == "squared"

    def compute_loss_for_module(self, *, module_id: ModuleID, config: Any, batch: Any, fwd_out: Any) -> Any:
        # the action space decides RLlib's loss (and so its target) as it decides this one
        discrete = isinstance(self.module[module_id].action_space, gym.spaces.Discrete)
        if discrete and not config.twin_q:
            # RLlib 2.60's discrete actor loss reads min(Q, twin Q) with or without a twin: min(Q, Q)
            fwd_out = {**fwd_out, QF_TWIN_PREDS: fwd_out[QF_PREDS]}
        total = super().compute_loss_for_module(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )
        if not self.squared_critic_loss:
            return total
        target = self._bellman_target(module_id, config, batch, fwd_out, discrete)
        losses = internals.sac_losses(self)
        for key, preds in ((QF_LOSS_KEY, QF_PREDS), (QF_TWIN_LOSS_KEY, QF_TWIN_PREDS)):
            if (module_id, key) not in losses:
                continue  # no twin Q
            q = fwd_out[preds]
            if discrete:  # the Q-net gives one value per action: the one taken
                actions = batch[Columns.ACTIONS].to(dtype=torch.int64).unsqueeze(-1)
                q = q.gather(dim=-1, index=actions).squeeze(-1)
            squared = torch.mean(batch["weights"] * 0.5 * (q - target) ** 2)
            total = total - losses[(module_id, key)] + squared
            losses[(module_id, key)] = squared
            self.metrics.log_value((module_id, key), squared, window=1)
        return total

    def _bellman_target(
        self, module_id: ModuleID, config: Any, batch: Any, fwd_out: Any, discrete: bool
    ) -> torch.Tensor:
        """RLlib's critic target (eq. 3 of Haarnoja et al. 2018), as its loss computes it."""
        alpha = torch.exp(cast(torch.Tensor, self.curr_log_alpha[module_id])).detach()
        if discrete:
            probs, log_probs = fwd_out[ACTION_PROBS_NEXT], fwd_out[ACTION_LOG_PROBS_NEXT]
            next_v = (probs * (fwd_out[QF_TARGET_NEXT] - alpha * log_probs)).sum(-1).squeeze(-1)
        else:
            next_v = fwd_out[QF_TARGET_NEXT] - alpha * fwd_out["logp_next_resampled"]
        alive = 1.0 - batch[Columns.TERMINATEDS].float()
        target: torch.Tensor = batch[Columns.REWARDS] + (config.gamma ** batch["n_step"]) * alive * next_v
        return target.detach()

    def compute_gradients(self, loss_per_module: dict[ModuleID, Any], **kwargs: Any) -> ParamDict:
        loss_per_module = dict(loss_per_module)
        signals = self.signals_gradients(loss_per_module)  # not in RLlib's SAC losses
        losses = internals.sac_losses(self)
        modules = set(loss_per_module) - {ALL_MODULES}
        fast = {m for m in modules if self.single_pass.get(m)}
        grads = self._single_pass(fast)
        rest = {m: loss for m, loss in loss_per_module.items() if m not in fast}
        unchecked = {m for m in rest if m != ALL_MODULES and m not in self.single_pass}
        kept = {key: loss for key, loss in losses.items() if key[0] in unchecked}
        rllib = super().compute_gradients(rest, **kwargs) if set(rest) - {ALL_MODULES} else {}
        for module_id in sorted(unchecked):  # RLlib's passes ran with retain_graph: the graph is alive
            if isinstance(self.module[module_id], TorchDDPRLModule):
                self.single_pass[module_id] = False  # several learners: see the module docstring
                continue
            losses.update({key: loss for key, loss in kept.items() if key[0] == module_id})
            one = self._single_pass({module_id})
            same = one.keys() <= rllib.keys() and all(_same(rllib[pid], one[pid]) for pid in one)
            self.single_pass[module_id] = same
            if not same:
                notice(
                    f"SAC module '{module_id}': one backward pass over its losses gives other gradients "
                    "than one pass per optimizer; keeping RLlib's passes"
                )
        return {**rllib, **grads, **signals}

    def _single_pass(self, modules: set[ModuleID]) -> ParamDict:
        """Gradients of these modules' losses from one backward pass over their sum."""
        if not modules:
            return {}
        optimizers = [
            (m, name, opt) for m in sorted(modules) for name, opt in self.get_optimizers_for_module(m)
        ]
        for _, _, optim in optimizers:
            optim.zero_grad(set_to_none=True)
        losses = internals.sac_losses(self)
        torch.autograd.backward([losses.pop((m, name + "_loss")) for m, name, _ in optimizers])
        params = internals.learner_params(self)
        grads: ParamDict = {}
        for _, _, optim in optimizers:
            grads.update(
                {pid: p.grad for pid, p in self.filter_param_dict_for_optimizer(params, optim).items()}
            )
        return grads


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=1e-5, atol=1e-7))
