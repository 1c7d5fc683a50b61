"""Every shipped config trains for real, briefly, and leaves usable output."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from envsdk import internals, substitutions
from tests.helpers import ROOT, progress_rows, run_train, trial_dirs

OFFLINE = {"cartpole-bc.yaml"}  # trains from a rollout.py recording: tests/config/test_offline.py
# Configs whose batches take minutes on 2 cores: smaller batches here, every other key as shipped.
QUICK = {
    "atari-pong-ppo.yaml": [
        "--config.train_batch_size=256",
        "--config.minibatch_size=128",
        "--config.num_epochs=1",
    ],
    "halfcheetah-sac.yaml": ["--config.num_steps_sampled_before_learning_starts=256"],
}
CONFIGS = sorted(p.name for p in (ROOT / "configs").glob("*.yaml") if p.name not in OFFLINE)
# The configs that take flags of their own train in a train.py each; the others train in one
# train.py with several -f (as a user may run them), which pays Python's and RLlib's start once
# (QUICK's too, as copies with their flags' values in their config: with_flags).
ALONE = {"tune-search.yaml", *(name for name in CONFIGS if name.startswith("unity-"))}
TOGETHER = [name for name in CONFIGS if name not in ALONE and name not in QUICK]


# Stock RLlib 2.60 cannot checkpoint these: its multi-agent replay buffer logs per-agent metrics
# under the env's integer agent ids, which MetricsLogger.get_state cannot join into a key.
# envsdk's transition replay (a substitution) is what trains them.
STOCK_CANNOT = {"multi-agent-pendulum-sac.yaml"}
# Every config that needs no game, with every substitution off but the in-process trial (the fixture
# `stock`): stock RLlib underneath.
STOCK = [n for n in CONFIGS if not n.startswith("unity-") and n not in STOCK_CANNOT and n not in QUICK]
# critic_loss: squared and advantage_normalization: minibatch are computed by envsdk's learners only
# (stock refuses them, naming the key); these configs train in a train.py each.
STOCK_FLAGS = {
    "halfcheetah-sac.yaml": ["--config.critic_loss=huber"],
    "lunarlander-ppo.yaml": ["--config.advantage_normalization=batch"],
}
OURS = (
    "envsdk.training.substitutes.sampling.batched_runner",
    "envsdk.training.substitutes.sac.learner",
    "envsdk.training.substitutes.replay.training_step",
)
OURS += ("envsdk.training.substitutes.ppo.learner", "envsdk.training.substitutes.dqn.learner")
OURS += ("guard_env", "arm_action_check", "speedups.on_env_runner")


def experiment_names(name: str) -> list[str]:
    return list(yaml.safe_load((ROOT / "configs" / name).read_text()))


@pytest.fixture(scope="module")
def together(ray_address, tmp_path_factory) -> tuple[str, Path]:
    """Every config of TOGETHER, and of QUICK with its smaller batches, trained for 2 iterations in one
    train.py; returns (stdout, results)."""
    folder = tmp_path_factory.mktemp("configs")
    results = folder / "results"
    files = [arg for name in TOGETHER for arg in ("-f", f"configs/{name}")]
    files += [arg for name in sorted(QUICK) for arg in ("-f", str(with_flags(name, folder, QUICK[name])))]
    out = run_train(
        [*files, "--stop-iters", "2", "--checkpoint-at-end", "--ray-address", ray_address,
         "--local-dir", str(results)],
        timeout=570,  # under pytest-timeout's 600 s
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout, results


def with_flags(name: str, folder: Path, flags: list[str]) -> Path:
    """A copy of configs/NAME in ``folder`` with the ``--config.KEY=VALUE`` ``flags`` written into each
    experiment's ``config:`` as train.py would set them (parsed as it parses them); every other key as
    shipped. Only for configs that name no file beside them (QUICK's and STOCK_FLAGS': gymnasium ids):
    they then train in one train.py with the others, not in one of their own (~10 s each of Python's,
    RLlib's and the cluster join's start)."""
    from envsdk.cli.train import parse_overrides

    overrides = parse_overrides(flags)
    experiments = yaml.safe_load((ROOT / "configs" / name).read_text())
    for experiment in experiments.values():
        experiment.setdefault("config", {}).update(overrides)
    (folder / name).write_text(yaml.safe_dump(experiments, sort_keys=False))
    return folder / name


@pytest.fixture(scope="module")
def stock(ray_address, tmp_path_factory) -> tuple[str, Path]:
    """Every config of STOCK trained for 1 iteration on stock RLlib, and the heavy ones (QUICK) with
    their smaller batches; returns (stdout, results).

    All in one train.py, the configs that take flags of their own (QUICK, STOCK_FLAGS) as copies with
    those flags' values in their config (with_flags). Every substitution is off (ENVSDK_STOCK lists
    them) but the in-process trial: it changes no config and no class of the algorithm, only who calls
    ``train()`` (train.py, not a Tune actor), and a Tune actor per config was half of this suite's
    stock pass. Stock trials in Tune actors are trained by test_rllib_parity.py's ``-stock`` runs."""
    folder = tmp_path_factory.mktemp("stock")
    results = folder / "results"
    files = [a for name in STOCK if name not in STOCK_FLAGS for a in ("-f", f"configs/{name}")]
    files += [
        a
        for name in sorted({*QUICK, *STOCK_FLAGS})
        for a in ("-f", str(with_flags(name, folder, [*QUICK.get(name, []), *STOCK_FLAGS.get(name, [])])))
    ]
    with pytest.MonkeyPatch.context() as env:
        off = [name for name in substitutions.TABLE if name != substitutions.IN_PROCESS_TRIAL]
        env.setenv("ENVSDK_STOCK", ",".join(off))
        out = run_train(
            [*files, "--stop-iters", "1", "--ray-address", ray_address, "--local-dir", str(results)],
            timeout=570,  # under pytest-timeout's 600 s
        )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout, results


