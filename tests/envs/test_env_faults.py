"""Faults inside a user's env, and a diverging policy: each ends the run by itself, names itself,
and leaves no process behind (envsdk.envs.faults.guard, envsdk.training.hooks.faults, docs/env-faults.md)."""

from __future__ import annotations

import functools
import math
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from envsdk.config.own_keys.env_checks import EnvCheckSettings
from envsdk.envs.faults.guard import SingleAgentGuard, Site, compile_check
from envsdk.envs.faults.records import EnvStalled, ObservationFault, ResetsInTheSameStep, RewardFault
from envsdk.envs.faults.stall_watch import arm_main_thread
from envsdk.errors import UserError, root_cause
from envsdk.progress import HEALTH, health_note
from envsdk.training.hooks.faults import (
    PolicyDiverged,
    check_action_inputs,
    check_learners,
    guard_env,
    with_learner_stats,
)
from tests.helpers import ROOT, processes_mentioning, run_train

# ---- the checks of one space, over every space kind -----------------------------------------------

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
SPACES = {
    "box": BOX,
    "unbounded-box": gym.spaces.Box(-np.inf, np.inf, (2, 2), np.float64),
    "int-box": gym.spaces.Box(0, 255, (4,), np.uint8),
    "discrete": gym.spaces.Discrete(5, start=1),
    "multi-discrete": gym.spaces.MultiDiscrete([3, 4]),
    "multi-binary": gym.spaces.MultiBinary(3),
    "dict": gym.spaces.Dict({"pos": BOX, "id": gym.spaces.Discrete(3)}),
    "tuple": gym.spaces.Tuple((BOX, gym.spaces.MultiBinary(2))),
}


def _batch(space: gym.Space, n: int | None) -> object:
    """A valid value of ``space`` (a batch of ``n`` as a vector env stacks them, or one)."""
    if n is None:
        return space.sample()
    return gym.vector.utils.concatenate(
        space, [space.sample() for _ in range(n)], gym.vector.utils.create_empty_array(space, n)
    )


def _spoil(space: gym.Space, value: object, how: str) -> object:
    """``value`` with one fault of kind ``how`` in its first leaf (the last sub-env, when batched)."""
    if isinstance(space, gym.spaces.Dict):
        key = next(iter(space.spaces))
        return {**value, key: _spoil(space[key], value[key], how)} if how != "missing" else {}
    if isinstance(space, gym.spaces.Tuple):
        return (_spoil(space[0], value[0], how), *value[1:])
    array = np.array(value, copy=True)
    if how == "shape":
        return np.concatenate([array.reshape(-1), array.reshape(-1)[:1]])
    if how == "nan":
        array = array.astype(np.float64)
        array.reshape(-1)[-1] = np.nan
        return array
    array = array.astype(np.float64 if array.dtype.kind == "f" else np.int64)
    array.reshape(-1)[-1] = 1000  # outside every space above
    return array


@pytest.mark.parametrize("batched", [None, 3], ids=["one", "batch-of-3"])
@pytest.mark.parametrize("name", list(SPACES))
def test_each_space_kind_passes_its_values_and_names_each_fault(name, batched):
    space = SPACES[name]
    lead = (batched,) if batched else ()
    check = compile_check(space, lead, "error")
    for _ in range(5):
        value = _batch(space, batched)
        assert check.fine(value), (name, value)
    faults = ["shape", "bounds", *(["nan"] if np.dtype(space.dtype or np.float32).kind == "f" else [])]
    if name == "unbounded-box":
        faults = ["shape", "nan"]
    if isinstance(space, gym.spaces.Dict):
        faults = ["missing", "shape", "bounds", "nan"]
    if isinstance(space, gym.spaces.Tuple):
        faults = ["shape", "bounds", "nan"]
    for how in faults:
        bad = _spoil(space, _batch(space, batched), how)
        assert not check.fine(bad), (name, how)
        problem = check.problem(bad, "")
        assert problem is not None and problem.kind == how, (name, how, problem)
        if batched and how in ("nan", "bounds"):
            assert problem.sub_env == batched - 1


