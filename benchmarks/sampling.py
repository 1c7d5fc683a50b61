"""Env steps per second of sampling: the vector env alone, RLlib's env runner, and ``sampler: batched``.

For each config (the shipped YAML, built as train.py builds it, one env runner in this process):

(a) the runner's own vector env (the same sub-envs and wrappers) stepped with random actions;
(b) RLlib's ``SingleAgentEnvRunner`` sampling with the config's default model;
(c) envsdk's ``BatchedEnvRunner`` (training/substitutes/sampling/batched_runner.py) on the same config.

Rounds alternate (a), (b), (c), so machine noise hits all three alike; rates are the medians of
the rounds, and (b) and (c) as a share of (a) the medians of each round's share.  The issue's
target: (c) >= 25% of (a) on CartPole with 8 envs.

    python benchmarks/sampling.py [--seconds 3] [--repeats 3] [--only cartpole]
"""

from __future__ import annotations

import argparse
import datetime
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine

# name -> (config file, overrides, envs per runner)
CASES = {
    "cartpole": (ROOT / "configs" / "cartpole-ppo.yaml", {}, 8),
    # the reference: gymnasium's SyncVectorEnv of 8 CartPole-v1 (benchmarks/overhead.py's (a))
    "cartpole-sync": (ROOT / "configs" / "cartpole-ppo.yaml", {"gym_env_vectorize_mode": "sync"}, 8),
    "pong": (ROOT / "configs" / "atari-pong-ppo.yaml", {}, 4),
    "halfcheetah": (ROOT / "configs" / "halfcheetah-sac.yaml", {}, 1),
}


def build(path: Path, overrides: dict, envs: int) -> Any:
    from envsdk.config.experiment import load_experiments
    from envsdk.training.build import build_config

    built = build_config(load_experiments(path)[0], overrides)
    config = built.config.copy(copy_frozen=False)
    return config.env_runners(num_env_runners=0, num_envs_per_env_runner=envs, rollout_fragment_length=128)


def runner_rate(config: Any, runner_class: type, seconds: float) -> float:
    import torch

    torch.set_num_threads(1)  # an env runner's one CPU
    config = config.copy(copy_frozen=False).env_runners(env_runner_cls=runner_class)
    runner = runner_class(config=config)
    try:
        runner.sample(num_timesteps=runner.num_envs * 128)  # warm-up
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            steps += sum(len(e) for e in runner.sample(num_timesteps=runner.num_envs * 128))
        return steps / (time.perf_counter() - start)
    finally:
        runner.stop()


def env_rate(config: Any, seconds: float) -> float:
    """The vector env an RLlib runner builds for this config, stepped with random actions."""
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    runner = SingleAgentEnvRunner(config=config)
    env = runner.env
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            env.step(env.action_space.sample())
            steps += env.num_envs
        return steps / (time.perf_counter() - start)
    finally:
        runner.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--repeats", type=int, default=3, help="alternating rounds; the median is reported")
    p.add_argument("--only", nargs="*", choices=sorted(CASES), default=sorted(CASES))
    args = p.parse_args()
    logging.getLogger("ray").setLevel(logging.ERROR)
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    from envsdk.training.substitutes.sampling.batched_runner import BatchedEnvRunner

    rows = []
    for name in [n for n in CASES if n in args.only]:
        path, overrides, envs = CASES[name]
        config = build(path, overrides, envs)
        rates: dict[str, list[float]] = {"env": [], "rllib": [], "batched": []}
        for _ in range(args.repeats):
            rates["env"].append(env_rate(config, args.seconds))
            rates["rllib"].append(runner_rate(config, SingleAgentEnvRunner, args.seconds))
            rates["batched"].append(runner_rate(config, BatchedEnvRunner, args.seconds))
        med = {k: float(np.median(v)) for k, v in rates.items()}
        # Each round's runners against that round's env: a slow spell of the machine hits the three
        # of a round alike, so the medians of the per-round shares are steadier than the shares of
        # the medians.
        share = {k: float(np.median(np.divide(rates[k], rates["env"]))) for k in ("rllib", "batched")}
        gain = float(np.median(np.divide(rates["batched"], rates["rllib"])))
        print(name, {k: [round(x) for x in v] for k, v in rates.items()}, flush=True)
        mode = str(getattr(config.gym_env_vectorize_mode, "value", config.gym_env_vectorize_mode)).lower()
        rows.append(
            f"| {path.name} | {config.env} | {envs} ({mode}) | {med['env']:,.0f} | {med['rllib']:,.0f} "
            f"({share['rllib']:.1%}) | {med['batched']:,.0f} ({share['batched']:.1%}) | {gain:.2f}x |"
        )
    lines = [
        f"### sampling: env steps per second of one env runner, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/sampling.py --seconds {args.seconds:g} --repeats "
        f"{args.repeats}`: each config's default model, one torch thread, 128-step fragments; medians "
        "of alternating rounds. In brackets: the median over rounds of each round's share of the env's "
        "own speed (random actions); the gain is the median of the rounds' ours/RLlib's.",
        "",
        "| config | env | envs (vector env) | env alone | RLlib's runner | ours (`sampler: batched`) "
        "| gain |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Target: ours at >= 25% of the env alone on CartPole with 8 envs (the issue's reference: a "
        "SyncVectorEnv of CartPole-v1, the `sync` row).",
    ]
    append_results(lines)


if __name__ == "__main__":
    main()
