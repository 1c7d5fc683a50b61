"""Unity games as RLlib environments.

:class:`UnityEnv` is a ``MultiAgentEnv``: agent ids are ``"<behavior>/<unity id>"``
and each behavior maps to one policy (``env_config.policy_mapping`` renames
or merges them).  :class:`UnityGymEnv` is the plain gymnasium view of a game
with one behavior and one agent.

Episodes: Unity restarts agents by itself, with a new id each time.  An RLlib
episode ends when every agent in it has ended (a round of the game); agents
that already asked for their next decision in that round start the next
episode.  Agents that join while others play on join the running episode.
Once every agent the episode started with has ended, it also ends at the next
step where all its live agents ask for a decision: they are truncated there,
with that observation, and start the next episode from it, with no RESET (a
relay, as ML-Agents' ``time_horizon`` cuts trajectories).  Without it, a game
whose agents end one by one and come back with new ids (3DBall, Chase) would
pile hundreds of agents into one RLlib episode, and RLlib's per-step cost grows
with the agents an episode holds.  ``episode_horizon`` truncates every live
agent, each with its last observation (ray #49381), and the next reset sends
RESET to the game.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.rllib.utils.typing import AgentID

from envsdk.envs.base import MASK_KEY, OBS_KEY, RLlibHooks, TaskSettable
from envsdk.envs.spaces import EntitySet
from envsdk.envs.unity.metrics import log_unity_metrics
from envsdk.notices import notice
from unity_bridge.behavior_names import behavior_name, default_policy_id, team_of
from unity_bridge.environment import Action, AgentStep, BehaviorSpec, UnityEnvironment
from unity_bridge.errors import PlayerError
from unity_bridge.player import thread_limit
from unity_bridge.samplers import Sampler, parse_parameter, with_seeds
from unity_bridge.settings import LaunchSettings, continuous_mapping, to_unity_range

ALL = "__all__"
GAME_RESTART_DELAY_S = 5.0  # a game's delay_between_env_runner_restarts_s (RLlib's: 60 s)
# A MultiAgentEnv's step reply: observations, rewards, terminateds, truncateds and infos, by agent id.
_Reply = tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict]]
_THREAD_WARN_FRACTION = 0.8


def agent_key(behavior: str, unity_id: int) -> str:
    return f"{behavior}/{unity_id}"


def behavior_of(agent_id: AgentID) -> str:
    return str(agent_id).rsplit("/", 1)[0]


class PolicyMapping:
    """Picklable ``policy_mapping_fn``: agent id -> behavior -> policy id."""

    def __init__(self, mapping: dict[str, str]):
        self.mapping = dict(mapping)

    def __call__(self, agent_id: str, episode: Any = None, **kwargs: Any) -> str:
        return self.policy_for(behavior_of(agent_id))

    def policy_for(self, behavior: str) -> str:
        """The policy ``policy_mapping`` names for the behavior (with its team, or every team of its
        name, as mlagents-learn's settings name it), else :func:`default_policy_id`."""
        return (
            self.mapping.get(behavior)
            or self.mapping.get(behavior_name(behavior))
            or default_policy_id(behavior)
        )


class SelfPlayTeams:
    """Self-play: agent -> (its behavior name's policy, its team), as ML-Agents' ghost trainer pairs them.

    ``policy_mapping`` may name the policy by the behavior's name without its team.
    """

    def __init__(self, mapping: dict[str, str]):
        self.names = PolicyMapping(mapping)

    def __call__(self, agent_id: Any) -> tuple[str, int]:
        behavior = behavior_of(agent_id)
        return self.names.policy_for(behavior_name(behavior)), team_of(behavior)


def observation_space(spec: BehaviorSpec, masked: bool) -> gym.Space:
    """One part per sensor (a Dict by sensor name where there are several): vectors and ray
    perception a Box, cameras and grid sensors an HWC image in [0, 1], a BufferSensor's entities an
    :class:`~envsdk.envs.spaces.EntitySet` (read by entity attention); the action mask beside them."""
    parts: dict[str, gym.Space] = {}
    for obs in spec.observations:
        if obs.variable_size:
            parts[obs.name] = EntitySet(*obs.shape)
            continue
        low, high = (0.0, 1.0) if obs.visual else (-np.inf, np.inf)
        parts[obs.name] = gym.spaces.Box(low, high, obs.shape, np.float32)
    inner = next(iter(parts.values())) if len(parts) == 1 else gym.spaces.Dict(parts)
    if not masked:
        return inner
    mask = gym.spaces.Box(0, 1, (sum(spec.branches),), np.int8)
    return gym.spaces.Dict({OBS_KEY: inner, MASK_KEY: mask})


def action_space(spec: BehaviorSpec) -> gym.Space:
    continuous = gym.spaces.Box(-1.0, 1.0, (spec.continuous,), np.float32) if spec.continuous else None
    if len(spec.branches) == 1:
        discrete: gym.Space | None = gym.spaces.Discrete(spec.branches[0])
    elif spec.branches:
        discrete = gym.spaces.MultiDiscrete(list(spec.branches))
    else:
        discrete = None
    if continuous is not None and discrete is not None:
        return gym.spaces.Tuple((continuous, discrete))
    space = continuous if continuous is not None else discrete
    if space is None:
        raise PlayerError(f"behavior '{spec.name}' declares no actions: there is nothing to train")
    return space


def to_action(spec: BehaviorSpec, action: Any, mapping: str) -> Action:
    """RLlib's action for one agent -> what the game gets: continuous values into [-1, 1] by
    ``mapping`` (:data:`~unity_bridge.settings.CONTINUOUS_ACTIONS`)."""
    if spec.continuous and spec.branches:
        continuous = to_unity_range(np.asarray(action[0], np.float32), mapping)
        return Action(continuous=continuous, discrete=np.atleast_1d(action[1]))
    if spec.continuous:
        return Action(continuous=to_unity_range(np.asarray(action, np.float32), mapping))
    return Action(discrete=np.atleast_1d(action))


class UnityEnv(RLlibHooks, TaskSettable, MultiAgentEnv):
    """A Unity player as an RLlib multi-agent env (``env: unity`` in a YAML file).

    The curriculum task is the dict of environment parameters sent to the game.
    """

    env_callbacks: ClassVar[dict[str, Any]] = {"on_sample_end": log_unity_metrics}
    build_in_dry_run: ClassVar[bool] = False  # building one launches the game
    stable_agent_ids: ClassVar[bool] = False  # Unity gives every agent a new id each episode
    steps_in_another_process: ClassVar[bool] = True  # the player computes the frame
    group_reward_in_rewards: ClassVar[bool] = True  # each member's reward holds its group's (run: POCA)
    # RLlib's action normalisation keeps per-agent-id spaces, but Unity agent ids change every
    # episode; continuous actions are brought into [-1, 1] here instead (Unity passes on whatever
    # it gets), by env_config continuous_actions, and RLlib trains on the unclipped sample.
    # A crashed game's runner waits delay_between_env_runner_restarts_s before RLlib restarts it
    # (60 s, for Ray's logs and a cluster's back-pressure): a game that crashes now and then would
    # lose a minute per crash per runner; a new player starts in seconds.
    config_defaults: ClassVar[dict[str, Any]] = {
        "normalize_actions": False,
        "clip_actions": False,
        "delay_between_env_runner_restarts_s": GAME_RESTART_DELAY_S,
    }

    def __init__(self, env_config: dict[str, Any] | None = None):
        super().__init__()  # type: ignore[no-untyped-call]  # RLlib's MultiAgentEnv
        env_config = env_config if env_config is not None else {}
        settings = LaunchSettings.from_config(env_config)
        self.worker_index = getattr(env_config, "worker_index", 0) or 0
        # RLlib hands every sub-env of one env runner the same context (vector_index 0), so
        # the slot among this process's games of that runner is counted here.
        self.slot = _claim_slot(self.worker_index)
        settings, worker_id = settings.for_worker(self.worker_index, self.slot)
        self.settings = settings
        # An unresolved `auto` (an env built outside train.py): a Gaussian policy's mapping.
        self._mapping = continuous_mapping(settings.continuous_actions, "")
        try:
            self.game = UnityEnvironment(settings, worker_id=worker_id, search=[Path.cwd()], notice=notice)
        except BaseException:
            _slots.discard((self.worker_index, self.slot))
            raise
        try:
            first = self.game.wait_for_agents(self.game.reset())
        except BaseException:
            self.close()
            raise
        self._masked = {
            b: bool(spec.branches) and any(s.mask is not None for s in first if s.behavior == b)
            for b, spec in self.game.specs.items()
        }
        self.policy_mapping_fn = PolicyMapping(settings.policy_mapping)
        self._spaces = {
            b: (observation_space(spec, self._masked[b]), action_space(spec))
            for b, spec in self.game.specs.items()
        }
        self.possible_agents = [agent_key(b, 0) for b in self.game.specs]
        self.agents = []
        self.observation_spaces = {a: self._spaces[behavior_of(a)][0] for a in self.possible_agents}
        self.action_spaces = {a: self._spaces[behavior_of(a)][1] for a in self.possible_agents}
        self._carry: list[AgentStep] = first
        self._live: set[str] = set()
        self._starters: set[str] = set()  # agents live at the episode's start that have not ended
        self._last_obs: dict[str, Any] = {}
        self._t = 0
        self._restarts: deque[float] = deque()
        self.restart_count = 0
        self._check_graphics()
        self._check_threads(env_config)

    # ---- spaces and policies ----------------------------------------------

    def get_observation_space(self, agent_id: AgentID) -> gym.Space:
        return self._spaces[behavior_of(agent_id)][0]

    def get_action_space(self, agent_id: AgentID) -> gym.Space:
        return self._spaces[behavior_of(agent_id)][1]

    def policy_specs(self) -> dict[str, tuple[gym.Space, gym.Space]]:
        """Policy id -> (observation space, action space), for train.py's default ``policies``."""
        out: dict[str, tuple[gym.Space, gym.Space]] = {}
        for behavior, spaces in self._spaces.items():
            pid = self.policy_mapping_fn(agent_key(behavior, 0))
            if pid in out and out[pid] != spaces:
                raise PlayerError(f"policy_mapping sends behaviors with different spaces to policy '{pid}'")
            out[pid] = spaces
        return out

    @classmethod
    def self_play_teams(cls, env_config: dict[str, Any]) -> SelfPlayTeams:
        """Teams from ``Behavior?team=N``; both teams of one behavior play its policy."""
        return SelfPlayTeams(LaunchSettings.from_config(env_config).policy_mapping)

    @classmethod
    def prepare_env_config(cls, env_config: dict[str, Any], base_dir: Path) -> dict[str, Any]:
        """Check the keys in the driver and make paths absolute for the env runners."""
        return {**env_config, **LaunchSettings.from_config(env_config).resolved_paths(base_dir)}

    @classmethod
    def for_algorithm(cls, env_config: dict[str, Any], algorithm: str) -> dict[str, Any]:
        """``continuous_actions: auto`` made concrete for the algorithm (recorded in checkpoints, so
        that rollouts and brains map actions as training did)."""
        setting = LaunchSettings.from_config(env_config).continuous_actions
        return {**env_config, "continuous_actions": continuous_mapping(setting, algorithm)}

    def get_task(self) -> dict[str, float | Sampler]:
        """The environment parameters last sent to the game: numbers and samplers."""
        return dict(self.game.parameters)

    def set_task(self, task: dict[str, Any]) -> None:
        """Send changed environment parameters; the game applies them when it reads them.

        Values are numbers, samplers or mlagents-learn's sampler mappings; a sampler without a
        seed gets one as at launch (``unity_bridge.samplers.with_seeds`` with env_config ``seed``)."""
        parsed = {key: parse_parameter(value, f"the task's {key}") for key, value in dict(task).items()}
        for key, value in with_seeds(parsed, self.settings.seed).items():
            if self.game.parameters.get(key) != value:
                self.game.set_parameter(key, value)

    # ---- checks made once, in the driver's preflight and in each runner -----

    def _check_graphics(self) -> None:
        visual = [b for b, spec in self.game.specs.items() if any(o.visual for o in spec.observations)]
        if visual and self.settings.no_graphics:
            notice(
                f"no_graphics is on but behavior '{visual[0]}' has visual observations: its frames will be"
                " blank. Set no_graphics: false (with virtual_display: auto on a machine without a screen)."
            )

    def _check_threads(self, env_config: Any) -> None:
        stats = self.game.player_stats()
        limit = thread_limit()
        players = max(1, getattr(env_config, "num_workers", 0))  # one player per env runner
        if stats and limit and stats.threads * players > _THREAD_WARN_FRACTION * limit:
            notice(
                f"{players} players x {stats.threads} threads each come near this user's process limit"
                f" ({limit}); use fewer env runners or raise `ulimit -u`"
            )

    # ---- episodes ------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if not self._carry:
            self._carry = self.game.wait_for_agents(self.game.reset())
        steps, self._carry = self._carry, []
        self._live, self._last_obs, self._t = set(), {}, 0
        obs, infos = {}, {}
        for step in steps:
            if not step.done:
                key = agent_key(step.behavior, step.agent_id)
                obs[key] = self._obs(step)
                infos[key] = self.info_of(step)
                self._live.add(key)
                self._last_obs[key] = obs[key]
        self._starters = set(self._live)
        self.agents = sorted(self._live)  # type: ignore[assignment]  # RLlib: list[Hashable | str]
        return obs, infos

    def step(  # type: ignore[override]  # RLlib's MultiAgentEnv.step clashes with gym.Env.step's types
        self, action_dict: dict[AgentID, Any]
    ) -> tuple[dict, dict, dict, dict, dict]:
        per_behavior: dict[str, dict[int, Action]] = {}
        for key, action in action_dict.items():
            behavior = behavior_of(key)
            per_behavior.setdefault(behavior, {})[int(str(key).rsplit("/", 1)[1])] = to_action(
                self.game.specs[behavior], action, self._mapping
            )
        for behavior, actions in per_behavior.items():
            self.game.set_actions(behavior, actions)
        try:
            steps = self.game.wait_for_agents(self.game.step())
        except PlayerError as err:
            return self._restart_after(err)
        return self._collect(steps)

    def _collect(self, steps: list[AgentStep]) -> _Reply:
        """RLlib's step reply from the agents the game reports: those of the episode that ended, those
        asking for a decision, and whether the episode ends (its round is over, a relay, or the horizon)."""
        reply: _Reply = ({}, {}, {}, {}, {})
        obs, _, terminated, truncated, _ = reply
        round_over = self._end_agents(steps, reply)
        asking = [s for s in steps if not s.done]
        self._t += 1
        relay, cut = self._relay_or_horizon(round_over, asking)
        if round_over or relay:
            self._carry = [s for s in asking if agent_key(s.behavior, s.agent_id) not in obs]
        if not round_over:  # else they all start the next episode
            self._ask_agents(asking, relay, reply)
        if cut or relay:
            self._truncate_live(reply)
        terminated[ALL] = round_over
        truncated[ALL] = cut or relay
        self.agents = sorted(self._live)  # type: ignore[assignment]  # RLlib: list[Hashable | str]
        return reply

    def _end_agents(self, steps: list[AgentStep], reply: _Reply) -> bool:
        """Put the live agents that ended in ``reply``; whether that ends the round (none is left)."""
        obs, rewards, terminated, truncated, infos = reply
        ended = [s for s in steps if s.done and agent_key(s.behavior, s.agent_id) in self._live]
        for step in ended:
            key = agent_key(step.behavior, step.agent_id)
            obs[key], rewards[key], infos[key] = self._obs(step), self.reward_of(step), self.info_of(step)
            terminated[key], truncated[key] = not step.interrupted, step.interrupted
            self._live.discard(key)
            self._starters.discard(key)
            self._last_obs.pop(key, None)
        return bool(ended) and not self._live

    def _relay_or_horizon(self, round_over: bool, asking: list[AgentStep]) -> tuple[bool, bool]:
        """How the episode ends here though its round goes on, as (relay, cut): a relay where every agent
        it started with has ended and every live one asks for a decision, else cut at the horizon."""
        if round_over:
            return False, False
        relay = not self._starters and self._live <= {agent_key(s.behavior, s.agent_id) for s in asking}
        horizon = self.settings.episode_horizon
        cut = not relay and horizon is not None and self._t >= horizon
        return relay, cut

    def _ask_agents(self, asking: list[AgentStep], relay: bool, reply: _Reply) -> None:
        """Put the agents asking for a decision in ``reply``, as live agents of this episode; at a
        relay only those already live (the others start the next episode)."""
        obs, rewards, _, _, infos = reply
        for step in asking:
            key = agent_key(step.behavior, step.agent_id)
            if relay and key not in self._live:
                continue
            obs[key], rewards[key], infos[key] = self._obs(step), self.reward_of(step), self.info_of(step)
            self._live.add(key)
            self._last_obs[key] = obs[key]

    def _truncate_live(self, reply: _Reply) -> None:
        """Truncate every live agent, each with its last observation (ray #49381)."""
        obs, rewards, terminated, truncated, _ = reply
        for key in self._live:
            obs.setdefault(key, self._last_obs[key])
            rewards.setdefault(key, 0.0)
            truncated[key], terminated[key] = True, False
        self._live.clear()

    def _restart_after(self, err: PlayerError) -> tuple[dict, dict, dict, dict, dict]:
        """Replace a crashed or hung player and end the episode as truncated, if the limits allow."""
        self._carry = self.restart_game(err)
        obs = {key: self._last_obs[key] for key in self._live}
        zero = {key: 0.0 for key in self._live}
        truncated = {key: True for key in self._live} | {ALL: True}
        terminated = {key: False for key in self._live} | {ALL: False}
        infos = {key: {"player_restarted": True} for key in self._live}
        self._live.clear()
        self.agents = []
        return obs, zero, terminated, truncated, infos

    def first_agents(self) -> list[AgentStep]:
        """The agents of the game's first frame after a reset (the one the env started with, else a
        new reset): for a sampler that steps :attr:`game` itself (the agents-batched loop)."""
        steps, self._carry = self._carry or self.game.wait_for_agents(self.game.reset()), []
        return steps

    def restart_game(self, err: PlayerError) -> list[AgentStep]:
        """Replace a crashed or hung player, if the restart limits allow (else PlayerError); the
        restarted game's first agents."""
        now = time.monotonic()
        while self._restarts and now - self._restarts[0] > 60.0:
            self._restarts.popleft()
        s = self.settings
        if self.restart_count >= s.max_restarts or len(self._restarts) >= s.max_restarts_per_minute:
            raise PlayerError(
                f"{err}; not restarting it again ({self.restart_count} restarts so far, limits:"
                f" max_restarts={s.max_restarts}, max_restarts_per_minute={s.max_restarts_per_minute})"
            ) from err
        notice(f"Unity player failed ({err}); restarting it")
        self.restart_count += 1
        self._restarts.append(now)
        self.game.restart()  # sends the game's environment parameters again
        return self.game.wait_for_agents(self.game.reset())

    def to_game_action(self, behavior: str, action: Any) -> Action:
        """RLlib's action for an agent of ``behavior`` as the game gets it (:func:`to_action`)."""
        return to_action(self.game.specs[behavior], action, self._mapping)

    def observation(self, step: AgentStep) -> Any:
        """An agent's observation as its behavior's :func:`observation_space` holds it."""
        return self._obs(step)

    def _obs(self, step: AgentStep) -> Any:
        spec = self.game.specs[step.behavior]
        if len(step.obs) == 1:
            inner: Any = step.obs[0]
        else:
            inner = {o.name: value for o, value in zip(spec.observations, step.obs, strict=True)}
        if not self._masked[step.behavior]:
            return inner
        mask = step.mask if step.mask is not None else np.ones(sum(spec.branches), np.int8)
        return {OBS_KEY: inner, MASK_KEY: mask}

    @staticmethod
    def reward_of(step: AgentStep) -> float:
        return float(step.reward + step.group_reward)  # group rewards go to every member (ray #21489)

    @staticmethod
    def info_of(step: AgentStep) -> dict[str, Any]:
        return {"group_id": step.group_id, "group_reward": step.group_reward}

    def close(self) -> None:
        self.game.close()
        _slots.discard((self.worker_index, self.slot))


_slots: set[tuple[int, int]] = set()  # (env runner index, slot) of this process's open games


def _claim_slot(worker_index: int) -> int:
    """The lowest slot no open game of this env runner holds (its port offset and log name)."""
    slot = next(i for i in range(len(_slots) + 1) if (worker_index, i) not in _slots)
    _slots.add((worker_index, slot))
    return slot


class UnityGymEnv(RLlibHooks, TaskSettable, gym.Env):
    """A game with one behavior and one agent as a plain gymnasium env (``env: unity-single``)."""

    reseedable: ClassVar[bool] = False
    reseed_note: ClassVar[str] = "the player gets env_config seed once, at launch"

    def __init__(self, env_config: dict[str, Any] | None = None):
        self.multi = UnityEnv(env_config)
        if len(self.multi.game.specs) != 1:
            names = ", ".join(self.multi.game.specs)
            self.multi.close()
            raise PlayerError(
                f"unity-single needs a game with one behavior, this one has: {names}; use env: unity"
            )
        ((self.observation_space, self.action_space),) = self.multi._spaces.values()
        self._agent: str | None = None

    prepare_env_config = UnityEnv.prepare_env_config
    for_algorithm = UnityEnv.for_algorithm
    env_callbacks = UnityEnv.env_callbacks
    stable_agent_ids, steps_in_another_process = UnityEnv.stable_agent_ids, UnityEnv.steps_in_another_process
    build_in_dry_run = UnityEnv.build_in_dry_run
    config_defaults: ClassVar[dict[str, Any]] = {"delay_between_env_runner_restarts_s": GAME_RESTART_DELAY_S}

    def get_task(self) -> dict[str, float | Sampler]:
        return self.multi.get_task()

    def set_task(self, task: dict[str, Any]) -> None:
        self.multi.set_task(task)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        obs, infos = self.multi.reset(seed=seed, options=options)
        if len(obs) != 1:
            raise PlayerError(f"unity-single needs one agent, the game has {len(obs)}; use env: unity")
        ((self._agent, value),) = obs.items()
        return value, infos[self._agent]

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, rewards, terminated, truncated, infos = self.multi.step({self._agent: action})
        key = self._agent  # the only agent: every round that reaches us is its decision or its end
        return (
            obs[key], rewards.get(key, 0.0), bool(terminated.get(key, False)),
            bool(truncated.get(key, False) or truncated[ALL]), infos.get(key, {}),
        )  # fmt: skip

    def close(self) -> None:
        self.multi.close()
