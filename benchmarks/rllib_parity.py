"""RLlib parity: every example env class and model file in the installed ray wheel, through
envsdk and through stock RLlib 2.60, with the same settings.

The classes come from the wheel itself (nothing of RLlib's is copied here): the env classes of
``ray/rllib/examples/envs/classes/`` (and ``multi_agent/``), the ModelV2 classes of the old API
stack's example models, and the RLModule classes of ``ray/rllib/examples/rl_modules/classes/``.
Each case runs, every run bounded by ``--timeout``:

* **envsdk**: ``train.py -f`` on a YAML that names the class the way RLlib's docs do (a model by
  its import path, ``custom_model: ray.rllib....Class``), PPO for 2 short iterations, then
  ``rollout.py CHECKPOINT --episodes 1``; once with ``num_env_runners: 0`` and once with one remote
  runner;
* **stock RLlib**: the same env, env_config and PPO settings built with RLlib's own
  ``PPOConfig`` in a fresh process (a model: ``ModelCatalog.register_custom_model`` on the old API
  stack, ``RLModuleSpec(module_class=...)`` on the new one), 2 iterations, with 0 and 1 runners.

Stock RLlib "trains" a case when its 2 iterations return and sampled env steps (RLlib restarts a
failed remote runner by default, and ``train()`` then returns having sampled nothing).  A case is
a **regression** when stock RLlib trains it and envsdk does not (train or roll out), or
when envsdk ends with anything but a finished run, an ``error:``/``fix:`` pair (exit 2) or a
fault at run time named on the summary's ``trial failed:`` line (always without a traceback).
Target: no regression.  Writes the table into benchmarks/RESULTS.md.

    python benchmarks/rllib_parity.py [--only NAME ...] [--runners 0 1] [--timeout 240]
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import inspect
import json
import os
import pkgutil
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine

ENV_PACKAGES = ("ray.rllib.examples.envs.classes", "ray.rllib.examples.envs.classes.multi_agent")
MODELV2_PACKAGE = "ray.rllib.examples." + "_old_api_stack.models"  # RLlib's public examples folder
RLMODULE_PACKAGE = "ray.rllib.examples.rl_modules.classes"
SMALL = {"train_batch_size": 128, "minibatch_size": 64, "num_epochs": 1}

# What a class needs that its own defaults do not give, as RLlib's example scripts set it; and the
# env a model file is tried on.  Nothing here makes a case pass that would fail with its defaults.
ENV_CONFIG: dict[str, dict[str, Any]] = {
    "CartPoleCrashing": {"p_crash": 0.002},
    "ParametricActionsCartPole": {"max_avail_actions": 10},
    "ParametricActionsCartPoleNoEmbeddings": {"max_avail_actions": 10},
    "MockEnv": {"episode_length": 10},
    "MockEnv2": {"episode_length": 10},
    "MockEnv3": {"episode_length": 10},
}
RUN_CONFIG: dict[str, dict[str, Any]] = {
    "CartPoleCrashing": {"restart_failed_env_runners": True, "restart_failed_sub_environments": True},
}
MODEL_ENV: dict[str, tuple[str, dict[str, Any]]] = {
    "ActionMaskingRLModule": ("ray.rllib.examples.envs.classes.action_mask_env.ActionMaskEnv", {}),
    "ActionMaskingTorchRLModule": ("ray.rllib.examples.envs.classes.action_mask_env.ActionMaskEnv", {}),
    "TorchActionMaskModel": ("ray.rllib.examples.envs.classes.action_mask_env.ActionMaskEnv", {}),
    "AutoregressiveActionsRLM": (
        "ray.rllib.examples.envs.classes.correlated_actions_env.CorrelatedActionsEnv",
        {},
    ),
    "TorchAutoregressiveActionModel": (
        "ray.rllib.examples.envs.classes.correlated_actions_env.CorrelatedActionsEnv",
        {},
    ),
    "TorchParametricActionsModel": (
        "ray.rllib.examples.envs.classes.parametric_actions_cartpole.ParametricActionsCartPole",
        {"max_avail_actions": 10},
    ),
    "CustomTorchRPGModel": ("ray.rllib.examples.envs.classes.simple_rpg.SimpleRPG", {}),
}
MODEL_SETTINGS: dict[str, dict[str, Any]] = {  # model_config keys RLlib's example scripts pass
    "VPGTorchRLModule": {"hidden_dim": 64},
    "LSTMContainingRLModule": {"lstm_cell_size": 32, "max_seq_len": 20},
    "LSTMContainingRLModuleWithTargetNetwork": {"lstm_cell_size": 32, "max_seq_len": 20},
}


@dataclass
class Case:
    """One class: an env (``target`` is the env) or a model (``target`` is the model class)."""

    name: str  # the class's name
    kind: str  # env | multi-agent env | ModelV2 | RLModule
    target: str  # its import path
    env: str
    env_config: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    model_config: dict[str, Any] = field(default_factory=dict)


def discover() -> tuple[list[Case], list[tuple[str, str]]]:
    """The cases, and the modules that cannot be imported here (a package RLlib's example needs)."""
    import gymnasium as gym
    from ray.rllib.core.rl_module.rl_module import RLModule
    from ray.rllib.env.multi_agent_env import MultiAgentEnv
    from ray.rllib.models.torch.torch_modelv2 import TorchModelV2

    cases, unimportable = [], []
    for package in (*ENV_PACKAGES, MODELV2_PACKAGE, RLMODULE_PACKAGE):
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
            module_name = f"{package}.{info.name}"
            try:
                module = importlib.import_module(module_name)
            except Exception as err:
                unimportable.append((module_name, f"{type(err).__name__}: {err}"))
                continue
            for name, cls in vars(module).items():
                if not inspect.isclass(cls) or cls.__module__ != module_name or inspect.isabstract(cls):
                    continue
                path = f"{module_name}.{name}"
                if issubclass(cls, MultiAgentEnv):
                    cases.append(_env_case(name, "multi-agent env", path))
                elif issubclass(cls, gym.Env):
                    cases.append(_env_case(name, "env", path))
                elif issubclass(cls, TorchModelV2 | RLModule):
                    env, env_config = MODEL_ENV.get(name, ("CartPole-v1", {}))
                    kind = "ModelV2" if issubclass(cls, TorchModelV2) else "RLModule"
                    cases.append(Case(name, kind, path, env, env_config, {}, MODEL_SETTINGS.get(name, {})))
    return cases, unimportable


def _env_case(name: str, kind: str, path: str) -> Case:
    return Case(name, kind, path, path, ENV_CONFIG.get(name, {}), RUN_CONFIG.get(name, {}))


# ---- one run, bounded ------------------------------------------------------------------------------


def _run(command: list[str], cwd: Path, timeout: float) -> tuple[int | None, str, float]:
    """A command in its own process group, ended whole at ``timeout``: (exit status or None, output,
    seconds)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out, time.perf_counter() - start
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out or "", time.perf_counter() - start


def _first_error(output: str) -> str:
    """The line that says why a run failed (ours: ``error:``/``trial failed:``; RLlib's: the last
    exception line)."""
    for pattern in (r"^error: (.+)$", r"^  trial failed:\s+\S+: (.+)$", r"^STOCK FAILED: (.+)$"):
        found = re.findall(pattern, output, re.M)
        if found:
            return str(found[-1])[:160]
    lines = [ln for ln in output.splitlines() if re.match(r"^\w*(Error|Exception)\b", ln)]
    return (lines[-1] if lines else (output.strip().splitlines() or ["no output"])[-1])[:160]


def _clean(code: int | None, output: str) -> bool:
    """Whether an envsdk run ended as it must: done, or one ``error:``/``fix:`` pair (exit 2), or a
    fault at run time reported on the summary's ``trial failed:`` line; never a traceback."""
    ended = code in (0, 2) or (code is not None and "  trial failed:" in output)
    return ended and "Traceback" not in output


@dataclass
class Outcome:
    ok: bool
    why: str = ""  # why not, one line
    clean: bool = True  # envsdk: ended with a result or an error:/fix: pair, no traceback
    output: str = ""  # what the run printed (kept for cases that are not ok)


def ours(case: Case, runners: int, timeout: float) -> tuple[Outcome, Outcome]:
    """(train.py, rollout.py) on the case."""
    with tempfile.TemporaryDirectory(prefix="parity-") as tmp:
        folder = Path(tmp)
        config = {**SMALL, "num_env_runners": runners, **case.config, "env_config": case.env_config}
        if case.kind in ("ModelV2", "RLModule"):
            config["model"] = {"custom_model": case.target, "custom_model_config": case.model_config}
        exp = {"run": "PPO", "env": case.env, "stop": {"training_iteration": 2}, "config": config}
        (folder / "exp.yaml").write_text(yaml.safe_dump({"parity": exp}))
        train = [sys.executable, str(ROOT / "train.py"), "-f", "exp.yaml", "--local-dir", "r"]
        code, trained, _ = _run(train, folder, timeout)
        if code != 0:
            why = "timed out" if code is None else _first_error(trained)
            return Outcome(False, why, _clean(code, trained), trained), Outcome(False, "not trained")
        checkpoint = next(iter(sorted(folder.glob("r/parity/*/checkpoint_*"))), None)
        if checkpoint is None:
            return Outcome(False, "no checkpoint", False, trained), Outcome(False, "no checkpoint")
        rollout = [sys.executable, str(ROOT / "rollout.py"), str(checkpoint), "--episodes", "1"]
        code, out, _ = _run([*rollout, "--max-episode-steps", "1000"], folder, timeout)
        why = "" if code == 0 else _first_error(out) if code else "timed out"
        rolled = Outcome(code == 0 and "1 episodes |" in out, why, _clean(code, out), out)
        return Outcome(True, "", _clean(0, trained), trained), rolled


STOCK = """
import json, sys
import ray
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.rllib.models import ModelCatalog
from ray.tune.registry import register_env
import importlib

case, runners = json.loads(sys.argv[1]), int(sys.argv[2])

def load(path):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)

try:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    env = case["env"] if "." not in case["env"].split("-")[0] else load(case["env"])
    config = (
        PPOConfig().environment(env=env, env_config=case["env_config"])
        .env_runners(num_env_runners=runners)
        .training(train_batch_size=128, minibatch_size=64, num_epochs=1)
    )
    settings = dict(case["config"])
    if settings:
        config.fault_tolerance(**settings)
    if case["kind"] == "multi-agent env":
        config.multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent, *a, **k: "shared")
    if case["kind"] == "ModelV2":
        ModelCatalog.register_custom_model("parity_model", load(case["target"]))
        config.api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)
        config.training(model={"custom_model": "parity_model", "custom_model_config": case["model_config"]})
    if case["kind"] == "RLModule":
        spec = RLModuleSpec(module_class=load(case["target"]), model_config=case["model_config"])
        config.rl_module(rl_module_spec=spec)
    algo = config.build_algo()
    for _ in range(2):
        result = algo.train()
    algo.stop()
    steps = result.get("num_env_steps_sampled_lifetime") or result.get("env_runners", {}).get(
        "num_env_steps_sampled_lifetime"
    )
    if not steps or steps != steps:  # 0 or NaN: RLlib restarts failed runners by default, and
        raise RuntimeError("sampled no env steps")  # train() then returns having sampled nothing
    print("STOCK OK", steps)
except BaseException as err:
    first = (str(err).strip().splitlines() or [""])[0]
    print(f"STOCK FAILED: {type(err).__name__}: {first}")
    sys.exit(1)
"""


def stock(case: Case, runners: int, timeout: float) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="parity-stock-") as tmp:
        code, out, _ = _run(
            [sys.executable, "-c", STOCK, json.dumps(asdict(case)), str(runners)], Path(tmp), timeout
        )
    if code == 0 and "STOCK OK" in out:
        return Outcome(True)
    return Outcome(False, "timed out" if code is None else _first_error(out), output=out)


