"""The agents-batched loop for any multi-agent env: PettingZoo's Parallel games, RLlib's and users'
``MultiAgentEnv`` classes (substitution ``agents-batched``).

RLlib's ``MultiAgentEnvRunner`` runs its connector pipelines agent by agent at every step: each
agent's observation is taken from its episode, mapped to its module, batched, turned into a tensor;
the module's output is split again, agent by agent, into the actions the env gets; and the step
counters are logged agent by agent.  Here, at each step:

* every agent asking for an action (the agents in the last observation dict that are not done, as
  ``get_agents_to_act`` says), across the runner's sub-envs, is one row of its policy's batch: one
  forward pass and one draw per policy (agent_rows.py), Box actions unsquashed or clipped on the
  whole batch as RLlib's ``NormalizeAndClipActions`` does;
* ``observation_filter: MeanStdFilter`` takes each step's new observations per policy in one batch
  (its statistics take in all of a step's rows before any is normalised, where RLlib's connector
  adds and normalises them one by one: the normalised values differ by that order);
* the counters are logged once per sample.

The episodes are RLlib's own: each sub-env's round is one ``MultiAgentEpisode`` that takes every
step through RLlib's ``add_env_step`` (hanging actions, agents that end early or join late, ``__all__``
ends), and is cut, validated and returned as RLlib's loop does.  So an episode's return is a
round's, summed over its agents, and the agents keep the env's ids, as on RLlib's runner.  The env
is stepped through the runner's vector env and its failure handling (the env guard, restarts of
failed sub-envs); episode callbacks run as RLlib's loop runs them (only ours: a user's keep RLlib's
loop, agents_batched.py's ``why_not_agents_batched``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
from ray.rllib.connectors.module_to_env import NormalizeAndClipActions
from ray.rllib.core.columns import Columns
from ray.rllib.utils.metrics import (
    RLMODULE_INFERENCE_TIMER,
    WEIGHTS_SEQ_NO,
)
from ray.rllib.utils.spaces.space_utils import batch

from envsdk import internals
from envsdk.training.hooks.observation_filter import ObservationMeanStdFilter
from envsdk.training.substitutes.sampling.agent_rows import log_sampled, policy_rows, row
from envsdk.training.substitutes.sampling.batched_runner import actions_for_env, check_failed_steps

_PerEnv = list[dict[Any, Any]]  # one dict per sub-env, keyed by agent id


class _Tally:
    """A sample's counts, logged once at its end as RLlib's loop logs them step by step."""

    def __init__(self) -> None:
        self.env_steps = 0
        self.per_agent: dict[str, int] = defaultdict(int)
        self.per_module: dict[str, int] = defaultdict(int)
        self.step_calls = 0
        self.step_s = self.forward_s = 0.0

    def count(self, episodes: list[Any], stepped: dict[int, dict[Any, Any]]) -> None:
        """A vector step's env steps, and agent steps per agent and module (the agents observed)."""
        self.env_steps += len(stepped)
        for i, observations in stepped.items():
            for aid in observations:
                self.per_agent[str(aid)] += 1
                self.per_module[episodes[i].module_for(aid)] += 1