@pytest.mark.slow
@pytest.mark.parametrize("name", [*STOCK, *QUICK])
def test_config_trains_on_stock_rllib(stock, name):
    """Stock RLlib (ENVSDK_STOCK): the config trains with none of envsdk's substitutions in its config."""
    stdout, results = stock
    for experiment in experiment_names(name):
        assert f"done: {experiment}:" in stdout, experiment
        trials = list((results / experiment).glob("*/params.json"))
        assert trials, experiment
        for params in trials:
            text = params.read_text()
            assert not [ours for ours in OURS if ours in text], (experiment, [o for o in OURS if o in text])


def test_every_config_is_covered():
    assert {
        "cartpole-ppo.yaml",
        "cartpole-dqn.yaml",
        "custom-env.yaml",
        "curriculum.yaml",
        "tune-search.yaml",
        "custom-model-modelv2.yaml",
        "custom-model-rlmodule.yaml",
        "action-mask.yaml",
    } <= set(CONFIGS)


@pytest.mark.slow  # its fixtures are requested by name, which the marker rule cannot see
@pytest.mark.parametrize("name", CONFIGS)
def test_config_trains(request, name):
    if name == "unity-dodgeball.yaml" and shutil.which("Xvfb") is None:
        pytest.skip("its camera needs Xvfb, which is not installed")
    iters = "4" if name == "tune-search.yaml" else "2"
    extra: list[str] = []
    if name in ALONE:
        train = request.getfixturevalue("train")
        logs = train.results.parent / "logs"  # the dodgeball config keeps player logs under its cwd
        extra = [f"--config.env_config.log_folder={logs}"] if name.startswith("unity-") else []
        args = ["-f", f"configs/{name}", "--stop-iters", iters, "--checkpoint-at-end", *extra]
        out = train(*args, *QUICK.get(name, []))
        assert out.returncode == 0, out.stderr[-2000:]
        stdout, trials = out.stdout, trial_dirs(train.results)
    else:
        stdout, results = request.getfixturevalue("together")
        folders = [results / experiment for experiment in experiment_names(name)]
        trials = sorted(p.parent for folder in folders for p in folder.glob("*/progress.csv"))
    for experiment in experiment_names(name):
        assert f"done: {experiment}:" in stdout, experiment
    assert trials, "no trial folder written"
    for trial in trials:
        rows = progress_rows(trial)
        assert 1 <= len(rows) <= int(iters)
        assert float(rows[-1]["num_env_steps_sampled_lifetime"]) > 0
        assert (trial / "params.json").is_file()
        result_lines = (trial / "result.json").read_text().splitlines()
        assert json.loads(result_lines[-1])["training_iteration"] == len(rows)
        assert list(trial.glob("events.out.tfevents*")), "no TensorBoard events"
    if extra:
        assert list(logs.glob("Player-*.log")), "no player log in the log_folder given on the command line"
        # Unity agents get a new id every episode: no per-agent-id columns (they grew without bound).
        columns = progress_rows(trials[0])[-1].keys()
        per_agent = [
            c
            for c in columns
            if re.search(r"/(agent_episode_returns_mean|num_agent_steps_sampled(_lifetime)?)/", c)
        ]
        assert not per_agent, per_agent[:5]
        # (a game of one agent as a gymnasium env, unity-single, has RLlib's single-agent names)
        assert any(re.match(r"env_runners/module_episode_returns?_mean/", c) for c in columns)
    if name == "multi-agent.yaml":  # stable agent ids keep RLlib's per-agent metrics
        columns = progress_rows(trials[0])[-1].keys()
        assert "env_runners/agent_episode_returns_mean/runner_0" in columns
    if name == "multi-agent.yaml":  # one policy per runner, each with its own returns
        columns = progress_rows(trials[0])[-1].keys()
        for policy in ("policy_0", "policy_1"):
            assert any(c == f"env_runners/module_episode_returns_mean/{policy}" for c in columns), columns
    if name == "multi-agent-pendulum-sac.yaml":  # each policy's steps in its own replay
        columns = progress_rows(trials[0])[-1]
        for policy in ("policy_0", "policy_1"):
            assert float(columns[f"replay_buffer/num_module_steps_stored/{policy}"]) > 0
    if name == "tune-search.yaml":
        assert len(trials) == 2
        lrs = sorted(json.loads((t / "params.json").read_text())["lr"] for t in trials)
        assert lrs == [0.0003, 0.001]


def test_checkpoint_loads_and_acts(together):
    import numpy as np
    import torch
    from ray.rllib.core.rl_module.rl_module import RLModule

    stdout, _ = together
    section = stdout.split("done: cartpole-ppo:", 1)[1]
    line = next(ln for ln in section.splitlines() if "best checkpoint:" in ln)
    ckpt = Path(line.split("best checkpoint:")[1].strip())
    module_dir = ckpt / internals.MODULE_DIR / "default_policy"
    module = RLModule.from_checkpoint(module_dir)
    obs = torch.as_tensor(np.zeros((3, 4), dtype=np.float32))
    logits = module.forward_inference({"obs": obs})["action_dist_inputs"]
    assert tuple(logits.shape) == (3, 2)
    assert (ckpt.parent / "reward.png").stat().st_size > 1000