def test_bounds_off_still_refuses_nan_and_infinity():
    check = compile_check(BOX, (2,), "off")
    assert check.fine(np.full((2, 3), 7.0, np.float32))  # out of bounds: not checked
    for bad in (np.nan, np.inf, -np.inf):
        value = np.zeros((2, 3), np.float32)
        value[1, 2] = bad
        assert not check.fine(value) and check.problem(value, "").kind == "nan"


# ---- the guard on a real gymnasium vector env -----------------------------------------------------

FAULTY_FILE = textwrap.dedent(
    '''
    import time

    import gymnasium as gym
    import numpy as np


    class Faulty(gym.Env):
        """Steps fine, then (after `after` steps of this env in all) does what `fault` says."""

        def __init__(self, config=None):
            config = config or {}
            self.fault = config.get("fault", "none")
            self.after = config.get("after", 700)
            self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
            self.action_space = gym.spaces.Discrete(2)
            self.total = 0
            self.t = 0

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return np.zeros(4, np.float32), {}

        def step(self, action):
            self.total += 1
            self.t += 1
            obs = np.full(4, 0.1, np.float32)
            reward = 1.0
            if self.total > self.after:
                if self.fault == "nan":
                    obs[2] = np.nan
                elif self.fault == "shape":
                    obs = np.zeros(5, np.float32)
                elif self.fault == "bounds":
                    obs[1] = 7.5
                elif self.fault == "reward":
                    reward = float("nan")
                elif self.fault == "huge-reward":  # finite, but a value loss of inf: the policy diverges
                    reward = 1e30
                elif self.fault == "stall":
                    time.sleep(3600)
            return obs, reward, self.t >= 50, False, {}
    '''
)


@pytest.fixture(scope="module")
def faulty_module(tmp_path_factory):
    folder = tmp_path_factory.mktemp("faulty")
    (folder / "faulty_env.py").write_text(FAULTY_FILE)
    sys.path.insert(0, str(folder))
    import faulty_env

    yield faulty_env, folder
    sys.path.remove(str(folder))


def _guarded(faulty_module, fault, after, num_envs=3, bounds="error", stall_s=30.0, runner=1):
    module, _ = faulty_module
    vec = gym.vector.SyncVectorEnv(
        [lambda i=i: module.Faulty({"fault": fault, "after": after + i}) for i in range(num_envs)]
    )
    warnings: list[str] = []
    counted: list[int] = []
    SingleAgentGuard(
        vec, Site("faulty_env.Faulty", runner), bounds, stall_s, warnings.append, lambda: counted.append(1)
    )
    return vec, warnings, counted


def _run_until_fault(vec, steps=200):
    vec.reset()
    for _ in range(steps):
        vec.step(np.zeros(vec.num_envs, np.int64))


@pytest.mark.parametrize(
    "fault, error, text",
    [
        (
            "nan",
            ObservationFault,
            "returned a non-finite observation: obs[2] = nan at step 11 of its episode",
        ),
        ("shape", ObservationFault, "of shape (5,), where the space says (4,) at step 11 of its episode"),
        ("bounds", ObservationFault, "returned obs[1] = 7.5, outside [-1.0, 1.0] at step 11 of its episode"),
        ("reward", RewardFault, "returned the reward nan at step 11 of its episode"),
    ],
)
def test_a_fault_names_the_env_runner_sub_env_step_and_value(faulty_module, fault, error, text):
    vec, _, _ = _guarded(faulty_module, fault, after=10)
    with pytest.raises(error) as caught:
        _run_until_fault(vec)
    message = str(caught.value)
    assert message.startswith("env 'faulty_env.Faulty' (env runner 1, sub-env 0) ") and text in message
    assert "; fix: " in message


def test_observation_bounds_warn_says_it_once_and_counts_each(faulty_module):
    vec, warnings, counted = _guarded(faulty_module, "bounds", after=10, num_envs=1, bounds="warn")
    _run_until_fault(vec, steps=30)
    assert len(warnings) == 1 and "obs[1] = 7.5" in warnings[0] and "(env runner 1)" in warnings[0]
    assert len(counted) == 20


def test_observation_bounds_off_lets_them_pass(faulty_module):
    vec, warnings, counted = _guarded(faulty_module, "bounds", after=10, bounds="off")
    _run_until_fault(vec, steps=30)
    assert not warnings and not counted


