"""What one env step costs, learning included: train.py against SB3 and a plain PyTorch loop (the floor).

``fixed_budget.py`` compares whole runs on the heavy families.  This splits their step into what
the arithmetic costs and what each tool adds to it, for both of its tasks with RL Zoo's settings:

* halfcheetah: HalfCheetah-v5 SAC (256x256 networks, batches of 256, lr 3e-4, one update per env
  step), learning from the start (after 256 steps);
* pong: Atari Pong PPO (8 envs x 128 steps, 4 epochs of minibatches of 256, the Nature CNN).

Each contender runs in a fresh process with two torch threads and is timed over the same number
of env steps after a warm-up (the first updates, lazy set-up); the contenders alternate, round by
round.  Each reports its whole step and the part of it spent learning:

* ours: the shipped config with fixed_budget.py's flags, built as train.py builds it, in this
  process (no Ray), timed over whole training iterations; the learner's pieces are timed by
  wrapping its methods;
* SB3: the model fixed_budget.py trains, timed over ``learn()``, its ``train()`` wrapped;
* plain: a loop below, with no framework at all: the same networks and losses, one backward pass
  per update and a fused Adam step; the env stack is gymnasium's own (Pong: ``AtariPreprocessing``
  and ``FrameStackObservation`` in a ``SyncVectorEnv``).  What any tool built on PyTorch pays on
  this machine.

    python benchmarks/floor.py [--tasks halfcheetah pong] [--rounds 3] [--steps N]
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine
from fixed_budget import CORES
from fixed_budget import TASKS as BUDGET

THREADS = 2
CONTENDERS = ("ours", "sb3", "plain")
PIECES = ("forward_train", "compute_losses", "compute_gradients", "apply_gradients")
# Ours, outside the learner's update: the replay algorithms' steps of an iteration (training_step.py)
AROUND = {"_sample_and_store": "sampling and storing", "_replayed_batch": "replay sample",
          "_sync_weights": "weight sync"}  # fmt: skip
TARGETS = "after_gradient_based_update"  # the learner's: SAC's target networks (PPO's schedules)
PLAIN_PARTS = ("batch", "forward and losses", "backward", "optimizer", "target networks")  # plain SAC's
# SAC's step part by part: (what it is, ours's timed pieces, the plain loop's part, None: its acting,
# env step and storing, "": nothing of the plain loop's)
ROWS = (
    ("a replayed batch", ("replay sample",), "batch"),
    ("forward pass and losses", ("forward_train", "compute_losses"), "forward and losses"),
    ("backward pass", ("compute_gradients",), "backward"),
    ("optimizer step", ("apply_gradients",), "optimizer"),
    ("target networks", (TARGETS,), "target networks"),
    ("acting, env step, storing", ("sampling and storing",), None),
    ("the learner's bookkeeping (batch conversion, metrics)", ("rest of the update",), ""),
    ("weight sync to the env runner", ("weight sync",), ""),
    ("the rest of the iteration (Algorithm.train)", ("rest of the iteration",), ""),
)
START = 256  # SAC: env steps before learning starts, for every contender (one batch)
HIDDEN, BATCH, LR, GAMMA, TAU = 256, 256, 3e-4, 0.99, 0.005  # RL Zoo's HalfCheetah SAC
PONG = BUDGET["pong"].kwargs  # RL Zoo's Atari PPO
LAMBDA, MAX_NORM, FRAMES = 0.95, 0.5, 4  # SB3's defaults for gae_lambda and max_grad_norm; stacked frames


def ours(task: str, steps: int) -> dict[str, Any]:
    """ms per env step of train.py's build of the config, of its learning, and of each piece of that."""
    from envsdk import speedups
    from envsdk.cli.train import parse_overrides
    from envsdk.config.experiment import load_experiments
    from envsdk.internals import local_learner, without_object_store
    from envsdk.substitutions import Stock
    from envsdk.training.build import build_config

    speedups.install(Stock.resolve())  # as train.py does, before it builds the config
    budget = BUDGET[task]
    overrides = parse_overrides([*budget.flags, *CORES])
    if budget.algo == "SAC":
        overrides["num_steps_sampled_before_learning_starts"] = START
    built = build_config(load_experiments(ROOT / budget.config)[0], overrides)
    spent: collections.Counter[str] = collections.Counter()
    with without_object_store():
        algo = built.algo_class(config=built.config)
        torch_threads()
        learner = local_learner(algo.learner_group)
        for name in ("update", *PIECES[1:]):
            timed(learner, name, spent)
        for module in learner.module.values():
            timed(module, PIECES[0], spent)
        timed(learner, "after_gradient_based_update", spent, TARGETS)
        for name, label in AROUND.items():
            if hasattr(algo, name):  # SAC's transition replay; PPO samples in RLlib's training_step
                timed(algo, name, spent, label)
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
    ms = {name: seconds / n * 1e3 for name, seconds in spent.items()}
    pieces = {name: ms[name] for name in (*PIECES, TARGETS)}
    pieces["rest of the update"] = ms["update"] - sum(pieces.values())
    outside = {label: ms[label] for label in AROUND.values() if label in ms}
    outside["rest of the iteration"] = wall / n * 1e3 - ms["update"] - sum(outside.values())
    return {"ms": wall / n * 1e3, "learn": ms["update"], "pieces": pieces, "outside": outside}


