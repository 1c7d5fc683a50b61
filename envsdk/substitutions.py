"""Every place where envsdk replaces, patches or wraps a piece of RLlib, Tune or torch: one table.

Each entry names the piece it stands in for, what it buys (and the benchmark
that measures it) and what turns off with it.  Every one can be turned off:

* ``ENVSDK_STOCK=1`` turns all of them off: the run is stock RLlib driven by
  envsdk's YAML, checks and command line.  ``ENVSDK_STOCK=a,b`` turns off some.
  train.py forwards it to a joined cluster's workers (``cluster/ray_session.py``).
* ``stock: true`` or ``stock: [a, b]`` in an experiment's ``config:`` does the
  same for that experiment.  The patches (``kind == "patch"``) act on the whole
  process, so an experiment that turns one off turns it off for the command.
* ``--config.stock=...`` on train.py's command line, as any config key.
* The older switches still work, as aliases: ``ENVSDK_NO_PATCHES`` (``1`` or names: the
  patches) and ``sampler: rllib`` (the batched sampler).

Each command reads these once, into one :class:`Stock` (:meth:`Stock.resolve`), and hands it to
every place that decides: the patches (``speedups.install``, ``speedups.untracked_imports``), the
config's build (``training/build/stages.py``), the in-process trial (``runs_in_process``), the
env checks (``training/hooks/faults.py``).  train.py resolves it from the environment and every
experiment before it imports RLlib; rollout.py from the environment and the ``stock:`` the
checkpoint's run recorded.  Each decision names its substitution by this module's constant
(``BATCHED_SAMPLER``, ...), never by a string of its own.

``--dry-run`` prints the table with what is in force.  To upgrade Ray: run the
tests with ``ENVSDK_STOCK=1`` first, then each substitution back on with its
test (ARCHITECTURE.md, "Stock RLlib underneath").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from envsdk import internals
from envsdk.errors import UserError

STOCK = "ENVSDK_STOCK"
NO_PATCHES = "ENVSDK_NO_PATCHES"  # the patches only; older than ENVSDK_STOCK
KEY = "stock"  # the config key

# The substitutions' names: every place that decides one names it by its constant.
BATCHED_SAMPLER = "batched-sampler"
TRANSITION_REPLAY = "transition-replay"
SAC_LEARNER = "sac-learner"
PPO_LEARNER = "ppo-learner"
DQN_LEARNER = "dqn-learner"
IMPALA_LEARNER = "impala-learner"
SAC_MODULE = "sac-module"
IN_PROCESS_TRIAL = "in-process-trial"
ENV_GUARD = "env-guard"
ACTION_INPUT_CHECK = "action-input-check"
AGENT_STEP_CLOCK = "agent-step-clock"
CONNECTOR_FRAMES = "connector-frames"
POLYAK_IN_PLACE = "polyak-in-place"
FUSED_ADAM = "fused-adam"
FINITE_CHECK_ONCE = "finite-check-once"
FROZEN_IMPORTS = "frozen-imports"
EPISODES_CONVERTED_ONCE = "episodes-converted-once"
PARALLEL_ENVS = "parallel-envs"
POCA = "poca"
ONE_FILE_PER_WRITE = "one-file-per-write"
GAMES_AT_ONCE = "games-at-once"
AGENTS_BATCHED = "agents-batched"


@dataclass(frozen=True)
class Substitution:
    name: str
    # "patch" (process-wide, speedups.py), "class" (swapped in the config), "loop", "wrapper",
    # "default" (a config value of RLlib's that the build chooses where the YAML leaves it out)
    kind: str
    replaces: str  # RLlib's (Tune's, torch's) piece that ours stands in for
    ours: str  # where ours lives
    buys: str  # what it buys, and the benchmark that measures it
    without: str = ""  # what stock RLlib does not give that goes off with it ("" if nothing)
    # kind "patch": the envsdk.internals function that puts it in place (speedups.install); None
    # for frozen-imports, a block around an import (speedups.untracked_imports)
    install: Callable[[], None] | None = None


TABLE: dict[str, Substitution] = {
    s.name: s
    for s in (
        Substitution(
            BATCHED_SAMPLER,
            "class",
            "SingleAgentEnvRunner's sampling loop (_sample)",
            "envsdk/training/substitutes/sampling/batched_runner.py, policy_pass.py",
            "several times RLlib's env steps/s on cheap envs (benchmarks/sampling.py)",
        ),
        Substitution(
            TRANSITION_REPLAY,
            "class",
            "DQN and SAC (their episode replay buffers)",
            "envsdk/training/substitutes/replay/ (training_step.py, buffers.py)",
            "DQN/SAC env steps/s (benchmarks/replay.py)",
        ),
        Substitution(
            SAC_LEARNER,
            "class",
            "SACTorchLearner (three backward passes)",
            "envsdk/training/substitutes/sac/learner.py",
            "one backward pass for the same gradients (benchmarks/floor.py, replay.py)",
            "critic_loss: squared (RLlib's learner has the huber loss only); reward_signals",
        ),
        Substitution(
            PPO_LEARNER,
            "class",
            "PPOTorchLearner's first epoch (minibatches in batch order); with reward_signals, its GAE"
            " connector piece and value loss",
            "envsdk/training/substitutes/ppo/learner.py, signals.py",
            "every epoch's minibatches at random: fewer env steps to solve (benchmarks/steps_to_solve.py)",
            "advantage_normalization: minibatch; a clip_param schedule (RLlib's learner: a fixed clip);"
            " reward_signals (a value head and a discount per signal, the signals' models learnt)",
        ),
        Substitution(
            DQN_LEARNER,
            "class",
            "DQNTorchLearner's optimizer (Adam with torch's epsilon)",
            "envsdk/training/substitutes/dqn/learner.py",
            "a feature, not speed: the same optimizer with the config's epsilon",
            "adam_epsilon (RLlib 2.60's DQN learner does not read it); reward_signals",
        ),
        Substitution(
            IMPALA_LEARNER,
            "class",
            "IMPALATorchLearner and APPOTorchLearner (unchanged without reward_signals)",
            "envsdk/training/substitutes/impala/learner.py, envsdk/training/substitutes/reward_signals.py",
            "a feature, not speed: reward signals summed into the reward V-trace reads",
            "reward_signals (the signals' rewards summed, their models learnt)",
        ),
        Substitution(
            SAC_MODULE,
            "class",
            "DefaultSACTorchRLModule's training pass (Box actions)",
            "envsdk/training/substitutes/sac/module.py",
            "the same outputs with less work: concat critics read as their layers (benchmarks/floor.py)",
        ),
        Substitution(
            IN_PROCESS_TRIAL,
            "loop",
            "Tune's trial loop for a run of one trial; with it, ray.put given the value back while no Ray"
            " runs (internals.without_object_store) and Trainable._monitor swapped at the trial's stop"
            " (internals.release_utilization_monitor)",
            "envsdk/training/run/in_process.py, tune_runner.py",
            "no Ray started for a one-trial run: seconds of start-up (benchmarks/startup.py)",
        ),
        Substitution(
            ENV_GUARD,
            "wrapper",
            "the env runner's vector env (wrapped)",
            "envsdk/envs/faults/guard.py, envsdk/training/hooks/faults.py",
            "a feature, not speed (benchmarks/env_checks.py measures its cost)",
            "env errors named with the env, runner and step; stalls bounded; observation bounds checked",
        ),
        Substitution(
            ACTION_INPUT_CHECK,
            "class",
            "GetActions in the module-to-env pipeline",
            "envsdk/training/hooks/faults.py",
            "a feature, not speed (benchmarks/env_checks.py)",
            "nan/inf in the policy's action distribution named once, where it starts",
        ),
        Substitution(
            AGENT_STEP_CLOCK,
            "wrapper",
            "the timesteps training_step hands LearnerGroup.update (count_steps_by: agent_steps only)",
            "envsdk/training/hooks/agent_step_clock.py",
            "a fix of behaviour, not speed: Ray 1.x's global timestep",
            "lr, entropy_coeff and target-update schedules counted in agent steps, not env steps",
        ),
        Substitution(
            CONNECTOR_FRAMES,
            "patch",
            "ConnectorV2's search for its caller's frame",
            "envsdk/internals/patches.py",
            "connector pieces built without reading every frame's source (benchmarks/speedups.py)",
            install=internals.connectors_find_their_caller_cheaply,
        ),
        Substitution(
            POLYAK_IN_PLACE,
            "patch",
            "the target networks' update (DQN, SAC, APPO)",
            "envsdk/internals/patches.py",
            "target networks blended in place (benchmarks/speedups.py)",
            install=internals.polyak_updates_in_place,
        ),
        Substitution(
            FUSED_ADAM,
            "patch",
            "RLlib's default Adam optimizers",
            "envsdk/internals/patches.py",
            "torch's fused Adam kernel on CPU (benchmarks/speedups.py)",
            install=internals.optimizers_fused_on_cpu,
        ),
        Substitution(
            FINITE_CHECK_ONCE,
            "patch",
            "the learner's nan/inf test of its gradients",
            "envsdk/internals/patches.py",
            "one sum instead of two passes tensor by tensor (benchmarks/speedups.py)",
            install=internals.gradients_checked_once,
        ),
        Substitution(
            FROZEN_IMPORTS,
            "patch",
            "Python's garbage collector while train.py and rollout.py import RLlib",
            "envsdk/speedups.py (untracked_imports)",
            "full collections skip RLlib's half a million import-time objects (benchmarks/phases.py)",
        ),
        Substitution(
            EPISODES_CONVERTED_ONCE,
            "patch",
            "MultiAgentEnvRunner's conversion of ended episodes",
            "envsdk/internals/patches.py",
            "each ended episode converted to numpy once (benchmarks/speedups.py)",
            install=internals.convert_done_episodes_once,
        ),
        Substitution(
            PARALLEL_ENVS,
            "default",
            "gym_env_vectorize_mode's default (sync: a runner's envs step one after another) where the"
            " start-up check times a costly step",
            "envsdk/training/substitutes/sampling/parallel_envs.py, envsdk/training/build/stages.py",
            "a costly env's copies step on every core (benchmarks/expensive_env.py)",
        ),
        Substitution(
            ONE_FILE_PER_WRITE,
            "default",
            "output_write_method_kwargs' default ({}: Ray Data writes a Parquet file per row RLlib's"
            " recorder hands it) where output: records with write_parquet",
            "envsdk/training/substitutes/sampling/recording.py (prepare)",
            "a sample's transitions in one file, not one per row, for the readers that take them back"
            " (tests/training/substitutes/test_recording.py counts the files)",
        ),
        Substitution(
            GAMES_AT_ONCE,
            "wrapper",
            "the vector env's step of its sub-envs one after another (SyncVectorEnv,"
            " SyncVectorMultiAgentEnv), for envs whose step waits on another process (a Unity player)",
            "envsdk/training/substitutes/sampling/games_at_once.py",
            "an env runner's games compute their frames at the same time, as mlagents-learn's --num-envs"
            " (benchmarks/games_at_once.py)",
        ),
        Substitution(
            AGENTS_BATCHED,
            "class",
            "MultiAgentEnvRunner's sampling loop (_sample): its per-agent connector runs, per-agent"
            " counters, and, on Unity games (env: unity), add_env_step and an episode per round",
            "envsdk/training/substitutes/sampling/agents_batched.py (Unity games),"
            " envsdk/training/substitutes/sampling/agent_rounds.py (any other multi-agent env)",
            "one forward pass per policy for all its agents of a step; on a Unity game each agent's life"
            " one episode built from arrays, elsewhere RLlib's episodes: agent steps/s with many agents"
            " (benchmarks/multiagent.py)",
        ),
        Substitution(
            POCA,
            "class",
            "nothing: RLlib has no MA-POCA (run: POCA: PPO's algorithm with a group critic and its learner)",
            "envsdk/training/substitutes/poca/, envsdk/networks/poca.py,"
            " envsdk/training/build/modules/poca.py",
            "cooperative groups' credit, ML-Agents' trainer_type: poca (benchmarks/poca.py)",
            "run: POCA (refused in stock mode: run: PPO trains the same env with per-agent rewards)",
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


@dataclass(frozen=True)
class Stock:
    """The switch: which substitutions are off.  Built once per command (:meth:`resolve`) and
    handed to every place that decides one; each asks :meth:`on` with the name's constant."""

    off: frozenset[str] = frozenset()

    @classmethod
    def resolve(cls, *configs: tuple[Any, str]) -> Stock:
        """The environment's switch (``ENVSDK_STOCK``, ``ENVSDK_NO_PATCHES``) and each experiment's
        ``stock:`` given as ``(value, where)`` (the YAML's, or ``--config.stock``'s)."""
        off = off_in_environment().union(*(off_in_config(value, where) for value, where in configs))
        return cls(frozenset(off))

    def on(self, name: str) -> bool:
        return name not in self.off

    def patches_off(self) -> list[str]:
        """The patches (process-wide) this switch turns off, in the table's order."""
        return [name for name in PATCHES if name in self.off]


def report(stock: Stock) -> list[str]:
    """``--dry-run``'s table: each substitution, on or off, what it replaces and buys, and its switch;
    YAML comments, so that the dry run's output still reads as YAML."""
    width = max(map(len, TABLE))
    lines = [
        f"# substitutions of RLlib ({STOCK}=1 or 'stock: true' turns all off; {STOCK}=NAME,..."
        " or 'stock: [NAME, ...]' some):"
    ]
    for s in TABLE.values():
        lines.append(f"#   {'on ' if stock.on(s.name) else 'off':3}  {s.name:{width}}  replaces {s.replaces}")
        lines.append(f"#   {'':3}  {'':{width}}  buys {s.buys}")
        if s.without:
            lines.append(f"#   {'':3}  {'':{width}}  off, also off: {s.without}")
    return lines
