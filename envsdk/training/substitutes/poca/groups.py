"""MA-POCA in PPO's learner connector: each member's step beside its group's, the group's value and
the member's baseline, λ-returns and advantages, as ML-Agents' POCA trainer computes them.

:class:`GroupAdvantages` takes the place of RLlib's ``GeneralAdvantageEstimation`` piece.  For a
policy with a group critic (:class:`~envsdk.networks.poca.GroupCriticModule`, module
``<policy>@poca_critic``) it reads the train batch's multi-agent episodes and, for every row (one
agent's observation, RLlib's bootstrap rows included), finds its groupmates' state at the same
environment step (:func:`group_view`): each other member's latest observation at or before that
step and the action it took there, or absent (not yet seen, or gone: its episode ended before that
step).  ML-Agents' agent processor attaches the same: each groupmate's last step.  Then:

* values ``V`` (the group's state) and baselines ``B`` (the member's, over the others' actions)
  from the critic's current weights;
* λ-returns ``G`` on ``V`` with the policy's gamma and lambda (RLlib's ``compute_value_targets``,
  whose targets are the λ-returns), where an agent whose episode ended while its group goes on is
  *not* at a terminal state: it bootstraps from the group's value at the step it left, so the
  group's later reward reaches it (ML-Agents: ``all_group_dones_reached`` false);
* the advantage ``G - B``, standardised over the batch (ML-Agents standardises PPO's and POCA's);

and hands the critic its own batch (the rows, the groupmates' columns, ``G`` and the estimates
before the update, for the trust-region clip of both losses).

Groups are the env's: ``infos[agent]["group_id"]`` (ML-Agents' wire field, 0 for none) or the
config's ``groups`` mapping (agent id -> group); members of a group that another policy plays are
not seen (ML-Agents' groups are within one behavior).  A member's reward is, as ML-Agents' POCA
sums it: its own, the group's, and each present groupmate's own reward at that step (the reward it
got for the action it took there).  Where the env gives a group reward only in
``infos[agent]["group_reward"]``, it is added here; an env whose rewards already hold it (Unity's,
:mod:`envsdk.envs.unity.rllib_env`) says so to the build, and its groupmates' own rewards are their
rewards less the group's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import tree
from ray.rllib.connectors.learner.general_advantage_estimation import GeneralAdvantageEstimation
from ray.rllib.core.columns import Columns
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.numpy import convert_to_numpy
from ray.rllib.utils.postprocessing.value_predictions import compute_value_targets

from envsdk.networks.poca import critic_module_id, encode_actions

GROUP_ID = "group_id"  # the infos' keys ML-Agents' wire has: an agent's group (0: none), its group reward
GROUP_REWARD = "group_reward"
OTHERS = "poca_others"  # the critic's batch columns: (rows, K, ...) groupmates' observations,
OTHERS_ACTIONS = "poca_others_actions"  # (rows, K, width) their actions encoded,
ABSENT = "poca_absent"  # (rows, K) 1.0 where a slot holds no present member,
OLD_VALUES = "poca_old_values"  # the estimates the returns were computed with
OLD_BASELINES = "poca_old_baselines"


@dataclass
class Member:
    """One agent of a multi-agent episode chunk, as the group view reads it."""

    agent_id: Any
    module_id: str
    group: Any
    steps: np.ndarray  # the chunk's env step of each of its rows (observations 0 .. last)
    obs: Any  # its rows' observations (a structure of arrays)
    actions: Any  # the actions taken at rows 0 .. last - 1
    left: bool  # its episode terminated at its last row (it left the group there)
    own: np.ndarray  # the reward of each row's step that is its own (its group's left out)

    @property
    def last(self) -> int:
        return len(self.steps) - 1


def env_steps(episode: MultiAgentEpisode, agent_id: Any, rows: int) -> np.ndarray:
    """The env step (0 = the chunk's first; negative: before it, where an agent's first row was
    observed in an earlier chunk) of each of the agent's first ``rows`` observations, from RLlib's
    env-step -> agent-step mapping (agent steps counted from ``agent_t_started``)."""
    mapping = episode.env_t_to_agent_t[agent_id]
    start = episode.agent_t_started[agent_id]
    data = np.asarray(mapping.data, dtype=object)
    stepped = np.flatnonzero(data != MultiAgentEpisode.SKIP_ENV_TS_TAG)
    rows_seen = data[stepped].astype(np.int64) - start
    kept = (rows_seen >= 0) & (rows_seen < rows)
    steps = np.full(rows, np.iinfo(np.int64).min, np.int64)
    # Right-aligned: the mapping's last entry is the chunk's last env step (every env step appends one
    # to every agent's mapping); an agent first seen after a cut has its front padded with as many
    # skips as the episode's whole env_t, not the chunk's (RLlib 2.60's add_env_step), so counting
    # from the front (the lookback) would shift it.
    last = episode.env_t - episode.env_t_started
    steps[rows_seen[kept]] = stepped[kept] - (len(data) - 1) + last
    if (steps == np.iinfo(np.int64).min).any():  # a mapping RLlib did not keep: an assumption broke
        raise ValueError(
            f"agent {agent_id!r}: the env steps of its observations {start}..{start + rows - 1} are not in"
            f" RLlib's env-step mapping {list(mapping.data)} (lookback {mapping.lookback})"
        )
    return steps


def members_of(
    episode: MultiAgentEpisode, groups: Mapping[Any, Any] | None, from_infos: bool
) -> list[tuple[Member, np.ndarray]]:
    """The chunk's agents with their data (in RLlib's order of its agent episodes), and the group
    reward in each one's infos per row where it is to be added (``from_infos``; else zeros)."""
    out = []
    for agent_id, sa in episode.agent_episodes.items():
        rows = len(sa)  # RLlib's bootstrap row added: observations 0 .. last
        infos = sa.get_infos(slice(0, rows))
        given = groups.get(agent_id) if groups is not None else (infos[0] or {}).get(GROUP_ID, 0)
        group = given if given not in (None, 0) else ("alone", agent_id)
        shared = np.zeros(rows, np.float32)  # the reward of step k arrives with observation k + 1
        shared[:-1] = [float((i or {}).get(GROUP_REWARD, 0.0)) for i in infos[1:]]
        rewards = np.asarray(sa.get_rewards(slice(0, rows)), np.float32)
        own = rewards if from_infos else rewards - shared  # a Unity game's rewards hold the group's
        member = Member(
            agent_id=agent_id,
            module_id=str(sa.module_id),
            group=group,
            steps=env_steps(episode, agent_id, rows),
            obs=sa.get_observations(slice(0, rows)),
            actions=sa.get_actions(slice(0, rows - 1)),
            left=bool(sa.is_terminated),
            own=own,
        )
        out.append((member, shared if from_infos else np.zeros(rows, np.float32)))
    return out