class RoundsLoop:
    """The sampling loop of :class:`~envsdk.training.substitutes.sampling.agents_batched.AgentsBatchedRunner`
    for a multi-agent env that is not a Unity game (module docstring)."""

    def __init__(self, runner: Any, obs_filter: ObservationMeanStdFilter | None) -> None:
        self.runner = runner
        self.filter = obs_filter
        self._for_env: dict[str, Callable[[Any], Any]] = {}  # module id -> its actions as the env gets them
        pieces = internals.runner_module_to_env(runner).connectors
        self._clip = next(p for p in pieces if isinstance(p, NormalizeAndClipActions))
        self._converts = bool(self._clip.normalize_actions or self._clip.clip_actions)

    def sample(self, num_timesteps: int, explore: bool, force_reset: bool) -> list[Any]:
        runner = self.runner
        state = internals.MultiRunnerState(runner)
        if force_reset or state.needs_reset:
            state.reset(explore)
        by_agents = runner.config.count_steps_by == "agent_steps"
        acting = [_asking(episode) for episode in state.episodes]
        done: list[Any] = []
        tally = _Tally()
        sampled = agent_steps = 0  # this sample's steps, as RLlib's loop counts them towards its size
        step_events = self._has_step_callbacks()
        modules: Any = runner.module
        training = [m for m in modules.values() if getattr(m, "training", False)]
        for module in training:
            module.eval()
        try:
            while (agent_steps if by_agents else sampled) < num_timesteps:
                episodes = state.episodes
                actions, for_env, extra = self._act(episodes, acting, explore, sampled, tally)
                began = time.perf_counter()
                results = state.step(for_env)
                tally.step_s += time.perf_counter() - began
                tally.step_calls += 1
                if results is None:  # a sub-env failed and RLlib made the env again: afresh, as RLlib
                    check_failed_steps(state)
                    sampled = agent_steps = 0
                    state.reset(explore)
                    acting = [_asking(episode) for episode in state.episodes]
                    continue
                stepped = self._record(state, episodes, results, (actions, extra), acting, done, step_events)
                sampled += len(stepped)
                agent_steps += sum(len(obs) for obs in stepped.values())
                tally.count(episodes, stepped)
        finally:
            for module in training:
                module.train()
        chunks = self._cut(state)
        if runner.config.episodes_to_numpy:
            for episode in done:
                episode.to_numpy()
        state.finished(done, chunks)
        self._log(state, tally, len(done))
        return done + chunks

    def _record(
        self,
        state: internals.MultiRunnerState,
        episodes: list[Any],
        results: tuple,
        acted: tuple[_PerEnv, _PerEnv],
        acting: _PerEnv,
        done: list[Any],
        step_events: bool,
    ) -> dict[int, dict[Any, Any]]:
        """A vector step into each sub-env's episode, through RLlib's ``add_env_reset``/``add_env_step``
        and the episode callbacks in RLlib's order; ``acting`` becomes the agents asking next and
        ``done`` takes the episodes that ended.  The observations of the sub-envs that stepped (resets
        aside), by sub-env."""
        observations, rewards, terminateds, truncateds, infos = results
        actions, extra = acted
        self._normalise(episodes, observations)
        stepped = {}
        for i, episode in enumerate(episodes):
            if not episode.is_reset:  # the vector env reset the sub-env at this step
                episode.add_env_reset(observations=observations[i], infos=infos[i])
                state.episode_callback("on_episode_start", i)
            else:
                episode.add_env_step(
                    observations=observations[i], actions=actions[i], rewards=rewards[i], infos=infos[i],
                    terminateds=terminateds[i], truncateds=truncateds[i], extra_model_outputs=extra[i],
                )  # fmt: skip
                stepped[i] = observations[i]
                if step_events:
                    state.episode_callback("on_episode_step", i)
            self._filtered_spaces(episode, observations[i])
            if episode.is_done:
                state.episode_callback("on_episode_end", i)
                state.prune(episode)
                done.append(episode)
                state.new_episode(i)
                acting[i] = {}
            else:
                over = {aid for aid in observations[i] if terminateds[i].get(aid) or truncateds[i].get(aid)}
                acting[i] = {aid: obs for aid, obs in observations[i].items() if aid not in over}
        return stepped

    def _act(
        self, episodes: list[Any], acting: _PerEnv, explore: bool, sampled: int, tally: _Tally
    ) -> tuple[_PerEnv, _PerEnv, _PerEnv]:
        """One forward pass per policy over its asking agents in every sub-env: per sub-env, the
        actions as the episodes keep them, as the env gets them, and the extra model outputs."""
        runner = self.runner
        rows: dict[str, list[tuple[int, Any]]] = defaultdict(list)
        for i, asking in enumerate(acting):
            for aid in asking:
                rows[episodes[i].module_for(aid)].append((i, aid))
        runners = runner.config.num_env_runners or 1
        t = (runner.num_env_steps_sampled_lifetime // runners + sampled) * runners
        seq_no = internals.MultiRunnerState(runner).weights_seq_no
        modules: Any = runner.module
        actions: _PerEnv = [{} for _ in episodes]
        for_env: _PerEnv = [{} for _ in episodes]
        extra: _PerEnv = [{} for _ in episodes]
        for mid, members in rows.items():
            if mid not in modules:  # as MultiRLModule's passes skip it: its agents send no action
                continue
            began = time.perf_counter()
            out = policy_rows(
                modules[mid], mid, batch([acting[i][aid] for i, aid in members]), explore, t, runner.rng
            )
            tally.forward_s += time.perf_counter() - began
            chosen = out.pop(Columns.ACTIONS)
            own = out.pop(Columns.ACTIONS_FOR_ENV, None)
            given = own if own is not None and not self._converts else self._given(mid, members, chosen)
            out[WEIGHTS_SEQ_NO] = np.full(len(members), seq_no)
            for index, (i, aid) in enumerate(members):
                actions[i][aid] = row(chosen, index)
                for_env[i][aid] = row(given, index)
                extra[i][aid] = {k: row(v, index) for k, v in out.items()}
        return actions, for_env, extra

    def _given(self, module_id: str, members: list[tuple[int, Any]], chosen: Any) -> Any:
        """A policy's actions as the env gets them: unsquashed or clipped into its agents' action space
        as RLlib's NormalizeAndClipActions does, on the whole batch (RLlib refuses agents of one policy
        with different action spaces when it builds the module)."""
        if module_id not in self._for_env:
            i, aid = members[0]
            space = self.runner.env.envs[i].unwrapped.get_action_space(aid)
            self._for_env[module_id] = actions_for_env(self._clip, space)
        return self._for_env[module_id](chosen)

    def _normalise(self, episodes: list[Any], observations: _PerEnv) -> None:
        """``observation_filter: MeanStdFilter``: the step's new observations, per policy in one batch,
        normalised in place before the episodes take them."""
        if self.filter is None:
            return
        per_module: dict[str, list[tuple[int, Any]]] = defaultdict(list)
        for i, obs in enumerate(observations):
            for aid in obs:
                per_module[episodes[i].module_for(aid)].append((i, aid))
        for mid, members in per_module.items():
            i, aid = members[0]
            space = self.runner.env.envs[i].unwrapped.get_observation_space(aid)
            raw = [observations[i][aid] for i, aid in members]
            for (i, aid), obs in zip(members, self.filter.normalise_rows(mid, space, raw), strict=True):
                observations[i][aid] = obs

    def _filtered_spaces(self, episode: Any, observations: dict[Any, Any]) -> None:
        """The filter's observation space on each agent's episode, as its connector sets it (the
        buffers batch by it)."""
        if self.filter is None:
            return
        for aid in observations:
            single = episode.agent_episodes[aid]
            space = self.filter.filtered_space(episode.module_for(aid))
            if single.observation_space is not space:
                single.observation_space = space

    def _has_step_callbacks(self) -> bool:
        """Whether anything listens to ``on_episode_step`` (RLlib calls it at every step of every sub-env):
        a callback function, or a callbacks object whose class has its own."""
        from ray.rllib.callbacks.callbacks import RLlibCallback

        if self.runner.config.callbacks_on_episode_step:
            return True
        base = RLlibCallback.on_episode_step
        objects = internals.MultiRunnerState(self.runner).callback_objects
        return any(getattr(type(obj), "on_episode_step", base) is not base for obj in objects)

    def _cut(self, state: internals.MultiRunnerState) -> list[Any]:
        """The ongoing episodes' chunks (validated, as numpy); each goes on in its cut, as RLlib's loop."""
        config = self.runner.config
        ongoing = state.episodes
        state.episodes = [e.cut(len_lookback_buffer=config.episode_lookback_horizon) for e in ongoing]
        chunks = []
        for episode in ongoing:
            if episode.env_t == 0:  # just created: no data yet
                continue
            episode.validate()
            state.prune(episode)
            chunks.append(episode.to_numpy() if config.episodes_to_numpy else episode)
        return chunks

    def _log(self, state: internals.MultiRunnerState, tally: _Tally, ended: int) -> None:
        """The sample's counters, Ray's counter of env steps, and ``_try_env_step``'s timer."""
        log_sampled(self.runner.metrics, tally.env_steps, ended, tally.per_agent, tally.per_module)
        if tally.env_steps:  # Ray's counter warns of a count of 0
            state.count_env_steps(tally.env_steps)
        state.count_steps(tally.step_calls, tally.step_s)
        if tally.step_calls:
            self.runner.metrics.log_value(
                RLMODULE_INFERENCE_TIMER, tally.forward_s / tally.step_calls, reduce="ema"
            )


def _asking(episode: Any) -> dict[Any, Any]:
    """The agents of an ongoing episode (chunk) that act next, with their last observations."""
    if not episode.is_reset:
        return {}
    last = episode.get_observations(-1)
    return {aid: obs for aid, obs in last.items() if not episode.agent_episodes[aid].is_done}