def test_a_stalled_call_on_the_main_thread_raises_there(faulty_module):
    arm_main_thread()
    vec, _, _ = _guarded(faulty_module, "stall", after=3, num_envs=1, stall_s=0.5, runner=0)
    began = time.monotonic()
    with pytest.raises(EnvStalled, match=r"the local env runner\) has not returned from step\(\) for 1 s"):
        _run_until_fault(vec)
    assert time.monotonic() - began < 5


STALL_SCRIPT = """
import sys, threading
import numpy as np
import gymnasium as gym
sys.path.insert(0, {folder!r})
import faulty_env
from envsdk.envs.faults.guard import SingleAgentGuard, Site
from envsdk.envs.faults.stall_watch import on_hard_exit
vec = gym.vector.SyncVectorEnv([lambda: faulty_env.Faulty({{"fault": "stall", "after": 2}})])
SingleAgentGuard(vec, Site("faulty_env.Faulty", {runner}), "error", 0.5, print, lambda: None)
on_hard_exit(lambda: print("hook ran", flush=True))
def run():
    vec.reset()
    for _ in range(10):
        vec.step(np.zeros(1, np.int64))
if {in_thread}:
    threading.Thread(target=run).start()
    threading.Event().wait()
else:
    run()
"""


@pytest.mark.parametrize(
    "runner, in_thread", [(1, False), (0, True)], ids=["remote-runner", "local-runner-in-a-thread"]
)
def test_a_stall_that_cannot_be_raised_ends_the_process(faulty_module, runner, in_thread):
    _, folder = faulty_module
    script = STALL_SCRIPT.format(folder=str(folder), runner=runner, in_thread=in_thread)
    began = time.monotonic()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 1, out.stderr[-2000:]
    assert (
        "error: EnvStalled: env 'faulty_env.Faulty'" in out.stderr
        and "has not returned from step()" in out.stderr
    )
    assert "hook ran" in out.stdout
    assert time.monotonic() - began < 30


class TwoAgents(MultiAgentEnv):
    """Agent 'b' observes NaN at its 5th step."""

    def __init__(self, config=None):
        super().__init__()
        self.possible_agents = self.agents = ["a", "b"]
        self.observation_spaces = {a: gym.spaces.Box(-1, 1, (2,), np.float32) for a in self.agents}
        self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.agents}
        self.t = 0

    def _obs(self):
        return {
            a: np.full(2, math.nan if (a == "b" and self.t == 5) else 0.5, np.float32) for a in self.agents
        }

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(), {}

    def step(self, action_dict):
        self.t += 1
        flags = {a: False for a in self.agents} | {"__all__": False}
        return self._obs(), {a: 1.0 for a in self.agents}, flags, flags, {}


def test_a_multi_agent_fault_names_the_agent_in_a_real_env_runner():
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner

    config = (
        PPOConfig()
        .environment(TwoAgents)
        .multi_agent(policies={"p"}, policy_mapping_fn=lambda aid, *a, **k: "p")
        .callbacks(on_environment_created=functools.partial(guard_env, bounds="error", stall_s=60.0))
    )
    runner = MultiAgentEnvRunner(config=config)
    try:
        with pytest.raises(RuntimeError) as caught:  # RLlib re-raises env errors "from" them
            runner.sample(num_timesteps=20)
        fault = root_cause(caught.value)
        assert isinstance(fault, ObservationFault) and (
            "(the local env runner, agent 'b') returned a non-finite observation: obs[0] = nan at step 5"
        ) in str(fault)
    finally:
        runner.stop()


# ---- settings ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, text",
    [
        ({"observation_bound": "off"}, "unknown env_checks setting 'observation_bound'"),
        ({"observation_bounds": "loud"}, "observation_bounds must be one of off, warn, error"),
        ({"stall_timeout_s": -1}, "stall_timeout_s must be a positive number"),
        ({"stall_timeout_s": True}, "stall_timeout_s must be a positive number"),
        ({"parallel_envs": "yes"}, "parallel_envs must be one of auto, off"),
        ("strict", "env_checks must be a mapping"),
    ],
)
def test_bad_env_checks_are_refused_by_name(value, text):
    with pytest.raises(UserError, match=text):
        EnvCheckSettings.parse(value, "x.yaml:3")