@dataclass
class GroupView:
    """One agent's rows beside its groupmates (slots in agent-id order)."""

    others: list[Member]
    index: np.ndarray  # (rows, K) each other's row at or before this row's step (clipped to 0)
    present: np.ndarray  # (rows, K) bool
    acted: np.ndarray  # (rows, K) bool: present and its action at that row is known
    group_goes_on: bool  # an agent that left: whether any groupmate stayed after it


def group_view(me: Member, everyone: list[Member]) -> GroupView:
    """Where each groupmate of ``me`` (same group, same policy) stands at each of its rows."""
    others = sorted(
        (m for m in everyone if m is not me and m.group == me.group and m.module_id == me.module_id),
        key=lambda m: str(m.agent_id),
    )
    rows = len(me.steps)
    index = np.zeros((rows, len(others)), np.int64)
    present = np.zeros((rows, len(others)), bool)
    acted = np.zeros((rows, len(others)), bool)
    for slot, other in enumerate(others):
        latest = np.searchsorted(other.steps, me.steps, side="right") - 1
        seen = latest >= 0
        latest = np.clip(latest, 0, other.last)
        gone = other.left & (latest == other.last) & (other.steps[latest] < me.steps)
        index[:, slot] = latest
        present[:, slot] = seen & ~gone
        acted[:, slot] = present[:, slot] & (latest < other.last)
    end = me.steps[-1]  # a member who joined at or after this step is of the group's next round
    goes_on = any(o.steps[0] < end and (not o.left or o.steps[-1] > end) for o in others)
    return GroupView(others, index, present, acted, goes_on)


