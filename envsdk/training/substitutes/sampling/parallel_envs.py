"""Costly envs step in parallel: ``gym_env_vectorize_mode: async`` where a step costs enough.

RLlib's env runner steps its ``num_envs_per_env_runner`` envs one after another in its own
process (``gym_env_vectorize_mode: sync``, RLlib's default).  Where a step costs a millisecond
(a simulator's physics, a game's frame), the machine's other cores stay idle meanwhile.
gymnasium's async vector env steps each env in a process of its own, and the runner waits for
all of them; it pays pipes and pickling at every step instead (the observations travel through
shared memory).  What a step costs, against that overhead, decides:

* the start-up check's env, still open, takes a few more steps, timed (:func:`time_steps`: the
  median of up to :data:`TIMED_STEPS`, within :data:`BUDGET_S`);
* a median step of at least :data:`THRESHOLD_S` steps in processes where the envs have cores
  to spread over (at least 2 per sampling process: the machine's CPUs over ``num_env_runners``),
  or where the step mostly waits (less than half of it on this process's CPU: a game, a server),
  which overlaps on one core too (:func:`parallel_pays`).

The threshold, measured on a 2-core machine (AMD EPYC, Python 3.11, gymnasium 1.2.2) with
``python benchmarks/expensive_env.py --overhead 2 8 32``: one vector step of N CartPoles whose
step spins for a given CPU time, median, async's time over sync's:

    step's CPU   0      0.05 ms  0.1 ms  0.15 ms  0.2 ms  0.3 ms  0.5 ms  1 ms
    N = 2        3.98   1.16     0.87    0.73     0.68    0.62    0.58    0.54
    N = 8        5.14   1.03     0.81    0.70     0.66    0.61    0.58    0.55
    N = 32       5.13   1.33     1.07    0.88     0.75    0.76    0.68    0.62

Async costs about 30 us per env and step (pipes, pickling, waking a process; an 84x84x3 uint8
observation as much as CartPole's four floats, through shared memory), and 32 processes on
2 cores pay for their switching: it breaks even near 0.05 ms with 2 to 8 envs and 0.13 ms with
32, so from 0.2 ms it saves a quarter or more of the stepping at every N measured.  The start-up
check's timing costs at most :data:`BUDGET_S` (7 steps of a 1-ms env: 7 ms); an algorithm
takes about 0.4 s more to build with 32 async envs, forked from its process.  On the shipped
``configs/cartpole-ppo.yaml`` without its ``vector_entry_point``, on a CartPole whose step spins
for 1 ms, an iteration of 1,024 steps takes 0.9 s async against 1.15 s sync (the env steps 22 ms
against 32 ms a vector step; the rest is the policy's passes and learning).

The build (``training/build/stages.py``, ``stage_parallel_envs``) asks only where the choice is
its to make: the YAML (or the env's own ``config_defaults``) sets no ``gym_env_vectorize_mode``,
``env_checks: {parallel_envs: off}`` is not set, the substitution is on (``ENVSDK_STOCK``,
envsdk/substitutions.py: ``parallel-envs``), and a runner steps more than one env.  With one env
per runner it stays: its process would step alone, with nothing to overlap, for the pipe's cost;
more env runners would start Ray (seconds, benchmarks/startup.py) and gather each iteration's
batch another way, which is ``num_env_runners: auto``'s choice.  Nor does it ask for envs whose
copies must live in the runner's process: multi-agent envs (RLlib's multi-agent runner has no
async mode), ``curriculum`` and ``environment_parameters`` (they set each copy's task there), an
env that launches a game (its copies count their ports there), the old API stack; nor where
``num_env_runners: auto`` fills the cores with runners, or a key the choice reads is searched.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

from envsdk.envs.checker import reset_returns, sample_action, step_returns
from envsdk.envs.spaces import conform
from envsdk.notices import notice

KEY = "parallel_envs"  # under env_checks: (envsdk/config/own_keys/env_checks.py)
MODE = "gym_env_vectorize_mode"
READS = frozenset({MODE, "num_envs_per_env_runner", "num_env_runners"})  # the keys the choice reads
TIMED_STEPS = 7
BUDGET_S = 0.25  # a costly step is timed fewer times, not for longer
THRESHOLD_S = 2e-4
WAITING = 0.5  # a step that spends less than this share of its time on this process's CPU waits


@dataclass(frozen=True)
class StepCost:
    """What one step of an env costs: the median over ``steps`` timed steps of the wall time and
    of this process's CPU time (a step that waits on a game or a server spends little of it)."""

    wall_s: float
    cpu_s: float
    steps: int


def time_steps(env: Any, steps: int = TIMED_STEPS, budget_s: float = BUDGET_S) -> StepCost | None:
    """The cost of a single-agent ``env``'s step, timed over up to ``steps`` steps with random
    (allowed) actions after a reset, fewer once ``budget_s`` has passed (a step of seconds is
    timed once); an episode that ends is reset, untimed.  None where the env fails: the start-up
    check before it passed, and training's own guard names an error of a later step."""
    walls: list[float] = []
    cpus: list[float] = []
    try:
        obs = conform(reset_returns(env, env.reset(seed=1)), env.observation_space)[0]
        began = time.perf_counter()
        while len(walls) < steps and time.perf_counter() - began < budget_s:
            action = sample_action(env, obs)
            wall, cpu = time.perf_counter(), time.process_time()
            out = step_returns(env, env.step(action))
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            obs = out[0] if not (out[2] or out[3]) else reset_returns(env, env.reset())
            obs = conform(obs, env.observation_space)[0]
    except Exception:
        return None
    return StepCost(statistics.median(walls), statistics.median(cpus), len(walls))


def machine_cpus() -> int:
    """The CPUs this process may run on (its affinity, where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def parallel_pays(cost: StepCost, cores: int) -> bool:
    """Whether envs whose step costs ``cost`` step faster in processes of their own, with
    ``cores`` CPUs for each sampling process's envs."""
    if cost.wall_s < THRESHOLD_S:
        return False
    return cores >= 2 or cost.cpu_s < WAITING * cost.wall_s


def costly(env: Any, name: str, envs: int, runners: int) -> bool:
    """Whether ``env``'s ``envs`` copies in each of ``runners`` env runners (0: the local one) step
    faster in processes of their own; where they do, one notice says so and how to keep them."""
    cost = time_steps(env)
    cores = machine_cpus() // max(1, runners)
    if cost is None or not parallel_pays(cost, cores):
        return False
    whose = f"each env runner's {envs} envs" if runners else f"its {envs} envs"
    where = "a process each" + ("" if cost.cpu_s < WAITING * cost.wall_s else f", over {cores} cores")
    notice(
        f"env '{name}' steps in {cost.wall_s * 1e3:.2f} ms ({cost.cpu_s * 1e3:.2f} ms of CPU): {whose}"
        f" step in {where} ({MODE}: async); env_checks: {{{KEY}: off}} keeps them in the runner's process"
    )
    return True
