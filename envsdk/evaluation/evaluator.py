"""Running a restored policy for whole episodes and keeping what happened.

New API stack checkpoints run through RLlib's own env runner classes
(``SingleAgentEnvRunner`` / ``MultiAgentEnvRunner``), built from the
checkpoint's config with its connector state restored, so observations go
through exactly the pipeline they went through in training (ray #53588), and
multi-agent checkpoints need no ``compute_single_action`` (#44475).  The
module is put in eval mode first (#61961: dropout/batch-norm).  Old API stack
(ModelV2) checkpoints run through their restored ``Policy`` objects with the
same preprocessor and observation filter as training.

:class:`Evaluator` does one worker's share; ``rollout`` runs several as Ray
actors for ``--num-workers N``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import tree

from envsdk.envs.time_limit import limit, own_limit
from envsdk.errors import reports_whole, root_cause
from envsdk.evaluation.opponents import LATEST_WEIGHTS, Opponent, self_play_policies
from envsdk.evaluation.opponents import apply as apply_opponent
from envsdk.evaluation.recording import HUMAN, RENDER, Recorder, Window, enable_rgb_render, wrap
from envsdk.evaluation.restore import Restored
from envsdk.internals import ENV_RUNNER_DIR
from envsdk.training.hooks.observation_filter import RAW_OBSERVATIONS, freeze_observation_filter
from envsdk.training.hooks.self_play import episode_games

AGENT = "agent"  # the one agent's id in single-agent records
# Steps after which rollout.py ends an episode of an env that has no time limit of its own (a greedy
# policy may never end one): reached in seconds on a fast env, with a live line on a slow one.
DEFAULT_EPISODE_CAP = 10_000


@dataclass
class Trace:
    """One agent's part of one episode: T actions, T+1 observations."""

    obs: Any  # batched: arrays (or dicts/tuples of arrays) with a leading T+1 axis
    actions: Any  # batched, leading T axis
    rewards: np.ndarray
    infos: list[dict]
    terminated: bool
    truncated: bool

    @property
    def ret(self) -> float:
        return float(np.sum(self.rewards))


@dataclass
class EpisodeRecord:
    """One episode; ``complete`` is False for the one cut short by --steps."""

    agents: dict[str, Trace]
    length: int  # env steps
    complete: bool
    video: Path | None = None
    capped: bool = False  # ended by rollout.py's cap (--max-episode-steps), not by the env
    games: dict[str, float] = field(default_factory=dict)  # self-play: policy -> 1 win, 0.5 draw, 0 loss

    @property
    def ret(self) -> float:
        return sum(t.ret for t in self.agents.values())


@dataclass(kw_only=True)
class EvalSpec:
    """Everything a worker needs; pickled to remote evaluation actors."""

    restored: Restored
    explore: bool = False
    seed: int | None = None
    video_dir: Path | None = None
    frames: tuple[str, tuple] | None = None  # (source, observation key path)
    render: bool = False
    num_workers: int = 0
    num_gpus_per_worker: float = 0.0
    opponent: Opponent | None = None  # self-play checkpoints: whom the other teams play (default latest)
    max_episode_steps: int | None = None  # --max-episode-steps; None: the env's own limit, else the default
    # --policy: a function of an observation acts instead of the checkpoint's policy
    scripted: Callable[[Any], Any] | None = None


def _batch(items: list[Any]) -> Any:
    """List of per-step structures -> structure of stacked arrays; where the steps differ in shape
    (RLlib's ``Repeated`` space: lists of varying length), an object array of the steps."""
    if not items:
        return np.zeros((0,), dtype=np.float32)
    try:
        return tree.map_structure(lambda *xs: np.stack([np.asarray(x) for x in xs]), *items)
    except (ValueError, TypeError):
        ragged = np.empty(len(items), dtype=object)
        ragged[:] = items
        return ragged