def _taken(value: Any, rows: np.ndarray) -> Any:
    return tree.map_structure(lambda x: np.asarray(x)[rows], value)


def view_columns(view: GroupView, width: int, action_space: Any, me: Member) -> dict[str, np.ndarray | Any]:
    """The critic's columns for ``me``'s rows: the others' observations (rows, K, ...), their encoded
    actions (rows, K, width) and the absent mask (rows, K)."""
    rows, k = view.index.shape
    if k == 0:
        empty = tree.map_structure(
            lambda x: np.zeros((rows, 0, *np.asarray(x).shape[1:]), np.asarray(x).dtype), me.obs
        )
        return {
            OTHERS: empty,
            OTHERS_ACTIONS: np.zeros((rows, 0, width), np.float32),
            ABSENT: np.zeros((rows, 0), np.float32),
        }
    per_slot_obs, per_slot_actions = [], []
    for slot, other in enumerate(view.others):
        per_slot_obs.append(_taken(other.obs, view.index[:, slot]))
        encoded = np.zeros((rows, width), np.float32)
        if other.last > 0:
            taken = np.clip(view.index[:, slot], 0, other.last - 1)
            actions = tree.map_structure(torch.as_tensor, _taken(other.actions, taken))
            encoded = encode_actions(action_space, actions).numpy().astype(np.float32)
            encoded[~view.acted[:, slot]] = 0.0
        per_slot_actions.append(encoded)
    others = tree.map_structure(lambda *xs: np.stack(xs, axis=1), *per_slot_obs)
    return {
        OTHERS: others,
        OTHERS_ACTIONS: np.stack(per_slot_actions, axis=1),
        ABSENT: (~view.present).astype(np.float32),
    }


