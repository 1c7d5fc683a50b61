"""Every observation and action space trains with the default model; no run succeeds having sampled nothing.

The matrix (observation kinds x action kinds x masks, PPO, a DQN and SAC
subset, and a multi-agent run mixing them) trains in one train.py process
(one YAML of many experiments), with envs from a user-style module next to
the YAML that raise on any masked action.  Each checkpoint then plays an
episode through rollout.py's code, and a subset is exported to ONNX and
checked against the actions the rollout took.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

from envsdk.envs.spaces import (
    action_leaves,
    allowed_version,
    describe_actions,
    image_layout,
    mask_size,
    observation_leaves,
    sample_allowed,
    split_mask,
)
from tests.helpers import ROOT, progress_rows, rollout_in_process, train_experiments

ENVS = ROOT / "tests" / "data" / "envs"
OBS = ["discrete", "multidiscrete", "box", "box2d", "image", "depth", "dict", "tuple"]
PPO_ACTIONS = [
    ("discrete", False), ("discrete", True), ("multidiscrete", False), ("multidiscrete", True),
    ("box", False), ("hybrid", False), ("hybrid", True),
]  # fmt: skip
CASES = (
    [("PPO", o, a, m) for o in OBS for a, m in PPO_ACTIONS]
    + [
        ("DQN", o, "discrete", m)
        for o in ("discrete", "multidiscrete", "image", "dict", "tuple")
        for m in (0, 1)
    ]
    + [("SAC", o, "box", False) for o in ("box2d", "image", "dict", "tuple")]
    + [("SAC", "tuple", "discrete", False)]
    # float64 (MuJoCo's) and integer Box observations, as RLlib casts them (the start-up check too)
    + [("PPO", "box64", "hybrid", True), ("PPO", "int", "multidiscrete", True)]
    + [("DQN", "box64", "discrete", 1), ("SAC", "box64", "box", False), ("SAC", "int", "box", False)]
)
# Ray 1.x's observation_filter: MeanStdFilter (RLlib's connector; the mask and images left as they are)
FILTERED = [("PPO", o, "hybrid", True, True) for o in ("box", "box2d", "depth", "dict", "tuple")] + [
    ("DQN", "dict", "discrete", True, True),
    ("SAC", "tuple", "box", False, True),
]
EXPORTED = [
    *[(*case, False) for case in [("PPO", o, "hybrid", True) for o in OBS]],
    ("PPO", "image", "box", False, False),
    ("PPO", "tuple", "multidiscrete", True, False),
    ("DQN", "dict", "discrete", True, False),
    ("SAC", "dict", "box", False, False),
    *FILTERED,
]
SETTINGS = {
    "PPO": {"train_batch_size": 128, "minibatch_size": 64, "num_epochs": 1},
    "DQN": {
        "train_batch_size": 32,
        "min_sample_timesteps_per_iteration": 64,
        "num_steps_sampled_before_learning_starts": 32,
    },
    "SAC": {
        "train_batch_size": 32,
        "min_sample_timesteps_per_iteration": 64,
        "num_steps_sampled_before_learning_starts": 32,
    },
}


def case_name(algo: str, obs: str, act: str, mask: bool, filtered: bool = False) -> str:
    return f"{algo}-{obs}-{act}" + ("-mask" if mask else "") + ("-meanstd" if filtered else "")


# ---- the space layer, without Ray ---------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "layout"),
    [
        ((84, 84, 3), "hwc"), ((3, 84, 84), "chw"), ((24, 24, 3), "hwc"), ((20, 20, 1), "hwc"),
        ((4, 64, 64), "chw"), ((84, 84, 12), "hwc"), ((8, 8, 16), "hwc"), ((6, 6, 3), None),
        ((3, 7, 40), None), ((84, 84), None), ((5,), None),
    ],
)  # fmt: skip
def test_image_layout(shape, layout):
    assert image_layout(gym.spaces.Box(0, 1, shape, np.float32)) == layout


def test_leaves_of_nested_spaces():
    space = gym.spaces.Dict(
        {
            "a": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.MultiBinary(3))),
            "b": gym.spaces.Dict({"c": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)}),
        }
    )
    leaves = observation_leaves(space)
    assert [(leaf.path, leaf.kind, leaf.name) for leaf in leaves] == [
        (("a", 0), "onehot", "a.0"), (("a", 1), "flat", "a.1"), (("b", "c"), "image", "b.c"),
    ]  # fmt: skip
    with pytest.raises(ValueError, match="the observations are Text"):
        observation_leaves(gym.spaces.Text(5))


@pytest.mark.parametrize(
    ("space", "size", "text"),
    [
        (gym.spaces.Discrete(4), 4, "Discrete(4)"),
        (gym.spaces.MultiDiscrete([3, 2]), 5, "MultiDiscrete([3, 2])"),
        (gym.spaces.Box(-1, 1, (2,)), 0, "2 continuous"),
        (gym.spaces.Tuple((gym.spaces.Box(-1, 1, (1,)), gym.spaces.Discrete(3))), 3,
         "hybrid 1 continuous + Discrete(3)"),
        (gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (2,)),
                           gym.spaces.MultiDiscrete([2, 2]))),
         6, "hybrid 2 continuous + Discrete(2) + MultiDiscrete([2, 2])"),
    ],
)  # fmt: skip
def test_masked_sampling_never_picks_a_forbidden_choice(space, size, text):
    assert mask_size(space) == size and describe_actions(space) == text
    if not size:
        return
    rng = np.random.default_rng(0)
    space.seed(0)
    discrete = [leaf for leaf in action_leaves(space) if leaf.discrete]
    for _ in range(200):
        mask = (rng.random(size) < 0.5).astype(np.int8)
        for leaf in discrete:  # every branch keeps one allowed choice
            sizes = [leaf.space.n] if isinstance(leaf.space, gym.spaces.Discrete) else leaf.space.nvec
            start = leaf.mask_start
            for n in sizes:
                mask[start + rng.integers(n)] = 1
                start += int(n)
        split_mask(space, mask)  # the per-branch form gymnasium's sample(mask=...) takes
        action = sample_allowed(space, {"observations": 0, "action_mask": mask})
        for leaf in discrete:
            value = action
            for key in leaf.path:
                value = value[key]
            offsets = np.cumsum([0, *([leaf.space.n] if isinstance(leaf.space, gym.spaces.Discrete)
                                      else leaf.space.nvec)])[:-1]  # fmt: skip
            picked = np.atleast_1d(value) + offsets + leaf.mask_start
            assert mask[picked].all(), (mask, action)


@pytest.mark.parametrize("act", ["discrete", "multidiscrete", "hybrid"])
def test_allowed_version_replaces_only_forbidden_choices(act):
    space = {
        "discrete": gym.spaces.Discrete(3, start=1),
        "multidiscrete": gym.spaces.MultiDiscrete([3, 2]),
        "hybrid": gym.spaces.Tuple((gym.spaces.Box(-1, 1, (1,)), gym.spaces.Discrete(3))),
    }[act]
    mask = {"discrete": [0, 1, 1], "multidiscrete": [0, 0, 1, 1, 0], "hybrid": [1, 0, 1]}[act]
    mask = np.array(mask, np.int8)
    if act == "discrete":
        assert allowed_version(space, 1, mask) == 2 and allowed_version(space, 3, mask) == 3
    elif act == "multidiscrete":
        assert allowed_version(space, np.array([0, 1]), mask).tolist() == [2, 0]
        assert allowed_version(space, np.array([2, 0]), mask).tolist() == [2, 0]
    else:
        cont = np.array([0.5], np.float32)
        fixed = allowed_version(space, (cont, 1), mask)
        assert fixed[1] == 0 and fixed[0] is cont


@pytest.mark.parametrize("obs", OBS)
@pytest.mark.parametrize("act", ["discrete", "multidiscrete", "box", "hybrid"])
def test_envsdk_check_steps_only_allowed_actions(obs, act):
    """The user-style env raises on a masked action: the checker (gymnasium's too) must not send one."""
    from envsdk.envs.checkup.verdict import check_env
    from envsdk.envs.registry import resolve_env
    from envsdk.networks.choice import describe

    mask = act != "box"
    resolved = resolve_env("matrix_env.MatrixEnv", [ENVS])
    config = {"obs": obs, "act": act, "mask": mask}
    report = check_env(resolved, config, steps=200, describe=describe)
    assert report.ok, report.render()
    assert any("gymnasium checker passed" in p for p in report.passed), report.render()
    (model,) = report.models
    assert model.startswith("default_policy: ") and ("masked" in model) == mask


# ---- training the whole matrix in one train.py ----------------------------------------------


def _experiment(algo: str, obs: str, act: str, mask: bool, filtered: bool = False) -> dict:
    return {
        "run": algo,
        "env": "matrix_env.MatrixEnv",
        "stop": {"training_iteration": 2},
        "checkpoint_at_end": True,
        "config": {
            "env_config": {"obs": obs, "act": act, "mask": bool(mask)},
            "num_env_runners": 0,
            "model_config": {"fcnet_hiddens": [32]},
            **SETTINGS[algo],
            **({"observation_filter": "MeanStdFilter"} if filtered else {}),
        },
    }


# DQN and SAC with a policy per agent: a turn-based env of ours (string agent ids; an agent's
# reward sums what it got between its turns), and RLlib's own MultiAgentPendulum (integer ids).
OFF_POLICY_MULTI_AGENT = {
    "DQN-multi-agent-turns": ("DQN", "turn_env.TurnEnv", {"act": "discrete"}, ["policy_x", "policy_y"]),
    "SAC-multi-agent-turns": ("SAC", "turn_env.TurnEnv", {"act": "box"}, ["policy_x", "policy_y"]),
    "SAC-multi-agent-pendulum": (
        "SAC",
        "ray.rllib.examples.envs.classes.multi_agent.MultiAgentPendulum",
        {"num_agents": 2},
        ["policy_0", "policy_1"],
    ),
}


def _off_policy_multi_agent(name: str) -> dict:
    algo, env, env_config, policies = OFF_POLICY_MULTI_AGENT[name]
    return {
        "run": algo,
        "env": env,
        "stop": {"training_iteration": 2},
        "checkpoint_at_end": True,
        "config": {
            **SETTINGS[algo],
            "env_config": env_config,
            "num_env_runners": 0,
            "model_config": {"fcnet_hiddens": [32]},
            "policies": policies,
            "policy_mapping_fn": "turn_env.policy_mapping",
        },
    }


@pytest.fixture(scope="module")
def matrix(ray_address, tmp_path_factory):
    """One train.py process training every case (and a mixed multi-agent run); returns (stdout, results)."""
    folder = tmp_path_factory.mktemp("matrix")
    for name in ("matrix_env.py", "matrix_multi_env.py", "turn_env.py"):
        shutil.copy(ENVS / name, folder / name)
    experiments = {case_name(*case): _experiment(*case) for case in [*CASES, *FILTERED]}
    experiments["PPO-multi-agent"] = {
        "run": "PPO",
        "env": "matrix_multi_env.MatrixMultiEnv",
        "stop": {"training_iteration": 2},
        "checkpoint_at_end": True,
        "config": {
            **SETTINGS["PPO"],
            "num_env_runners": 0,
            "model_config": {"fcnet_hiddens": [32]},
            "multiagent": {
                "policies": ["policy_a", "policy_b", "policy_c"],
                "policy_mapping_fn": "matrix_multi_env.policy_mapping",
            },
        },
    }
    experiments.update({name: _off_policy_multi_agent(name) for name in OFF_POLICY_MULTI_AGENT})
    out, results = train_experiments(folder, experiments, ray_address)
    return out.stdout, results


@pytest.mark.parametrize("case", CASES, ids=[case_name(*c) for c in CASES])
def test_every_space_trains_and_rolls_out(matrix, tmp_path, case):
    stdout, results = matrix
    _, obs, _, mask = case
    name = case_name(*case)
    (trial,) = [p.parent for p in (results / name).glob("*/progress.csv")]
    rows = progress_rows(trial)
    assert len(rows) == 2 and float(rows[-1]["num_env_steps_sampled_lifetime"]) > 0
    model = re.search(rf"^\[{name}\] model default_policy: (.*)$", stdout, re.M).group(1)
    assert ("masked" in model) == bool(mask)
    assert ("CNN" in model) == (obs in ("image", "depth", "dict")), model
    assert ("one-hot" in model) == (obs in ("discrete", "multidiscrete", "tuple")), model
    code, out = rollout_in_process(results / name, "--episodes", "1", "--out", tmp_path / "e.npz")
    assert code == 0, out
    assert re.search(r"^episode 1: return -?[\d.]+, length 8$", out, re.M), (
        out
    )  # the env raised on no masked action


def test_mixed_policies_train_side_by_side(matrix, tmp_path):
    stdout, results = matrix
    models = dict(re.findall(r"^\[PPO-multi-agent\] model (policy_\w): (.*)$", stdout, re.M))
    assert "masked" in models["policy_a"] and "CNN" in models["policy_a"] and "hybrid" in models["policy_a"]
    assert "masked" not in models["policy_b"] and "MLP" in models["policy_b"]
    assert "masked" in models["policy_c"] and "CNN" in models["policy_c"]
    (trial,) = [p.parent for p in (results / "PPO-multi-agent").glob("*/progress.csv")]
    columns = progress_rows(trial)[-1]
    for policy in models:
        assert float(columns[f"env_runners/module_episode_returns_mean/{policy}"]) != 0
    code, out = rollout_in_process(results / "PPO-multi-agent", "--episodes", "1", "--no-out")
    assert code == 0, out


@pytest.mark.parametrize("name", OFF_POLICY_MULTI_AGENT)
def test_dqn_and_sac_train_a_module_per_agent_and_roll_out(matrix, name):
    """RLlib 2.60 fails these on its first replay sample (a single-agent buffer by default, and
    metrics keyed by integer agent ids that no checkpoint can save)."""
    _, results = matrix
    policies = OFF_POLICY_MULTI_AGENT[name][3]
    (trial,) = [p.parent for p in (results / name).glob("*/progress.csv")]
    last = progress_rows(trial)[-1]
    for policy in policies:
        assert float(last[f"learners/{policy}/qf_loss"]) > 0, f"{policy} did not learn"
        assert float(last[f"replay_buffer/num_module_steps_stored/{policy}"]) > 0
    code, out = rollout_in_process(results / name, "--episodes", "1", "--no-out")
    assert code == 0, out


def _feeds(session, layout, data, episode: str) -> dict:
    """ONNX inputs from an experience file's recorded observations (all steps of one episode)."""
    prefix = f"{episode}/agent/obs" + ("/observations" if layout.masked else "")
    feeds = {}
    for name, leaf in zip(layout.input_names, layout.obs, strict=False):
        key = "/".join([prefix, *map(str, leaf.path)])
        dtype = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(uint8)": np.uint8}
        want = next(i.type for i in session.get_inputs() if i.name == name)
        feeds[name] = data[key].astype(dtype[want])
    if layout.masked:
        feeds["action_mask"] = data[f"{episode}/agent/obs/action_mask"].astype(np.float32)
    return feeds


def _assert_squashed_mode(got: np.ndarray, want: np.ndarray, space) -> None:
    """The export's SAC action against the rollout's.

    RLlib's greedy SAC action is the Gaussian's mean without the tanh squash (its
    Distribution.to_deterministic), unsquashed onto the bounds and clipped there; the export gives
    the squashed mode. Where the rollout's action sits on a bound, the mean was clipped, so only
    its side is known: the squashed mode must lie at least tanh(1) out on that side.
    """
    low, high = space.low, space.high
    mean = (want - low) / (high - low) * 2 - 1  # in [-1, 1]
    squashed = (got - low) / (high - low) * 2 - 1
    clipped = np.abs(mean) >= 1 - 1e-6
    np.testing.assert_allclose(squashed[~clipped], np.tanh(mean[~clipped]), atol=1e-5)
    assert (np.sign(squashed[clipped]) == np.sign(mean[clipped])).all()
    assert (np.abs(squashed[clipped]) >= np.tanh(1) - 1e-5).all()


@pytest.mark.parametrize("case", EXPORTED, ids=[case_name(*c) for c in EXPORTED])
def test_onnx_export_acts_like_therollout_in_process(matrix, tmp_path, case):
    import onnxruntime

    from envsdk.evaluation.onnx_export import greedy, layout_for
    from envsdk.evaluation.restore import load
    from envsdk.training.hooks.observation_filter import saved_statistics
    from envsdk.training.run.checkpoints import locate

    _, results = matrix
    target = tmp_path / "policy.onnx"
    code, out = rollout_in_process(results / case_name(*case), "--export-onnx", target, "--episodes", "2",
                         "--out", tmp_path / "e.npz")  # fmt: skip
    assert code == 0, out
    module_dir = load(locate(results / case_name(*case)).checkpoint).module_dir / "default_policy"
    from ray.rllib.core.rl_module.rl_module import RLModule

    module = RLModule.from_checkpoint(module_dir)
    layout = layout_for(module.observation_space, module.action_space, q_values=case[0] == "DQN")
    stats = saved_statistics(load(locate(results / case_name(*case)).checkpoint), module)
    if case[-1]:  # trained statistics of every float part, baked into the export
        floats = [leaf.path for leaf in layout.obs if leaf.space.dtype.kind == "f"]
        assert stats is not None and sorted(stats.stats, key=str) == sorted(floats, key=str), stats
        assert all((std > 0).any() for _, std in stats.stats.values())  # learned (one feature is constant)
    else:
        assert stats is None
    session = onnxruntime.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == layout.input_names
    assert [o.name for o in session.get_outputs()] == layout.output_names
    data = np.load(tmp_path / "e.npz")
    for episode in ("ep0000", "ep0001"):
        chosen = greedy(session.run(None, _feeds(session, layout, data, episode)), layout)
        if layout.q_values or len(layout.actions) == 1:
            taken = [data[f"{episode}/agent/actions"]]
        else:
            taken = [data[f"{episode}/agent/actions/{i}"] for i in range(len(layout.actions))]
        for got, want in zip(chosen, taken, strict=True):
            got = got[:-1]  # no action after the last observation
            if case[0] == "SAC":
                _assert_squashed_mode(got, want.reshape(got.shape), module.action_space)
            elif got.dtype.kind == "f":
                np.testing.assert_allclose(got, want.reshape(got.shape), atol=1e-5)
            else:
                assert (got == want.reshape(got.shape)).all()


# ---- the seed tutorial's BasicEnv, and runs that sample nothing --------------------------------


def test_seed_tutorial_basic_env_learns(train, tmp_path):
    """../shared/seeds/002: `import gym`, old API, Discrete(2) observations, a Ray 1.x YAML."""
    seed = ROOT / "tests" / "data" / "seeds" / "basic_env"
    for path in seed.iterdir():
        shutil.copy(path, tmp_path / path.name)
    out = train("-f", str(tmp_path / "custom_env.yaml"), cwd=tmp_path, timeout=570)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "imports gym, which is not installed" in out.stderr or "gym" in sys.modules
    assert "model default_policy: Discrete(2) one-hot" in out.stdout
    (trial,) = [p.parent for p in train.results.glob("*/*/progress.csv")]
    returns = [float(r["env_runners/episode_return_mean"]) for r in progress_rows(trial)]
    # Random play scores about -0.6; the run ends when the YAML's stop, episode_reward_mean: 0.5, is
    # reached, which Tune tests as >= (a clean-clone run stopped at exactly 0.5 and failed a > here).
    assert returns[0] < 0 and returns[-1] >= 0.5, returns


def test_seed_tutorial_basic_env_trains_in_a_tune_trial_too(train, tmp_path, monkeypatch):
    """Its `import gym` is answered by gymnasium in the trial's own Ray worker too, where the env's
    modules are imported again (before: 'needs the module gym' there, on stock RLlib and in any
    Tune run)."""
    seed = ROOT / "tests" / "data" / "seeds" / "basic_env"
    for path in seed.iterdir():
        shutil.copy(path, tmp_path / path.name)
    monkeypatch.setenv("ENVSDK_STOCK", "in-process-trial")  # a Tune trial, in a worker of its own
    out = train("-f", str(tmp_path / "custom_env.yaml"), "--stop-iters", "1", cwd=tmp_path, timeout=570)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "done: custom-env:" in out.stdout
    (trial,) = [p.parent for p in train.results.glob("*/*/progress.csv")]
    assert float(progress_rows(trial)[-1]["num_env_steps_sampled_lifetime"]) > 0


CRASH_ENV = '''
import sys

import gymnasium as gym
import numpy as np


class CrashEnv(gym.Env):
    """Works in train.py's own process (its preflight); crashes on the 6th step in a Ray worker."""

    def __init__(self, config=None):
        self.observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.n = 0

    def reset(self, *, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.n += 1
        if self.n > 5 and "default_worker" in sys.argv[0]:
            raise RuntimeError(f"boom from the env at step {self.n}")
        return np.zeros(3, np.float32), 1.0, self.n % 10 == 0, False, {}
'''


@pytest.mark.parametrize("restarts", [False, True], ids=["default", "restart_failed_env_runners"])
def test_crashing_env_runner_fails_the_run(train, tmp_path, restarts):
    (tmp_path / "crash_env.py").write_text(CRASH_ENV)
    # RLlib restarts a failed runner by default, after 60 s unless told otherwise.
    config = {"num_env_runners": 1, "train_batch_size": 200, "minibatch_size": 100}
    config.update(delay_between_env_runner_restarts_s=1)
    if restarts:
        config.update(restart_failed_env_runners=True)
    text = yaml.safe_dump({"crash": {"run": "PPO", "env": "crash_env.CrashEnv", "config": config}})
    (tmp_path / "crash.yaml").write_text(text)
    started = time.monotonic()
    out = train("-f", str(tmp_path / "crash.yaml"), "--stop-iters", "10", cwd=tmp_path)
    elapsed = time.monotonic() - started
    assert out.returncode == 1, out.stdout[-2000:]
    assert (
        "env runner 1 failed: EnvRaised: env 'crash_env.CrashEnv' (env runner 1) raised RuntimeError:"
        " boom from the env at step 6 in step() at step 5 of its episode" in out.stdout
    ), out.stdout[-2000:]
    assert re.search(r"^failed: crash: return - after 0 env steps", out.stdout, re.M), out.stdout
    trace = Path(re.search(r"traceback in (\S+?\.txt)", out.stdout).group(1)).read_text()
    assert "crash_env.py" in trace and "boom from the env" in trace
    if restarts:
        assert "iteration(s) in a row sampled no env steps" in out.stdout
        assert "env runners:" in out.stdout  # the restarts, in the summary
    assert elapsed < 150, elapsed


def test_dry_run_lists_models(tmp_path):
    shutil.copy(ENVS / "matrix_env.py", tmp_path / "matrix_env.py")
    exp = {"x": _experiment("PPO", "dict", "hybrid", True)}
    (tmp_path / "x.yaml").write_text(yaml.safe_dump(exp))
    out = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-f", "x.yaml", "--dry-run"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = yaml.safe_load(out.stdout)
    (line,) = doc["x"]["models"]
    assert line.startswith("default_policy: camera 16x16x3 uint8 image -> CNN 2 layers relu + vector Box(3,)")
    assert json.dumps(doc)  # plain data only