def sb3(task: str, steps: int) -> dict[str, Any]:
    from fixed_budget import sb3_model

    torch_threads()
    budget = BUDGET[task]
    model = sb3_model(budget, 0, **({"learning_starts": START} if budget.algo == "SAC" else {}))
    model.learn(2 * START)  # learning has started (SAC); one rollout and update (PPO)
    spent: collections.Counter[str] = collections.Counter()
    timed(model, "train", spent)
    first = model.num_timesteps
    begin = time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    n = model.num_timesteps - first
    return {"ms": (time.perf_counter() - begin) / n * 1e3, "learn": spent["train"] / n * 1e3}


def timed(obj: Any, name: str, spent: collections.Counter[str], label: str = "") -> None:
    """Replace ``obj.name`` by a wrapper that adds the seconds spent in each call to
    ``spent[label or name]``."""
    method = getattr(obj, name)
    key = label or name

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            spent[key] += time.perf_counter() - start

    setattr(obj, name, wrapper)


def plain_sac(steps: int) -> dict[str, Any]:
    """SAC as the paper writes it (twin Q, learned temperature), in as little code as it takes."""
    import gymnasium as gym
    import numpy as np
    import torch
    from torch import nn

    torch_threads()
    torch.manual_seed(0)
    env = gym.make(BUDGET["halfcheetah"].env)
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
    learning = [0.0]
    parts: collections.Counter[str] = collections.Counter()  # seconds per part of the update

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
        start = time.perf_counter()
        idx = np.random.randint(0, t + 1, BATCH)
        o, n, a, r, e = (torch.from_numpy(memory[key][idx]) for key in memory)
        forward = time.perf_counter()
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
        backward = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        (critic_loss + actor_loss + alpha_loss).backward()
        stepping = time.perf_counter()
        optimizer.step()
        blending = time.perf_counter()
        with torch.no_grad():  # as envsdk's polyak-in-place speed-up blends them
            for target_weight, weight in zip(targets, critics, strict=True):
                target_weight.lerp_(weight, TAU)
        end = time.perf_counter()
        for part, seconds in zip(
            PLAIN_PARTS,
            (forward - start, backward - forward, stepping - backward, blending - stepping, end - blending),
            strict=True,
        ):
            parts[part] += seconds
        learning[0] += end - start

    for t in range(2 * START):
        step(t)
    learning[0] = 0.0
    parts.clear()
    begin = time.perf_counter()
    for t in range(2 * START, 2 * START + steps):
        step(t)
    ms = (time.perf_counter() - begin) / steps * 1e3
    pieces = {part: parts[part] / steps * 1e3 for part in PLAIN_PARTS}
    return {"ms": ms, "learn": learning[0] / steps * 1e3, "pieces": pieces}


