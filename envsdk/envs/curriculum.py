"""Curriculum learning on Ray 2.60 (which dropped ``env_task_fn``).

The YAML key ``curriculum: module.fn`` (legacy name ``env_task_fn``) names
``fn(train_results, task_settable_env, env_ctx) -> task``.  After each
training iteration :func:`apply_curriculum` calls it for every env copy on
every env runner and calls ``set_task`` where the task changes.  The results
passed in also carry the Ray 1.x names (``timesteps_total``,
``episode_reward_mean``) so seed-era curriculum functions run unchanged.

``environment_parameters`` (mlagents-learn's lessons, :mod:`envsdk.config.own_keys.environment_parameters`)
reach an env of the user's through :class:`DrawingFactory`: its wrapper calls ``set_task`` with
every parameter's value at each reset, a sampler's value drawn per episode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.env.env_context import EnvContext
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from envsdk.config import legacy
from envsdk.envs.base import TaskSettable
from envsdk.envs.imports import import_ref
from envsdk.envs.multi_agent_wrapper import MultiAgentWrapper
from envsdk.envs.registry import EnvFactory
from envsdk.errors import UserError


def legacy_view(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` plus its Ray 1.x metric names at the top level."""
    view = dict(result)
    for old, new in legacy.METRICS.items():
        node: Any = result
        for part in new.split("/"):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None and "/" not in old:
            view[old] = node
    return view


def sub_environments(env_runner: Any) -> list[Any]:
    """The unwrapped envs of one env runner, in vector-index order."""
    env = getattr(env_runner, "env", None)
    if env is None:
        return []
    # Single-agent runners hold a gymnasium vector env (behind vector wrappers):
    # its sub-envs are in .unwrapped.envs; multi-agent runners hold one env.
    base = getattr(env, "unwrapped", env)
    subs = getattr(base, "envs", None) or [base]
    return [getattr(sub, "unwrapped", sub) for sub in subs]


def task_settable_envs(env_runner: Any) -> list[tuple[TaskSettable, int]]:
    """Every TaskSettable env of one env runner, with its vector index."""
    envs = sub_environments(env_runner)
    return [(env, index) for index, env in enumerate(envs) if isinstance(env, TaskSettable)]


def apply_curriculum(*, algorithm: Any, result: dict, ref: str, search: list[str], **_: Any) -> None:
    """``callbacks_on_train_result`` hook installed for ``curriculum:``."""
    view = legacy_view(result)
    folders = [Path(p) for p in search]

    def update(env_runner: Any) -> list[Any]:
        fn = import_ref(ref, folders, what="curriculum function")
        tasks = []
        for env, index in task_settable_envs(env_runner):
            ctx = EnvContext(
                dict(env_runner.config.env_config),
                worker_index=env_runner.worker_index,
                vector_index=index,
            )
            task = fn(view, env, ctx)
            if task != env.get_task():
                env.set_task(task)
            tasks.append(env.get_task())
        return tasks

    tasks = algorithm.env_runner_group.foreach_env_runner(update, local_env_runner=True)
    current = [t for runner_tasks in tasks for t in runner_tasks]
    if current:
        result.setdefault("curriculum", {})["task"] = current[0]


def task_settable_inside(env: Any) -> TaskSettable | None:
    """The TaskSettable env inside ``env``'s wrappers (gymnasium's, or ours with ``.env``), if any."""
    seen = 0
    while env is not None and seen < 64:
        if isinstance(env, TaskSettable):
            return env
        env, seen = getattr(env, "env", None), seen + 1
    return None


class ParameterDraws:
    """``environment_parameters`` for an env of the user's: at each reset, ``set_task`` gets every
    parameter's value, a sampler's drawn afresh (mlagents-learn's games draw once per episode).

    Mixed into a gymnasium wrapper (:class:`DrawingWrapper`) or our multi-agent one
    (:class:`MultiAgentDrawingWrapper`).  Each sampler draws from its own generator, seeded from
    its seed and the env's ``(worker_index, vector_index)``: copies of the env draw different
    values, and a run with the same seeds draws the same ones.
    """

    env: Any

    def start_draws(self, values: dict[str, Any], place: tuple[int, int]) -> None:
        self.task_env = task_settable_inside(self.env)
        if self.task_env is None:
            raise UserError(
                f"environment_parameters need an env with set_task: {type(self.env).__name__} has none",
                "subclass envsdk.TaskSettable (or envsdk.CurriculumEnv) and implement set_task(dict)",
            )
        self.place = place
        self.generators: dict[Any, np.random.Generator] = {}
        self.values = dict(values)

    def set_values(self, values: dict[str, Any]) -> None:
        """The values from the next reset on (a lesson changed)."""
        self.values = dict(values)

    def draw(self) -> dict[str, float]:
        from unity_bridge.samplers import Sampler  # here: a gym run imports no Unity bridge

        task = {}
        for name, value in self.values.items():
            if isinstance(value, Sampler):
                rng = self.generators.get(value)
                if rng is None:
                    rng = self.generators[value] = np.random.default_rng([max(value.seed, 0), *self.place])
                task[name] = value.draw(rng)
            else:
                task[name] = float(value)
        return task


class DrawingWrapper(ParameterDraws, gym.Wrapper):
    def __init__(self, env: gym.Env, values: dict[str, Any], place: tuple[int, int]):
        gym.Wrapper.__init__(self, env)
        self.start_draws(values, place)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        self.task_env.set_task(self.draw())  # type: ignore[union-attr]
        return self.env.reset(seed=seed, options=options)


class MultiAgentDrawingWrapper(ParameterDraws, MultiAgentWrapper):
    def __init__(self, env: Any, values: dict[str, Any], place: tuple[int, int]):
        MultiAgentWrapper.__init__(self, env)
        self.start_draws(values, place)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.task_env.set_task(self.draw())  # type: ignore[union-attr]
        return super().reset(seed=seed, options=options)


class DrawingFactory(EnvFactory):
    """Picklable env creator: ``inner``'s env inside the wrapper that draws its parameters."""

    def __init__(self, inner: EnvFactory, values: dict[str, Any]):
        super().__init__(
            inner.target, inner.name, inner.max_episode_steps, inner.imports, inner.drop_keys, inner.atari
        )
        self.values = values

    def __call__(self, env_config: dict | None = None) -> Any:
        env = super().__call__(env_config)
        place = (int(getattr(env_config, "worker_index", 0)), int(getattr(env_config, "vector_index", 0)))
        if isinstance(env, MultiAgentEnv):
            return MultiAgentDrawingWrapper(env, self.values, place)
        return DrawingWrapper(env, self.values, place)


def drawing_wrappers(env_runner: Any) -> list[ParameterDraws]:
    """The :class:`ParameterDraws` wrappers of one env runner's envs."""
    env = getattr(env_runner, "env", None)
    if env is None:
        return []
    base = getattr(env, "unwrapped", env)
    found = []
    for sub in getattr(base, "envs", None) or [env]:
        seen = 0
        while sub is not None and seen < 64:
            if isinstance(sub, ParameterDraws):
                found.append(sub)
                break
            sub, seen = getattr(sub, "env", None), seen + 1
    return found
