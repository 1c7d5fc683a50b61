"""The models of ML-Agents' intrinsic reward signals, as one learner-only RLModule per policy.

:class:`RewardSignalsModule` sits in the MultiRLModule beside the policy it rewards (module id
``<policy>@reward_signals``, ``learner_only``: env runners never build it), so that its weights,
optimizers and state go into checkpoints with the policy's.  It holds one model per signal:

* ``curiosity`` (:class:`Curiosity`, Pathak et al.'s ICM as ML-Agents builds it): an encoder of
  the observation to ``hidden_units``, a forward model predicting the next observation's encoding
  from the encoding and the action, an inverse model predicting the action from both encodings.
  Loss ``10 * (0.2 * forward + 0.8 * inverse)``; reward ``0.5 * |forward error|^2`` summed over
  the encoding, capped at ``1 / strength`` and zero until the first update (ML-Agents').
* ``rnd`` (:class:`RandomNetworkDistillation`): a fixed, randomly initialised encoder and a
  trained one of the same shape; reward and loss the squared distance of their outputs.
* ``gail`` (:class:`Discriminator`): a discriminator between a ``.demo`` file's steps
  (:func:`demonstration_batch`, read with ``unity_bridge.demo_files``) and the policy's, over
  observations (and actions and done flags with ``use_actions``), with VAIL's bottleneck
  (``use_vail``: KL term, its weight beta adapted) and a gradient penalty of 10; reward
  ``-log(1 - D)``.  The demonstration is read where the module is built, not checkpointed.

Each model's loss is its own; the learner steps each signal's parameters with its own Adam at the
signal's ``learning_rate`` (:class:`envsdk.training.substitutes.reward_signals.SignalModelsLearner`).
Observations of any Box (flattened, images included), Discrete, MultiDiscrete, MultiBinary, Dict or
Tuple space are read; actions of any of these (continuous parts regressed, discrete branches classified).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
import tree
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from torch import nn

from envsdk.config.own_keys.reward_signals import RewardSignals, Signal
from envsdk.envs.demo_layout import Layout, first_choices
from envsdk.envs.keys import MASK_KEY
from envsdk.envs.spaces import EntitySet, TextTokens
from envsdk.errors import UserError

SIGNALS = "reward_signals"  # the model_config key: RewardSignals.to_config()
SUFFIX = "@reward_signals"
EPISODE_ENDED = "episode_ended"  # the learner batch's column: 1.0 at an episode's real last step
EPSILON = 1e-10
INVERSE_WIDTH = 256  # ML-Agents' forward and inverse models: one layer of 256


def signals_module_id(policy: str) -> str:
    """The id of the learner-only module holding ``policy``'s reward-signal models."""
    return f"{policy}{SUFFIX}"


def policy_of_signals(module_id: str) -> str | None:
    """The policy a reward-signals module serves (None: ``module_id`` is no such module)."""
    return module_id[: -len(SUFFIX)] if module_id.endswith(SUFFIX) else None


def _leaves(space: gym.Space, value: Any) -> Iterator[tuple[gym.Space, torch.Tensor]]:
    """(leaf space, its batch of values) in a fixed order; an action mask is no observation."""
    if isinstance(space, gym.spaces.Dict):
        for key in space.spaces:  # the space's order, as a .demo file lays them out
            if key != MASK_KEY:
                yield from _leaves(space[key], value[key])
    elif isinstance(space, gym.spaces.Tuple):
        for part, item in zip(space.spaces, value, strict=True):
            yield from _leaves(part, item)
    else:
        yield space, value


def _space_leaves(space: gym.Space) -> list[gym.Space]:
    if isinstance(space, gym.spaces.Dict):
        return [leaf for k in space.spaces if k != MASK_KEY for leaf in _space_leaves(space[k])]
    if isinstance(space, gym.spaces.Tuple):
        return [leaf for part in space.spaces for leaf in _space_leaves(part)]
    if not isinstance(
        space, gym.spaces.Box | gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary
    ):
        raise UserError(
            f"reward_signals: a {type(space).__name__} space is not one the signals' models read",
            "use Box, Discrete, MultiDiscrete, MultiBinary (or Dict/Tuple of them)",
        )
    return [space]