def test_the_stall_bound_follows_sample_timeout_and_refuses_a_longer_one_set_beside_it():
    assert EnvCheckSettings.parse(None, "w").stall_bound(45.0, "w", True) == 45.0
    assert EnvCheckSettings.parse(None, "w").stall_bound(None, "w", False) == 60.0
    assert EnvCheckSettings.parse({"observation_bounds": False}, "w").observation_bounds == "off"
    settings = EnvCheckSettings.parse({"stall_timeout_s": 300}, "w")
    assert settings.stall_bound(60.0, "w", False) == 300.0  # sample_timeout_s is raised to it
    with pytest.raises(UserError, match="longer than sample_timeout_s"):
        settings.stall_bound(60.0, "w", True)


# ---- the policy's side ----------------------------------------------------------------------------


def test_non_finite_action_inputs_name_the_policy():
    check_action_inputs({"action_dist_inputs": torch.zeros(4, 2)})
    for batch, policy in [
        ({"action_dist_inputs": torch.tensor([[0.0, math.nan]])}, "default_policy"),
        ({"red": {"action_dist_inputs": {"a": torch.zeros(1), "b": torch.tensor([math.inf])}}}, "red"),
    ]:
        with pytest.raises(PolicyDiverged, match=f"policy '{policy}' produced NaN or infinite"):
            check_action_inputs(batch)


@pytest.mark.substitution("action-input-check")
def test_a_runner_whose_weights_are_nan_names_the_policy_instead_of_torch():
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    from envsdk.config.experiment import load_experiments
    from envsdk.training.build import build_config

    built = build_config(
        load_experiments(ROOT / "configs" / "cartpole-ppo.yaml")[0], {"num_envs_per_env_runner": 2}
    )
    runner = SingleAgentEnvRunner(config=built.config)
    try:
        runner.sample(num_timesteps=8)  # the check is armed when the first episodes are created
        with torch.no_grad():
            for param in runner.module.parameters():
                param.fill_(math.nan)
        with pytest.raises(PolicyDiverged, match="policy 'default_policy' produced NaN or infinite"):
            runner.sample(num_timesteps=8)
    finally:
        runner.stop()


def test_learner_stats_that_diverged_end_the_run_and_empty_iterations_do_not():
    result = {
        "training_iteration": 7,
        "learners": {
            "__all_modules__": {"total_loss": math.nan},
            "idle": {"num_module_steps_trained": 0, "total_loss": math.nan},
            "p0": {"num_module_steps_trained": np.int64(64), "total_loss": np.float32(1.5)},
            "p1": {
                "num_module_steps_trained": 64,
                "total_loss": math.inf,
                "vf_loss_unclipped": math.inf,
                "gradients_default_optimizer_global_norm": math.nan,
            },
        },
    }
    with pytest.raises(PolicyDiverged) as caught:
        check_learners(algorithm=None, result=result)
    message = str(caught.value)
    assert (
        "policy 'p1' diverged at iteration 7: total_loss=inf, gradients_default_optimizer_global_norm=nan"
        in message
    )
    assert "vf_loss_unclipped" not in message
    del result["learners"]["p1"]
    check_learners(algorithm=None, result=result)


def test_a_runners_divergence_gets_the_iteration_and_learner_stats():
    message = "PolicyDiverged: policy 'p' produced NaN or infinite action-distribution inputs; fix: lower lr"
    last = {"training_iteration": 3, "learners": {"p": {"total_loss": 2.5, "policy_loss": 0.1}}}
    assert with_learner_stats(message, last) == (
        "PolicyDiverged: policy 'p' produced NaN or infinite action-distribution inputs (in iteration 4;"
        " learner stats of iteration 3: p: total_loss=2.5, policy_loss=0.1); fix: lower lr"
    )
    assert with_learner_stats("ValueError: x", last) == "ValueError: x"


