"""``behavioral_cloning``: a policy pulled towards a demonstrator's actions while RL trains it.

ML-Agents' BC module (``mlagents/trainers/torch_entities/components/bc/module.py``), the same keys
and meaning (read in :mod:`envsdk.config.own_keys.behavioral_cloning`)::

    config:
      behavioral_cloning: {demo_path: demos/Expert.demo, strength: 0.5, steps: 150000}

After each of the learner's updates, :meth:`BehavioralCloning.update` runs ``num_epoch`` passes over
the demonstrations (``samples_per_update`` of them at most, 0: all) in minibatches of
``batch_size`` (both default to the run's ``num_epochs`` and ``minibatch_size``), with an Adam of
its own at the policy's learning rate times ``strength``, decayed linearly to 1e-10 over ``steps``
of the policy's training (0: constant).  The loss is ML-Agents': each discrete branch's negative
log-likelihood of the demonstrated action, averaged over branches; for continuous actions the
squared error between a sampled (reparameterised) action and the demonstrated one.  A Box and
discrete action together (Unity's hybrid actions) take the negative log-likelihood of both.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
import tree
from ray.rllib.core.columns import Columns

from envsdk.config.own_keys.behavioral_cloning import KEY as KEY
from envsdk.config.own_keys.behavioral_cloning import Cloning
from envsdk.networks.reward_signals import demonstration_batch

LR_FLOOR = 1e-10  # ML-Agents' DecayedValue floor


def for_learner(learner: Any) -> dict[str, BehavioralCloning]:
    """The learner's trained policies that clone (their config's ``learner_config_dict`` holds the
    settings: :func:`envsdk.training.build.modules.reward_signals.add_cloning`), each with its
    demonstrations."""
    from unity_bridge.demo_files import read_demo  # protobuf: only where a run imitates

    found = {}
    for module_id in list(learner.module.keys()):  # iterating a MultiRLModule gives no ids
        given = learner.config.get_config_for_module(module_id).learner_config_dict.get(KEY)
        if not given or not learner.should_module_be_updated(module_id):
            continue
        settings = Cloning(**given)
        module = learner.module[module_id].unwrapped()
        obs_space, act_space = module.observation_space, module.action_space
        demo = read_demo(settings.demo_path)
        batch = demonstration_batch(demo, obs_space, act_space)  # an action mask among its observations
        lr = learner.config.get_config_for_module(module_id).lr
        start_lr = float(lr[0][1] if isinstance(lr, list) else lr)  # a schedule's first value
        found[module_id] = BehavioralCloning(
            module,
            settings,
            batch[Columns.OBS],
            batch[Columns.ACTIONS],
            act_space,
            start_lr,
            learner.config.seed,
        )
    return found


class BehavioralCloning:
    """One policy's cloning: its demonstrations as tensors, its optimizer and its schedule."""

    def __init__(
        self,
        module: Any,
        settings: Cloning,
        observations: Any,
        actions: Any,
        action_space: gym.Space,
        policy_lr: float,
        seed: int | None = None,
    ) -> None:
        self.module = module
        self.settings = settings
        self.start_lr = policy_lr * settings.strength
        self.optimizer = torch.optim.Adam(module.parameters(), lr=self.start_lr)
        device = next(module.parameters()).device
        self.observations = tree.map_structure(lambda a: torch.as_tensor(a, device=device), observations)
        self.actions = tree.map_structure(lambda a: torch.as_tensor(a, device=device), actions)
        self.rows = len(tree.flatten(self.actions)[0])
        self.action_space = action_space
        self.rng = np.random.default_rng(seed)

    def lr(self, step: int) -> float:
        """The learning rate at ``step`` of the policy's training (linear to 1e-10 over ``steps``)."""
        if self.settings.steps <= 0:
            return self.start_lr
        done = min(1.0, step / self.settings.steps)
        return self.start_lr + (LR_FLOOR - self.start_lr) * done

    def update(self, step: int) -> dict[str, float]:
        """ML-Agents' ``BCModule.update``: the epochs over the demonstrations; the mean loss."""
        lr = self.lr(step)
        if lr <= LR_FLOOR:
            return {"loss": 0.0, "lr": lr}
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        size = min(self.settings.batch_size, self.rows)
        limit = self.settings.samples_per_update
        if limit < size:  # ML-Agents: fewer samples than a batch (0 among them) is no limit
            limit = 0
        rows = self.rows if limit <= 0 else min(self.rows, limit)
        losses = []
        for _ in range(self.settings.num_epoch):
            order = self.rng.permutation(self.rows)[:rows]
            for start in range(0, rows - size + 1, size):
                take = order[start : start + size]
                loss = self.loss(_rows(self.observations, take), _rows(self.actions, take))
                self.optimizer.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                self.optimizer.step()
                losses.append(float(loss.detach()))
        return {"loss": float(np.mean(losses)) if losses else 0.0, "lr": lr}

    def loss(self, observations: Any, actions: Any) -> torch.Tensor:
        """The cloning loss of one minibatch (ML-Agents' ``_behavioral_cloning_loss``)."""
        out = self.module.forward_train({Columns.OBS: observations})
        dist = self.module.get_train_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
        space = self.action_space
        if isinstance(space, gym.spaces.Box):
            return torch.nn.functional.mse_loss(dist.rsample(), actions.to(torch.float32))
        branches = len(space.nvec) if isinstance(space, gym.spaces.MultiDiscrete) else 1
        nll: torch.Tensor = -dist.logp(actions).mean() / branches
        return nll


def _rows(columns: Any, take: np.ndarray) -> Any:
    """The rows ``take`` of every tensor of a (nested) batch."""
    return tree.map_structure(lambda t: t[torch.from_numpy(take).to(t.device)], columns)
