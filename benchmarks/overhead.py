"""Env steps per second: bare gymnasium, RLlib on our env wrappers, RLlib on the env directly.

(a) a gymnasium SyncVectorEnv of 8 CartPole-v1 with random actions;
(b) RLlib's SingleAgentEnvRunner (8 envs, the default PPO module choosing
    actions) on CartPole built through envsdk's registry (``EnvFactory``: the
    path every ``env: module.Class`` and registered env takes);
(c) the same env runner on ``CartPole-v1`` handed straight to RLlib.
(b) against (c) is our own overhead; (a) shows what RLlib's sampling costs.
Writes a table into benchmarks/RESULTS.md.

    python benchmarks/overhead.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import datetime
import logging
import sys
import time
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--repeats", type=int, default=3, help="alternating rounds; the median is reported")
    args = p.parse_args()
    logging.getLogger("ray").setLevel(logging.ERROR)
    from ray.tune.registry import register_env

    from envsdk.envs.registry import EnvFactory

    register_env("envsdk-cartpole", EnvFactory(ours_factory, "envsdk-cartpole"))
    rates: dict[str, list[float]] = {"bare": [], "ours": [], "direct": []}
    for _ in range(args.repeats):  # alternate, so machine noise hits all three alike
        rates["bare"].append(bare(args.seconds))
        rates["ours"].append(rllib("envsdk-cartpole", args.seconds))
        rates["direct"].append(rllib("CartPole-v1", args.seconds))
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
        "",
        f"Our wrappers cost {cost:.1f}% of steps per second against bare RLlib "
        "(target <= 3%; negative = noise).",
    ]
    append_results(lines)


if __name__ == "__main__":
    main()
