"""Training for real: returns move, curricula advance, checkpoints restore."""

from __future__ import annotations

import json
import shutil
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from envsdk import internals
from envsdk.evaluation.restore import load
from envsdk.training.run.checkpoints import verify
from envsdk.training.substitutes.sampling.batched_runner import FAILED_STEPS_PER_SAMPLE
from tests.helpers import (
    ROOT,
    processes_mentioning,
    progress_rows,
    rollout_in_process,
    run_train,
    tensorboard_scalars,
    trial_dirs,
)


def _checkpoint(stdout: str) -> Path:
    line = next(ln for ln in stdout.splitlines() if "best checkpoint:" in ln)
    return Path(line.split("best checkpoint:")[1].strip())


def test_return_moves_on_cartpole(train):
    # 8 iterations: the mean is over the last 100 episodes, so it trails the policy (seeds 1-3 gain 24-33).
    out = train("-f", "configs/cartpole-ppo.yaml", "--stop-iters", "8", "--seed", "1")
    assert out.returncode == 0
    rows = progress_rows(trial_dirs(train.results)[0])
    returns = [float(r["env_runners/episode_return_mean"]) for r in rows]
    assert returns[-1] > returns[0] + 15, returns
    assert "[cartpole-ppo] iter" in out.stdout  # the progress line


