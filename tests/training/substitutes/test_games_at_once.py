"""Several games per env runner step at once (envsdk/training/substitutes/sampling/games_at_once.py):
the sub-envs' steps overlap, the vector env's results are those of its own one-after-another
stepping (single- and multi-agent, episodes ending at different steps), errors and the envs it
leaves alone; and a Unity run with several games per runner, and without the substitution."""

from __future__ import annotations

import re
import threading
from types import SimpleNamespace
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.env.vector.sync_vector_multi_agent_env import SyncVectorMultiAgentEnv

from envsdk import substitutions
from envsdk.envs.base import Env, MultiAgentEnv
from envsdk.training.substitutes.sampling.games_at_once import (
    GamesAtOnce,
    SteppedOtherwise,
    step_games_at_once,
)
from tests.helpers import player_pids, progress_rows, trial_dirs

pytestmark = pytest.mark.substitution(substitutions.GAMES_AT_ONCE)


class Counter(Env):
    """A single-agent env whose episodes last ``3 + index`` steps; the observation counts steps."""

    steps_in_another_process: ClassVar[bool] = True
    barrier: ClassVar[threading.Barrier | None] = None  # set: every step waits for its siblings'
    fail_at: ClassVar[int | None] = None

    def __init__(self, config: dict[str, Any] | None = None):
        super().__init__(config)
        self.index = int(self.config.get("index", 0))
        self.observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.t = self.episodes = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, 100 * self.index + self.episodes], np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        self.t, self.episodes = 0, self.episodes + 1
        return self._obs(), {"reset": self.episodes}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.barrier is not None:
            self.barrier.wait()  # raises BrokenBarrierError unless the siblings step meanwhile
        self.t += 1
        if self.fail_at is not None and self.index == 1 and self.t == self.fail_at:
            raise ValueError("the game fell over")
        ended = self.t >= 3 + self.index
        return self._obs(), float(action) + self.index, ended and self.index % 2 == 0, ended, {"t": self.t}


class Cheap(Counter):
    steps_in_another_process: ClassVar[bool] = False


class Teams(MultiAgentEnv):
    """Two agents over a :class:`Counter` each; the episode ends when both have."""

    steps_in_another_process: ClassVar[bool] = True

    def __init__(self, config: dict[str, Any] | None = None):
        super().__init__()
        index = int((config or {}).get("index", 0))
        self.games = {f"a{k}": Counter({"index": index + k}) for k in range(2)}
        self.possible_agents = list(self.games)
        self.agents = list(self.games)
        self.observation_spaces = {a: g.observation_space for a, g in self.games.items()}
        self.action_spaces = {a: g.action_space for a, g in self.games.items()}
        self.live: set[str] = set()

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.live = set(self.games)
        pairs = {a: g.reset() for a, g in self.games.items()}
        return {a: p[0] for a, p in pairs.items()}, {a: p[1] for a, p in pairs.items()}

    def step(self, action_dict: dict) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        obs, rewards, terminated, truncated, infos = {}, {}, {}, {}, {}
        for agent, action in action_dict.items():
            obs[agent], rewards[agent], terminated[agent], truncated[agent], infos[agent] = self.games[
                agent
            ].step(action)
            if terminated[agent] or truncated[agent]:
                self.live.discard(agent)
        terminated["__all__"] = truncated["__all__"] = not self.live
        return obs, rewards, terminated, truncated, infos


def _vector(multi_agent: bool, n: int, cls: type = Counter) -> Any:
    if multi_agent:
        return SyncVectorMultiAgentEnv([lambda i=i: Teams({"index": 2 * i}) for i in range(n)])
    return gym.vector.SyncVectorEnv([lambda i=i: cls({"index": i}) for i in range(n)])


def _actions(env: Any, multi_agent: bool, obs: Any, step: int) -> Any:
    if multi_agent:
        return [{a: (step + k) % 3 for k, a in enumerate(o)} for o in obs]
    return np.array([(step + k) % 3 for k in range(env.num_envs)])


def _run(multi_agent: bool, at_once: bool, steps: int = 14) -> list[Any]:
    env = _vector(multi_agent, 3)
    if at_once:
        step_games_at_once(env_runner=SimpleNamespace(env=env, worker_index=0))
        assert isinstance(env.step.__self__, GamesAtOnce)
    obs, infos = env.reset(seed=0)
    seen = [(obs, infos)]
    for t in range(steps):
        out = env.step(_actions(env, multi_agent, obs, t))
        obs = out[0]
        seen.append(out)
    env.close()
    return seen


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray) and a.dtype == object:
        return _same(list(a), list(b))
    return bool(np.array_equal(a, b))