class GroupAdvantages(GeneralAdvantageEstimation):
    """RLlib's GAE for modules without a group critic; POCA's returns and advantages for those with one."""

    def __init__(
        self, *, gamma: float, lambda_: float, groups: Mapping[Any, Any] | None, group_reward_from_infos: bool
    ) -> None:
        super().__init__(gamma=gamma, lambda_=lambda_)  # type: ignore[no-untyped-call]
        self.groups = groups
        self.from_infos = group_reward_from_infos

    def __call__(self, *, rl_module: Any, episodes: list[Any], batch: dict[str, Any], **kwargs: Any) -> Any:
        ours = {mid: batch.pop(mid) for mid in list(batch) if critic_module_id(mid) in rl_module}
        if batch:  # modules without a critic (a self-play opponent): RLlib's GAE
            batch = super().__call__(rl_module=rl_module, episodes=episodes, batch=batch, **kwargs)
        if not ours:
            return batch
        gathered: dict[str, list[dict[str, Any]]] = {mid: [] for mid in ours}
        for member, view, bonus in self._views(episodes):
            if member.module_id in ours:
                gathered[member.module_id].append(self._member_rows(rl_module, member, view, bonus))
        for module_id, columns in ours.items():
            batch[module_id] = columns
            batch[critic_module_id(module_id)] = self._returns(
                rl_module, module_id, columns, gathered[module_id]
            )
        return batch

    def _views(self, episodes: list[Any]) -> Iterator[tuple[Member, GroupView, np.ndarray]]:
        """Every agent episode, in the order RLlib's pieces laid out the batch's rows."""
        found: dict[tuple[Any, Any], tuple[Member, GroupView, np.ndarray]] = {}
        for episode in episodes:
            everyone = members_of(episode, self.groups, self.from_infos)
            teams: dict[tuple[Any, str], list[Member]] = {}
            for member, _ in everyone:
                teams.setdefault((member.group, member.module_id), []).append(member)
            for member, bonus in everyone:
                view = group_view(member, teams[(member.group, member.module_id)])
                found[(episode.id_, member.agent_id)] = (member, view, bonus)
        # RLlib's order, not the episode's dict's: its iterator walks each episode's agent_ids, a set
        for sa in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False):
            yield found[(sa.multi_agent_episode_id, sa.agent_id)]

    def _member_rows(
        self, rl_module: Any, member: Member, view: GroupView, bonus: np.ndarray
    ) -> dict[str, Any]:
        critic = rl_module[critic_module_id(member.module_id)]
        columns = view_columns(view, critic.actions, critic.action_space, member)
        for slot, other in enumerate(view.others):  # ML-Agents' POCA: the groupmates' own rewards too
            bonus = bonus + np.where(view.acted[:, slot], other.own[view.index[:, slot]], 0.0)
        terminated = np.zeros(len(member.steps), np.float32)
        truncated = np.zeros(len(member.steps), np.float32)
        if len(member.steps) < 2:  # no step of its own in this chunk: its one row is a bootstrap row
            pass
        elif member.left and not view.group_goes_on:
            terminated[-2] = 1.0  # the last real step: the whole group is done, nothing to bootstrap
        else:
            truncated[-2] = 1.0  # a chunk's end, or a member who left a group that goes on
        return {**columns, "bonus": bonus, "terminated": terminated, "truncated": truncated}

    def _returns(
        self, rl_module: Any, module_id: str, columns: dict[str, Any], rows: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The policy's advantages and value targets into ``columns``; the critic's batch returned."""
        critic = rl_module[critic_module_id(module_id)]
        device = next(critic.parameters()).device
        joined = (
            {
                key: tree.map_structure(lambda *xs: np.concatenate(xs, axis=0), *[r[key] for r in rows])
                for key in (OTHERS, OTHERS_ACTIONS, ABSENT)
            }
            if len({r[ABSENT].shape[1] for r in rows}) == 1
            else _padded(rows)
        )
        rewards = np.asarray(convert_to_numpy(columns[Columns.REWARDS]), np.float32)
        rewards = rewards + np.concatenate([r["bonus"] for r in rows])
        terminated = np.concatenate([r["terminated"] for r in rows])
        truncated = np.concatenate([r["truncated"] for r in rows])
        tensors = tree.map_structure(lambda x: torch.as_tensor(x, device=device), joined)
        obs = tree.map_structure(
            lambda x: torch.as_tensor(convert_to_numpy(x), device=device), columns[Columns.OBS]
        )
        with torch.no_grad():
            estimated = critic.estimates(obs, tensors[OTHERS], tensors[OTHERS_ACTIONS], tensors[ABSENT])
            values, baselines = (e.cpu().numpy() for e in estimated)
        config: Any = self
        targets = compute_value_targets(
            values, rewards, terminated, truncated, gamma=config.gamma, lambda_=config.lambda_
        )
        advantages = targets - baselines
        mask = columns.get(Columns.LOSS_MASK)
        counted = advantages if mask is None else advantages[np.asarray(convert_to_numpy(mask), bool)]
        advantages = (advantages - counted.mean()) / max(1e-4, float(counted.std()))

        def as_tensor(x: Any) -> torch.Tensor:
            return torch.from_numpy(np.asarray(x, np.float32)).to(device)

        columns[Postprocessing.ADVANTAGES] = as_tensor(advantages)
        columns[Postprocessing.VALUE_TARGETS] = as_tensor(targets)
        out = {
            Columns.OBS: obs,
            **tensors,
            Postprocessing.VALUE_TARGETS: as_tensor(targets),
            OLD_VALUES: as_tensor(values),
            OLD_BASELINES: as_tensor(baselines),
        }
        if mask is not None:
            out[Columns.LOSS_MASK] = mask
        return out


def _padded(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Members' columns of groups of different sizes, padded to the largest (absent slots)."""
    k = max(r[ABSENT].shape[1] for r in rows)

    def pad(x: np.ndarray, fill: float) -> np.ndarray:
        widths = [(0, 0), (0, k - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
        return np.pad(x, widths, constant_values=fill)

    return {
        OTHERS: tree.map_structure(
            lambda *xs: np.concatenate([pad(x, 0) for x in xs], axis=0), *[r[OTHERS] for r in rows]
        ),
        OTHERS_ACTIONS: np.concatenate([pad(r[OTHERS_ACTIONS], 0) for r in rows], axis=0),
        ABSENT: np.concatenate([pad(r[ABSENT], 1.0) for r in rows], axis=0),
    }
