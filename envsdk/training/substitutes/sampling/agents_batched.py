"""Many agents, batched: RLlib's multi-agent env runner with a loop that acts for all of a policy's
agents at once (substitution ``agents-batched``).

RLlib's ``MultiAgentEnvRunner`` keeps every env step of every agent as Python dicts: the connector
pipelines run agent by agent, each step goes into a ``MultiAgentEpisode`` through ``add_env_step``,
and the step counters are logged agent by agent.  A Unity scene holds many agents of one behavior
(3DBall 12, the team games 4 to 6), so that bookkeeping, not the game, is most of a step
(benchmarks/multiagent.py).  mlagents-learn acts for all agents of a behavior in one policy call.

:class:`AgentsBatchedRunner` keeps RLlib's runner (its env, MultiRLModule, state, checkpoints,
metrics, restarts of the runner) and replaces the loop of ``_sample``.  Other multi-agent envs
(PettingZoo's, a user's ``MultiAgentEnv``) sample with agent_rounds.py's loop, which keeps RLlib's
episodes, a round each.  For Unity games (``env: unity``) this module's loop steps each game of the
runner itself:

* every agent that asks for a decision in a frame, across the runner's games, is one row of its
  policy's batch: one forward pass and one draw per policy a frame (batched_runner.py's draws);
* each agent's life (from its first decision to its end: Unity gives the next life a new id) is one
  episode of its own, a ``MultiAgentEpisode`` holding that agent's ``SingleAgentEpisode``, built once
  from arrays when the life ends or the sample does.  Agents that skip frames, end at different
  times, or join later need no bookkeeping of the others;
* ``episode_horizon`` truncates a life after that many decisions; the agent goes on in a new one
  from the same observation (mlagents-learn's ``time_horizon``).

What changes against RLlib's runner: its episodes are a round of the game holding all its agents
(``envs/unity/rllib_env.py``); here an episode is one agent's life, so ``episode_return_mean`` and
``episode_len_mean`` are per agent (what mlagents-learn reports as its mean reward), and
``agent_return_mean`` is unchanged.  RLlib's loop samples, with a notice, where this one does not
cover the config: a user's episode callbacks or connectors, recurrent modules, self-play, POCA
(its group critic reads the groupmates of each step in one episode), ``batch_mode:
complete_episodes``; and, call by call, random actions and samples of whole episodes (evaluation by
episodes): those are rounds of the game, where counting lives would keep the first to end.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from typing import Any

import numpy as np
from ray.rllib.connectors.env_to_module import (
    AddObservationsFromEpisodesToBatch,
    AddStatesFromEpisodesToBatch,
    AddTimeDimToBatchAndZeroPad,
    AgentToModuleMapping,
    BatchIndividualItems,
    NumpyToTensor,
)
from ray.rllib.connectors.module_to_env import (
    GetActions,
    ListifyDataForVectorEnv,
    ModuleToAgentUnmapping,
    NormalizeAndClipActions,
    RemoveSingleTsTimeRankFromBatch,
    TensorToNumpy,
    UnBatchToIndividualItems,
)
from ray.rllib.core.columns import Columns
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import (
    RLMODULE_INFERENCE_TIMER,
    WEIGHTS_SEQ_NO,
)
from ray.rllib.utils.spaces.space_utils import batch

from envsdk import internals
from envsdk.envs.faults.guard import Guard
from envsdk.training.hooks.agent_metrics import ALL_AGENTS
from envsdk.training.hooks.observation_filter import ObservationMeanStdFilter
from envsdk.training.substitutes.sampling.agent_rounds import RoundsLoop
from envsdk.training.substitutes.sampling.agent_rows import log_sampled, policy_rows, row
from envsdk.training.substitutes.sampling.batched_runner import (
    default_pieces,
    why_not_next_step,
    why_not_our_loop,
)

logger = logging.getLogger(__name__)

# RLlib's default connector pieces of a multi-agent runner (2.60), in order, which the loops stand in
# for (batched_runner.default_pieces: GetActions may be the env-fault guard's, which checks first).
MA_ENV_TO_MODULE = (
    AddObservationsFromEpisodesToBatch,
    AddTimeDimToBatchAndZeroPad,
    AddStatesFromEpisodesToBatch,
    AgentToModuleMapping,
    BatchIndividualItems,
    NumpyToTensor,
)
MA_MODULE_TO_ENV = (
    GetActions,
    TensorToNumpy,
    UnBatchToIndividualItems,
    ModuleToAgentUnmapping,
    RemoveSingleTsTimeRankFromBatch,
    NormalizeAndClipActions,
    ListifyDataForVectorEnv,
)


class _Life:
    """One agent's life in the sample: what it saw, did and got, as it came (row values)."""

    __slots__ = ("acted", "actions", "agent_id", "behavior", "episode_id", "extra", "infos", "module_id",
                 "obs", "rewards", "started", "t_started")  # fmt: skip

    def __init__(self, agent_id: str, behavior: str, module_id: str, obs: Any, info: dict, t: int = 0):
        self.agent_id, self.behavior, self.module_id = agent_id, behavior, module_id
        self.episode_id = uuid.uuid4().hex
        self.t_started = t
        self.obs, self.infos = [obs], [info]
        self.actions: list[Any] = []
        self.extra: list[dict[str, Any]] = []
        self.rewards: list[float] = []
        self.started = time.perf_counter()
        self.acted = self.started

    def carry_on(self) -> _Life:
        """The life's next chunk: from its last observation, with any action not answered yet."""
        done = len(self.rewards)
        nxt = _Life(self.agent_id, self.behavior, self.module_id, self.obs[done], self.infos[done],
                    self.t_started + done)  # fmt: skip
        nxt.episode_id = self.episode_id
        nxt.obs, nxt.infos = self.obs[done:], self.infos[done:]
        nxt.actions, nxt.extra = self.actions[done:], self.extra[done:]
        nxt.started = nxt.acted = self.acted
        return nxt

    def episode(self, spaces: tuple[Any, Any], terminated: bool, truncated: bool, mapping_fn: Any) -> Any:
        """Its complete steps as a one-agent MultiAgentEpisode, numpy throughout."""
        n = len(self.rewards)
        extra = {k: np.stack([e[k] for e in self.extra[:n]]) for k in self.extra[0]} if n else {}
        single = SingleAgentEpisode(
            id_=self.episode_id,
            agent_id=self.agent_id,
            module_id=self.module_id,
            multi_agent_episode_id=self.episode_id,  # type: ignore[arg-type]  # RLlib's ids are strings
            observations=batch(self.obs[: n + 1]),
            infos=self.infos[: n + 1],
            actions=batch(self.actions[:n]),
            rewards=np.asarray(self.rewards, np.float32),  # type: ignore[arg-type]  # RLlib takes arrays
            extra_model_outputs=extra,
            terminated=terminated,
            truncated=truncated,
            t_started=self.t_started,
            len_lookback_buffer=0,
            observation_space=spaces[0],
            action_space=spaces[1],
        )
        internals.episode_filled(single, self.obs[n], self.infos[n], self.started, self.acted)
        return internals.one_agent_episode(single, self.episode_id, mapping_fn, spaces)