def test_an_iteration_that_sampled_nothing_says_so_on_the_progress_line():
    result = {HEALTH: {"restarts": 0, "healthy": 1, "env_runners": 1, "empty_iterations": 2}}
    assert health_note(result) == "SAMPLED NOTHING (2 iteration(s) in a row)"
    result[HEALTH].update(restarts=1, empty_iterations=0)
    assert health_note(result) == "env runners: 1 restarts, 1/1 healthy"


# ---- train.py, for real: each fault on a local runner, a remote one, and a joined cluster -----------

FAULTS = {
    "nan": "ObservationFault: env 'faulty_env.Faulty' ({where}) returned a non-finite observation: obs[2]",
    "shape": "ObservationFault: env 'faulty_env.Faulty' ({where}) returned an observation of shape (5,)",
    "stall": "EnvStalled: env 'faulty_env.Faulty' ({where}) has not returned from step() for",
    "huge-reward": "PolicyDiverged: policy 'default_policy' diverged at iteration 1: total_loss=inf",
}
PLACES = {"local": 0, "remote": 1, "cluster": 1}
# Every fault on the local runner and on a joined cluster's runner; a run's own local Ray (its start
# is most of a case's cost) for the two ways its runner must be ended there: hung in step() (stall),
# and healthy when the learner fails (huge-reward). The runner that raised (nan, shape) has ended by
# itself, as on the cluster; test_with_restarts_... and the Unity player's hang end local Rays too.
CASES = [(f, p) for f in FAULTS for p in PLACES if p != "remote" or f in ("stall", "huge-reward")]


def _assert_nothing_left(*mentions: str) -> None:
    """No env runner is left, nor any process whose command line mentions one of ``mentions``
    (given 20 s: a joined cluster ends a finished job's actors by itself)."""

    def left() -> list[int]:
        return [*_runner_processes(), *(p for text in mentions for p in processes_mentioning(text))]

    deadline = time.time() + 20
    while left() and time.time() < deadline:
        time.sleep(0.5)
    assert not left()


def _write_faulty_run(faulty_module, folder: Path, iterations: int, **config) -> None:
    """The faulty env's file and a small PPO experiment on it (exp.yaml) in ``folder``."""
    (folder / "faulty_env.py").write_text((faulty_module[1] / "faulty_env.py").read_text())
    experiment = {
        "faulty": {
            "run": "PPO",
            "env": "faulty_env.Faulty",
            "stop": {"training_iteration": iterations},
            "config": {
                "train_batch_size": 200,
                "minibatch_size": 100,
                "num_epochs": 1,
                "delay_between_env_runner_restarts_s": 1,  # RLlib's default restart waits 60 s
                **config,
            },
        }
    }
    (folder / "exp.yaml").write_text(yaml.safe_dump(experiment))


def _runner_processes() -> list[int]:
    return [
        p
        for name in ("ray::SingleAgentEnvRunner", "ray::MultiAgentEnvRunner")
        for p in processes_mentioning(name)
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "place"), CASES, ids=[f"{f}-{p}" for f, p in CASES])
def test_a_fault_ends_the_run_by_itself_with_its_line_and_no_process_left(
    faulty_module, tmp_path, fault, place, request
):
    _write_faulty_run(
        faulty_module,
        tmp_path,
        iterations=6,
        env_config={"fault": fault, "after": 0 if fault == "huge-reward" else 300},
        num_env_runners=PLACES[place],
        vf_clip_param=float("inf"),
        env_checks={"stall_timeout_s": 4},
    )
    ray_temp = Path(tempfile.mkdtemp(prefix="envsdk-rf-", dir="/tmp"))  # Ray's socket paths must be short
    args = ["-f", "exp.yaml", "--local-dir", str(tmp_path / "results")]
    args += ["--ray-address", request.getfixturevalue("ray_address")] if place == "cluster" else []
    args += ["--temp-dir", str(ray_temp)] if place == "remote" else []
    began = time.monotonic()
    out = run_train(args, cwd=tmp_path, timeout=240)
    took = time.monotonic() - began
    text = out.stdout + out.stderr
    where = "the local env runner" if place == "local" else "env runner 1"
    assert out.returncode == 1, text[-3000:]
    summary = [line for line in text.splitlines() if "trial failed:" in line]
    assert summary and FAULTS[fault].format(where=where) in summary[0], text[-3000:]
    assert "Traceback" not in text.splitlines()[-1]
    assert took < 120
    _assert_nothing_left(str(ray_temp))
    shutil.rmtree(ray_temp, ignore_errors=True)


