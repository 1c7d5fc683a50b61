"""Curriculum learning on Ray 2.60 (which dropped ``env_task_fn``).

The YAML key ``curriculum: module.fn`` (legacy name ``env_task_fn``) names
``fn(train_results, task_settable_env, env_ctx) -> task``.  After each
training iteration :func:`apply_curriculum` calls it for every env copy on
every env runner and calls ``set_task`` where the task changes.  The results
passed in also carry the Ray 1.x names (``timesteps_total``,
``episode_reward_mean``) so seed-era curriculum functions run unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.rllib.env.env_context import EnvContext

from envsdk.config import legacy
from envsdk.envs.base import TaskSettable
from envsdk.envs.imports import import_ref


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