def _branches(space: gym.Space) -> list[int]:
    """A leaf's discrete branches (none for a Box or MultiBinary)."""
    if isinstance(space, gym.spaces.Discrete):
        return [int(space.n)]
    if isinstance(space, gym.spaces.MultiDiscrete):
        return [int(n) for n in np.asarray(space.nvec).ravel()]
    return []


def chosen(space: gym.Space, x: torch.Tensor) -> torch.Tensor:
    """A discrete leaf's batch of choices as (rows, branches) indices from 0."""
    x = x.long().reshape(len(x), len(_branches(space)))
    return x - torch.as_tensor(first_choices(space), device=x.device)


def _width(space: gym.Space) -> int:
    """A leaf's width once flattened: one-hot for discrete branches."""
    branches = _branches(space)
    return sum(branches) if branches else int(np.prod(space.shape or (1,)))


def _scale(leaf: gym.Space) -> float:
    """What a continuous leaf's values are multiplied by to lie in 0 to 1 where they are codes:
    bytes (images) as RLlib's encoders read them, a text part's character indices by their count
    (MiniGrid's mission as token ids of up to 100 dwarfed every other input); others as they are."""
    if isinstance(leaf, TextTokens):
        return 1.0 / float(np.max(leaf.high))
    return 1 / 255 if leaf.dtype == np.uint8 else 1.0


def flat(space: gym.Space, value: Any) -> torch.Tensor:
    """A batch of ``space``'s values as one float matrix (rows, width): continuous parts flattened,
    discrete branches one-hot."""
    parts = []
    for leaf, x in _leaves(space, value):
        branches = _branches(leaf)
        if branches:
            x = chosen(leaf, x)
            parts += [nn.functional.one_hot(x[:, i], n).float() for i, n in enumerate(branches)]
        else:
            parts.append(x.reshape(len(x), -1).float() * _scale(leaf))
    return torch.cat(parts, dim=1)


def _normalized(leaf: gym.Space) -> bool:
    """Whether ML-Agents would normalise this part of an observation: a vector observation (its
    ``VectorInput``, which ``ObservationEncoder`` builds with ``normalize``: mlagents'
    trainers/torch_entities/networks.py and utils.py ``get_encoder_for_obs``), here a Box that is no
    image (uint8 or of rank 3: a visual observation, never normalised) and no text or entity set.
    One-hot choices (Discrete, MultiDiscrete) and MultiBinary flags, which ML-Agents has no
    observation for, are read as they are."""
    return (
        isinstance(leaf, gym.spaces.Box)
        and not isinstance(leaf, TextTokens | EntitySet)
        and leaf.dtype != np.uint8
        and len(leaf.shape) != 3
    )


class Normalizer(nn.Module):
    """A running mean and variance of the inputs (ML-Agents' ``normalize``), updated while training,
    applied to the columns of :func:`flat` features that are vector observations (:func:`_normalized`)."""

    count: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor
    columns: torch.Tensor

    def __init__(self, space: gym.Space):
        super().__init__()
        columns = [torch.full((_width(leaf),), _normalized(leaf)) for leaf in _space_leaves(space)]
        width = sum(len(c) for c in columns)
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("mean", torch.zeros(width))
        self.register_buffer("var", torch.ones(width))
        self.register_buffer("columns", torch.cat(columns), persistent=False)  # the space's: no state

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normalized = torch.clamp((x - self.mean) / torch.sqrt(self.var + 1e-6), -5.0, 5.0)
        return torch.where(self.columns, normalized, x)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        n = float(len(x))
        if n == 0:
            return
        total = self.count + n
        delta = x.mean(0) - self.mean
        self.var.copy_(
            (self.var * self.count + x.var(0, unbiased=False) * n + delta**2 * self.count * n / total) / total
        )
        self.mean.add_(delta * n / total)
        self.count.copy_(total)