@pytest.mark.slow
def test_a_unity_player_that_stops_answering_ends_the_run_and_leaves_nothing(tmp_path, standin_builds):
    display = "on" if shutil.which("Xvfb") else "off"
    experiment = {
        "hung": {
            "run": "PPO",
            "env": "unity",
            "stop": {"training_iteration": 5},
            "config": {
                "env_config": {
                    "file_name": str(standin_builds / "Chase"),
                    "no_graphics": display == "off",
                    "virtual_display": display,
                    "additional_args": ["--max-steps", "30", "--hang-after", "250"],
                    "timeout_wait": 3,
                    "max_restarts": 0,
                },
                "num_env_runners": 1,
                "train_batch_size": 200,
                "minibatch_size": 100,
                "num_epochs": 1,
            },
        }
    }
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(experiment))
    ray_temp = Path(tempfile.mkdtemp(prefix="envsdk-rf-", dir="/tmp"))
    began = time.monotonic()
    out = run_train(
        ["-f", "exp.yaml", "--local-dir", str(tmp_path / "results"), "--temp-dir", str(ray_temp)], tmp_path
    )
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-3000:]
    summary = [line for line in text.splitlines() if "trial failed:" in line]
    assert (
        summary
        and "env runner 1 failed: PlayerError:" in summary[0]
        and "not restarting it again" in summary[0]
    )
    assert time.monotonic() - began < 120
    _assert_nothing_left(str(ray_temp), str(standin_builds / "Chase"), *(["Xvfb"] if display == "on" else []))
    shutil.rmtree(ray_temp, ignore_errors=True)


