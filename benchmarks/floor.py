"""What one SAC step costs: train.py against SB3, and against a plain PyTorch loop (the floor).

``fixed_budget.py`` compares whole runs.  This splits the step that dominates them, on
HalfCheetah-v5 with RL Zoo's SAC settings (256x256 networks, batches of 256, lr 3e-4, one update
per env step), into what the arithmetic costs and what each tool adds to it.  Each contender runs
in a fresh process with two torch threads, learning from the start (after 256 steps), and is timed
over the same number of env steps, each with its update; the contenders alternate, round by round:

* ours: ``configs/halfcheetah-sac.yaml`` built as train.py builds it, in this process (no Ray),
  timed over whole training iterations; the learner's pieces are timed by wrapping its methods;
* SB3: ``SAC("MlpPolicy")`` with the same settings, timed over ``learn()``;
* plain: the loop below, with no framework at all: one env step with the actor, then one update of
  the same four networks (actor, twin Q, twin target Q), one backward pass, one fused Adam step and
  the target networks blended in place.  The same arithmetic as both tools: what any tool built on
  PyTorch pays on this machine.

    python benchmarks/floor.py [--rounds 3] [--steps 1500]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import functools
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine

CONFIG = ROOT / "configs" / "halfcheetah-sac.yaml"
ENV = "HalfCheetah-v5"
START = 256  # env steps before learning starts, for every contender (one batch)
HIDDEN, BATCH, LR, GAMMA, TAU = 256, 256, 3e-4, 0.99, 0.005  # RL Zoo's HalfCheetah SAC
THREADS = 2
CONTENDERS = ("ours", "sb3", "plain")
PIECES = ("forward_train", "compute_losses", "compute_gradients", "apply_gradients")


def ours(steps: int) -> dict[str, Any]:
    """ms per env step of train.py's build of the config, and of each piece of its learner's update."""
    from envsdk import speedups
    from envsdk.config.experiment import load_experiments
    from envsdk.internals import local_learner, without_object_store
    from envsdk.training.algorithm_config import build_config

    speedups.install()  # as train.py does, before it builds the config
    built = build_config(
        load_experiments(CONFIG)[0],
        {"num_steps_sampled_before_learning_starts": START, "num_cpus_for_main_process": THREADS},
    )
    spent: collections.Counter[str] = collections.Counter()

    def timed(obj: Any, name: str) -> None:
        method = getattr(obj, name)

        @functools.wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - start

        setattr(obj, name, wrapper)

    with without_object_store():
        algo = built.algo_class(config=built.config)
        torch_threads()
        learner = local_learner(algo.learner_group)
        for name in ("update", *PIECES[1:]):
            timed(learner, name)
        for module in learner.module.values():
            timed(module, PIECES[0])
        while algo.train()["num_env_steps_sampled_lifetime"] < 2 * START:
            pass  # learning has started, and the first updates (lazy set-up) are behind
        done = algo.train()["num_env_steps_sampled_lifetime"]
        spent.clear()
        begin = time.perf_counter()
        first = done
        while done - first < steps:
            done = algo.train()["num_env_steps_sampled_lifetime"]
        wall = time.perf_counter() - begin
        algo.stop()
    n = done - first
    pieces = {name: spent[name] / n * 1e3 for name in PIECES}
    pieces["rest of the update"] = spent["update"] / n * 1e3 - sum(pieces.values())
    return {"ms": wall / n * 1e3, "pieces": pieces}


def sb3(steps: int) -> dict[str, Any]:
    import gymnasium as gym
    from stable_baselines3 import SAC

    torch_threads()
    model = SAC(
        "MlpPolicy", gym.make(ENV), learning_starts=START, batch_size=BATCH, learning_rate=LR,
        policy_kwargs={"net_arch": [HIDDEN, HIDDEN]}, seed=0, verbose=0,
    )  # fmt: skip
    model.learn(2 * START)
    begin = time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    return {"ms": (time.perf_counter() - begin) / steps * 1e3}


def plain(steps: int) -> dict[str, Any]:
    """SAC as the paper writes it (twin Q, learned temperature), in as little code as it takes."""
    import gymnasium as gym
    import numpy as np
    import torch
    from torch import nn

    torch_threads()
    torch.manual_seed(0)
    env = gym.make(ENV)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]

    def mlp(inputs: int, outputs: int) -> nn.Sequential:
        layers = [nn.Linear(inputs, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(HIDDEN, outputs))

    actor, q1, q2 = mlp(obs_dim, 2 * act_dim), mlp(obs_dim + act_dim, 1), mlp(obs_dim + act_dim, 1)
    target1, target2 = mlp(obs_dim + act_dim, 1), mlp(obs_dim + act_dim, 1)
    target1.load_state_dict(q1.state_dict())
    target2.load_state_dict(q2.state_dict())
    log_alpha = torch.zeros(1, requires_grad=True)
    critics = [*q1.parameters(), *q2.parameters()]
    targets = [*target1.parameters(), *target2.parameters()]
    optimizer = torch.optim.Adam([*actor.parameters(), *critics, log_alpha], lr=LR, fused=True)

    def act(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A squashed Gaussian action and its log-probability."""
        mean, log_std = actor(obs).chunk(2, -1)
        std = log_std.clamp(-20, 2).exp()
        u = mean + std * torch.randn_like(mean)
        logp = (-0.5 * ((u - mean) / std) ** 2 - std.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp -= (2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        return torch.tanh(u), logp

    size = steps + 4 * START
    memory = {
        "obs": np.zeros((size, obs_dim), np.float32), "next": np.zeros((size, obs_dim), np.float32),
        "act": np.zeros((size, act_dim), np.float32), "rew": np.zeros(size, np.float32),
        "end": np.zeros(size, np.float32),
    }  # fmt: skip
    obs, _ = env.reset(seed=0)

    def step(t: int) -> None:
        nonlocal obs
        with torch.no_grad():
            action = act(torch.as_tensor(obs, dtype=torch.float32)[None])[0][0].numpy()
        nxt, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(memory, (obs, nxt, action, reward, terminated), strict=True):
            memory[key][t] = value
        obs = env.reset()[0] if terminated or truncated else nxt
        if t < START:
            return
        idx = np.random.randint(0, t + 1, BATCH)
        o, n, a, r, e = (torch.from_numpy(memory[key][idx]) for key in memory)
        alpha = log_alpha.exp().detach()
        with torch.no_grad():
            next_action, next_logp = act(n)
            pair = torch.cat([n, next_action], -1)
            next_q = torch.min(target1(pair), target2(pair)).squeeze(-1) - alpha * next_logp
            target = r + GAMMA * (1 - e) * next_q
        pair = torch.cat([o, a], -1)
        critic_loss = 0.5 * ((q1(pair).squeeze(-1) - target) ** 2).mean()
        critic_loss = critic_loss + 0.5 * ((q2(pair).squeeze(-1) - target) ** 2).mean()
        new_action, logp = act(o)
        pair = torch.cat([o, new_action], -1)
        for p in critics:
            p.requires_grad_(False)
        q = torch.min(q1(pair), q2(pair)).squeeze(-1)
        for p in critics:
            p.requires_grad_(True)
        actor_loss = (alpha * logp - q).mean()
        alpha_loss = -(log_alpha * (logp.detach() - act_dim)).mean()
        optimizer.zero_grad(set_to_none=True)
        (critic_loss + actor_loss + alpha_loss).backward()
        optimizer.step()
        with torch.no_grad():  # as envsdk's polyak-in-place speed-up blends them
            for target_weight, weight in zip(targets, critics, strict=True):
                target_weight.lerp_(weight, TAU)

    for t in range(2 * START):
        step(t)
    begin = time.perf_counter()
    for t in range(2 * START, 2 * START + steps):
        step(t)
    return {"ms": (time.perf_counter() - begin) / steps * 1e3}


def torch_threads() -> None:
    import torch

    torch.set_num_threads(THREADS)


def child(contender: str, steps: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", contender, "--steps", str(steps)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"{contender} failed (pip install -e '.[bench]'?):\n{out.stderr[-2500:]}")
    report: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return report


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3, help="each contender once per round, alternating")
    p.add_argument("--steps", type=int, default=1500, help="env steps timed per run (one update each)")
    p.add_argument("--worker", choices=CONTENDERS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps({"ours": ours, "sb3": sb3, "plain": plain}[args.worker](args.steps)))
        return
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CONTENDERS}
    for round_ in range(args.rounds):
        order = CONTENDERS if round_ % 2 == 0 else CONTENDERS[::-1]
        for contender in order:
            runs[contender].append(child(contender, args.steps))
            print(f"round {round_ + 1}: {contender} {runs[contender][-1]['ms']:.1f} ms per step", flush=True)
    median = {c: statistics.median(r["ms"] for r in runs[c]) for c in CONTENDERS}
    names = {
        "ours": "ours (`configs/halfcheetah-sac.yaml`, as train.py builds it)",
        "sb3": "Stable-Baselines3 SAC",
        "plain": "plain PyTorch loop (the floor)",
    }
    lines = [
        f"### floor: one SAC step, train.py vs Stable-Baselines3 vs plain PyTorch, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/floor.py --rounds {args.rounds} --steps {args.steps}`: "
        f"{ENV}, RL Zoo's SAC settings (256x256, batch 256, lr 3e-4, one update per env step), "
        f"{THREADS} torch threads, each run a fresh process timed over {args.steps} env steps after "
        "learning started; the contenders alternate. The plain loop has the same four networks, one "
        "backward pass, one fused Adam step and in-place target blending, and no framework.",
        "",
        "| contender | ms per env step (runs) | median | vs SB3 |",
        "|---|---|---|---|",
    ]
    for c in CONTENDERS:
        values = ", ".join(f"{r['ms']:.1f}" for r in runs[c])
        lines.append(f"| {names[c]} | {values} | {median[c]:.1f} | {median[c] / median['sb3']:.2f} |")
    pieces = {k: statistics.median(r["pieces"][k] for r in runs["ours"]) for k in runs["ours"][0]["pieces"]}
    update = sum(pieces.values())
    lines += [
        "",
        "Ours, per env step (medians, ms): the learner's update "
        f"{update:.1f} (" + ", ".join(f"{k} {v:.1f}" for k, v in pieces.items()) + "), the rest "
        f"(sampling, replay, the iteration's bookkeeping) {median['ours'] - update:.1f}. "
        f"The floor is {median['plain'] / median['sb3']:.2f} of SB3's step; fixed_budget.py's target for "
        "whole runs is 0.7 of SB3's wall time.",
    ]
    append_results(lines)


if __name__ == "__main__":
    main()
