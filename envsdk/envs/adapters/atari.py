"""The standard Atari preprocessing, from YAML alone: the ``atari_preprocessing`` config key.

An Atari env (an ``ALE/...`` id, or one of ale-py's older ids such as ``PongNoFrameskip-v4``)
gets, unless the YAML says ``atari_preprocessing: false``, the standard preprocessing, built
from RLlib's Atari wrappers: each action repeated for ``frameskip`` frames and the max of the
last two raw frames kept, that frame grayscaled and resized to ``dim`` x ``dim``, scaled to
[-1, 1], up to 30 no-ops at reset, one life per episode, FIRE at reset where the game needs
it, and the last ``framestack`` frames stacked.  That is DeepMind's order, which SB3's
``AtariWrapper`` keeps too; RLlib's ``wrap_atari_for_new_api_stack`` grayscales and resizes
every raw frame before taking the max, four times the work per step for the same kind of
frame.  The base env is made with ``frameskip: 1`` and no sticky actions
(``repeat_action_probability: 0``), as RLlib's examples make it, unless ``env_config`` says
otherwise.  Ray 1.x did this by default too (``preprocessor_pref:
deepmind``), sized by ``model: {dim, grayscale, framestack}``: :func:`from_model_options`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envsdk.config.yamlio import settings_from
from envsdk.errors import UserError
from envsdk.notices import notice

BASE_SETTINGS = {"frameskip": 1, "repeat_action_probability": 0.0}
"""What the base ALE env is made with under the preprocessing (the wrapper skips the frames)."""


@dataclass(frozen=True)
class AtariSettings:
    """One ``atari_preprocessing`` block; ``true`` takes the defaults below."""

    dim: int = 84  # frames are dim x dim pixels
    grayscale: bool = True  # one channel per frame
    frameskip: int = 4  # each action repeats for this many frames (the max of the last two is seen)
    framestack: int = 4  # the observation holds this many frames (0: one)

    @classmethod
    def parse(cls, value: Any, where: str) -> AtariSettings | None:
        """The YAML value (``true``, ``false`` or a mapping) -> settings, None for ``false``."""
        if value is False:
            return None
        if value is True or value is None:
            return cls()
        if not isinstance(value, dict):
            raise UserError(
                f"{where}: atari_preprocessing must be true, false or a mapping of settings, got {value!r}",
                "e.g. atari_preprocessing: {dim: 84, framestack: 4}",
            )
        settings: AtariSettings = settings_from(cls, value, where, "atari_preprocessing")
        for key in ("dim", "frameskip", "framestack"):
            number = getattr(settings, key)
            if (
                isinstance(number, bool)
                or not isinstance(number, int)
                or number < (0 if key == "framestack" else 1)
            ):
                raise UserError(
                    f"{where}: atari_preprocessing {key} must be a positive integer, got {number!r}", ""
                )
        if not isinstance(settings.grayscale, bool):
            raise UserError(f"{where}: atari_preprocessing grayscale must be true or false", "")
        if not settings.grayscale and settings.framestack > 1:
            raise UserError(
                f"{where}: atari_preprocessing stacks frames only in grayscale (RLlib's wrapper)",
                "set grayscale: true, or framestack: 0",
            )
        return settings

    def describe(self) -> str:
        color = "gray" if self.grayscale else "color"
        stack = f", {self.framestack} frames stacked" if self.framestack > 1 else ""
        return f"{self.dim}x{self.dim} {color}, every {self.frameskip}th frame{stack}"


def from_model_options(model: dict[str, Any]) -> dict[str, Any]:
    """Ray 1.x ``model:`` options that sized its Atari preprocessing, taken out of ``model`` and
    returned as ``atari_preprocessing`` settings (``framestack: true`` was 4 frames)."""
    settings: dict[str, Any] = {}
    if "dim" in model:
        settings["dim"] = model.pop("dim")
    if "grayscale" in model:
        settings["grayscale"] = bool(model.pop("grayscale"))
    if "framestack" in model:
        stack = model.pop("framestack")
        settings["framestack"] = (4 if stack else 0) if isinstance(stack, bool) else stack
    model.pop("zero_mean", None)  # the frames are scaled to [-1, 1]
    if settings:
        notice(f"model options {sorted(settings)} size the Atari preprocessing (atari_preprocessing)")
    return settings


def is_atari(env: Any) -> bool:
    """Whether ``env`` is an ALE game (its unwrapped env has ``ale``)."""
    return hasattr(getattr(env, "unwrapped", env), "ale")


def wrap(env: Any, settings: AtariSettings) -> Any:
    """``env`` with the standard preprocessing (see the module docstring)."""
    import gymnasium as gym
    from ray.rllib.env.wrappers.atari_wrappers import (
        EpisodicLifeEnv,
        FireResetEnv,
        FrameStack,
        MaxAndSkipEnv,
        NoopResetEnv,
        NormalizedImageEnv,
        WarpFrame,
    )

    if not is_atari(env):
        raise UserError(
            "atari_preprocessing needs an Atari game (ALE/...),"
            f" and this env is {type(env.unwrapped).__name__}",
            "remove atari_preprocessing, or use an ALE id such as ALE/Pong-v5",
        )
    env = gym.wrappers.TimeLimit(env, max_episode_steps=108_000)
    if settings.frameskip > 1:
        env = MaxAndSkipEnv(env, skip=settings.frameskip)  # the max of the last two raw frames
    env = WarpFrame(env, dim=settings.dim, grayscale=settings.grayscale)  # once per step
    env = NormalizedImageEnv(env)
    env = NoopResetEnv(env, noop_max=30)  # no-ops of frameskip frames each, as RLlib's
    env = EpisodicLifeEnv(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireResetEnv(env)
    if settings.framestack > 1:
        env = FrameStack(env, k=settings.framestack)
    return env