class Encoder(nn.Module):
    """ML-Agents' ``NetworkBody`` for a signal: observations (plus ``extra`` inputs) through
    ``num_layers`` layers of ``hidden_units`` with Swish activations."""

    def __init__(self, space: gym.Space, signal: Signal, extra: int = 0):
        super().__init__()
        self.space = space
        width = sum(_width(leaf) for leaf in _space_leaves(space))
        self.normalizer = Normalizer(space) if signal.normalize else None
        layers: list[nn.Module] = []
        size = width + extra
        for _ in range(signal.num_layers):
            layers += [nn.Linear(size, signal.hidden_units), nn.SiLU()]
            size = signal.hidden_units
        self.body = nn.Sequential(*layers)

    def forward(self, obs: Any, extra: torch.Tensor | None = None, update: bool = False) -> torch.Tensor:
        return self.encode(flat(self.space, obs), extra, update)

    def encode(
        self, x: torch.Tensor, extra: torch.Tensor | None = None, update: bool = False
    ) -> torch.Tensor:
        """The encoding of flat features ``x`` (:func:`flat`) and ``extra`` inputs."""
        if self.normalizer is not None:
            if update:
                self.normalizer.update(x)
            x = self.normalizer(x)
        out: torch.Tensor = self.body(x if extra is None else torch.cat([x, extra], dim=1))
        return out


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return x.mean()
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


