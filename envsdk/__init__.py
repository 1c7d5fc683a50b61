"""envsdk: write an environment, train it with RLlib 2.60 from a YAML file."""

import gc

# Importing RLlib (torch, Ray, Tune) allocates about half a million objects, all kept for the life
# of the process: the collector runs hundreds of times during the import and frees nothing (0.3 s),
# then every full collection of a training run walks them again.  So: no collection during the
# import, and what it left is moved out of the collector's generations (gc.freeze).  A CartPole run
# ends 0.5 s sooner (benchmarks/RESULTS.md).
_collecting = gc.isenabled()
gc.disable()

try:
    from envsdk import internals
    from envsdk.envs.base import (
        MASK_KEY,
        OBS_KEY,
        ActionMaskEnv,
        CurriculumEnv,
        Env,
        MultiAgentEnv,
        TaskSettable,
    )
    from envsdk.envs.registry import register

    internals.connectors_find_their_caller_cheaply()  # 0.2 s less to build an algorithm or env runner
    internals.polyak_updates_in_place()  # DQN's and SAC's target networks blended in place
    internals.discrete_actions_skip_unsquashing()  # no copy of discrete actions at every env step
    internals.optimizers_fused_on_cpu()  # torch's fused Adam for RLlib's default optimizers on CPU
    gc.freeze()
finally:
    if _collecting:
        gc.enable()

__all__ = [
    "MASK_KEY",
    "OBS_KEY",
    "ActionMaskEnv",
    "CurriculumEnv",
    "Env",
    "MultiAgentEnv",
    "TaskSettable",
    "register",
]
