"""The faults an env commits while it trains, as the guard (:mod:`envsdk.envs.faults.guard`) and the stall
watchdog (:mod:`envsdk.envs.faults.stall_watch`) name them: each message says which env, runner, sub-env,
agent and step, and what to do."""

from __future__ import annotations

from envsdk.errors import RunFault


class EnvFault(RunFault):
    """An env did something nothing can learn from; the message names it and what to do."""


class ObservationFault(EnvFault):
    """An observation that does not fit its space, or is NaN or infinite."""


class RewardFault(EnvFault):
    """A NaN or infinite reward."""


class ResetsInTheSameStep(EnvFault):
    """A vector env that resets a sub-env in the step that ends its episode (gymnasium's SAME_STEP).

    RLlib 2.60's env runners never read ``final_obs``: they record the next episode's first
    observation as the last one of the episode that ended, and start the next from its second.
    Upstream: RLlib 2.60.0, no upstream issue found (searched 2026-11-29)."""


class EnvStalled(EnvFault):
    """An env call that did not return within the stall bound."""