class Curiosity(nn.Module):
    """ML-Agents' curiosity: the intrinsic curiosity module (ICM)."""

    FORWARD_WEIGHT = 0.2  # ML-Agents' beta: forward vs inverse
    LOSS_MULTIPLIER = 10.0
    updated: torch.Tensor

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, signal: Signal):
        super().__init__()
        self.strength = signal.strength
        self.act_space = act_space
        leaves = _space_leaves(act_space)
        self.branches = [n for leaf in leaves for n in _branches(leaf)]
        self.continuous = sum(_width(leaf) for leaf in leaves if not _branches(leaf))
        hidden = signal.hidden_units
        self.encoder = Encoder(obs_space, signal)
        self.inverse = nn.Sequential(nn.Linear(2 * hidden, INVERSE_WIDTH), nn.SiLU())
        self.continuous_head = nn.Linear(INVERSE_WIDTH, self.continuous) if self.continuous else None
        self.discrete_head = nn.Linear(INVERSE_WIDTH, sum(self.branches)) if self.branches else None
        action_width = self.continuous + sum(self.branches)
        self.forward_model = nn.Sequential(
            nn.Linear(hidden + action_width, INVERSE_WIDTH), nn.SiLU(), nn.Linear(INVERSE_WIDTH, hidden)
        )
        self.register_buffer("updated", torch.zeros(()))  # ML-Agents rewards nothing before one update

    def _errors(
        self, batch: dict[str, Any], update: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(per-row forward error, encoding, next encoding)."""
        here = self.encoder(batch[Columns.OBS], update=update)
        there = self.encoder(batch[Columns.NEXT_OBS])
        action = flat(self.act_space, batch[Columns.ACTIONS])
        predicted = self.forward_model(torch.cat([here, action], dim=1))
        return 0.5 * ((there - predicted) ** 2).sum(dim=1), here, there

    @torch.no_grad()
    def reward(self, batch: dict[str, Any]) -> torch.Tensor:
        error, _, _ = self._errors(batch)
        return torch.clamp(error, max=1.0 / max(self.strength, EPSILON)) * self.updated

    def loss(
        self, batch: dict[str, Any], mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        self.updated.fill_(1.0)
        error, here, there = self._errors(batch, update=True)
        forward = masked_mean(error, mask)
        hidden = self.inverse(torch.cat([here, there], dim=1))
        inverse = torch.zeros((), device=error.device)
        leaves = list(_leaves(self.act_space, batch[Columns.ACTIONS]))
        if self.continuous_head is not None:
            target = torch.cat(
                [x.reshape(len(x), -1).float() for leaf, x in leaves if not _branches(leaf)], 1
            )
            inverse = inverse + masked_mean(((target - self.continuous_head(hidden)) ** 2).sum(1), mask)
        if self.discrete_head is not None:
            choices = torch.cat([chosen(leaf, x) for leaf, x in leaves if _branches(leaf)], 1)
            logits = torch.split(self.discrete_head(hidden), self.branches, dim=1)
            cross = sum(
                nn.functional.cross_entropy(branch, choices[:, i], reduction="none")
                for i, branch in enumerate(logits)
            )
            inverse = inverse + masked_mean(torch.as_tensor(cross), mask)
        total = self.LOSS_MULTIPLIER * (self.FORWARD_WEIGHT * forward + (1 - self.FORWARD_WEIGHT) * inverse)
        return total, {"forward_loss": forward.detach(), "inverse_loss": inverse.detach()}


class RandomNetworkDistillation(nn.Module):
    """ML-Agents' RND: a trained encoder chasing a fixed random one."""

    def __init__(self, obs_space: gym.Space, signal: Signal):
        super().__init__()
        self.target = Encoder(obs_space, signal)
        self.target.requires_grad_(False)
        self.predictor = Encoder(obs_space, signal)

    def _distance(self, batch: dict[str, Any], update: bool = False) -> torch.Tensor:
        with torch.no_grad():
            target = self.target(batch[Columns.OBS], update=update)
        distance: torch.Tensor = ((self.predictor(batch[Columns.OBS], update=update) - target) ** 2).sum(
            dim=1
        )
        return distance

    @torch.no_grad()
    def reward(self, batch: dict[str, Any]) -> torch.Tensor:
        distance: torch.Tensor = self._distance(batch)
        return distance

    def loss(
        self, batch: dict[str, Any], mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        loss = masked_mean(self._distance(batch, update=True), mask)
        return loss, {"loss": loss.detach()}


class Discriminator(nn.Module):
    """ML-Agents' GAIL: a discriminator between the expert's steps (a ``.demo`` file) and the policy's,
    over observations (and actions and done flags with ``use_actions``), with VAIL's variational
    bottleneck (``use_vail``) and a gradient penalty on inputs between the two.  Reward
    ``-log(1 - D)``: high where the policy's step looks like the expert's."""

    GRADIENT_PENALTY = 10.0
    Z_SIZE = 128
    BETA_STEP = 0.0005  # ML-Agents' alpha: the VAIL beta's step toward the information bound
    MUTUAL_INFORMATION = 0.5
    EPSILON = 1e-7
    beta: torch.Tensor

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, signal: Signal, expert: dict[str, Any]):
        super().__init__()
        self.obs_space, self.act_space = obs_space, act_space
        self.use_actions, self.use_vail = signal.use_actions, signal.use_vail
        leaves = _space_leaves(act_space)
        extra = sum(_width(leaf) for leaf in leaves) + 1 if signal.use_actions else 0  # +1: done
        self.encoder = Encoder(obs_space, signal, extra)
        width = signal.hidden_units
        if signal.use_vail:
            self.z_sigma = nn.Parameter(torch.ones(self.Z_SIZE))
            self.z_mu = nn.Linear(signal.hidden_units, self.Z_SIZE)
            nn.init.kaiming_normal_(self.z_mu.weight)
            with torch.no_grad():
                self.z_mu.weight.mul_(0.1)
            self.register_buffer("beta", torch.zeros(()))
            width = self.Z_SIZE
        self.estimator = nn.Sequential(nn.Linear(width, 1), nn.Sigmoid())
        self.expert = expert  # the demonstration's steps as a batch (not weights: not in checkpoints)

    def _inputs(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Flat observations, and the actions and done flags where the discriminator reads them."""
        obs = flat(self.obs_space, batch[Columns.OBS])
        if not self.use_actions:
            return obs, None
        done = episode_ends(batch).reshape(len(obs), 1)
        return obs, torch.cat([flat(self.act_space, batch[Columns.ACTIONS]), done], dim=1)

    def _estimate(
        self, obs: torch.Tensor, extra: torch.Tensor | None, noise: bool, update: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        hidden = self.encoder.encode(obs, extra, update)
        mu = None
        if self.use_vail:
            mu = self.z_mu(hidden)
            hidden = mu + torch.randn_like(mu) * self.z_sigma * float(noise)
        estimate: torch.Tensor = self.estimator(hidden).squeeze(1)
        return estimate, mu

    @torch.no_grad()
    def reward(self, batch: dict[str, Any]) -> torch.Tensor:
        estimate, _ = self._estimate(*self._inputs(batch), noise=False)
        return -torch.log(1.0 - estimate * (1.0 - self.EPSILON))

    def expert_batch(self, rows: int, device: torch.device) -> dict[str, Any]:
        """``rows`` of the expert's steps drawn at random."""
        index = torch.randint(len(self.expert[Columns.TERMINATEDS]), (rows,))
        taken: dict[str, Any] = tree.map_structure(lambda x: x[index].to(device), self.expert)
        return taken

    def loss(
        self, batch: dict[str, Any], mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        policy_obs, policy_extra = self._inputs(batch)
        expert_obs, expert_extra = self._inputs(self.expert_batch(len(policy_obs), policy_obs.device))
        policy, policy_mu = self._estimate(policy_obs, policy_extra, noise=True)
        expert, expert_mu = self._estimate(expert_obs, expert_extra, noise=True, update=True)
        loss = -(
            torch.log(expert + self.EPSILON).mean()
            + masked_mean(torch.log(1.0 - policy + self.EPSILON), mask)
        )
        terms = {
            "loss": loss.detach(),
            "policy_estimate": masked_mean(policy.detach(), mask),
            "expert_estimate": expert.detach().mean(),
        }
        total = loss
        if policy_mu is not None and expert_mu is not None:
            sigma = self.z_sigma**2
            kl = torch.mean(
                -torch.sum(1 + sigma.log() - 0.5 * expert_mu**2 - 0.5 * policy_mu**2 - sigma, dim=1)
            )
            total = total + self.beta.clone() * (kl - self.MUTUAL_INFORMATION)  # beta: this step's
            with torch.no_grad():
                self.beta.copy_(
                    torch.clamp(self.beta + self.BETA_STEP * (kl - self.MUTUAL_INFORMATION), min=0.0)
                )
            terms.update(kl_loss=kl.detach(), beta=self.beta.clone())
        penalty = self.GRADIENT_PENALTY * self._gradient_magnitude(
            (policy_obs, policy_extra), (expert_obs, expert_extra)
        )
        terms["gradient_penalty"] = penalty.detach()
        return total + penalty, terms

    def _gradient_magnitude(
        self,
        policy: tuple[torch.Tensor, torch.Tensor | None],
        expert: tuple[torch.Tensor, torch.Tensor | None],
    ) -> torch.Tensor:
        """ML-Agents' (WGAN-GP's) penalty: (|dD/d obs| - 1)^2 at inputs drawn between the two."""

        def between(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            share = torch.rand_like(a)
            return (share * a + (1 - share) * b).requires_grad_(True)

        obs = between(policy[0], expert[0])
        extra = None if policy[1] is None or expert[1] is None else between(policy[1], expert[1])
        estimate, _ = self._estimate(obs, extra, noise=True)
        inputs = (obs,) if extra is None else (obs, extra)
        gradient = torch.autograd.grad(estimate.sum(), inputs, create_graph=True)[0]
        norm = torch.sqrt((gradient**2).sum(dim=1) + self.EPSILON)
        return torch.mean((norm - 1) ** 2)


def episode_ends(batch: dict[str, Any]) -> torch.Tensor:
    """1.0 at each row that is its episode's last real step, however the episode ended (by the env or
    by a step limit), 0.0 elsewhere: GAIL's done flag with ``use_actions``, the same on both sides.

    ML-Agents 1.1.0: the expert's flag is ``next_done``, whether the step after a row is terminal
    (trainers/demo_loader.py ``make_demo_buffer``), a terminal step ending the episode whether the
    game ended it or it reached max_step (``interrupted``); the policy's is ``done`` of each
    ``AgentExperience``, ``isinstance(step, TerminalStep)``, max_step included
    (trainers/agent_processor.py, into ``BufferKey.DONE`` by trainers/trajectory.py); the
    discriminator reads ``BufferKey.DONE`` of both
    (trainers/torch_entities/components/reward_providers/gail_reward_provider.py).

    A PPO, APPO or IMPALA batch says it in :data:`EPISODE_ENDED`
    (``training.substitutes.reward_signals.MarkEpisodeEnds``): there RLlib's
    ``AddOneTsToEpisodesAndTruncate`` marks truncated every chunk the sampler cut mid-episode too.
    Without it (the expert's batch, :func:`demonstration_batch`; DQN's and SAC's replayed
    transitions, truncated only where the env truncated) it is terminated or truncated."""
    ended: torch.Tensor
    if EPISODE_ENDED in batch:
        ended = batch[EPISODE_ENDED].bool()
    else:
        ended = batch[Columns.TERMINATEDS].bool()
        truncated = batch.get(Columns.TRUNCATEDS)
        if truncated is not None:
            ended = ended | truncated.bool()
    counted = batch.get(Columns.LOSS_MASK)
    if counted is not None:
        ended = ended & counted.bool()
    return ended.float()


def demo_layout(obs_space: gym.Space, act_space: gym.Space) -> Layout:
    """Where these spaces' parts lie in a ``.demo`` file that GAIL or behavioral cloning read."""
    hint = "imitate with a policy whose observations are Box parts and actions Box, Discrete or MultiDiscrete"
    return Layout.of(obs_space, act_space, hint)


def demonstration_batch(demo: Any, obs_space: gym.Space, act_space: gym.Space) -> dict[str, Any]:
    """A :class:`unity_bridge.demo_files.Demonstration` as the learner's batch for these spaces (laid
    out as ``rollout.py --out FILE.demo`` writes them: :class:`~envsdk.envs.demo_layout.Layout`),
    its episodes' ends as RLlib says them (see :func:`episode_ends`)."""
    layout = demo_layout(obs_space, act_space)
    terminated, truncated = demo.episode_ends()
    return {
        Columns.OBS: layout.observations_of(demo, torch.as_tensor),
        Columns.ACTIONS: layout.actions_of(demo, torch.as_tensor),
        Columns.TERMINATEDS: torch.as_tensor(terminated, dtype=torch.float32),
        Columns.TRUNCATEDS: torch.as_tensor(truncated, dtype=torch.float32),
    }


def demo_shapes(obs_space: gym.Space, act_space: gym.Space) -> tuple[list[tuple[int, ...]], int, list[int]]:
    """What a demonstration for these spaces holds: its observations' shapes, its continuous
    actions' size and its discrete branches (for ``unity_bridge.demo_files.check_demo``)."""
    layout = demo_layout(obs_space, act_space)
    return list(layout.shapes), layout.continuous_size, list(layout.branches)


def build_signal(obs_space: gym.Space, act_space: gym.Space, signal: Signal) -> nn.Module:
    if signal.name == "curiosity":
        return Curiosity(obs_space, act_space, signal)
    if signal.name == "rnd":
        return RandomNetworkDistillation(obs_space, signal)
    from unity_bridge.demo_files import read_demo  # protobuf: only where a run imitates

    expert = demonstration_batch(read_demo(str(signal.demo_path)), obs_space, act_space)
    return Discriminator(obs_space, act_space, signal, expert)


class RewardSignalsModule(TorchRLModule):
    """The learner-only module of one policy's intrinsic signals (its ``model_config`` holds
    :data:`SIGNALS`); it never acts."""

    def setup(self) -> None:
        config: Any = self.model_config
        obs: Any = self.observation_space
        act: Any = self.action_space
        self.settings = RewardSignals.from_config(config[SIGNALS])
        self.models = nn.ModuleDict({s.name: build_signal(obs, act, s) for s in self.settings.intrinsic})

    def _model(self, name: str) -> Curiosity | RandomNetworkDistillation | Discriminator:
        return cast(Curiosity | RandomNetworkDistillation | Discriminator, self.models[name])

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        raise RuntimeError("a reward-signals module rewards and learns; it does not act")

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {}  # its loss reads the batch itself (RewardSignalsModule.losses)

    @torch.no_grad()
    def rewards(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Each intrinsic signal's reward per row, before its strength."""
        return {name: self._model(name).reward(batch) for name in self.models}

    def losses(self, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, dict[str, torch.Tensor]]]:
        """The sum of the signals' losses (their parameters are disjoint, each has its optimizer),
        and each signal's loss terms."""
        mask = batch.get(Columns.LOSS_MASK)
        mask = None if mask is None else mask.float()
        total = torch.zeros((), device=next(self.parameters()).device)
        stats = {}
        for name in self.models:
            loss, stats[name] = self._model(name).loss(batch, mask)
            total = total + loss
        return total, stats