@pytest.mark.slow
def test_with_restarts_a_stalled_runner_is_replaced_counted_and_the_run_goes_on(faulty_module, tmp_path):
    _write_faulty_run(
        faulty_module,
        tmp_path,
        iterations=40,
        env_config={"fault": "stall", "after": 300},  # every fresh runner stalls after 300 steps
        num_env_runners=1,
        restart_failed_env_runners=True,
        env_checks={"stall_timeout_s": 3},
    )
    # Each runner delivers one sample of 200 steps and stalls in its second: 400 steps need a fresh
    # runner, however long it takes to start on a busy machine (the iterations cap it).
    experiment = yaml.safe_load((tmp_path / "exp.yaml").read_text())
    experiment["faulty"]["stop"]["num_env_steps_sampled_lifetime"] = 400
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(experiment))
    ray_temp = Path(tempfile.mkdtemp(prefix="envsdk-rf-", dir="/tmp"))
    args = ["-f", "exp.yaml", "--local-dir", str(tmp_path / "results"), "--temp-dir", str(ray_temp)]
    out = run_train(args, cwd=tmp_path, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert re.search(r"^done: faulty: return [\d.]+ after ([4-9]\d\d|[\d,]{5,}) env steps", out.stdout, re.M)
    restarts = re.search(r"env runners: (\d+) restarts, 1/1 healthy", out.stdout)
    assert restarts and int(restarts.group(1)) >= 1, out.stdout[-2000:]
    assert "EnvStalled: env 'faulty_env.Faulty' (env runner 1) has not returned from step()" in text
    _assert_nothing_left(str(ray_temp))
    shutil.rmtree(ray_temp, ignore_errors=True)


class _Algo:
    """What check_result reads of an Algorithm: its config."""

    def __init__(self, runners: int = 1) -> None:
        self.config = type("Config", (), {"num_env_runners": runners, "sample_timeout_s": 60.0})()


def _result(sampled: float | None, healthy: int = 1, restarts: int = 0) -> dict:
    runners = {} if sampled is None else {"num_env_steps_sampled": sampled}
    return {
        "env_runners": runners,
        "fault_tolerance": {"num_healthy_workers": healthy, "num_remote_worker_restarts": restarts},
    }


@pytest.mark.parametrize("nothing", [0, math.nan, None], ids=["zero", "nan", "missing"])
def test_an_iteration_with_no_sampled_count_is_empty(nothing):
    """RLlib reports NaN steps when no runner delivered: that is an empty iteration, like 0."""
    from envsdk.progress import HEALTH
    from envsdk.training.hooks.restarts import check_result

    algo = _Algo()
    check_result(algorithm=algo, result=_result(200), allowed=3)  # delivered once: past its start
    for expected in (1, 2):
        result = _result(nothing)
        check_result(algorithm=algo, result=result, allowed=3)
        assert result[HEALTH]["empty_iterations"] == expected
    result = _result(200)
    check_result(algorithm=algo, result=result, allowed=3)
    assert result[HEALTH]["empty_iterations"] == 0


def test_a_restarting_runner_gets_its_grace_and_then_the_run_ends(monkeypatch):
    from envsdk.training.hooks import restarts

    algo = _Algo()
    for _ in range(8):  # a fresh runner that takes a while to start: empty iterations, no error
        restarts.check_result(algorithm=algo, result=_result(math.nan, healthy=0), allowed=3)
    monkeypatch.setattr(restarts, "RESTART_GRACE_S", 0.0)
    with pytest.raises(restarts.EnvRunnersFailed, match=r"9 iteration\(s\) in a row .* 0 of 1 healthy"):
        restarts.check_result(algorithm=algo, result=_result(math.nan, healthy=0), allowed=3)
    # a fresh runner of an env that never delivered, and that fails again: no grace
    again = _Algo()
    monkeypatch.setattr(restarts, "RESTART_GRACE_S", 3600.0)
    for count in range(restarts.EMPTY_ITERATIONS_ALLOWED):
        restarts.check_result(algorithm=again, result=_result(math.nan, 0, count), allowed=3)
    with pytest.raises(restarts.EnvRunnersFailed, match=r"4 iteration\(s\) in a row .*3 env runner restart"):
        restarts.check_result(algorithm=again, result=_result(math.nan, 0, 3), allowed=3)
    # runners of an env that delivered before, restarting and crashing again before they deliver
    # (a flaky env): RLlib restarts them however often they fail, so the grace holds; past it, the end
    flaky = _Algo()
    restarts.check_result(algorithm=flaky, result=_result(200), allowed=3)
    for count in range(2 * restarts.EMPTY_ITERATIONS_ALLOWED):
        restarts.check_result(algorithm=flaky, result=_result(math.nan, 0, count), allowed=3)
    monkeypatch.setattr(restarts, "RESTART_GRACE_S", 0.0)
    with pytest.raises(restarts.EnvRunnersFailed, match=r"7 iteration\(s\) in a row .*6 env runner restart"):
        restarts.check_result(algorithm=flaky, result=_result(math.nan, 0, 6), allowed=3)
    # without restarts asked for, a dead runner's first empty iteration ends the run
    with pytest.raises(restarts.EnvRunnersFailed, match=r"1 iteration\(s\) in a row"):
        restarts.check_result(algorithm=_Algo(), result=_result(math.nan, healthy=0), allowed=0)
    # healthy runners that delivered once and then nothing: the 4th empty iteration ends the run
    healthy = _Algo()
    restarts.check_result(algorithm=healthy, result=_result(200), allowed=3)
    for _ in range(restarts.EMPTY_ITERATIONS_ALLOWED):
        restarts.check_result(algorithm=healthy, result=_result(0), allowed=3)
    with pytest.raises(restarts.EnvRunnersFailed, match="within sample_timeout_s"):
        restarts.check_result(algorithm=healthy, result=_result(0), allowed=3)


def test_a_vector_env_that_resets_in_the_same_step_is_named_before_it_steps(faulty_module):
    """RLlib 2.60's runners read every vector env as resetting at the next step: a SAME_STEP one
    would end each episode on the next one's first observation, silently."""
    module, _ = faulty_module
    vec = gym.vector.SyncVectorEnv(
        [lambda: module.Faulty({"fault": "none", "after": 5})] * 2,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    fix = r"autoreset_mode=gymnasium\.vector\.AutoresetMode\.NEXT_STEP"
    with pytest.raises(ResetsInTheSameStep, match=fix):
        SingleAgentGuard(vec, Site("faulty_env.Faulty", 0), "error", 30.0, print, lambda: None)
    vec.close()
