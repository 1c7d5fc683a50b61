"""``rollout.py --policy module:function --env ENV``: a scripted player instead of a checkpoint's policy.

The function takes one agent's observation, as the env hands it out, and returns that agent's
action; ``path/to/file.py:function`` names a file as well as ``module:function`` a module.  Before
any episode is played it is imported, found callable, and asked for its action at a first
observation, which must be in the env's action space: each refused in one line naming the function.
The env it plays is read into the same record a checkpoint's is (:class:`Restored`), so the
evaluator, videos and experience files take it alike.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from envsdk.envs.imports import add_to_sys_path, import_ref
from envsdk.envs.registry import resolve_env
from envsdk.errors import UserError
from envsdk.evaluation.evaluator import AGENT
from envsdk.evaluation.restore import Restored

SUBJECT = "the scripted policy"
ALGORITHM = "scripted"  # what the experience file's meta and the summary say played
FORM = "name it module:function or path/to/file.py:function (a function of the observation)"


def load_function(ref: str) -> Callable[[Any], Any]:
    """The function ``ref`` names, imported (a file's folder joins the import path)."""
    module, colon, name = ref.rpartition(":")
    if not colon or not module or not name:
        raise UserError(f"'{ref}' names no function", FORM, SUBJECT)
    search: list[Path] = []
    if module.endswith(".py"):
        path = Path(module).expanduser().resolve()
        if not path.is_file():
            raise UserError(f"{path} does not exist", FORM, SUBJECT)
        search, module = [path.parent], path.stem
    function = import_ref(f"{module}:{name}", search, what="scripted policy")
    if not callable(function):
        raise UserError(f"{ref} is a {type(function).__name__}, not a function", FORM, SUBJECT)
    return function  # type: ignore[no-any-return]  # callable(): any callable object will do


def played(
    env_ref: str,
    env_config: dict[str, Any] | None,
    ref: str,
    function: Callable[[Any], Any],
    seed: int | None,
) -> Restored:
    """The env a scripted player plays, as a checkpoint's is read back (``checkpoint``: the
    function's file, where the played policy comes from), once ``function``'s first action is
    checked on it."""
    from ray.rllib.env.multi_agent_env import MultiAgentEnv

    search = [Path.cwd()]
    add_to_sys_path(search)
    resolved = resolve_env(env_ref, search)
    module, _, _ = ref.rpartition(":")
    source = Path(module).resolve() if module.endswith(".py") else Path.cwd()
    env = resolved.make(dict(env_config or {}))
    multi_agent = isinstance(env, MultiAgentEnv)
    try:
        check_first_action(function, ref, env, multi_agent, seed)
    finally:
        env.close()
    return Restored(
        checkpoint=source,
        algorithm=ALGORITHM,
        new_stack=False,
        config={},
        env=resolved,
        env_config=dict(env_config or {}),
        multi_agent=multi_agent,
        search_paths=search,
    )


def check_first_action(
    function: Callable[[Any], Any], ref: str, env: Any, multi_agent: bool, seed: int | None
) -> None:
    """Ask ``function`` for its action at ``env``'s first observation (of each agent): in the action
    space, or refused in one line naming the function, the value and the space."""
    obs, _ = env.reset(seed=seed)
    firsts = obs if multi_agent else {AGENT: obs}
    for agent, first in firsts.items():
        space = env.get_action_space(agent) if multi_agent else env.action_space
        try:
            action = function(first)
        except Exception as err:
            raise UserError(
                f"{ref} raised {type(err).__name__} at the first observation: {err}",
                "make the function take one observation and return one action",
                SUBJECT,
            ) from err
        if not _contains(space, action):
            whose = f" for agent {agent}" if multi_agent else ""
            raise UserError(
                f"{ref} returned {action!r}{whose}, which is not in the action space {space}",
                f"return a value of {space} (e.g. {_example(space)!r})",
                SUBJECT,
            )


def _example(space: gym.Space) -> Any:
    value = space.sample()
    return value.tolist() if hasattr(value, "tolist") else value


def _contains(space: gym.Space, action: Any) -> bool:
    try:
        return bool(space.contains(action))
    except (TypeError, ValueError, AttributeError, IndexError, KeyError):
        return False
