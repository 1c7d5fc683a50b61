"""The learners' clock in agent steps under ``count_steps_by: agent_steps``, as in Ray 1.x.

A schedule (``lr: [[t, v], ...]``, ``entropy_coeff``, DQN's target updates)
reads the timestep the algorithm hands ``LearnerGroup.update``:
``timesteps[num_env_steps_sampled_lifetime]``.  In Ray 1.x that global
timestep was agent steps where ``count_steps_by: agent_steps``; RLlib 2.60's
new stack hands its learners env steps whatever ``count_steps_by`` says, so a
Ray 1.x schedule on a game with 12 agents in a scene runs 12 times slower.

:func:`count_agent_steps` (``on_algorithm_init``, installed by
``training/build/stages.py`` where ``count_steps_by: agent_steps``) wraps the
algorithm's ``learner_group.update`` so that this entry holds the agent steps
sampled so far by the trained policies (the env runners'
``num_module_steps_sampled_lifetime``, self-play's frozen opponents left out; else
``num_agent_steps_sampled_lifetime`` summed over agent ids: for envs without stable agent ids, one
pooled count, :mod:`envsdk.training.hooks.agent_metrics`).  Each trained policy's own count rides
beside it (:data:`MODULE_CLOCK`): envsdk's PPO learner steps a policy's lr, entropy and clip
schedules by it, as mlagents-learn's trainers each count their own behavior's steps (RLlib's own
learners step every policy's by the one timestep).  It is the substitution
``agent-step-clock`` (``envsdk/substitutions.py``): a fix of behaviour, not a
speed-up, and ``ENVSDK_STOCK`` turns it off with the others (RLlib's env-step
clock then).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_MODULE_STEPS_SAMPLED_LIFETIME,
)

from envsdk.training.hooks.self_play import is_self_play_module


def agent_steps_sampled(metrics: Any) -> int:
    """The agent steps of the trained policies sampled so far: a self-play opponent's agents do not
    count, as mlagents-learn's ghost trainer counts the learning team's steps only.  Without per-policy
    counts, every agent's (RLlib keeps them per agent id)."""
    modules = module_steps_sampled(metrics)
    if modules:
        return sum(modules.values())
    counts = metrics.peek((ENV_RUNNER_RESULTS, NUM_AGENT_STEPS_SAMPLED_LIFETIME), default={})
    return int(sum(counts.values()) if isinstance(counts, dict) else counts)


MODULE_CLOCK = "envsdk_module_steps"  # timesteps' entry: each trained policy's own agent steps


def module_steps_sampled(metrics: Any) -> dict[str, int]:
    """Each trained policy's agent steps sampled so far (self-play's opponents left out)."""
    modules = metrics.peek((ENV_RUNNER_RESULTS, NUM_MODULE_STEPS_SAMPLED_LIFETIME), default={})
    if not isinstance(modules, dict):
        return {}
    return {str(m): int(v) for m, v in modules.items() if not is_self_play_module(str(m))}


class AgentStepClock:
    """``LearnerGroup.update`` with ``timesteps[num_env_steps_sampled_lifetime]`` in agent steps, and
    each trained policy's own (:data:`MODULE_CLOCK`), which envsdk's PPO learner steps each policy's
    schedules by, as mlagents-learn's trainers each count their own behavior's steps."""

    def __init__(self, update: Callable[..., Any], metrics: Any):
        self.update = update
        self.metrics = metrics

    def __call__(self, *args: Any, timesteps: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        if timesteps is not None:
            timesteps = {
                **timesteps,
                NUM_ENV_STEPS_SAMPLED_LIFETIME: agent_steps_sampled(self.metrics),
                MODULE_CLOCK: module_steps_sampled(self.metrics),
            }
        return self.update(*args, timesteps=timesteps, **kwargs)


def count_agent_steps(*, algorithm: Any, **_: Any) -> None:
    """``on_algorithm_init``: the learners' schedules count agent steps (module docstring)."""
    group = algorithm.learner_group
    if group is not None and not isinstance(group.update, AgentStepClock):
        group.update = AgentStepClock(group.update, algorithm.metrics)
