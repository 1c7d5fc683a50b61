"""The ``env_checks:`` config key: every setting, its default, type and check, in one place.

    config:
      env_checks:
        observation_bounds: warn   # off | warn | error: an observation outside its Box's low/high
        stall_timeout_s: 60        # an env call (reset, step, close) that has not returned by then
                                   # ends its env runner; default: sample_timeout_s (RLlib's 60 s)
        parallel_envs: auto        # auto | off: where a step costs enough, a runner's envs step
                                   # in processes of their own (gym_env_vectorize_mode: async);
                                   # off: in the runner's process, as RLlib's default does

NaN or infinite observations and rewards, and observations of the wrong shape or kind, are
always errors: nothing can learn from them.  What the checks do, and their messages, are in
:mod:`envsdk.envs.faults.guard` and docs/env-faults.md; what ``parallel_envs`` decides, in
:mod:`envsdk.training.substitutes.sampling.parallel_envs`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from envsdk.config.yamlio import settings_from
from envsdk.errors import UserError

BOUNDS_MODES = ("off", "warn", "error")
PARALLEL_MODES = ("auto", "off")
RLLIB_SAMPLE_TIMEOUT_S = 60.0  # AlgorithmConfig.sample_timeout_s's default


@dataclass(frozen=True)
class EnvCheckSettings:
    """One ``env_checks:`` block; ``stall_timeout_s`` None means "as long as ``sample_timeout_s``"."""

    observation_bounds: str = "warn"
    stall_timeout_s: float | None = None
    parallel_envs: str = "auto"

    @classmethod
    def parse(cls, value: Any, where: str) -> EnvCheckSettings:
        """The YAML value (a mapping, or null for the defaults) -> settings; errors name ``where``."""
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise UserError(
                f"{where}: env_checks must be a mapping of settings, got {value!r}",
                "e.g. env_checks: {observation_bounds: error, stall_timeout_s: 120}",
            )
        # YAML 1.1 reads a bare `off` as false: take it as the word the user wrote.
        words = ("observation_bounds", "parallel_envs")
        value = {k: ("off" if k in words and v is False else v) for k, v in value.items()}
        settings: EnvCheckSettings = settings_from(cls, value, where, "env_checks")
        if settings.observation_bounds not in BOUNDS_MODES:
            raise UserError(
                f"{where}: env_checks observation_bounds must be one of {', '.join(BOUNDS_MODES)},"
                f" got {settings.observation_bounds!r}",
                "off: no check; warn: one line per runner and a count; error: the run stops",
            )
        if settings.parallel_envs not in PARALLEL_MODES:
            raise UserError(
                f"{where}: env_checks parallel_envs must be one of {', '.join(PARALLEL_MODES)},"
                f" got {settings.parallel_envs!r}",
                "auto: a costly env's copies step in processes of their own; off: in the runner's process",
            )
        timeout = settings.stall_timeout_s
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise UserError(
                f"{where}: env_checks stall_timeout_s must be a positive number of seconds, got {timeout!r}",
                "e.g. stall_timeout_s: 120 (leave it out to take sample_timeout_s)",
            )
        return settings

    def stall_bound(self, sample_timeout_s: float | None, where: str, sample_timeout_given: bool) -> float:
        """Seconds an env call may take: ``stall_timeout_s``, else ``sample_timeout_s``.

        A stall bound longer than ``sample_timeout_s`` that the YAML also sets is refused: RLlib
        would stop waiting for the runner first, and report iterations that sampled nothing."""
        sample = sample_timeout_s if sample_timeout_s else RLLIB_SAMPLE_TIMEOUT_S
        if self.stall_timeout_s is None:
            return float(sample)
        if sample_timeout_given and sample_timeout_s and self.stall_timeout_s > sample_timeout_s:
            raise UserError(
                f"{where}: env_checks stall_timeout_s ({self.stall_timeout_s:g} s) is longer than"
                f" sample_timeout_s ({sample_timeout_s:g} s): RLlib would stop waiting for the runner first",
                "raise sample_timeout_s to at least stall_timeout_s, or lower stall_timeout_s",
            )
        return float(self.stall_timeout_s)
