"""What the env checks cost: CartPole sampling with and without them (docs/env-faults.md).

The checks (envsdk.envs.faults.guard: stall timing, observation and reward checks; the action-input
check of envsdk.training.hooks.faults) run in every env runner.  An env runner is built from a
config as train.py builds it, once as it is and once with those pieces taken out, and each
samples for ``--seconds`` in turn, ``--repeats`` times (the order alternates, so machine noise
hits both alike).  Two configs: configs/cartpole-ppo.yaml (32 envs, gymnasium's vectorized
CartPole) and the same with one env per runner (the most checks per env step).  Target: the
checks cost <= 2% of the steps per second.  Writes a table into benchmarks/RESULTS.md.

    python benchmarks/env_checks.py [--seconds 4] [--repeats 5]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine

CONFIG = ROOT / "configs" / "cartpole-ppo.yaml"
VARIANTS = {
    "cartpole-ppo.yaml (32 envs, vectorized)": {},
    "cartpole-ppo.yaml, 1 env per runner": {"num_envs_per_env_runner": 1, "gym_env_vectorize_mode": "sync"},
}


def configs(overrides: dict) -> tuple[Any, Any]:
    """(the config train.py would use, the same without the env checks)."""
    from envsdk.config.experiment import load_experiments
    from envsdk.training.build import build_config
    from envsdk.training.hooks.faults import arm_action_check, guard_env

    checked = build_config(load_experiments(CONFIG)[0], overrides).config
    bare = checked.copy(copy_frozen=False)
    for event, ours in (("on_environment_created", guard_env), ("on_episode_created", arm_action_check)):
        hooks = [
            h
            for h in getattr(bare, f"callbacks_{event}") or []
            if h is not ours and not (isinstance(h, functools.partial) and h.func is ours)
        ]
        bare.callbacks(**{event: hooks or None})
    return checked, bare


def rate(config: Any, seconds: float) -> float:
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    runner = SingleAgentEnvRunner(config=config)
    batch = max(256, config.num_envs_per_env_runner * 32)
    runner.sample(num_timesteps=batch)  # warm-up
    # CPU time of this process: what the checks add, less the noise of other processes on the machine.
    steps, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        episodes = runner.sample(num_timesteps=batch)
        steps += sum(len(e) for e in episodes)
    result = steps / (time.process_time() - cpu)
    runner.stop()
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--repeats", type=int, default=5, help="alternating rounds; the median is reported")
    args = p.parse_args()
    logging.getLogger("ray").setLevel(logging.ERROR)
    import torch

    torch.set_num_threads(1)  # one core's CPU time per step, as an env runner has
    rows = []
    for name, overrides in VARIANTS.items():
        checked, bare = configs(overrides)
        runs: dict[str, list[float]] = {"checked": [], "bare": []}
        for i in range(args.repeats):
            order = ["checked", "bare"] if i % 2 == 0 else ["bare", "checked"]
            for which in order:
                runs[which].append(rate(checked if which == "checked" else bare, args.seconds))
        ratios = [c / b for c, b in zip(runs["checked"], runs["bare"], strict=True)]
        cost = (1 - float(np.median(ratios))) * 100
        rows.append(
            f"| {name} | {np.median(runs['bare']):,.0f} | {np.median(runs['checked']):,.0f} | "
            f"{', '.join(f'{r:.3f}' for r in ratios)} | {cost:+.1f}% |"
        )
    lines = [
        f"### env_checks: what the env and action checks cost in sampling, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/env_checks.py --seconds {args.seconds:g} --repeats "
        f"{args.repeats}`: one SingleAgentEnvRunner in this process, built from the config as train.py"
        " builds it, with and without the checks, sampling in alternating rounds (one torch thread);"
        " env steps per second of the process's CPU time; cost = 1 - median of the per-round ratios"
        " (checked / without).",
        "",
        "| config | without (env steps per CPU second) | checked | per-round ratios | cost |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "Target: <= 2% (a negative cost is noise).",
    ]
    append_results(lines)


if __name__ == "__main__":
    main()