class EnvCreator:
    """``env_config -> env`` for evaluation: the run's env plus video capture or a window."""

    def __init__(self, spec: EvalSpec, worker: int):
        self.spec = spec
        self.worker = worker
        self.cap_steps: int | None = None  # the cap on the envs built (see cap)

    @property
    def __name__(self) -> str:  # the env's: what the env guard's findings call it
        return self.spec.restored.env.name

    def make_plain(self, env_config: dict[str, Any], render_mode: str | None) -> Any:
        resolved = self.spec.restored.env
        if render_mode != HUMAN:  # pygame-drawn envs: no window, no sound card wanted
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        if resolved.creator is None and render_mode:  # gymnasium id
            return resolved.make({**env_config, "render_mode": render_mode})
        env = resolved.make(env_config)
        if render_mode == "rgb_array":
            enable_rgb_render(env)
        elif render_mode == HUMAN and hasattr(env.unwrapped, "render_mode"):
            env.unwrapped.render_mode = HUMAN
        return env

    def cap(self, env: Any) -> int | None:
        """The steps after which rollout.py cuts ``env``'s episodes: ``--max-episode-steps``,
        else none where the env has a time limit of its own, else :data:`DEFAULT_EPISODE_CAP`."""
        if self.spec.max_episode_steps:
            return self.spec.max_episode_steps
        return None if own_limit(env) else DEFAULT_EPISODE_CAP

    def make_capped(self, env_config: dict[str, Any], render_mode: str | None) -> Any:
        env = self.make_plain(env_config, render_mode)
        self.cap_steps = steps = self.cap(env)
        return limit(env, steps) if steps else env

    def __call__(self, env_config: Any = None) -> Any:
        spec = self.spec
        config = dict(env_config or {})
        if spec.render:
            return wrap(self.make_capped(config, HUMAN), Window())
        if spec.video_dir is None or spec.frames is None:
            return self.make_capped(config, None)
        source, path = spec.frames
        env = self.make_capped(config, "rgb_array" if source == RENDER else None)
        fps = float((getattr(env, "metadata", None) or {}).get("render_fps") or 30)
        recorder = Recorder(spec.video_dir, f"w{self.worker:03d}", source, path, fps)
        return wrap(env, recorder)


class _SaidWhole(logging.Filter):
    """Drops RLlib's log of an env step that failed with a fault that names itself (an env's,
    from the env guard): rollout.py's command line says it in its own line."""

    def filter(self, record: logging.LogRecord) -> bool:
        err = record.exc_info[1] if record.exc_info else None
        return not reports_whole(err)


@contextlib.contextmanager
def _faults_whole() -> Iterator[None]:
    """A fault that names itself (the env guard's, the divergence guard's) raised as it is, not
    inside RLlib's bare ``RuntimeError`` around it: a Ray actor's caller (``--num-workers``) gets
    it whole, without the chain that pickling drops."""
    try:
        yield
    except Exception as err:
        fault = root_cause(err)
        if fault is err or not reports_whole(fault):
            raise
        raise fault from None


