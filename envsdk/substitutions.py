"""Every place where envsdk replaces, patches or wraps a piece of RLlib, Tune or torch: one table.

Each entry names the piece it stands in for, what it buys (and the benchmark
that measures it) and what turns off with it.  Every one can be turned off:

* ``ENVSDK_STOCK=1`` turns all of them off: the run is stock RLlib driven by
  envsdk's YAML, checks and command line.  ``ENVSDK_STOCK=a,b`` turns off some.
  train.py forwards it to a joined cluster's workers (``cluster/ray_session.py``).
* ``stock: true`` or ``stock: [a, b]`` in an experiment's ``config:`` does the
  same for that experiment.  The patches (``kind == "patch"``) act on the whole
  process, so an experiment that turns one off turns it off for the command.
* The older switches still work: ``ENVSDK_NO_PATCHES`` (the patches) and
  ``sampler: rllib`` (the batched sampler).

``--dry-run`` prints the table with what is in force.  To upgrade Ray: run the
tests with ``ENVSDK_STOCK=1`` first, then each substitution back on with its
test (ARCHITECTURE.md, "Stock RLlib underneath").
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from envsdk.errors import UserError

STOCK = "ENVSDK_STOCK"
NO_PATCHES = "ENVSDK_NO_PATCHES"  # the patches only; older than ENVSDK_STOCK
KEY = "stock"  # the config key


@dataclass(frozen=True)
class Substitution:
    name: str
    kind: str  # "patch" (process-wide, speedups.py), "class" (swapped in the config), "loop", "wrapper"
    replaces: str  # RLlib's (Tune's, torch's) piece that ours stands in for
    ours: str  # where ours lives
    buys: str  # what it buys, and the benchmark that measures it
    without: str = ""  # what stock RLlib does not give that goes off with it ("" if nothing)


TABLE: dict[str, Substitution] = {
    s.name: s
    for s in (
        Substitution(
            "batched-sampler",
            "class",
            "SingleAgentEnvRunner's sampling loop (_sample)",
            "envsdk/training/batched_runner.py, policy_pass.py",
            "several times RLlib's env steps/s on cheap envs (benchmarks/sampling.py)",
        ),
        Substitution(
            "transition-replay",
            "class",
            "DQN and SAC (their episode replay buffers)",
            "envsdk/training/off_policy.py, transition_replay.py",
            "DQN/SAC env steps/s (benchmarks/replay.py)",
        ),
        Substitution(
            "sac-learner",
            "class",
            "SACTorchLearner (three backward passes)",
            "envsdk/training/sac_learner.py",
            "one backward pass for the same gradients (benchmarks/floor.py, replay.py)",
            "critic_loss: squared (RLlib's learner has the huber loss only)",
        ),
        Substitution(
            "ppo-learner",
            "class",
            "PPOTorchLearner's first epoch (minibatches in batch order)",
            "envsdk/training/ppo_learner.py",
            "every epoch's minibatches at random: fewer env steps to solve (benchmarks/steps_to_solve.py)",
        ),
        Substitution(
            "dqn-learner",
            "class",
            "DQNTorchLearner's optimizer (Adam with torch's epsilon)",
            "envsdk/training/dqn_learner.py",
            "a feature, not speed: the same optimizer with the config's epsilon",
            "adam_epsilon (RLlib 2.60's DQN learner does not read it)",
        ),
        Substitution(
            "sac-module",
            "class",
            "DefaultSACTorchRLModule's training pass (Box actions)",
            "envsdk/training/sac_module.py",
            "the same outputs with less work: concat critics read as their layers (benchmarks/floor.py)",
        ),
        Substitution(
            "in-process-trial",
            "loop",
            "Tune's trial loop for a run of one trial",
            "envsdk/training/in_process.py",
            "no Ray started for a one-trial run: seconds of start-up (benchmarks/startup.py)",
        ),
        Substitution(
            "env-guard",
            "wrapper",
            "the env runner's vector env (wrapped)",
            "envsdk/envs/guard.py, envsdk/training/guards.py",
            "a feature, not speed (benchmarks/env_checks.py measures its cost)",
            "env errors named with the env, runner and step; stalls bounded; observation bounds checked",
        ),
        Substitution(
            "action-input-check",
            "class",
            "GetActions in the module-to-env pipeline",
            "envsdk/training/guards.py",
            "a feature, not speed (benchmarks/env_checks.py)",
            "nan/inf in the policy's action distribution named once, where it starts",
        ),
        Substitution(
            "connector-frames",
            "patch",
            "ConnectorV2's search for its caller's frame",
            "envsdk/internals/patches.py",
            "connector pieces built without reading every frame's source (benchmarks/speedups.py)",
        ),
        Substitution(
            "polyak-in-place",
            "patch",
            "the target networks' update (DQN, SAC, APPO)",
            "envsdk/internals/patches.py",
            "target networks blended in place (benchmarks/speedups.py)",
        ),
        Substitution(
            "fused-adam",
            "patch",
            "RLlib's default Adam optimizers",
            "envsdk/internals/patches.py",
            "torch's fused Adam kernel on CPU (benchmarks/speedups.py)",
        ),
        Substitution(
            "finite-check-once",
            "patch",
            "the learner's nan/inf test of its gradients",
            "envsdk/internals/patches.py",
            "one sum instead of two passes tensor by tensor (benchmarks/speedups.py)",
        ),
        Substitution(
            "frozen-imports",
            "patch",
            "Python's garbage collector while train.py and rollout.py import RLlib",
            "envsdk/speedups.py (untracked_imports)",
            "full collections skip RLlib's half a million import-time objects (benchmarks/phases.py)",
        ),
        Substitution(
            "episodes-converted-once",
            "patch",
            "MultiAgentEnvRunner's conversion of ended episodes",
            "envsdk/internals/patches.py",
            "each ended episode converted to numpy once (benchmarks/speedups.py)",
        ),
    )
}
PATCHES = [s.name for s in TABLE.values() if s.kind == "patch"]


def _names(value: str, variable: str, among: Iterable[str]) -> set[str]:
    """A switch's value: ``1`` (all of ``among``) or a comma list of names, each checked."""
    value = value.strip()
    among = list(among)
    if value in ("", "0"):
        return set()
    if value == "1":
        return set(among)
    names = {n.strip() for n in value.split(",") if n.strip()}
    unknown = sorted(names - set(among))
    if unknown:
        raise UserError(
            f"{variable} names no substitution {', '.join(map(repr, unknown))}",
            f"use 1 (all off) or some of: {', '.join(among)}",
        )
    return names


