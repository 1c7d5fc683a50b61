"""One policy's pass over many agents at once (each agent asking for an action is one row of the
batch), and a sample's counters logged once.  The agents-batched loops (agents_batched.py for Unity
games, agent_rounds.py for any other multi-agent env) share them; the actions are drawn as the
batched sampler draws them, and go to the env as batched_runner.py's ``actions_for_env`` makes them."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.utils.metrics import (
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    NUM_MODULE_STEPS_SAMPLED,
    NUM_MODULE_STEPS_SAMPLED_LIFETIME,
)

from envsdk import internals
from envsdk.training.hooks import faults
from envsdk.training.hooks.agent_metrics import AGENT_STEPS
from envsdk.training.substitutes.sampling.batched_runner import (
    DRAWS,
    obs_to_tensor,
    on_cpu,
    outputs_to_numpy,
)


def policy_rows(
    module: Any, module_id: str, obs: Any, explore: bool, t: int, rng: np.random.Generator
) -> dict[str, Any]:
    """The policy's actions and extra outputs for a batch of observations (one row per agent), as
    numpy: the batched sampler's numpy draws where the distribution has one, else the module's own
    distribution; a NaN from a diverged policy is named (the env-fault guard's check), not left to
    torch's sampler."""
    device = next(iter(module.parameters()), torch.zeros(0)).device
    tensors = {Columns.OBS: _tensor(obs, device)}
    with torch.no_grad():
        pass_ = internals.module_forward(module, explore)
        out = dict(pass_(tensors, t=t) if explore else pass_(tensors))
        inputs: Any = out.get(Columns.ACTION_DIST_INPUTS)
        if Columns.ACTIONS not in out:
            draw = DRAWS.get(module.get_exploration_action_dist_cls()) if explore else None
            array = inputs.numpy() if draw is not None and on_cpu(inputs) else None
            if draw is not None and array is not None and np.isfinite(array).all():
                out[Columns.ACTION_DIST_INPUTS] = array
                out[Columns.ACTIONS], out[Columns.ACTION_LOGP] = draw(array, rng)
            else:
                faults.check_action_inputs({module_id: {Columns.ACTION_DIST_INPUTS: inputs}})
                if explore:
                    cls = module.get_exploration_action_dist_cls()
                else:
                    cls = module.get_inference_action_dist_cls()
                dist = cls.from_logits(inputs)
                if not explore:
                    dist = dist.to_deterministic()
                actions = dist.sample()
                out[Columns.ACTIONS] = actions
                if Columns.ACTION_LOGP not in out:  # as GetActions, explore or not
                    out[Columns.ACTION_LOGP] = dist.logp(actions)
    return outputs_to_numpy(out)


def row(data: Any, index: int) -> Any:
    """Row ``index`` of an array, or of each array of a struct (a Dict or Tuple action's parts)."""
    if isinstance(data, np.ndarray):
        return data[index]
    if isinstance(data, dict):
        return {k: row(v, index) for k, v in data.items()}
    return tuple(row(v, index) for v in data)


def _tensor(obs: Any, device: Any) -> Any:
    if isinstance(obs, dict):
        return {k: _tensor(v, device) for k, v in obs.items()}
    if isinstance(obs, tuple | list):
        return type(obs)(_tensor(v, device) for v in obs)
    return obs_to_tensor(obs, device)


def log_sampled(
    metrics: Any, env_steps: int, ended: int, per_agent: dict[str, int], per_module: dict[str, int]
) -> None:
    """A sample's counters, as RLlib's multi-agent loop logs them step by step
    (``_increase_sampled_metrics``): env steps, ended episodes, and agent steps per agent id and
    per module."""
    if env_steps:  # RLlib logs them at each env step
        metrics.log_value(NUM_ENV_STEPS_SAMPLED, env_steps, reduce="sum")
        metrics.log_value(
            NUM_ENV_STEPS_SAMPLED_LIFETIME, env_steps, reduce="lifetime_sum", with_throughput=True
        )
    if ended:  # RLlib logs them at an episode's end only
        metrics.log_value(NUM_EPISODES, ended, reduce="sum")
        metrics.log_value(NUM_EPISODES_LIFETIME, ended, reduce="lifetime_sum")
    for aid, steps in per_agent.items():
        for key, reduce in AGENT_STEPS:
            metrics.log_value((key, aid), steps, reduce=reduce)
    for mid, steps in per_module.items():
        metrics.log_value((NUM_MODULE_STEPS_SAMPLED, mid), steps, reduce="sum")
        metrics.log_value((NUM_MODULE_STEPS_SAMPLED_LIFETIME, mid), steps, reduce="lifetime_sum")
