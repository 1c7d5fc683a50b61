"""DQN and SAC: env steps per second of envsdk's off-policy path against RLlib's, piece by piece.

``run: DQN`` and ``run: SAC`` train with envsdk's subclasses of RLlib's
algorithms, which replay transitions from arrays and hand the learner its
batch (envsdk/training/substitutes/replay/training_step.py); RLlib's own classes sample one-step
episodes and batch them in the learner connector.  SAC runs also get the
learner's single backward pass (envsdk/training/substitutes/sac/learner.py), and
``configs/pendulum-sac.yaml`` the ``q_network: concat`` critic.  This times,
on the shipped configs (``pendulum-sac.yaml``: one update per env step;
``cartpole-dqn.yaml``: prioritized 3-step replay; ``multi-agent-pendulum-sac.yaml``:
a policy per agent, each replayed from its own arrays), each piece taken away in
turn down to RLlib's own path, each run in a fresh process, alternating, and
appends a table to benchmarks/RESULTS.md.

    python benchmarks/replay.py [--iterations 4] [--repeats 2] [--configs pendulum-sac.yaml ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, env_steps_per_second, machine

STREAMS = {"model_config": {"q_network": "streams", "fusionnet_hiddens": [64, 64]}}  # RLlib's critic
RLLIB_SAC_LEARNER = "ray.rllib.algorithms.sac.torch.sac_torch_learner:SACTorchLearner"


class Variant(NamedTuple):
    config: str
    label: str
    overrides: dict
    algo_class: str | None = None  # "module:Class" instead of train.py's
    learner_class: str | None = None


WARM = {"num_steps_sampled_before_learning_starts": 100}  # replay from the second iteration on
DQN_WARM = {**WARM, "min_sample_timesteps_per_iteration": 500}
VARIANTS = [  # per config, the last one is RLlib's own path: the speed-ups are against it
    Variant("pendulum-sac.yaml", "envsdk: transitions, concat critic, one backward pass", WARM),
    Variant("pendulum-sac.yaml", "transitions, concat critic, RLlib's passes", WARM, None, RLLIB_SAC_LEARNER),
    Variant("pendulum-sac.yaml", "transitions, RLlib's critic, RLlib's passes", {**WARM, **STREAMS}, None,
            RLLIB_SAC_LEARNER),
    Variant("pendulum-sac.yaml", "RLlib: episodes, RLlib's critic and passes", {**WARM, **STREAMS},
            "ray.rllib.algorithms.sac:SAC", RLLIB_SAC_LEARNER),
    Variant("cartpole-dqn.yaml", "envsdk: transitions", DQN_WARM),
    Variant("cartpole-dqn.yaml", "RLlib: episodes", DQN_WARM, "ray.rllib.algorithms.dqn:DQN"),
    Variant("multi-agent-pendulum-sac.yaml", "envsdk: transitions per policy", WARM),
    # RLlib's multi-agent episode buffer, with the same critic and learner: only the replay differs
    Variant("multi-agent-pendulum-sac.yaml", "RLlib: multi-agent episodes", WARM,
            "ray.rllib.algorithms.sac:SAC"),
]  # fmt: skip


def _load(ref: str | None) -> object:
    import importlib

    if ref is None:
        return None
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


def one_run(index: int, iterations: int) -> None:
    """Runs in a fresh interpreter: env steps per second, as one JSON line."""
    v = VARIANTS[index]
    rate = env_steps_per_second(
        ROOT / "configs" / v.config, v.overrides, _load(v.algo_class), iterations, _load(v.learner_class)
    )
    print(json.dumps(rate))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--configs", nargs="+", help="only these configs' rows (default: all)")
    p.add_argument("--one-run", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one_run is not None:
        one_run(args.one_run, args.iterations)
        return
    chosen = [i for i, v in enumerate(VARIANTS) if not args.configs or v.config in args.configs]
    if not chosen:
        raise SystemExit(f"no variant of {args.configs}; configs: {sorted({v.config for v in VARIANTS})}")
    rates: dict[int, list[float]] = {}
    for _ in range(args.repeats):
        for index in chosen:  # alternate, so that drift hits all alike
            command = [sys.executable, __file__, "--one-run", str(index)]
            command += ["--iterations", str(args.iterations)]
            out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
            if out.returncode != 0:
                raise SystemExit(out.stderr[-2000:])
            rates.setdefault(index, []).append(json.loads(out.stdout.strip().splitlines()[-1]))
    lines = [
        f"### replay: DQN and SAC, envsdk's off-policy path against RLlib's, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/replay.py {' '.join(sys.argv[1:])}`: env steps per "
        f"second over {args.iterations} iterations after the first two, in one process (no Ray), "
        "learning from the second iteration on; each row takes one piece away.",
        "",
        "| config | path | runs (env steps/s) | median | speed-up against RLlib's |",
        "|---|---|---|---|---|",
    ]
    for index in chosen:
        v = VARIANTS[index]
        rllib = max(i for i, w in enumerate(VARIANTS) if w.config == v.config)
        base = statistics.median(rates[rllib])
        median = statistics.median(rates[index])
        runs = ", ".join(f"{r:.1f}" for r in rates[index])
        lines.append(f"| {v.config} | {v.label} | {runs} | {median:.1f} | {median / base:.2f}x |")
    append_results(lines)


if __name__ == "__main__":
    main()