_Ended = tuple[_Life, bool, bool]  # a life that ended: it, terminated, truncated


class AgentsBatchedRunner(MultiAgentEnvRunner):
    """RLlib's multi-agent env runner acting for all of a policy's agents at once (module docstring)."""

    def __init__(self, *, config: Any, **kwargs: Any) -> None:
        super().__init__(config=config, **kwargs)
        self._why_not: str | None = None
        self._checked = False
        self._lives: list[dict[int, _Life]] = []  # per game: Unity agent id -> its life
        self._asking: list[list[Any]] = []  # per game: the AgentSteps waiting for a decision
        self._fresh: list[tuple[_Life, int]] = []  # the frame's new observations: (life, index in obs)
        self._successors: list[tuple[_Life, int, int]] = []  # lives cut at episode_horizon, game, uid
        self._filter: ObservationMeanStdFilter | None = None  # observation_filter: MeanStdFilter's
        self._rounds: RoundsLoop | None = None  # the loop of a multi-agent env that is not a Unity game
        self._forward_s = 0.0  # the sample's forward passes
        seed = config.seed
        self.rng = np.random.default_rng(None if seed is None else [seed, self.worker_index or 0])

    # ---- whether this loop samples ---------------------------------------------

    def games(self) -> list[Any]:
        """The runner's sub-envs (Unity games, for the loop of this module)."""
        env = internals.runner_env(self)
        return [sub.unwrapped for sub in getattr(env, "envs", ())]

    def why_not(self) -> str | None:
        """Why this runner samples with RLlib's loop (None: the batched one), decided once."""
        if not self._checked:
            self._checked = True
            self._why_not = self._find_why_not()
            if self._why_not is not None:
                logger.warning("agents-batched: RLlib's loop samples this env runner: %s", self._why_not)
        return self._why_not

    @property
    def samples_rounds(self) -> bool:
        """Whether agent_rounds.py's loop samples (a multi-agent env that is not a Unity game)."""
        return self.why_not() is None and self._rounds is not None

    def _find_why_not(self) -> str | None:
        from envsdk.envs.unity.rllib_env import UnityEnv

        if self.module is None:
            return "the runner has no RLModule"
        for mid, sub in self.module.items():
            if sub.is_stateful():
                return f"policy {mid} is recurrent"
        pieces = list(getattr(internals.runner_env_to_module(self), "connectors", ()))
        found = [p for p in pieces if isinstance(p, ObservationMeanStdFilter)]
        if found and found[0].keep_raw:
            return "observation_filter keeps each raw observation (an evaluation runner)"
        self._filter = found[0] if found else None
        games = self.games()
        if games and all(isinstance(g, UnityEnv) for g in games):
            return None
        if any(isinstance(g, UnityEnv) for g in games):
            return "its env wraps a Unity game"
        why = why_not_next_step(internals.runner_env(self)) or _not_default_pieces(
            pieces, list(getattr(internals.runner_module_to_env(self), "connectors", ()))
        )
        if why is not None:
            return why
        self._rounds = RoundsLoop(self, self._filter)
        return None

    # ---- the loop -----------------------------------------------------------------

    def _sample(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> list[Any]:
        if random_actions or num_episodes is not None or self.why_not() is not None:
            # Whole episodes (batch_mode: complete_episodes, evaluation by episodes) are rounds of the
            # game, RLlib's: counting agent lives would keep the first lives to end and drop the rest.
            # RLlib's loop starts the games afresh and leaves them to be started afresh here.
            return super()._sample(
                num_timesteps=num_timesteps, num_episodes=num_episodes, explore=explore,
                random_actions=random_actions, force_reset=force_reset,
            )  # fmt: skip
        if self._rounds is not None:
            return self._rounds.sample(int(num_timesteps or 0), explore, force_reset)
        state = internals.MultiRunnerState(self)
        games = self.games()
        if force_reset or state.needs_reset or len(self._lives) != len(games):
            self._start(games, state)
        by_agents = self.config.count_steps_by == "agent_steps"
        env_steps = agent_steps = frames = 0
        done: list[Any] = []
        self._forward_s = 0.0
        modules: Any = self.module
        training = [m for m in modules.values() if getattr(m, "training", False)]
        for module in training:
            module.eval()
        try:
            while (agent_steps if by_agents else env_steps) < int(num_timesteps or 0):
                acted = self._act(games, explore, env_steps)
                replies = self._step(games)
                done += self._collect(games, replies)
                env_steps += len(games)
                agent_steps += acted
                frames += 1
        finally:
            for module in training:
                module.train()
        chunks = self._cut()
        for episode in done:
            state.life_callback("on_episode_end", episode, games)
        state.finished(done, chunks)
        self._count(env_steps, done + chunks)
        state.count_env_steps(env_steps)
        if frames:  # RLlib's loop times its one forward pass of a step (all games)
            self.metrics.log_value(RLMODULE_INFERENCE_TIMER, self._forward_s / frames, reduce="ema")
        return done + chunks

    def _cut(self) -> list[Any]:
        """The ongoing lives' complete steps as episode chunks; each life goes on in a new chunk."""
        chunks = []
        for lives in self._lives:
            for uid, life in lives.items():
                if life.rewards:
                    chunks.append(self._episode(life, False, False))
                    lives[uid] = life.carry_on()
        return chunks

    def _start(self, games: list[Any], state: internals.MultiRunnerState) -> None:
        """Every game from its first frame: each agent asking for a decision starts a life."""
        state.forget_ongoing()
        state.started()
        self._lives = [{} for _ in games]
        self._asking = [[] for _ in games]
        for i, game in enumerate(games):
            self._arrive(i, game, game.first_agents())
        self._take_fresh(games)

    def _act(self, games: list[Any], explore: bool, env_steps: int) -> int:
        """One forward pass per policy over its agents asking in every game; their actions sent."""
        rows: dict[str, list[tuple[int, Any]]] = {}
        for i, asking in enumerate(self._asking):
            for step in asking:
                rows.setdefault(self._lives[i][step.agent_id].module_id, []).append((i, step))
        lifetime = self.num_env_steps_sampled_lifetime // (self.config.num_env_runners or 1) + env_steps
        t = lifetime * (self.config.num_env_runners or 1)
        seq_no = internals.MultiRunnerState(self).weights_seq_no
        modules: Any = self.module
        per_game: list[dict[str, dict[int, Any]]] = [{} for _ in games]
        for mid, members in rows.items():
            lives = [self._lives[i][step.agent_id] for i, step in members]
            began = time.perf_counter()
            obs = batch([life.obs[-1] for life in lives])
            out = policy_rows(modules[mid], mid, obs, explore, t, self.rng)
            self._forward_s += time.perf_counter() - began
            actions = out.pop(Columns.ACTIONS)
            out[WEIGHTS_SEQ_NO] = np.full(len(lives), seq_no)
            for index, ((i, step), life) in enumerate(zip(members, lives, strict=True)):
                action = row(actions, index)
                life.actions.append(action)
                life.extra.append({k: row(v, index) for k, v in out.items()})
                life.acted = time.perf_counter()
                per_game[i].setdefault(step.behavior, {})[step.agent_id] = games[i].to_game_action(
                    step.behavior, action
                )
        for i, game in enumerate(games):
            for behavior, actions in per_game[i].items():
                game.game.set_actions(behavior, actions)
        return sum(len(m) for m in rows.values())

    def _guard(self) -> Guard | None:
        """The env guard on the runner's vector env (faults.py's hook), which checks what the games
        return; this loop steps the games itself and asks it."""
        guard = getattr(internals.runner_env(self).step, "__self__", None)
        return guard if isinstance(guard, Guard) else None

    def _step(self, games: list[Any]) -> list[Any]:
        """Each game's next frame (its agents' reports), the games at once where the games-at-once
        substitution put its threads on the vector env, else one after another; a game that failed
        gives its error."""

        def one(game: Any) -> Any:
            try:
                return game.game.wait_for_agents(game.game.step())
            except Exception as err:  # the game's error, handled in _collect (a restart)
                return err

        at_once = getattr(internals.runner_env(self), "games_at_once", None)  # games_at_once.py's
        if at_once is None:
            return [one(game) for game in games]
        replies: list[Any] = at_once.run(lambda sub: one(sub.unwrapped))
        return replies

    def _collect(self, games: list[Any], replies: list[Any]) -> list[Any]:
        """Each game's frame into its agents' lives; the lives that ended, as episodes."""
        from unity_bridge.errors import PlayerError

        ended: list[_Ended] = []
        for i, (game, reply) in enumerate(zip(games, replies, strict=True)):
            if isinstance(reply, PlayerError):
                ended += self._restarted(i, game, reply)
            elif isinstance(reply, BaseException):
                raise reply
            else:
                ended += self._frame(i, game, reply)
        self._take_fresh(games)
        for life, game, uid in self._successors:  # episode_horizon: each goes on from its last observation
            self._lives[game][uid] = _Life(
                life.agent_id, life.behavior, life.module_id, life.obs[-1], life.infos[-1]
            )
        self._successors = []
        return [self._episode(life, terminated, truncated) for life, terminated, truncated in ended]

    def _take_fresh(self, games: list[Any]) -> None:
        """The frame's new observations, per policy in one batch: checked by the env guard as the
        games returned them, then normalised where ``observation_filter: MeanStdFilter`` is on (the
        episodes keep them normalised, as RLlib's connector leaves them)."""
        guard = self._guard()
        per_module: dict[str, list[tuple[_Life, int]]] = {}
        for life, index in self._fresh:
            per_module.setdefault(life.module_id, []).append((life, index))
        self._fresh = []
        for mid, fresh in per_module.items():
            raw = [life.obs[i] for life, i in fresh]
            space = games[0].get_observation_space(fresh[0][0].agent_id)
            if guard is not None:
                names = [life.agent_id for life, _ in fresh]
                guard.check_agents(space, batch(raw), names, [life.t_started + i for life, i in fresh])
            if self._filter is not None:
                for (life, i), obs in zip(fresh, self._filter.normalise_rows(mid, space, raw), strict=True):
                    life.obs[i] = obs

    def _frame(self, index: int, game: Any, reply: list[Any]) -> list[Any]:
        """A game's frame: each agent's answer to its last action (its reward and observation), the
        lives that ended (or reached ``episode_horizon``: the agent goes on in a new one)."""
        lives = self._lives[index]
        guard = self._guard()
        horizon = game.settings.episode_horizon
        ended: list[_Ended] = []
        asking = [step for step in reply if not step.done]
        for step in reply:
            life = lives.get(step.agent_id)
            if life is None or len(life.actions) <= len(life.rewards):  # nothing of ours to answer
                if step.done:
                    lives.pop(step.agent_id, None)
                continue
            reward = game.reward_of(step)
            if not math.isfinite(reward) and guard is not None:
                guard.check_reward(reward, life.agent_id)
            life.rewards.append(reward)
            life.obs.append(game.observation(step))
            life.infos.append(game.info_of(step))
            self._fresh.append((life, len(life.obs) - 1))
            if step.done:
                del lives[step.agent_id]
                ended.append((life, not step.interrupted, bool(step.interrupted)))
            elif horizon is not None and life.t_started + len(life.rewards) >= horizon:  # over its chunks
                ended.append((life, False, True))
                self._successors.append((life, index, step.agent_id))
        self._asking[index] = []
        self._arrive(index, game, asking)
        return ended

    def _restarted(self, index: int, game: Any, err: Exception) -> list[_Ended]:
        """A failed game restarted (past the restart limits: PlayerError); its lives end truncated,
        an action not answered with reward 0 and the observation it was taken on."""
        first = game.restart_game(err)
        ended: list[_Ended] = []
        for life in self._lives[index].values():
            if len(life.actions) > len(life.rewards):
                life.rewards.append(0.0)
                life.obs.append(life.obs[-1])
                life.infos.append({"player_restarted": True})
            if life.rewards:
                ended.append((life, False, True))
        self._lives[index], self._asking[index] = {}, []
        self._arrive(index, game, first)
        return ended

    def _arrive(self, index: int, game: Any, steps: list[Any]) -> None:
        """The asking agents of a game's frame: a new life for each agent not seen before."""
        from envsdk.envs.unity.rllib_env import agent_key

        lives = self._lives[index]
        for step in steps:
            if step.done:
                continue
            if step.agent_id not in lives:
                key = agent_key(step.behavior, step.agent_id)
                mapping: Any = self.config.policy_mapping_fn
                module_id = mapping(key, None)
                life = lives[step.agent_id] = _Life(
                    key, step.behavior, module_id, game.observation(step), game.info_of(step)
                )
                self._fresh.append((life, 0))
            self._asking[index].append(step)

    def _episode(self, life: _Life, terminated: bool, truncated: bool) -> Any:
        game = self.games()[0]
        spaces = (game.get_observation_space(life.agent_id), game.get_action_space(life.agent_id))
        return life.episode(spaces, terminated, truncated, self.config.policy_mapping_fn)

    def _count(self, env_steps: int, episodes: list[Any]) -> None:
        """The sample's counters: agent ids pooled (Unity's are new each life), as agent_metrics.py
        pools unstable ones."""
        per_module: dict[str, int] = {}
        for episode in episodes:
            for single in episode.agent_episodes.values():
                per_module[single.module_id] = per_module.get(single.module_id, 0) + len(single)
        ended = sum(1 for e in episodes if e.is_done)
        log_sampled(self.metrics, env_steps, ended, {ALL_AGENTS: sum(per_module.values())}, per_module)


def _not_default_pieces(to_module: list[Any], to_env: list[Any]) -> str | None:
    """Why a multi-agent runner's connector pipelines are not RLlib's defaults (the observation
    filter aside), which the loops stand in for (None: they are)."""
    for pieces, wanted in (
        ([p for p in to_module if not isinstance(p, ObservationMeanStdFilter)], MA_ENV_TO_MODULE),
        (to_env, MA_MODULE_TO_ENV),
    ):
        if not default_pieces(pieces, wanted):
            return f"connector pieces {[type(p).__name__ for p in pieces]} are not RLlib's defaults"
    return None


def is_unity(env_target: Any) -> bool:
    """Whether a run's env is a Unity game as a multi-agent env (``env: unity``), which this loop steps."""
    from envsdk.envs.unity.rllib_env import UnityEnv

    return isinstance(env_target, type) and issubclass(env_target, UnityEnv)


def why_not_agents_batched(config: Any, self_play: bool, unity: bool) -> str | None:
    """Why a multi-agent run's env runners sample with RLlib's loop (None: the agents-batched one).
    Self-play counts its games by episode: a round, which only agent_rounds.py's episodes are."""
    from envsdk.training.substitutes.poca.algorithm import POCAConfig

    if self_play and unity:
        return "self_play counts a Unity game's rounds, and this loop's episodes are agents' lives"
    if isinstance(config, POCAConfig):
        return "run: POCA's group critic reads each step's groupmates in one episode"
    if config.batch_mode == "complete_episodes":
        return "batch_mode: complete_episodes samples whole rounds"
    return why_not_our_loop(config, takes_filter=True)