def test_curriculum_function_sets_tasks(train):
    # Run from elsewhere: curriculum_env.py is found next to the YAML file.
    out = train(
        "-f", str(ROOT / "configs" / "curriculum.yaml"), "--stop-iters", "5", cwd=train.results.parent
    )
    assert out.returncode == 0
    rows = progress_rows(trial_dirs(train.results)[0])
    tasks = [float(r["curriculum/task"]) for r in rows]
    steps = [float(r["num_env_steps_sampled_lifetime"]) for r in rows]
    # The tutorial's schedule: task = 1 + timesteps_total // 2000 (capped at 5).
    assert tasks == [min(5, 1 + s // 2000) for s in steps]
    assert tasks[-1] > tasks[0]


def test_restore_continues_from_checkpoint(train):
    first = train("-f", "configs/cartpole-ppo.yaml", "--stop-iters", "2")
    assert first.returncode == 0
    ckpt = _checkpoint(first.stdout)
    before = progress_rows(ckpt.parent)[-1]
    second = train("-f", "configs/cartpole-ppo.yaml", "--stop-iters", "1", "--restore", str(ckpt))
    assert second.returncode == 0
    newest = max(trial_dirs(train.results), key=lambda p: p.stat().st_mtime)
    after = progress_rows(newest)[0]
    # Counters and the policy carry over: the lifetime step count keeps counting.
    assert float(after["num_env_steps_sampled_lifetime"]) > float(before["num_env_steps_sampled_lifetime"])


def test_single_trial_folder_matches_tunes(train):
    """One trial trains in train.py's process; its folder holds what a Tune trial's does."""
    out = train(
        "-f", "configs/cartpole-ppo.yaml", "--stop-iters", "4", "--checkpoint-freq", "1",
        "--keep-checkpoints-num", "2", "--checkpoint-score-attr", "env_runners/episode_return_mean",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    (trial,) = trial_dirs(train.results)
    assert not list(trial.parent.glob("experiment_state*")), "went through Tune"
    rows = progress_rows(trial)
    assert [int(r["training_iteration"]) for r in rows] == [1, 2, 3, 4]
    assert all(r["env_runners/episode_return_mean"] for r in rows)
    results = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
    assert [r["training_iteration"] for r in results] == [1, 2, 3, 4]
    assert json.loads((trial / "params.json").read_text())["lr"] == results[0]["config"]["lr"]
    assert (trial / "reward.png").is_file()
    # TensorBoard gets each iteration's numbers under Tune's tags.
    scalars = tensorboard_scalars(trial)
    for i, row in enumerate(rows, start=1):
        for key in ("env_runners/episode_return_mean", "num_env_steps_sampled_lifetime", "time_total_s"):
            assert scalars[f"ray/tune/{key}"][i] == pytest.approx(float(row[key]), rel=1e-6)
    # Best two by return, plus the latest; each verifies against its manifest.
    kept = sorted(trial.glob("checkpoint_*"))
    returns = {i + 1: float(r["env_runners/episode_return_mean"]) for i, r in enumerate(rows)}
    best_two = sorted(returns, key=returns.get, reverse=True)[:2]
    assert {verify(c)["result"]["training_iteration"] for c in kept} == {*best_two, 4}
    best = max(kept, key=lambda c: verify(c)["result"]["env_runners/episode_return_mean"])
    assert _checkpoint(out.stdout) == best


def _flaky_run(
    train: Any, tmp_path: Path, fails_when: str, config: str, iterations: int, runners: int = 0
) -> Any:
    """train.py on CartPole whose step() raises where ``fails_when`` holds (of its steps), with PPO's
    ``config`` (YAML flow mapping entries) and ``runners`` remote env runners; it failed (status 1)."""
    (tmp_path / "flaky_env.py").write_text(
        textwrap.dedent(
            f"""
            import gymnasium as gym

            class Flaky(gym.Wrapper):
                def __init__(self, config=None):
                    super().__init__(gym.make("CartPole-v1"))
                    self.steps = 0
                def step(self, action):
                    self.steps += 1
                    if {fails_when}:
                        raise RuntimeError("the simulator lost its licence")
                    return self.env.step(action)
            """
        )
    )
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(
        f"flaky:\n  run: PPO\n  env: flaky_env.Flaky\n  config: {{num_env_runners: {runners}, {config}}}"
    )
    out = train("-f", str(cfg), "--stop-iters", str(iterations))
    assert out.returncode == 1
    return out


@pytest.mark.substitution("env-guard", "in-process-trial")  # EnvRaised; our trial's error.txt
def test_env_failing_mid_training_is_reported(train, tmp_path):
    out = _flaky_run(train, tmp_path, "self.steps > 3000", "train_batch_size: 1000, minibatch_size: 250", 50)
    (trial,) = trial_dirs(train.results)
    assert (
        f"trial failed:    {trial}: EnvRaised: env 'flaky_env.Flaky' (the local env runner) raised"
        " RuntimeError: the simulator lost its licence in step() at step" in out.stdout
    ), out.stdout[-2000:]
    assert "restart_failed_sub_environments: true" in out.stdout
    assert "Traceback" in (trial / "error.txt").read_text()
    assert 1 <= len(progress_rows(trial)) < 50


@pytest.mark.substitution("env-guard")  # its EnvRaised names the env's error
def test_an_env_failing_in_trials_of_a_grid_is_named_for_each(train, tmp_path):
    """Trials of a grid run in Tune's actors, whose errors reach train.py as Ray's RayTaskError, the
    env's error chain only in its text: each trial's line still names the env's error."""
    grid = "train_batch_size: 500, minibatch_size: 250, lr: {grid_search: [0.001, 0.0005]}"
    out = _flaky_run(train, tmp_path, "self.steps > 1500", grid, 10)
    said = [line for line in out.stdout.splitlines() if line.startswith("  trial failed:    ")]
    assert len(said) == 2, out.stdout[-2000:]
    named = ": EnvRaised: env 'flaky_env.Flaky' (the local env runner) raised RuntimeError: the simulator"
    assert all(named in line for line in said), said


@pytest.mark.substitution("batched-sampler")  # RLlib's own loop samples such an env for ever
def test_an_env_that_keeps_failing_ends_the_run_with_its_error(train, tmp_path):
    """restart_failed_sub_environments remakes a failed env and counts the sample afresh: an env that
    fails every few steps would sample for ever.  The run ends, naming the env's error and the fix."""
    restarting = "train_batch_size: 200, minibatch_size: 100, restart_failed_sub_environments: true"
    out = _flaky_run(train, tmp_path, "self.steps % 5 == 0", restarting, 3)
    (error,) = train.results.glob("*/*/error.txt")  # no iteration ended: no progress.csv
    trial = error.parent
    failures = FAILED_STEPS_PER_SAMPLE + 1
    said = [line for line in out.stdout.splitlines() if line.startswith(f"  trial failed:    {trial}: ")]
    assert len(said) == 1, out.stdout[-2000:]
    assert "EnvKeepsFailing" in said[0]  # through Ray's RayTaskError where the trial runs in Tune's actor
    assert f"the env's step failed {failures} times in one sample" in said[0]
    assert "its last error: RuntimeError: the simulator lost its licence" in said[0]
    assert "EnvKeepsFailing" in error.read_text()


@pytest.mark.substitution("batched-sampler")
def test_a_remote_runner_whose_env_keeps_failing_is_named_by_its_fault(train, tmp_path):
    """The runner's record of its error (hooks/restarts.py) is the fault that ended it, not the first
    env error it recovered from (whose advice, restart_failed_sub_environments, is already taken)."""
    restarting = (
        "delay_between_env_runner_restarts_s: 1, train_batch_size: 200, minibatch_size: 100,"
        " restart_failed_sub_environments: true"
    )
    out = _flaky_run(train, tmp_path, "self.steps % 5 == 0", restarting, 3, runners=1)
    said = [line for line in out.stdout.splitlines() if line.startswith("  trial failed:    ")]
    assert len(said) == 1, out.stdout[-2000:]
    assert "env runner 1 failed: EnvKeepsFailing: the env's step failed" in said[0], said
    assert (
        "(its last error: RuntimeError: the simulator lost its licence); fix: fix the env's step()" in said[0]
    )


@pytest.mark.slow
def test_a_local_rays_workers_import_modules_next_to_the_yaml(tmp_path):
    """A remote env runner of a Ray that train.py starts imports what the env module imports from its folder.

    The env class itself travels by value; the module it imports does not, so the
    worker must find the YAML's folder on its path (not the tests' working directory).
    """
    (tmp_path / "sibling_sizes.py").write_text("LENGTH = 7\n")
    (tmp_path / "sibling_env.py").write_text(
        textwrap.dedent("""
        import gymnasium as gym
        import numpy as np
        import sibling_sizes

        class SiblingEnv(gym.Env):
            observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
            action_space = gym.spaces.Discrete(2)

            def __init__(self, config=None):
                self.t = 0

            def reset(self, *, seed=None, options=None):
                self.t = 0
                return np.zeros(1, np.float32), {}

            def step(self, action):
                self.t += 1
                return np.zeros(1, np.float32), float(action), self.t >= sibling_sizes.LENGTH, False, {}
    """)
    )
    (tmp_path / "exp.yaml").write_text(
        "sibling:\n  run: PPO\n  env: sibling_env.SiblingEnv\n"
        "  config: {num_env_runners: 1, train_batch_size: 200, minibatch_size: 100, num_epochs: 1}\n"
    )
    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    try:
        out = run_train(["-f", str(tmp_path / "exp.yaml"), "--stop-iters", "1", "--ray-num-cpus", "2",
                         "--temp-dir", str(temp), "--local-dir", str(tmp_path / "results")])  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        assert list(temp.glob("session_*")), "the env runner ran outside train.py's process"
        (row,) = progress_rows(trial_dirs(tmp_path / "results")[0])
        assert float(row["env_runners/episode_len_mean"]) == 7
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("runners", [0, 1])
def test_local_ray_only_when_needed_and_gone_after(tmp_path, runners):
    """Without --ray-address, train.py starts a local Ray only for what runs outside its own process
    (here: an env runner), and ends all of it (monitor included) on exit."""
    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: Ray's socket paths have a length limit
    try:
        out = run_train(
            ["-f", "configs/cartpole-ppo.yaml", "--stop-iters", "1", "--ray-num-cpus", "2",
             "--temp-dir", str(temp), "--local-dir", str(tmp_path), f"--config.num_env_runners={runners}"],
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        assert "done: cartpole-ppo" in out.stdout and "autoscaler" not in out.stderr
        assert "gputil" not in out.stderr  # advice about a package nobody needs, once per algorithm
        assert bool(list(temp.glob("session_*"))) is (runners > 0)
        assert not processes_mentioning(str(temp))
        assert (trial_dirs(tmp_path)[0] / "checkpoint_000000" / internals.ALGORITHM_STATE_FILE).is_file()
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize(("cpus", "threads"), [(None, 1), (2, 2)])
def test_an_in_process_trial_computes_on_the_threads_a_tune_trial_would_get(tmp_path, cpus, threads):
    """Ray gives a Tune trial's process OMP_NUM_THREADS = its CPUs; train.py's own process does the same."""
    (tmp_path / "threads_hook.py").write_text(
        "import torch\n\ndef record(algorithm, **kwargs):\n"
        "    with open('threads.txt', 'a') as fh:\n        fh.write(f'{torch.get_num_threads()}\\n')\n"
    )
    # No env runner of its own (RLlib's default is 2, which would start a local Ray and two actors for
    # nothing this test reads): the algorithm's process asks for the same CPUs either way
    # (its first bundle: num_cpus_for_main_process, and the local learner's).
    config = {
        "num_env_runners": 0,
        "train_batch_size": 64,
        "minibatch_size": 64,
        "num_epochs": 1,
        "callbacks_on_train_result": "threads_hook.record",
    }
    if cpus:
        config["num_cpus_for_main_process"] = cpus
    (tmp_path / "exp.yaml").write_text(
        json.dumps({"threads": {"run": "PPO", "env": "CartPole-v1", "config": config}})
    )
    out = run_train(["-f", "exp.yaml", "--stop-iters", "1", "--local-dir", "results"], cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "threads.txt").read_text().split() == [str(threads)]


def test_a_ray_1x_grid_over_model_options_trains_each_network(train, tmp_path):
    """`model: {fcnet_hiddens: {grid_search: ...}}`, as Ray 1.x tuning files write it: each Tune trial
    checkpoints the network its grid value names (the search space once varied a dict nothing read)."""
    from ray.rllib.core.rl_module.rl_module import RLModule
    from torch import nn

    path = tmp_path / "grid.yaml"
    path.write_text(
        textwrap.dedent("""
        grid:
          run: PPO
          env: CartPole-v1
          stop: {training_iteration: 1}
          checkpoint_at_end: true
          config:
            num_workers: 0
            train_batch_size: 64
            sgd_minibatch_size: 32
            num_sgd_iter: 1
            model:
              fcnet_hiddens: {grid_search: [[5], [7]]}
              post_fcnet_hiddens: [3]
        """)
    )
    out = train("-f", str(path))
    assert out.returncode == 0, out.stderr[-2000:]
    widths = {}
    for trial in trial_dirs(train.results):
        (ckpt,) = trial.glob("checkpoint_*")
        module = RLModule.from_checkpoint(ckpt / internals.MODULE_DIR / "default_policy")
        layers = [m for m in module.modules() if isinstance(m, nn.Linear)]
        hidden = json.loads((trial / "params.json").read_text())[internals.MODEL_CONFIG_FIELD][
            "fcnet_hiddens"
        ]
        assert layers[0].out_features == hidden[0], (hidden, layers)
        assert any(m.out_features == 3 for m in layers)  # post_fcnet_hiddens: the heads' layer
        widths[trial.name] = hidden[0]
        # Loading the checkpoint builds its config again, with the network this trial drew.
        assert load(ckpt).config.model_config["fcnet_hiddens"] == hidden
    assert sorted(widths.values()) == [5, 7], widths


def test_a_grid_in_env_config_gives_each_trial_its_env(train, tmp_path):
    """`env_config: {size: {grid_search: [...]}}` (Tune expands a grid anywhere): each trial builds its
    own env and a network for that env's observation size."""
    from ray.rllib.core.rl_module.rl_module import RLModule
    from torch import nn

    (tmp_path / "sized_env.py").write_text(
        textwrap.dedent("""
        import gymnasium as gym
        import numpy as np

        class SizedEnv(gym.Env):
            def __init__(self, config=None):
                self.size = int(config["size"])
                self.observation_space = gym.spaces.Box(-1, 1, (self.size,), np.float32)
                self.action_space = gym.spaces.Discrete(2)

            def reset(self, *, seed=None, options=None):
                self.t = 0
                return np.zeros(self.size, np.float32), {}

            def step(self, action):
                self.t += 1
                return np.zeros(self.size, np.float32), float(action), self.t >= 8, False, {}
        """)
    )
    path = tmp_path / "grid.yaml"
    path.write_text(
        textwrap.dedent("""
        sized:
          run: PPO
          env: sized_env.SizedEnv
          stop: {training_iteration: 1}
          checkpoint_at_end: true
          config:
            env_config: {size: {grid_search: [3, 5]}, noise: {uniform: [0, 1]}}
            num_env_runners: 0
            train_batch_size: 64
            minibatch_size: 32
            num_epochs: 1
        """)
    )
    out = train("-f", str(path))
    assert out.returncode == 0, out.stderr[-2000:]
    sizes = []
    for trial in trial_dirs(train.results):
        env_config = json.loads((trial / "params.json").read_text())["env_config"]
        assert env_config["noise"] == {"uniform": [0, 1]}  # not a search space inside env_config: the env's
        (ckpt,) = trial.glob("checkpoint_*")
        module = RLModule.from_checkpoint(ckpt / internals.MODULE_DIR / "default_policy")
        first = next(m for m in module.modules() if isinstance(m, nn.Linear))
        assert first.in_features == env_config["size"], (env_config, first)
        sizes.append(env_config["size"])
        assert load(ckpt).env_config["size"] == env_config["size"]  # the config built again: this trial's
    assert sorted(sizes) == [3, 5]


def test_evaluation_runs_on_its_own_env(train, tmp_path):
    """`evaluation_config: {env: module.Class, env_config: ...}`: evaluation's env is resolved and
    registered as `env` is (here an old-gym-API class, which RLlib cannot run by itself), its
    env_config merged over training's, and the trained network acts in it."""
    (tmp_path / "fixed_env.py").write_text(
        textwrap.dedent("""
        import gymnasium as gym
        import numpy as np

        class FixedReturn(gym.Env):
            '''CartPole's spaces; `steps` steps of reward `pay` whatever the agent does.'''

            def __init__(self, config=None):
                self.steps, self.pay = int(config["steps"]), float(config["pay"])
                self.observation_space = gym.make("CartPole-v1").observation_space
                self.action_space = gym.spaces.Discrete(2)

            def reset(self, *, seed=None, options=None):
                self.t = 0
                return np.zeros(4, np.float32), {}

            def step(self, action):
                self.t += 1
                return np.zeros(4, np.float32), self.pay, self.t >= self.steps, False, {}

        class OldApiFixedReturn(FixedReturn):
            '''The same, written for Ray 1.x's gym: reset -> obs, step -> 4-tuple.'''

            def reset(self):
                return super().reset()[0]

            def step(self, action):
                obs, reward, done, _, info = super().step(action)
                return obs, reward, done, info

        def count_episode(*, metrics_logger=None, **_):
            metrics_logger.log_value("hooked_episodes", 1, reduce="sum")

        class HookedFixedReturn(FixedReturn, RLlibHooks):
            '''The same with hooks of its own: a callback, and a config default.'''

            env_callbacks = {"on_episode_end": count_episode}
            config_defaults = {"explore": False}
        """).replace("import numpy as np", "import numpy as np\nfrom envsdk.envs.base import RLlibHooks")
    )
    path = tmp_path / "eval.yaml"
    path.write_text(
        textwrap.dedent("""
        evaluated:
          run: PPO
          env: fixed_env.FixedReturn
          stop: {training_iteration: 1}
          config:
            env_config: {steps: 10, pay: 1.0}
            num_env_runners: 0
            train_batch_size: 64
            minibatch_size: 32
            num_epochs: 1
            evaluation_interval: 1
            evaluation_duration: 2
            evaluation_config:
              env: fixed_env.OldApiFixedReturn
              env_config: {pay: 2.5}
        """)
    )
    out = train("-f", str(path))
    assert out.returncode == 0, out.stderr[-2000:]
    (trial,) = trial_dirs(train.results)
    last = progress_rows(trial)[-1]
    assert float(last["env_runners/episode_return_mean"]) == 10.0  # training's env: 10 steps of 1
    assert float(last["evaluation/env_runners/episode_return_mean"]) == 25.0  # 10 (training's) steps of 2.5
    # rollout.py --eval-env plays evaluation's env and settings; without it, training's.
    for flags, ret in (([], "10.00"), (["--eval-env"], "25.00")):
        code, text = rollout_in_process(trial, "--episodes", "1", "--no-out", *flags)
        assert code == 0 and f"episode 1: return {ret}, length 10" in text, text

    # An evaluation env with hooks of its own gets them there, and training's env does not.
    path.write_text(path.read_text().replace("fixed_env.OldApiFixedReturn", "fixed_env.HookedFixedReturn"))
    out = train("-f", str(path))
    assert out.returncode == 0, out.stderr[-2000:]
    (hooked,) = set(trial_dirs(train.results)) - {trial}
    last = progress_rows(hooked)[-1]
    assert float(last["evaluation/env_runners/hooked_episodes"]) >= 2  # its callback ran in evaluation
    assert "env_runners/hooked_episodes" not in last  # and not in training
    params = json.loads((hooked / "params.json").read_text())
    assert params["evaluation_config"]["explore"] is False  # its config default, in evaluation only