# ---- the table -------------------------------------------------------------------------------------


def _cell(outcome: Outcome) -> str:
    return "trains" if outcome.ok else f"fails: {outcome.why}"


def verdict(theirs: list[Outcome], trained: list[Outcome], rolled: list[Outcome]) -> str:
    """``ok``, or why the case is a regression (RLlib trains where we do not, or we end unclean)."""
    problems = []
    for t, o, r in zip(theirs, trained, rolled, strict=True):
        if t.ok and not o.ok:
            problems.append("RLlib trains, envsdk does not")
        elif o.ok and not r.ok:
            problems.append("rollout fails")
        if not (o.clean and r.clean):
            problems.append("not one error line")
    return "**REGRESSION**: " + "; ".join(dict.fromkeys(problems)) if problems else "ok"


def _keep_logs(folder: Path, *outcomes: list[Outcome]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for what, runs in zip(("stock", "train", "rollout"), outcomes, strict=True):
        for i, outcome in enumerate(runs):
            (folder / f"{what}-{i}.log").write_text(outcome.output)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="class names to run (default: all)")
    parser.add_argument("--runners", type=int, nargs="*", default=[0, 1], help="num_env_runners settings")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per run")
    parser.add_argument(
        "--logs", type=Path, default=Path(tempfile.gettempdir()) / "rllib-parity-logs",
        help="where the output of every run of a case that is not ok is written",
    )  # fmt: skip
    args = parser.parse_args(argv)
    cases, unimportable = discover()
    if args.only:
        cases = [c for c in cases if c.name in args.only]
    rows, regressions = [], 0
    for number, case in enumerate(cases, 1):
        theirs = [stock(case, n, args.timeout) for n in args.runners]
        runs = [ours(case, n, args.timeout) for n in args.runners]
        trained, rolled = [r[0] for r in runs], [r[1] for r in runs]
        result = verdict(theirs, trained, rolled)
        regressions += result != "ok"
        if result != "ok":
            _keep_logs(args.logs / case.name, theirs, trained, rolled)
        stock_text = " / ".join(_cell(t) for t in theirs)
        our_text = " / ".join(
            f"{_cell(o)}{', rolls out' if r.ok else (', rollout ' + _cell(r)) if o.ok else ''}"
            for o, r in zip(trained, rolled, strict=True)
        )
        rows.append(f"| `{case.name}` | {case.kind} | {stock_text} | {our_text} | {result} |")
        print(f"[{number}/{len(cases)}] {case.name}: {result}", flush=True)
    runners = " / ".join(f"{n} runner{'s' if n != 1 else ''}" for n in args.runners)
    command = " ".join(["python benchmarks/rllib_parity.py", *(argv if argv is not None else sys.argv[1:])])
    lines = [
        f"### rllib_parity: RLlib's example classes through envsdk and stock RLlib, {datetime.date.today()}",
        f"Machine: {machine()}. `{command}`: the classes of the installed ray wheel's example folders,"
        f" PPO for 2 iterations of 128 env steps; each cell: {runners}.",
        "",
        f"Regressions (RLlib trains and envsdk does not, or envsdk ends unclean): **{regressions}** of"
        f" {len(cases)} classes.",
        "",
        "| class | kind | stock RLlib | envsdk (train.py, rollout.py) | verdict |",
        "|---|---|---|---|---|",
        *rows,
    ]
    if unimportable:
        lines += ["", "Not importable here (a package the example needs is not installed):"]
        lines += [f"- `{name}`: {why[:120]}" for name, why in unimportable]
    append_results(lines)
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