class Evaluator:
    """One evaluation worker (in-process, or a Ray actor for --num-workers)."""

    def __init__(
        self,
        spec: EvalSpec,
        worker: int = 0,
        on_episode: Callable[[EpisodeRecord], None] | None = None,
        on_step: Callable[[int, float], None] | None = None,
    ):
        self.spec = spec
        self.worker = worker
        self.report = on_episode or (lambda record: None)
        self.on_step = on_step or (lambda steps, ret: None)  # the episode so far: its steps and return
        self.creator = EnvCreator(spec, worker)
        self._runner: Any = None
        self._loop: _EnvLoop | None = None
        if spec.scripted is not None:
            self._loop = _ScriptedLoop(spec, self.creator, worker, spec.scripted)
        elif spec.restored.new_stack:
            self._runner = self._make_env_runner()
        else:
            self._loop = _PolicyLoop(spec, self.creator, worker)

    def _make_env_runner(self) -> Any:
        from ray.rllib.core import DEFAULT_MODULE_ID
        from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule
        from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
        from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

        from envsdk.training.substitutes.sampling.batched_runner import BatchedEnvRunner

        rllib_log = logging.getLogger("ray.rllib")  # where RLlib's env runners log a failed step
        if not any(isinstance(f, _SaidWhole) for f in rllib_log.filters):
            rllib_log.addFilter(_SaidWhole())
        restored, spec = self.spec.restored, self.spec
        config = restored.config.copy(copy_frozen=False)
        config.environment(env=self.creator, env_config=restored.env_config)
        config.env_runners(
            num_env_runners=spec.num_workers,
            num_envs_per_env_runner=1,
            num_gpus_per_env_runner=spec.num_gpus_per_worker,
            gym_env_vectorize_mode="sync",  # one env of ours (video, window), however training stepped them
        )
        config.debugging(seed=spec.seed)
        freeze_observation_filter(config)
        # Announce each episode as it ends (one sample() call keeps the seeding of
        # a single run: repeated calls would re-seed every episode identically).
        config.callbacks(on_episode_end=self._episode_ended, on_episode_step=self._episode_step)
        cls = config.env_runner_cls
        if cls is None or issubclass(cls, BatchedEnvRunner):  # RLlib's loop reports each episode as it ends
            cls = MultiAgentEnvRunner if restored.multi_agent else SingleAgentEnvRunner
        runner = cls(config=config, worker_index=self.worker, num_workers=spec.num_workers)
        runner.restore_from_path(restored.checkpoint / ENV_RUNNER_DIR)
        if runner.module is None:
            raise RuntimeError(f"{cls.__name__} built no RLModule for {restored.checkpoint}")
        if isinstance(runner.module, MultiRLModule):
            runner.module.restore_from_path(restored.module_dir)
            modules: list[Any] = list(runner.module.values())
        else:  # the single-agent runner holds the one module itself
            runner.module.restore_from_path(restored.module_dir / DEFAULT_MODULE_ID)
            modules = [runner.module]
        if self_play_policies(restored.module_dir):
            apply_opponent(runner, spec.opponent or LATEST_WEIGHTS, restored.module_dir)
            modules = list(cast(MultiRLModule, runner.module).values())
        for module in modules:
            if hasattr(module, "eval"):
                module.eval()
        return runner

    def run(self, episodes: int | None = None, steps: int | None = None) -> list[EpisodeRecord]:
        """Play ``episodes`` whole episodes, or ``steps`` env steps in total, then close.

        ``on_episode`` (see the constructor) sees each whole episode as it
        ends; an episode cut short by ``steps`` is reported at the end.
        """
        with _faults_whole():
            if self._loop is not None:
                records = [
                    self._mark_cap(record, truncated)
                    for record, truncated in self._loop.run(episodes, steps, self.report, self.on_step)
                ]
            elif episodes:
                records = self._convert(self._runner.sample(num_episodes=episodes, explore=self.spec.explore))
            else:
                raw = self._runner.sample(num_timesteps=steps, explore=self.spec.explore, force_reset=True)
                records = self._convert(raw)
                records.sort(key=lambda r: not r.complete)  # the cut episode comes last
                for record in records:
                    if not record.complete:
                        self.report(record)
        self.close()
        videos = self._videos()
        for i, record in enumerate(records):
            record.video = videos[i] if i < len(videos) else None
        return records

    def _trace(self, episode: Any) -> Trace:
        """One agent's episode, with the actions as the env received them (RLlib's episodes keep the
        module's, normalized ones)."""
        config = self.spec.restored.config
        actions = _batched(episode.get_actions())
        raw = episode.custom_data.get(RAW_OBSERVATIONS)  # an observation filter changed the episode's
        return _trace(
            episode,
            env_actions(actions, episode.action_space, config.normalize_actions, config.clip_actions),
            _batch(raw) if raw else None,
        )

    def _record(self, episode: Any) -> EpisodeRecord:
        if self.spec.restored.multi_agent:
            agents = {str(aid): self._trace(e) for aid, e in episode.agent_episodes.items()}
            games = episode_games(episode) if episode.is_done else {}
            record = EpisodeRecord(agents, int(episode.env_steps()), bool(episode.is_done), games=games)
        else:
            record = EpisodeRecord({AGENT: self._trace(episode)}, len(episode), bool(episode.is_done))
        return self._mark_cap(record, bool(episode.is_truncated))

    def _mark_cap(self, record: EpisodeRecord, truncated: bool) -> EpisodeRecord:
        """Whether our cap, not the env, ended the episode (truncated at exactly the cap)."""
        cap = self.creator.cap_steps
        record.capped = bool(truncated and cap and record.length == cap)
        return record

    def _episode_step(self, *, episode: Any, **_: Any) -> None:
        steps = episode.env_steps() if self.spec.restored.multi_agent else len(episode)
        self.on_step(int(steps), float(episode.get_return()))

    def _episode_ended(self, *, episode: Any, **_: Any) -> None:
        record = self._record(episode)
        if record.length:
            self.report(record)

    def _convert(self, raw: list[Any]) -> list[EpisodeRecord]:
        records = [self._record(e) for e in raw]
        return [r for r in records if r.length > 0]

    def _videos(self) -> list[Path]:
        if self.spec.video_dir is None:
            return []
        return sorted(Path(self.spec.video_dir).glob(f"w{self.worker:03d}_*.mp4"))

    def close(self) -> None:
        """End the envs (and any game processes behind them); safe to call twice."""
        if self._runner is not None:
            self._runner.stop()
            self._runner = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None


