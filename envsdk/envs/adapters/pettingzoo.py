"""PettingZoo games as RLlib multi-agent envs.

``env:`` may name a PettingZoo module (``pettingzoo.classic.connect_four_v3``: its
``parallel_env`` where it has one, else its ``env``), one of its functions, an id of
PettingZoo's registry (``pettingzoo:classic/connect_four-v3``, :class:`PettingZooMake`), or any
function of the user's that returns an AEC or a Parallel env; the env factory wraps whatever comes
back (:func:`wrap_pettingzoo`).  The adapters are RLlib's own wrappers with what
training needs besides: every possible agent's spaces, in the game's order, live
``agents``, and ``render`` as PettingZoo calls it.  Turn-based (AEC) games report only the
agent to move, as RLlib's turn-based examples do.  Their ``{"observation", "action_mask"}``
observations are laid out as a mask by :mod:`envsdk.envs.observation_layout`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import gymnasium as gym
from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv, PettingZooEnv

from envsdk.errors import UserError, did_you_mean

ENTRY_FUNCTIONS = ("parallel_env", "env")
"""What a PettingZoo module offers, in the order it is taken: simultaneous moves where the game
has them (one step for all agents), else the turn-based AEC env."""


def pettingzoo_target(target: Any, spec: str) -> Any:
    """A PettingZoo module's env function (:data:`ENTRY_FUNCTIONS`); anything else as it is.

    An old version (``pistonball_v5``) is a stand-in module whose functions raise; it is refused here,
    with the version to use."""
    if type(target).__name__ == "DeprecatedModule":
        try:
            target.env()
        except ImportError as err:
            raise UserError(f"env '{spec}': {err}", "name the version it gives in env:") from err
    if not isinstance(target, ModuleType):
        return target
    for name in ENTRY_FUNCTIONS:
        function = getattr(target, name, None)
        if callable(function):
            return function
    return target


@dataclass(frozen=True)
class PettingZooMake:
    """Picklable ``**env_config -> pettingzoo.make(kind, env_id, **env_config)``: the Parallel version
    where the registry has one, else the AEC one."""

    env_id: str

    def __call__(self, **env_config: Any) -> Any:
        import pettingzoo

        kind = "parallel" if self.env_id in pettingzoo.parallel_registry else "aec"
        return pettingzoo.make(kind, self.env_id, **env_config)


def registry_id(env_id: str) -> PettingZooMake:
    """``env_id`` of PettingZoo's registry, or a UserError naming the closest ones."""
    import pettingzoo

    known = sorted(set(pettingzoo.aec_registry) | set(pettingzoo.parallel_registry))
    if env_id not in known:
        raise UserError(
            f"env 'pettingzoo:{env_id}': PettingZoo's registry has no '{env_id}'",
            did_you_mean(env_id, known) or f"its ids: {', '.join(known[:8])}, ...",
        )
    return PettingZooMake(env_id)


def is_pettingzoo(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo AEC or Parallel env (PettingZoo is imported only if it already is)."""
    if "pettingzoo" not in sys.modules:
        return False
    from pettingzoo import AECEnv, ParallelEnv

    return isinstance(env, AECEnv | ParallelEnv)


class _Adapter:
    """What both adapters add to RLlib's wrappers: every possible agent's spaces in the game's order,
    ``agents`` kept live, and ``render`` as PettingZoo calls it.  ``game``: the PettingZoo env."""

    game: Any

    def _describe(self) -> None:
        game: Any = self.game
        self.possible_agents = list(game.possible_agents)
        self.agents = list(game.agents)
        self.observation_spaces = {a: game.observation_space(a) for a in self.possible_agents}
        self.action_spaces = {a: game.action_space(a) for a in self.possible_agents}
        self.observation_space = gym.spaces.Dict(dict(self.observation_spaces))
        self.action_space = gym.spaces.Dict(dict(self.action_spaces))
        self.render_mode = getattr(game, "render_mode", None)
        self.metadata = dict(getattr(game, "metadata", None) or {})

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, infos = super().reset(seed=seed, options=options)  # type: ignore[misc]
        self.agents = list(self.game.agents)
        return dict(obs), {a: infos.get(a, {}) for a in obs} if isinstance(infos, dict) else {}

    def step(self, action: dict) -> tuple[dict, dict, dict, dict, dict]:
        obs, rewards, terminateds, truncateds, infos = super().step(action)  # type: ignore[misc]
        self.agents = list(self.game.agents)
        return obs, rewards, terminateds, truncateds, infos

    def render(self) -> Any:
        return self.game.render()


class TurnBasedGame(_Adapter, PettingZooEnv):  # type: ignore[misc]  # step: RLlib's types vs gym's
    """A PettingZoo AEC env: each step is the move of the agent to move (RLlib's ``PettingZooEnv``)."""

    def __init__(self, env: Any):
        super().__init__(env)  # type: ignore[no-untyped-call]  # RLlib's wrapper
        self.game = env
        self._describe()


class SimultaneousGame(_Adapter, ParallelPettingZooEnv):  # type: ignore[misc]  # as TurnBasedGame
    """A PettingZoo Parallel env: all live agents move at once (RLlib's ``ParallelPettingZooEnv``)."""

    def __init__(self, env: Any):
        super().__init__(env)  # type: ignore[no-untyped-call]  # RLlib's wrapper
        self.game = env
        self._describe()


def wrap_pettingzoo(env: Any) -> TurnBasedGame | SimultaneousGame:
    """An AEC or Parallel env as an RLlib multi-agent env."""
    from pettingzoo import ParallelEnv

    return SimultaneousGame(env) if isinstance(env, ParallelEnv) else TurnBasedGame(env)
