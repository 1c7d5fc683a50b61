"""The standard Atari preprocessing, from YAML alone: the ``atari_preprocessing`` config key.

An Atari env (an ``ALE/...`` id, or one of ale-py's older ids such as ``PongNoFrameskip-v4``)
gets, unless the YAML says ``atari_preprocessing: false``, the preprocessing that RLlib's
Atari examples use (``wrap_atari_for_new_api_stack``): frames resized to ``dim`` x ``dim``
and grayscaled, scaled to [-1, 1], the max over ``frameskip`` frames, up to 30 no-ops at
reset, one life per episode, FIRE at reset where the game needs it, and the last
``framestack`` frames stacked.  The base env is made with ``frameskip: 1`` and no sticky
actions (``repeat_action_probability: 0``), as those examples make it, unless
``env_config`` says otherwise.  Ray 1.x did this by default too (``preprocessor_pref:
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
    """``env`` with the preprocessing of RLlib's Atari examples (see the module docstring)."""
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    if not is_atari(env):
        raise UserError(
            "atari_preprocessing needs an Atari game (ALE/...),"
            f" and this env is {type(env.unwrapped).__name__}",
            "remove atari_preprocessing, or use an ALE id such as ALE/Pong-v5",
        )
    return wrap_atari_for_new_api_stack(
        env,
        dim=settings.dim,
        frameskip=settings.frameskip,
        framestack=settings.framestack if settings.framestack > 1 else None,
        grayscale=settings.grayscale,
    )