def plain_ppo(steps: int) -> dict[str, Any]:
    """PPO with a clipped objective and GAE on the Nature CNN, rollouts of n_steps x n_envs."""
    import ale_py
    import gymnasium as gym
    import torch
    from torch import nn

    torch_threads()
    torch.manual_seed(0)
    gym.register_envs(ale_py)
    n_envs, n_steps = BUDGET["pong"].n_envs, PONG["n_steps"]

    def make() -> gym.Env:
        env = gym.wrappers.AtariPreprocessing(gym.make(BUDGET["pong"].env), noop_max=30, frame_skip=4)
        return gym.wrappers.FrameStackObservation(env, FRAMES)

    envs = gym.vector.SyncVectorEnv([make] * n_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    n_actions = int(envs.single_action_space.n)  # type: ignore[attr-defined]
    net = nn.Sequential(
        nn.Conv2d(FRAMES, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten(), nn.Linear(7 * 7 * 64, 512), nn.ReLU(),
        nn.Linear(512, n_actions + 1),  # the policy's logits and the value, on one shared body
    )  # fmt: skip
    optimizer = torch.optim.Adam(net.parameters(), lr=PONG["learning_rate"], fused=True)

    def forward(frames: torch.Tensor) -> tuple[torch.distributions.Categorical, torch.Tensor]:
        out = net(frames.float() / 255)
        return torch.distributions.Categorical(logits=out[:, :-1]), out[:, -1]

    frames = torch.zeros((n_steps, n_envs, FRAMES, 84, 84), dtype=torch.uint8)
    actions = torch.zeros((n_steps, n_envs), dtype=torch.long)
    logps, values, rewards, ends = (torch.zeros((n_steps, n_envs)) for _ in range(4))
    obs, _ = envs.reset(seed=0)
    learning = [0.0]

    def iteration() -> None:
        nonlocal obs
        for t in range(n_steps):
            frames[t] = torch.from_numpy(obs)
            with torch.no_grad():
                dist, values[t] = forward(frames[t])
                actions[t] = dist.sample()
                logps[t] = dist.log_prob(actions[t])
            obs, reward, terminated, truncated, _ = envs.step(actions[t].numpy())
            rewards[t], ends[t] = torch.from_numpy(reward), torch.from_numpy(terminated | truncated)
        start = time.perf_counter()
        with torch.no_grad():
            following = forward(torch.from_numpy(obs))[1]
            advantages, last = torch.zeros_like(rewards), torch.zeros(n_envs)
            for t in reversed(range(n_steps)):
                alive = 1 - ends[t]
                delta = rewards[t] + GAMMA * following * alive - values[t]
                last = delta + GAMMA * LAMBDA * alive * last
                advantages[t], following = last, values[t]
        flat = [x.flatten(0, 1) for x in (frames, actions, logps, advantages, advantages + values)]
        for _ in range(PONG["n_epochs"]):
            for idx in torch.randperm(n_steps * n_envs).split(PONG["batch_size"]):
                obs_b, act_b, logp_b, adv_b, ret_b = (x[idx] for x in flat)
                dist, value = forward(obs_b)
                adv_b = (adv_b - adv_b.mean()) / (adv_b.std() + 1e-8)
                ratio = (dist.log_prob(act_b) - logp_b).exp()
                clipped = ratio.clamp(1 - PONG["clip_range"], 1 + PONG["clip_range"])
                policy_loss = -torch.min(adv_b * ratio, adv_b * clipped).mean()
                value_loss = ((value - ret_b) ** 2).mean()
                loss = policy_loss + PONG["vf_coef"] * value_loss - PONG["ent_coef"] * dist.entropy().mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), MAX_NORM)
                optimizer.step()
        learning[0] += time.perf_counter() - start

    iteration()
    learning[0] = 0.0
    rounds = math.ceil(steps / (n_steps * n_envs))
    begin = time.perf_counter()
    for _ in range(rounds):
        iteration()
    n = rounds * n_steps * n_envs
    return {"ms": (time.perf_counter() - begin) / n * 1e3, "learn": learning[0] / n * 1e3}


def torch_threads() -> None:
    import torch

    torch.set_num_threads(THREADS)


@dataclass(frozen=True)
class Task:
    title: str
    settings: str  # what the RESULTS block says of the settings
    steps: int  # env steps timed per run, by default
    plain: Callable[[int], dict[str, Any]]


TASKS = {
    "halfcheetah": Task(
        "HalfCheetah-v5 SAC", "RL Zoo's SAC settings (256x256, batch 256, lr 3e-4, one update per env "
        "step), learning from the start (after 256 steps); the plain loop has the same four networks, "
        "one backward pass, one fused Adam step and in-place target blending", 1500, plain_sac),
    "pong": Task(
        "Atari Pong PPO", "RL Zoo's Atari PPO settings (8 envs x 128 steps, 4 epochs of minibatches "
        "of 256, the Nature CNN with shared heads); the plain loop has the same network and losses, "
        "one backward pass per minibatch, a fused Adam step, and gymnasium's Atari wrappers in a "
        "SyncVectorEnv", 8192, plain_ppo),
}  # fmt: skip


CONTENDED = {"ours": ours, "sb3": sb3}  # the tools; each task has its own plain loop


