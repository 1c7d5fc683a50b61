"""What a user's env does wrong while it trains, caught where it happens in every env runner:
the faults themselves (``records``), the guard around the runner's vector env (``guard``) and the
stall watchdog (``stall_watch``).  Installing them in RLlib is :mod:`envsdk.training.hooks.faults`.

The faults are also named here, where ``envsdk.envs.faults`` (a module until 0.4) had them.
"""

from envsdk.envs.faults.records import EnvFault, EnvStalled, ObservationFault, RewardFault

__all__ = ["EnvFault", "EnvStalled", "ObservationFault", "RewardFault"]
