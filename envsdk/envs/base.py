"""Base classes for new environments.

Each class is a thin layer over the gymnasium / RLlib API that fixes the
conventions this tool relies on:

* the constructor takes one ``config`` dict (the YAML's ``env_config``);
* curriculum envs expose ``get_task``/``set_task`` (the Ray 1.x
  ``TaskSettableEnv`` contract, removed from Ray 2.60);
* action-masking envs return ``{"observations": ..., "action_mask": ...}`` so
  the default models can honour the mask;
* what an env tells train.py beyond that (config defaults, callbacks, policies,
  whether a dry run may build it) is declared once, in :class:`RLlibHooks`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv as _RLlibMultiAgentEnv

# Re-exported: users and our modules import them from here.
from envsdk.envs.keys import MASK_KEY as MASK_KEY
from envsdk.envs.keys import OBS_KEY as OBS_KEY
from envsdk.envs.keys import has_action_mask as has_action_mask


class RLlibHooks:
    """What an env class may tell train.py beyond the gymnasium/RLlib API, with the defaults.

    Inherit it and override what your env needs (``UnityEnv`` does).  train.py
    reads these only through :func:`hooks`, so an env without the mixin gets
    the defaults below.
    """

    build_in_dry_run: ClassVar[bool] = True
    """Whether ``--dry-run`` may build the env (False: building it launches something, e.g. a game)."""

    config_defaults: ClassVar[dict[str, Any]] = {}
    """RLlib config values this env needs unless the YAML sets them (``{"normalize_actions": False}``)."""

    env_callbacks: ClassVar[dict[str, Callable[..., Any]]] = {}
    """RLlib callback event -> function, run beside the user's (e.g. ``on_sample_end`` game stats)."""

    reseedable: ClassVar[bool] = True
    """Whether ``reset(seed=...)`` reseeds the env; False turns ``envsdk check``'s reseed failures into
    a warning (a Unity player takes its seed once, at launch)."""

    reseed_note: ClassVar[str] = "by design"
    """Why the env cannot be reseeded, for that warning."""

    steps_in_another_process: ClassVar[bool] = False
    """Whether ``step`` mostly waits on another process (a game, a simulator server): an env runner's
    copies then step at once, in threads (substitution ``games-at-once``); False where it computes."""

    stable_agent_ids: ClassVar[bool] = True
    """Whether agent ids repeat from episode to episode; False (a Unity game gives each agent a new id
    every episode) drops RLlib's per-agent-id metrics, which would grow without bound."""

    @classmethod
    def prepare_env_config(cls, env_config: dict[str, Any], base_dir: Path) -> dict[str, Any]:
        """Check ``env_config`` in the driver, before Ray starts, and return what the env runners get.

        ``base_dir`` is the YAML file's folder (for relative paths).  Default: unchanged.
        """
        return env_config

    @classmethod
    def for_algorithm(cls, env_config: dict[str, Any], algorithm: str) -> dict[str, Any]:
        """``env_config`` completed for the algorithm that trains on the env (``PPO``, ``SAC``, ...),
        after :meth:`prepare_env_config`: what the env must know of the policy (a Unity game: how a
        squashed policy's continuous actions reach it).  Default: unchanged."""
        return env_config

    @classmethod
    def self_play_teams(cls, env_config: dict[str, Any]) -> Callable[[Any], tuple[str, int]] | None:
        """Self-play: a picklable ``agent id -> (policy, team)``; the policy is the one both teams share.

        None (the default): the YAML's ``self_play.teams`` says, and the run's policy mapping.
        """
        return None

    def policy_specs(self) -> dict[str, tuple[gym.Space, gym.Space]] | None:
        """Multi-agent: policy id -> (observation space, action space), the default ``policies``.

        None (the default): one policy per agent, or ``default_policy`` for a single agent.
        """
        return None


_DEFAULT_HOOKS = RLlibHooks()


def hooks(env: Any) -> Any:
    """``env`` (a class or an instance) if it declares :class:`RLlibHooks`, else their defaults."""
    declares = isinstance(env, RLlibHooks) or (isinstance(env, type) and issubclass(env, RLlibHooks))
    return env if declares else _DEFAULT_HOOKS


class Env(RLlibHooks, gym.Env):
    """A single-agent environment configured from ``env_config``.

    Subclasses set ``observation_space`` and ``action_space`` in ``__init__``
    and implement gymnasium's ``reset(seed=, options=)`` and ``step(action)``;
    they may override any of :class:`RLlibHooks`.
    """

    def __init__(self, config: dict[str, Any] | None = None):
        super().__init__()
        self.config: dict[str, Any] = dict(config or {})


class MultiAgentEnv(RLlibHooks, _RLlibMultiAgentEnv):
    """A multi-agent environment (RLlib's API) configured from ``env_config``.

    Set ``self.agents``/``self.possible_agents`` and the per-agent
    ``observation_spaces``/``action_spaces`` dicts; ``reset`` and ``step``
    return per-agent dicts, with ``"__all__"`` in the terminated/truncated dicts.
    Override :meth:`RLlibHooks.self_play_teams` for self-play.
    """

    def __init__(self, config: dict[str, Any] | None = None):
        super().__init__()  # type: ignore[no-untyped-call]  # RLlib's MultiAgentEnv
        self.config: dict[str, Any] = dict(config or {})


class TaskSettable(abc.ABC):
    """Mixin for curriculum learning: a task (difficulty) that training can change.

    The YAML key ``curriculum: module.fn`` names a function
    ``fn(train_results, env, env_ctx) -> task`` called after every training
    iteration for every environment copy; when the task it returns differs
    from ``get_task()``, ``set_task`` is called with it.
    """

    @abc.abstractmethod
    def get_task(self) -> Any:
        """The current task."""

    @abc.abstractmethod
    def set_task(self, task: Any) -> None:
        """Switch to ``task``; takes effect from the next ``reset``."""


class CurriculumEnv(TaskSettable, Env):
    """A single-agent env whose task the curriculum function sets."""


class ActionMaskEnv(Env):
    """An env that forbids some actions in some states.

    Observations are dicts ``{"observations": obs, "action_mask": mask}``
    with one mask entry per choice of every discrete part of the action, in
    the action space's order: ``n`` for a ``Discrete(n)``, the sum of the
    branch sizes for a ``MultiDiscrete``, and only the discrete parts of a
    hybrid ``Tuple(Box, Discrete)``; ``mask[i] == 1`` means allowed.  Build
    the space with :meth:`masked_space` and each observation with
    :meth:`masked`.  The default models of PPO, APPO, IMPALA, DQN and SAC
    (``Discrete`` actions) never pick a masked action.
    """

    @staticmethod
    def masked_space(inner: gym.Space, action_space: gym.Space) -> gym.spaces.Dict:
        from envsdk.envs.spaces import mask_size

        mask = gym.spaces.Box(0, 1, shape=(mask_size(action_space),), dtype=np.int8)
        return gym.spaces.Dict({OBS_KEY: inner, MASK_KEY: mask})

    @abc.abstractmethod
    def action_mask(self) -> np.ndarray:
        """1 for allowed choices, 0 for forbidden ones, in the current state."""

    def masked(self, obs: Any) -> dict[str, Any]:
        return {OBS_KEY: obs, MASK_KEY: np.asarray(self.action_mask(), dtype=np.int8)}