def child(task: str, contender: str, steps: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", task, contender, "--steps", str(steps)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"{task} {contender} failed (pip install -e '.[bench]'?):\n{out.stderr[-2500:]}")
    report: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return report


def block(task: str, steps: int, runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One task's table: each contender's step and its learning part, then our learner's pieces."""
    median = {c: {k: statistics.median(r[k] for r in runs[c]) for k in ("ms", "learn")} for c in CONTENDERS}
    names = {
        "ours": f"ours (`{BUDGET[task].config}`, as train.py builds it)",
        "sb3": f"Stable-Baselines3 {BUDGET[task].algo}",
        "plain": "plain PyTorch loop (the floor)",
    }
    lines = [
        f"**{task}: {TASKS[task].title}**. {TASKS[task].settings}; {steps} env steps timed per run.",
        "",
        "| contender | ms per env step (runs) | median | vs SB3 | learning | the rest |",
        "|---|---|---|---|---|---|",
    ]
    for c in CONTENDERS:
        values = ", ".join(f"{r['ms']:.2f}" for r in runs[c])
        ms, learn = median[c]["ms"], median[c]["learn"]
        ratio = ms / median["sb3"]["ms"]
        lines.append(f"| {names[c]} | {values} | {ms:.2f} | {ratio:.2f} | {learn:.2f} | {ms - learn:.2f} |")
    pieces = {k: statistics.median(r["pieces"][k] for r in runs["ours"]) for k in runs["ours"][0]["pieces"]}
    floor = median["plain"]["ms"] / median["sb3"]["ms"]
    lines += [
        "",
        "Ours, the learner's update per env step (medians, ms): "
        + ", ".join(f"{k} {v:.2f}" for k, v in pieces.items())
        + f". The floor is {floor:.2f} of SB3's step; fixed_budget.py's target for whole runs is 0.7 "
        "of SB3's wall time.",
        "",
    ]
    if "pieces" in runs["plain"][0] and "outside" in runs["ours"][0]:
        lines += part_by_part(runs, median["plain"])
    return lines


def part_by_part(runs: dict[str, list[dict[str, Any]]], plain: dict[str, float]) -> list[str]:
    """Ours's step and the plain loop's, part by part (medians), and ours's step at the plain loop's
    update: its learning in place of ours's counterparts, everything else ours's."""
    ours = {
        k: statistics.median({**r["pieces"], **r["outside"]}[k] for r in runs["ours"])
        for k in {**runs["ours"][0]["pieces"], **runs["ours"][0]["outside"]}
    }
    theirs = {k: statistics.median(r["pieces"][k] for r in runs["plain"]) for k in PLAIN_PARTS}
    lines = ["| part of a step | ours (ms) | plain (ms) |", "|---|---|---|"]
    machinery = 0.0  # ours's parts that are not the plain loop's update
    for what, mine, part in ROWS:
        value = sum(ours.get(k, 0.0) for k in mine)
        other = plain["ms"] - plain["learn"] if part is None else theirs.get(part) if part else None
        if part in (None, ""):
            machinery += value
        lines.append(f"| {what} | {value:.2f} | {'-' if other is None else f'{other:.2f}'} |")
    lines.append(f"| the step | {statistics.median(r['ms'] for r in runs['ours']):.2f} | {plain['ms']:.2f} |")
    at_floor = plain["learn"] + machinery
    return [
        *lines,
        "",
        f"Ours at the plain loop's update ({plain['learn']:.2f} ms) with ours's acting and "
        f"bookkeeping around it ({machinery:.2f} ms): {at_floor:.2f} ms a step, "
        f"{at_floor / plain['ms']:.2f} of the plain loop's.",
        "",
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--rounds", type=int, default=3, help="each contender once per round, alternating")
    p.add_argument("--steps", type=int, help="env steps timed per run (default: the task's)")
    p.add_argument("--worker", nargs=2, metavar=("TASK", "CONTENDER"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        task, contender = args.worker
        steps = args.steps or TASKS[task].steps
        run = TASKS[task].plain if contender == "plain" else functools.partial(CONTENDED[contender], task)
        print(json.dumps(run(steps)))
        return
    lines = [
        f"### floor: one env step, train.py vs Stable-Baselines3 vs plain PyTorch, {datetime.date.today()}",
        f"Machine: {machine()}. `{' '.join(['python benchmarks/floor.py', *sys.argv[1:]])}`: "
        f"{THREADS} torch threads, each run a fresh process timed after its warm-up; the contenders "
        "alternate. Learning: the time in the learner's update (ours), `train()` (SB3), the update "
        "(plain); the rest is sampling, replay and bookkeeping.",
        "",
    ]
    for task in args.tasks:
        steps = args.steps or TASKS[task].steps
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CONTENDERS}
        for round_ in range(args.rounds):
            for contender in CONTENDERS if round_ % 2 == 0 else CONTENDERS[::-1]:
                runs[contender].append(child(task, contender, steps))
                report = runs[contender][-1]
                print(f"{task} round {round_ + 1}: {contender} {report['ms']:.2f} ms per step "
                      f"({report['learn']:.2f} learning)", flush=True)  # fmt: skip
        lines += block(task, steps, runs)
    append_results(lines)


if __name__ == "__main__":
    main()
