"""The ``envsdk`` command: one entry point for training, evaluation and the tools.

``envsdk train`` and ``envsdk rollout`` are ``train.py`` and ``rollout.py``
(the same code); ``envsdk evaluate`` is ``rollout`` under Ray 1.x's
``rllib evaluate`` name.  Each command is imported only when it runs.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from envsdk.errors import UserError, did_you_mean, exit_now, run_cli


@dataclass(frozen=True)
class Command:
    target: str  # "module:function", called as function(argv, prog=...)
    summary: str
    example: str


COMMANDS = {
    "train": Command("envsdk.cli.train:main", "train from a YAML experiment file (train.py)",
                     "envsdk train -f configs/cartpole-ppo.yaml"),
    "rollout": Command("envsdk.cli.rollout:main",
                       "evaluate a checkpoint: returns, experience, video (rollout.py)",
                       "envsdk rollout ~/ray_results/cartpole-ppo --episodes 3 --video videos/"),
    "evaluate": Command("envsdk.cli.rollout:main", "rollout, under rllib evaluate's name",
                        "envsdk evaluate CHECKPOINT --steps 1000 --out rollout.npz"),
    "export": Command("envsdk.cli.tools:export", "write a checkpoint's policy as ONNX",
                      "envsdk export ~/ray_results/cartpole-ppo policy.onnx"),
    "check": Command("envsdk.cli.tools:check", "check an env against its spaces and the API checkers",
                     "envsdk check custom_env.CustomEnv"),
    "new": Command("envsdk.cli.tools:new", "write a new env, its YAML and a passing test",
                   "envsdk new gridworld --dir myproject"),
    "slurm": Command("envsdk.cluster.slurm:main", "write an sbatch script that trains on SLURM",
                     "envsdk slurm --nodes 2 --time 04:00:00 -- -f my.yaml --num-workers auto"),
    "completion": Command("envsdk.cli.tools:completion", "print a bash completion script",
                          "source <(envsdk completion)"),
    "legacy-table": Command("envsdk.cli.tools:legacy_table", "print the Ray 1.x names and what they became",
                            "envsdk legacy-table"),
}  # fmt: skip


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: envsdk COMMAND [ARGS...]   (envsdk COMMAND --help for its flags)", "", "commands:"]
    lines += [f"  {name:<{width}}  {c.summary}" for name, c in COMMANDS.items()]
    lines += ["", "examples:"] + [f"  {c.example}" for c in COMMANDS.values()]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        raise UserError(
            f"unknown command '{name}'", did_you_mean(name, COMMANDS) or f"commands: {', '.join(COMMANDS)}"
        )
    module, function = COMMANDS[name].target.split(":")
    return int(getattr(importlib.import_module(module), function)(rest, prog=f"envsdk {name}") or 0)


def entry() -> None:
    # exit_now: training and rollouts load RLlib and torch, whose teardown costs a second for nothing
    exit_now(run_cli(main, sys.argv[1:]))