def env_actions(actions: Any, space: Any, normalize: bool, clip: bool) -> Any:
    """A module's actions (batched or not) as RLlib's connector sends them to the env."""
    if not (normalize or clip):
        return actions
    from ray.rllib.utils.spaces.space_utils import clip_action, get_base_struct_from_space, unsquash_action

    struct = get_base_struct_from_space(space)
    return unsquash_action(actions, struct) if normalize else clip_action(actions, struct)


def _batched(values: Any) -> Any:
    return _batch(list(values)) if isinstance(values, list) else values


def _trace(episode: Any, actions: Any, observations: Any = None) -> Trace:
    return Trace(
        obs=_batched(episode.get_observations()) if observations is None else observations,
        actions=actions,
        rewards=np.asarray(episode.get_rewards(), dtype=np.float64),
        infos=list(episode.get_infos()),
        terminated=bool(episode.is_terminated),
        truncated=bool(episode.is_truncated),
    )


class _TraceBuilder:
    def __init__(self) -> None:
        self.obs: list[Any] = []
        self.actions: list[Any] = []
        self.rewards: list[float] = []
        self.infos: list[dict] = []
        self.terminated = self.truncated = False

    def build(self) -> Trace:
        return Trace(
            _batch(self.obs),
            _batch(self.actions),
            np.asarray(self.rewards, dtype=np.float64),
            self.infos,
            self.terminated,
            self.truncated,
        )