@pytest.mark.parametrize("multi_agent", [False, True], ids=["single-agent", "multi-agent"])
def test_the_games_step_at_once_and_give_the_vector_envs_own_results(multi_agent: bool) -> None:
    """The same observations, rewards, ends and infos as the vector env's own stepping, step for
    step, through episodes that end at different steps (terminated and truncated, next-step resets)."""
    ours, theirs = _run(multi_agent, at_once=True), _run(multi_agent, at_once=False)
    assert len(ours) == len(theirs)
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert _same(list(a), list(b)), step


@pytest.mark.parametrize("multi_agent", [False, True], ids=["single-agent", "multi-agent"])
def test_each_step_of_the_games_overlaps_the_others(multi_agent: bool) -> None:
    """Every sub-env's step waits at a barrier for its siblings': one after another, the first would
    wait alone and break it."""
    env = _vector(multi_agent, 3)
    obs, _ = env.reset(seed=0)
    Counter.barrier = threading.Barrier(3, timeout=2)  # a game's agents step in its own thread, in turn
    try:
        with pytest.raises(threading.BrokenBarrierError):
            env.step(_actions(env, multi_agent, obs, 0))  # RLlib's and gymnasium's: one after another
        Counter.barrier = threading.Barrier(3, timeout=10)
        env.reset(seed=0)
        step_games_at_once(env_runner=SimpleNamespace(env=env, worker_index=0))
        out = env.step(_actions(env, multi_agent, obs, 0))
        assert len(out[0]) == 3
    finally:
        Counter.barrier = None
        env.close()


def test_a_games_error_reaches_the_runner_after_every_game_answered() -> None:
    env = _vector(False, 3)
    step_games_at_once(env_runner=SimpleNamespace(env=env, worker_index=0))
    env.reset(seed=0)
    Counter.fail_at = 2
    try:
        env.step(np.zeros(3, np.int64))
        with pytest.raises(ValueError, match="the game fell over"):
            env.step(np.zeros(3, np.int64))
        # the others took their step; none keeps a one-shot method
        assert [e.unwrapped.t for e in env.envs] == [2, 2, 2]
        assert all("step" not in e.__dict__ and "reset" not in e.__dict__ for e in env.envs)
    finally:
        Counter.fail_at = None
        env.close()


@pytest.mark.parametrize(("cls", "n"), [(Cheap, 3), (Counter, 1)], ids=["in-process env", "one game"])
def test_envs_that_step_in_this_process_or_alone_are_left_as_they_are(cls: type, n: int) -> None:
    env = _vector(False, n, cls)
    own = env.step
    step_games_at_once(env_runner=SimpleNamespace(env=env, worker_index=0))
    assert env.step == own
    env.close()


def test_the_vector_env_stepping_otherwise_than_predicted_is_an_error() -> None:
    """A vector env whose autoreset is not the next step's would call a sub-env's other method: that
    fails loudly rather than stepping a game twice."""
    same_step = gym.vector.AutoresetMode.SAME_STEP
    makers = [lambda i=i: Counter({"index": i}) for i in range(2)]
    env = gym.vector.SyncVectorEnv(makers, autoreset_mode=same_step)
    step_games_at_once(env_runner=SimpleNamespace(env=env, worker_index=0))
    assert not isinstance(getattr(env.step, "__self__", None), GamesAtOnce)  # not its mode: left alone
    GamesAtOnce(env, multi_agent=False)  # forced onto it
    env.reset(seed=0)
    with pytest.raises(SteppedOtherwise, match="ENVSDK_STOCK=games-at-once"):
        for t in range(5):
            env.step(np.full(2, t % 3))
    env.close()


@pytest.mark.slow
@pytest.mark.parametrize("stock", [False, True], ids=["at-once", "stock"])
def test_a_unity_run_with_several_games_per_runner(train, tmp_path, monkeypatch, stock: bool) -> None:
    """Three games of 4 agents each in train.py's own runner, each crashing at its 100th frame: trains,
    restarts the players (from the games' threads, at once), says which way the games step, and
    leaves no player behind."""
    if stock:
        monkeypatch.setenv(substitutions.STOCK, substitutions.GAMES_AT_ONCE)
    before = player_pids()
    out = train(
        "-f", "configs/unity-chase.yaml", "--env", "unity", "--stop-iters", "1",
        "--config.num_envs_per_env_runner=3", "--config.train_batch_size=600",
        "--config.env_config.additional_args=[--max-steps, '30', --agents, '4', --crash-after, '100']",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    said = "games-at-once: the 3 games of env runner 0 step at the same time" in out.stderr
    assert said is not stock, out.stderr[-2000:]
    steps = re.search(r"after (\d+) env steps", out.stdout)
    assert steps is not None and int(steps.group(1)) >= 600, out.stdout[-1500:]
    (trial,) = trial_dirs(train.results)
    (row,) = progress_rows(trial)
    assert float(row["env_runners/unity/player_restarts"]) >= 1, row
    assert list(trial.glob("checkpoint_000000"))
    assert player_pids() <= before
