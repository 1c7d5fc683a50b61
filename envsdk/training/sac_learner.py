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
the rest of the run, with a notice.  Everything else (losses, metrics,
optimizers, target updates, checkpoints) is RLlib's.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner as RLlibSACTorchLearner
from ray.rllib.core import ALL_MODULES
from ray.rllib.utils.typing import ModuleID, ParamDict

from envsdk import internals
from envsdk.notices import notice


class SACTorchLearner(RLlibSACTorchLearner):
    """RLlib's SAC learner; one backward pass per update for modules shown to allow it."""

    def build(self) -> None:
        super().build()
        self.single_pass: dict[ModuleID, bool] = {}  # module -> checked on its first update

    def compute_gradients(self, loss_per_module: dict[ModuleID, Any], **kwargs: Any) -> ParamDict:
        losses = internals.sac_losses(self)
        modules = set(loss_per_module) - {ALL_MODULES}
        fast = {m for m in modules if self.single_pass.get(m)}
        grads = self._single_pass(fast)
        rest = {m: loss for m, loss in loss_per_module.items() if m not in fast}
        unchecked = {m for m in rest if m != ALL_MODULES and m not in self.single_pass}
        kept = {key: loss for key, loss in losses.items() if key[0] in unchecked}
        rllib = super().compute_gradients(rest, **kwargs) if set(rest) - {ALL_MODULES} else {}
        for module_id in sorted(unchecked):  # RLlib's passes ran with retain_graph: the graph is alive
            losses.update({key: loss for key, loss in kept.items() if key[0] == module_id})
            one = self._single_pass({module_id})
            same = one.keys() <= rllib.keys() and all(_same(rllib[pid], one[pid]) for pid in one)
            self.single_pass[module_id] = same
            if not same:
                notice(
                    f"SAC module '{module_id}': one backward pass over its losses gives other gradients "
                    "than one pass per optimizer; keeping RLlib's passes"
                )
        return {**rllib, **grads}

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