class _EnvLoop(ABC):
    """Episodes played on the env directly, each agent's action from :meth:`_act`."""

    def __init__(self, spec: EvalSpec, creator: EnvCreator, worker: int):
        from ray.rllib.env.env_context import EnvContext

        restored = spec.restored
        self.spec = spec
        self.env = creator(EnvContext(restored.env_config, worker_index=worker, num_workers=spec.num_workers))
        self.multi = restored.multi_agent
        self.seed = None if spec.seed is None else spec.seed + 1000 * worker

    @abstractmethod
    def _act(self, agent: str, obs: Any, state: dict[str, list]) -> Any:
        """``agent``'s action at ``obs``; ``state`` keeps what the policy carries between steps."""

    def run(
        self,
        episodes: int | None,
        steps: int | None,
        report: Callable[[EpisodeRecord], None],
        on_step: Callable[[int, float], None],
    ) -> list[tuple[EpisodeRecord, bool]]:
        """The episodes played, each with whether the env truncated it."""
        records: list[tuple[EpisodeRecord, bool]] = []
        total = 0
        while (episodes and len(records) < episodes) or (steps and total < steps):
            record, truncated = self._episode(None if steps is None else steps - total, on_step)
            total += record.length
            records.append((record, truncated))
            report(record)
        return records

    def _episode(
        self, budget: int | None, on_step: Callable[[int, float], None]
    ) -> tuple[EpisodeRecord, bool]:
        seed, self.seed = self.seed, None if self.seed is None else self.seed + 1
        obs, infos = self.env.reset(seed=seed)
        if not self.multi:
            obs, infos = {AGENT: obs}, {AGENT: infos}
        traces: dict[str, _TraceBuilder] = {}
        for aid, o in obs.items():
            traces.setdefault(aid, _TraceBuilder()).obs.append(o)
            traces[aid].infos.append(infos.get(aid, {}))
        rnn: dict[str, list] = {}
        length, done, truncated, ret = 0, False, False, 0.0
        while not done and (budget is None or length < budget):
            actions = {aid: self._act(aid, o, rnn) for aid, o in obs.items()}
            if self.multi:
                obs, rewards, terms, truncs, infos = self.env.step(actions)
                done, truncated = (
                    bool(terms.get("__all__") or truncs.get("__all__")),
                    bool(truncs.get("__all__")),
                )
            else:
                step = self.env.step(actions[AGENT])
                obs, rewards, terms, truncs, infos = ({AGENT: value} for value in step)
                done, truncated = bool(terms[AGENT] or truncs[AGENT]), bool(truncs[AGENT])
            length += 1
            ret += float(sum(rewards.values()))
            on_step(length, ret)
            for aid, action in actions.items():
                traces[aid].actions.append(action)
                traces[aid].rewards.append(float(rewards.get(aid, 0.0)))
            for aid, o in obs.items():
                trace = traces.setdefault(aid, _TraceBuilder())
                trace.obs.append(o)
                trace.infos.append(infos.get(aid, {}))
                trace.terminated = bool(terms.get(aid, False))
                trace.truncated = bool(truncs.get(aid, False))
        return EpisodeRecord({aid: t.build() for aid, t in traces.items()}, length, done), truncated

    def close(self) -> None:
        self.env.close()


class _PolicyLoop(_EnvLoop):
    """Old API stack: restored ``Policy`` objects act on the env directly."""

    def __init__(self, spec: EvalSpec, creator: EnvCreator, worker: int):
        from ray.rllib.models import ModelCatalog
        from ray.rllib.policy.policy import Policy

        super().__init__(spec, creator, worker)
        restored = spec.restored
        self.policies = cast(dict[str, Policy], Policy.from_checkpoint(str(restored.checkpoint)))
        for policy in self.policies.values():
            policy.model.eval()  # type: ignore[attr-defined]  # a TorchPolicyV2
        self.mapping = restored.worker_state.get("policy_mapping_fn")
        self.filters = restored.worker_state.get("filters", {})
        spaces = self.env.observation_spaces if self.multi else {AGENT: self.env.observation_space}
        self.preprocessors = {
            aid: ModelCatalog.get_preprocessor_for_space(space) for aid, space in spaces.items()
        }

    def _policy_id(self, agent: str) -> str:
        return self.mapping(agent, None, None) if self.multi and self.mapping else "default_policy"

    def _act(self, agent: str, obs: Any, state: dict[str, list]) -> Any:
        pid = self._policy_id(agent)
        policy = self.policies[pid]
        x = self.preprocessors[agent].transform(obs)
        flt = self.filters.get(pid)
        if flt is not None and type(flt).__name__ != "NoFilter":
            x = flt(x, update=False)
        rnn = state.setdefault(agent, policy.get_initial_state())
        action, rnn_out, _ = policy.compute_single_action(x, rnn, explore=self.spec.explore)
        state[agent] = rnn_out
        return action


class _ScriptedLoop(_EnvLoop):
    """``rollout.py --policy``: a function of each agent's observation acts."""

    def __init__(self, spec: EvalSpec, creator: EnvCreator, worker: int, function: Callable[[Any], Any]):
        super().__init__(spec, creator, worker)
        self.function = function

    def _act(self, agent: str, obs: Any, state: dict[str, list]) -> Any:
        return self.function(obs)