def off_in_environment() -> set[str]:
    """The substitutions this process's environment turns off (ENVSDK_STOCK, ENVSDK_NO_PATCHES)."""
    return _names(os.environ.get(STOCK, ""), STOCK, TABLE) | _names(
        os.environ.get(NO_PATCHES, ""), NO_PATCHES, PATCHES
    )


def off_in_config(value: Any, where: str) -> set[str]:
    """``stock:`` of an experiment's config: true (all off), false, or a list of names."""
    if value is None or value is False:
        return set()
    if value is True:
        return set(TABLE)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(
            f"{where}: stock is {value!r}, but it takes true, false or a list of substitutions",
            f"for example 'stock: true' (stock RLlib) or 'stock: [{PATCHES[0]}]'",
        )
    return _names(",".join(value), f"{where}: stock", TABLE)


def report(off: set[str]) -> list[str]:
    """``--dry-run``'s table: each substitution, on or off, what it replaces and buys, and its switch;
    YAML comments, so that the dry run's output still reads as YAML."""
    width = max(map(len, TABLE))
    lines = [
        f"# substitutions of RLlib ({STOCK}=1 or 'stock: true' turns all off; {STOCK}=NAME,..."
        " or 'stock: [NAME, ...]' some):"
    ]
    for s in TABLE.values():
        lines.append(f"#   {'off' if s.name in off else 'on ':3}  {s.name:{width}}  replaces {s.replaces}")
        lines.append(f"#   {'':3}  {'':{width}}  buys {s.buys}")
        if s.without:
            lines.append(f"#   {'':3}  {'':{width}}  off, also off: {s.without}")
    return lines
