"""Env steps per second: bare gymnasium, RLlib on our env wrappers, RLlib on the env directly.

(a) a gymnasium SyncVectorEnv of 8 CartPole-v1 with random actions;
(b) RLlib's SingleAgentEnvRunner (8 envs, the default PPO module choosing
    actions) on CartPole built through envsdk's registry (``EnvFactory``: the
    path every ``env: module.Class`` and registered env takes);
(c) the same env runner on ``CartPole-v1`` handed straight to RLlib;
(d) (c) with RLlib's own ``NormalizeAndClipActions``, which copies every
    discrete action and maps a no-op over it at each step (envsdk skips it:
    ``internals.discrete_actions_skip_unsquashing``).
(b) against (c) is our own overhead; (a) shows what RLlib's sampling costs;
(d) against (c) what the skip saves.
Writes a table into benchmarks/RESULTS.md.

    python benchmarks/overhead.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import append_results, machine

ENVS = 8


def bare(seconds: float) -> float:
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(ENVS)])
    envs.reset(seed=0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        envs.step(envs.action_space.sample())
        steps += ENVS
    return steps / (time.perf_counter() - start)


def ours_factory(env_config: dict) -> gym.Env:
    return gym.make("CartPole-v1")


def rllib(env: str, seconds: float) -> float:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    config = (
        PPOConfig().environment(env).env_runners(num_envs_per_env_runner=ENVS, rollout_fragment_length=128)
    )
    runner = SingleAgentEnvRunner(config=config)
    runner.sample(num_timesteps=ENVS * 128)  # warm-up
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        episodes = runner.sample(num_timesteps=ENVS * 128)
        steps += sum(len(e) for e in episodes)
    rate = steps / (time.perf_counter() - start)
    runner.stop()
    return rate


@contextlib.contextmanager
def rllib_unsquash() -> Iterator[None]:
    """RLlib's own ``NormalizeAndClipActions.__call__``, in place of envsdk's for the block."""
    from ray.rllib.connectors.module_to_env.normalize_and_clip_actions import NormalizeAndClipActions

    ours = NormalizeAndClipActions.__call__
    NormalizeAndClipActions.__call__ = ours.__wrapped__  # type: ignore[attr-defined]
    try:
        yield
    finally:
        NormalizeAndClipActions.__call__ = ours  # type: ignore[method-assign]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--repeats", type=int, default=3, help="alternating rounds; the median is reported")
    args = p.parse_args()
    logging.getLogger("ray").setLevel(logging.ERROR)
    from ray.tune.registry import register_env

    from envsdk.envs.registry import EnvFactory

    register_env("envsdk-cartpole", EnvFactory(ours_factory, "envsdk-cartpole"))
    rates: dict[str, list[float]] = {"bare": [], "ours": [], "direct": [], "unsquash": []}
    for _ in range(args.repeats):  # alternate, so machine noise hits all three alike
        rates["bare"].append(bare(args.seconds))
        rates["ours"].append(rllib("envsdk-cartpole", args.seconds))
        rates["direct"].append(rllib("CartPole-v1", args.seconds))
        with rllib_unsquash():
            rates["unsquash"].append(rllib("CartPole-v1", args.seconds))
    med = {k: float(np.median(v)) for k, v in rates.items()}
    cost = (med["direct"] - med["ours"]) / med["direct"] * 100
    lines = [
        f"### overhead: env steps per second through our wrappers, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/overhead.py --seconds {args.seconds:g} --repeats "
        f"{args.repeats}`: CartPole-v1, {ENVS} envs, one process; medians of alternating rounds.",
        "",
        "| path | env steps/s |",
        "|---|---|",
        f"| (a) gymnasium SyncVectorEnv, random actions | {med['bare']:,.0f} |",
        f"| (b) RLlib env runner, env built by envsdk's registry | {med['ours']:,.0f} |",
        f"| (c) RLlib env runner, CartPole-v1 given to RLlib directly | {med['direct']:,.0f} |",
        f"| (d) as (c), with RLlib's own copy and unsquash of discrete actions | {med['unsquash']:,.0f} |",
        "",
        f"Our wrappers cost {cost:.1f}% of steps per second against bare RLlib "
        "(target <= 3%; negative = noise). Skipping the no-op unsquash of discrete actions: "
        f"{(med['direct'] / med['unsquash'] - 1) * 100:+.1f}% steps per second ((c) against (d)).",
    ]
    append_results(lines)


if __name__ == "__main__":
    main()
