"""Observations laid out the way the default models read them: an action mask is a mask.

Our masking convention is ``{"observations": obs, "action_mask": mask}``
(:class:`envsdk.envs.base.ActionMaskEnv`).  Other packages name the parts otherwise:
PettingZoo's classic games return ``{"observation": ..., "action_mask": ...}``, and an
env may carry more parts beside its mask.  Fed as it is, such a mask would reach the
network as features and every choice would stay open.  :func:`lay_out` therefore moves
an ``action_mask`` that fits the action space to where the models look for it, and
puts the other parts under ``observations``; a mask that fits no discrete action is
refused.  It also drops the parts that ``drop_observation_keys`` names (MiniGrid's
``mission`` text).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gymnasium as gym
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from envsdk.envs.base import MASK_KEY, OBS_KEY
from envsdk.envs.multi_agent_wrapper import MultiAgentWrapper
from envsdk.errors import UserError


def plan(space: gym.Space, action_space: gym.Space, drop: Iterable[str] = ()) -> tuple[str, ...] | None:
    """The keys to keep as observation parts when ``space`` needs laying out, else None (a Dict left
    with only a mask is refused)."""
    drop = tuple(drop)
    if not isinstance(space, gym.spaces.Dict):
        if drop:
            raise UserError(
                f"drop_observation_keys {list(drop)}: the observations are"
                f" {type(space).__name__}, not a Dict",
                "remove drop_observation_keys",
            )
        return None
    unknown = [k for k in drop if k not in space.spaces]
    if unknown:
        raise UserError(
            f"drop_observation_keys: the observations have no part '{unknown[0]}'",
            f"their parts are: {', '.join(map(str, space.spaces))}",
        )
    keys = tuple(k for k in space.spaces if k not in drop)
    if MASK_KEY not in keys:
        return keys if drop else None
    if keys == (OBS_KEY, MASK_KEY) or keys == (MASK_KEY, OBS_KEY):
        return None if not drop else (OBS_KEY,)
    _check_mask(space[MASK_KEY], action_space)
    parts = tuple(k for k in keys if k != MASK_KEY)
    if not parts:
        raise UserError(
            "the observations hold only an action_mask: nothing to learn from",
            "return the state beside the mask ({'observation': ..., 'action_mask': ...})",
        )
    return parts


def _check_mask(mask: gym.Space, action_space: gym.Space) -> None:
    """A mask must have one entry per discrete choice of the actions (:func:`mask_size`)."""
    from envsdk.envs.spaces import SpaceError, mask_size

    try:
        size = mask_size(action_space)
    except SpaceError:
        size = 0
    shape: tuple[int, ...] = tuple(getattr(mask, "shape", None) or ())
    length = int(shape[0]) if len(shape) == 1 else -1
    if size == 0:
        raise UserError(
            f"the observations carry an 'action_mask', but the actions ({action_space}) have no discrete"
            " choice to mask; it would be fed to the network as features",
            "rename the key if it is a feature, or drop it (config: drop_observation_keys: [action_mask])",
        )
    if length != size:
        raise UserError(
            f"the observations' 'action_mask' is {mask}, but the actions {action_space} need a flat mask of"
            f" {size} entries (one per choice)",
            "give one 0/1 entry per discrete choice, branch after branch",
        )


def mask_lookalike(space: gym.Space, action_space: gym.Space) -> str | None:
    """The key of a Dict observation's part that looks like an action mask under another name
    (RLlib's ``ParametricActionsCartPoleNoEmbeddings``: ``valid_avail_actions_mask``): named
    ``*mask*``, of 0/1 values, one per discrete choice of the actions.  None where there is
    none, or where an ``action_mask`` is there (the mask is read from that key only)."""
    from envsdk.envs.spaces import SpaceError, mask_size

    if not isinstance(space, gym.spaces.Dict) or MASK_KEY in space.spaces:
        return None
    try:
        size = mask_size(action_space)
    except SpaceError:
        return None
    for key, part in space.spaces.items():
        binary = isinstance(part, gym.spaces.MultiBinary) or (
            isinstance(part, gym.spaces.Box) and part.low.min() >= 0 and part.high.max() <= 1
        )
        if "mask" in str(key).lower() and binary and size and part.shape == (size,):
            return str(key)
    return None


class _Layout:
    """What to do to one agent's observations: keep ``keys`` as the parts, beside the mask if
    ``masked``, and read the text parts (``texts``) as character indices."""

    def __init__(self, space: gym.Space, keys: tuple[str, ...], masked: bool, texts: dict[str, Any]):
        assert isinstance(space, gym.spaces.Dict)
        self.keys, self.masked, self.texts = keys, masked, texts
        parts = gym.spaces.Dict({k: texts.get(k, space[k]) for k in keys})
        if not masked:
            self.space: gym.Space = parts
        else:
            inner = parts[keys[0]] if len(keys) == 1 else parts
            self.space = gym.spaces.Dict({OBS_KEY: inner, MASK_KEY: space[MASK_KEY]})

    def __call__(self, obs: Any) -> Any:
        parts = {k: self.texts[k].encode(obs[k]) if k in self.texts else obs[k] for k in self.keys}
        if not self.masked:
            return parts
        return {OBS_KEY: parts[self.keys[0]] if len(self.keys) == 1 else parts, MASK_KEY: obs[MASK_KEY]}


def _layout(space: gym.Space, action_space: gym.Space, drop: tuple[str, ...]) -> _Layout | None:
    from envsdk.envs.spaces import text_tokens

    keys = plan(space, action_space, drop)
    if not isinstance(space, gym.spaces.Dict):
        return None
    kept = keys if keys is not None else tuple(k for k in space.spaces if k != MASK_KEY)
    texts = {k: tokens for k in kept if (tokens := text_tokens(space[k])) is not None}
    if keys is None and not texts:
        return None
    masked = MASK_KEY in space.spaces and MASK_KEY not in drop
    return _Layout(space, kept, masked, texts)


class SingleAgentLayout(gym.ObservationWrapper):
    """A gymnasium env's observations laid out (:mod:`envsdk.envs.observation_layout`)."""

    def __init__(self, env: gym.Env, layout: _Layout):
        super().__init__(env)
        self.layout = layout
        self.observation_space = layout.space

    def observation(self, observation: Any) -> Any:
        return self.layout(observation)


class MultiAgentLayout(MultiAgentWrapper):
    """A multi-agent env whose agents' observations are laid out (:mod:`envsdk.envs.observation_layout`)."""

    def __init__(self, env: MultiAgentEnv, layouts: dict[Any, _Layout]):
        super().__init__(env, {a: layout.space for a, layout in layouts.items()})
        self.layouts = layouts

    def _obs(self, obs: dict) -> dict:
        return {a: self.layouts[a](o) if a in self.layouts else o for a, o in obs.items()}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, infos = super().reset(seed=seed, options=options)
        return self._obs(obs), infos

    def step(  # type: ignore[override]  # RLlib's MultiAgentEnv.step clashes with gym.Env.step's types
        self, action_dict: dict
    ) -> tuple[dict, dict, dict, dict, dict]:
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        return self._obs(obs), rewards, terminateds, truncateds, infos


def lay_out(env: Any, drop: tuple[str, ...]) -> Any:
    """``env`` with its observations laid out where they need it (the same env where none does)."""
    if isinstance(env, MultiAgentEnv):
        agents = list(getattr(env, "possible_agents", None) or [])
        layouts = {
            agent: layout
            for agent in agents
            if (layout := _layout(env.get_observation_space(agent), env.get_action_space(agent), drop))
        }
        return MultiAgentLayout(env, layouts) if layouts else env
    if not isinstance(env, gym.Env):
        return env
    layout = _layout(env.observation_space, env.action_space, drop)
    return env if layout is None else SingleAgentLayout(env, layout)
