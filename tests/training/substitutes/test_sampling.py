"""``sampler: batched`` (envsdk/training/substitutes/sampling/batched_runner.py) against RLlib's
own env runner loop.

With the same weights, seeds and action draws, both loops return the same episodes, field by field
and dtype by dtype (lookback buffers, extra model outputs, infos, flags), over every space kind of
the test matrix and every kind of ``sample()`` call: timesteps across cuts and resets, whole
episodes, random actions, and no exploration.  The batched loop's own numpy draws are checked
against the torch distributions they replace.  Configs it does not cover fall back with a notice.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from envsdk import internals, substitutions
from envsdk.errors import UserError
from envsdk.training.substitutes.sampling import batched_runner
from envsdk.training.substitutes.sampling.batched_runner import BatchedEnvRunner
from tests.helpers import ROOT, built_config, failing_every
from tests.networks.test_spaces import CASES, case_name

pytestmark = pytest.mark.substitution("batched-sampler")  # the batched loop, tested on stock runs too

TIMING = ("id_", *internals.EPISODE_CLOCKS)  # per run, not per loop


def _same(a: Any, b: Any, where: str) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (where, a.keys(), getattr(b, "keys", b))
        for key in a:
            _same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray | np.generic) or isinstance(b, np.ndarray | np.generic):
        assert np.asarray(a).dtype == np.asarray(b).dtype, (where, np.asarray(a).dtype, np.asarray(b).dtype)
        assert np.array_equal(a, b), where
    else:
        assert a == b, (where, a, b)


def _state(episode: Any) -> dict:
    state = episode.get_state()
    for key in TIMING:
        state.pop(key)
    return state


def _built(tmp_path, run: str, obs: str, act: str, mask: bool, **config: Any) -> Any:
    return built_config(
        tmp_path, run, obs, act, mask, **({"minibatch_size": 16} if run == "PPO" else {}), **config
    )


def _runners(tmp_path, case: tuple) -> tuple[Any, BatchedEnvRunner]:
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    run, obs, act, mask = case
    settings = {
        "num_envs_per_env_runner": 3,
        "rollout_fragment_length": 10,
        "train_batch_size": 30,
        "seed": 7,
    }
    built = _built(tmp_path, run, obs, act, bool(mask), **settings)
    assert built.sampler == "batched"
    config = built.config.copy(copy_frozen=False)
    ours = BatchedEnvRunner(config=config)
    theirs = SingleAgentEnvRunner(config=config.copy(copy_frozen=False).env_runners(env_runner_cls=None))
    ours.module.set_state(theirs.module.get_state())
    ours.draws = {}  # the GetActions piece draws, from torch's generator: the draws match RLlib's
    return theirs, ours


CALLS = [
    {"num_timesteps": 30, "random_actions": True},  # as DreamerV3 starts (the next call starts afresh)
    {"num_timesteps": 30, "force_reset": True},
    {"num_timesteps": 30},  # the 8-step episodes end and reset inside a call, and are cut between calls
    {"num_episodes": 4},
    {"num_timesteps": 30},
    {"num_timesteps": 45, "explore": False, "force_reset": True},  # as an evaluation runner samples
    {"num_timesteps": 30, "explore": False},
]


@pytest.mark.parametrize("case", CASES, ids=[case_name(*c) for c in CASES])
def test_the_batched_loop_returns_rllibs_episodes(tmp_path, case):
    theirs, ours = _runners(tmp_path, case)
    try:
        for i, call in enumerate(CALLS):
            if call.get("random_actions") and case[3]:
                continue  # RLlib's random actions ignore masks (the env raises): DreamerV3's, not ours
            for runner in (theirs, ours):
                runner.env.action_space.seed(i)  # random_actions: the vector space's own generator
            torch.manual_seed(i)
            expected = theirs.sample(**call)
            torch.manual_seed(i)
            got = ours.sample(**call)
            assert ours.why_not() is None
            # RLlib's own PPO module over an MLP: the policy pass of policy_pass.py samples
            assert (ours.flat_pass is not None) == (case[:2] == ("PPO", "box") and not case[3]), case
            assert [len(e) for e in got] == [len(e) for e in expected], call
            assert sum(len(e) for e in got) > 0
            for n, (want, have) in enumerate(zip(expected, got, strict=True)):
                _same(_state(want), _state(have), f"call {i} {call} episode {n}")
        metrics_theirs, metrics_ours = theirs.get_metrics(), ours.get_metrics()
        # RLlib's connector pipelines time themselves: the batched loop runs none of them
        pipelines = {k for k in metrics_theirs if k.startswith(("env_to_module", "module_to_env"))}
        assert set(metrics_theirs) - pipelines <= set(metrics_ours)
        for key in ("num_env_steps_sampled", "num_episodes", "episode_return_mean", "episode_len_mean"):
            assert metrics_ours[key].peek() == pytest.approx(metrics_theirs[key].peek()), key
        assert metrics_ours["episode_duration_sec_mean"].peek() > 0
    finally:
        theirs.stop()
        ours.stop()


def _frequencies(actions: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(actions.reshape(-1), minlength=n) / actions.size


def test_numpy_categorical_draws_follow_the_logits_and_never_a_masked_choice():
    from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical

    logits = np.array([[0.0, 1.0, -3.4e38, 2.0], [5.0, 5.0, 5.0, -3.4e38]], np.float32)
    rows = np.repeat(logits, 20000, axis=0).reshape(2, 20000, 4).transpose(1, 0, 2)
    actions, logp = batched_runner._categorical(rows, np.random.default_rng(0))
    assert actions.dtype == np.int32 and logp.dtype == np.float32 and actions.shape == (20000, 2)
    dist = TorchCategorical.from_logits(torch.from_numpy(logits))
    for row in range(2):
        probs = torch.softmax(torch.from_numpy(logits[row]), -1).numpy()
        assert np.abs(_frequencies(actions[:, row], 4) - probs).max() < 0.01
        assert not np.any(actions[:, row] == np.argmin(logits[row]))  # probability 0: never drawn
    torch_logp = dist.logp(torch.from_numpy(actions[:50].astype(np.int64))).numpy()
    np.testing.assert_allclose(logp[:50], torch_logp, rtol=1e-5, atol=1e-5)


def test_numpy_gaussian_draws_have_the_means_scales_and_densities_of_torchs():
    from ray.rllib.core.distribution.torch.torch_distribution import TorchDiagGaussian

    inputs = np.array([[0.5, -2.0, np.log(0.1), np.log(3.0)]], np.float32)
    actions, logp = batched_runner._diag_gaussian(np.repeat(inputs, 50000, axis=0), np.random.default_rng(1))
    assert actions.dtype == np.float32 and logp.dtype == np.float32 and actions.shape == (50000, 2)
    np.testing.assert_allclose(actions.mean(axis=0), [0.5, -2.0], atol=0.05)
    np.testing.assert_allclose(actions.std(axis=0), [0.1, 3.0], rtol=0.02)
    dist = TorchDiagGaussian.from_logits(torch.from_numpy(np.repeat(inputs, 50, axis=0)))
    np.testing.assert_allclose(
        logp[:50], dist.logp(torch.from_numpy(actions[:50])).numpy(), rtol=1e-5, atol=1e-5
    )


def test_seeded_runners_draw_the_same_actions_and_unseeded_ones_differ(tmp_path):
    def actions(seed: int | None) -> np.ndarray:
        built = _built(tmp_path, "PPO", "box", "discrete", False, num_envs_per_env_runner=2, seed=seed)
        runner = BatchedEnvRunner(config=built.config)
        try:
            assert runner.draws  # numpy's draws, from the runner's generator
            runner.module.set_state(
                {k: torch.ones_like(v) * 0.01 for k, v in runner.module.state_dict().items()}
            )
            return np.concatenate([e.get_actions() for e in runner.sample(num_timesteps=40)])
        finally:
            runner.stop()

    assert np.array_equal(actions(3), actions(3))
    assert not np.array_equal(actions(None), actions(None))


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({"observation_filter": "MeanStdFilter"}, internals.CONNECTOR_DIRS[0]),
        ({"model_config": {"use_lstm": True, "max_seq_len": 4}}, "recurrent"),
        ({"callbacks_on_episode_step": "hooks.step"}, "on_episode_step callback hooks.step"),
        ({"callbacks_on_episode_end": "hooks.end"}, "on_episode_end callback hooks.end"),
        ({"sampler": "rllib"}, None),
    ],
)
def test_configs_the_batched_loop_does_not_cover_use_rllibs_with_a_notice(tmp_path, capsys, config, why):
    (tmp_path / "hooks.py").write_text("def step(**kwargs):\n    pass\n\n\ndef end(**kwargs):\n    pass\n")
    built = _built(tmp_path, "PPO", "box", "discrete", False, **config)
    assert built.config.env_runner_cls is None and built.sampler.startswith("rllib")
    if why is not None:
        assert why in built.sampler
        (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("notice: sampler:")]
        assert line.startswith("notice: sampler: RLlib's env runner loop, as ") and why in line


@pytest.mark.substitution(substitutions.AGENTS_BATCHED)
def test_a_multi_agent_config_says_it_samples_with_the_agents_batched_loop():
    """configs/multi-agent.yaml: the agents-batched loop with RLlib's episodes (test_agent_rounds.py)."""
    config = ROOT / "configs" / "multi-agent.yaml"
    out = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-f", str(config), "--dry-run"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "notice: agents-batched: each policy acts for all its agents of a step at once" in out.stderr
    assert "an episode is a round, as RLlib's" in out.stderr
    assert "sampler: agents-batched" in out.stdout


def test_an_unknown_sampler_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(UserError, match=r"sampler must be one of batched, rllib, got 'fast'"):
        _built(tmp_path, "PPO", "box", "discrete", False, sampler="fast")


@contextlib.contextmanager
def _runner(tmp_path, **config: Any) -> Iterator[BatchedEnvRunner]:
    """A batched runner for the matrix env's Box observations and Discrete actions, stopped after."""
    built = _built(tmp_path, "PPO", "box", "discrete", False, **config)
    runner = BatchedEnvRunner(
        config=built.config.copy(copy_frozen=False).env_runners(env_runner_cls=BatchedEnvRunner)
    )
    try:
        yield runner
    finally:
        runner.stop()


def test_a_runner_given_a_connector_falls_back_to_rllibs_loop_and_says_why(tmp_path, caplog):
    """What only the built runner knows: RLlib's loop samples, and the runner's log says why."""
    with _runner(tmp_path, observation_filter="MeanStdFilter") as runner:
        with caplog.at_level(logging.WARNING, logger=batched_runner.__name__):
            episodes = runner.sample(num_timesteps=20)
        assert sum(len(e) for e in episodes) >= 20
        assert "are not RLlib's defaults" in (runner.why_not() or "")
        assert "RLlib's loop samples this env runner" in caplog.text


def test_a_failed_env_step_is_remade_and_sampling_goes_on(tmp_path):
    """restart_failed_sub_environments: RLlib's handling, through RunnerState.step."""
    with _runner(tmp_path, num_envs_per_env_runner=2, restart_failed_sub_environments=True) as runner:
        runner.sample(num_timesteps=10)
        env = runner.env
        original = env.step
        calls = {"n": 0}

        def failing_once(actions: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 3:
                raise ValueError("the game crashed")
            return original(actions)

        env.step = failing_once
        episodes = runner.sample(num_timesteps=20)
        assert runner.env is not env  # made again
        assert sum(len(e) for e in episodes) >= 20
        assert runner.get_metrics()["num_env_step_failures"].peek() == 1


@pytest.mark.parametrize("size", [4, 30])
def test_an_env_failing_more_often_than_a_sample_is_long_ends_the_run(tmp_path, monkeypatch, size):
    """RLlib's runner counts a sample afresh after each failure: an env failing at every third step
    would sample 30 steps for ever.  The sample ends the run past FAILED_STEPS_PER_SAMPLE failures,
    naming the env's error on one line.  Samples of 4 steps (two vector steps) fail once each: the
    failures are counted per sample, so 150 of them go on."""
    calls = {"n": 0}
    with _runner(tmp_path, num_envs_per_env_runner=2, restart_failed_sub_environments=True) as runner:
        vector_env = type(runner.env.unwrapped)  # under the env guard's step
        monkeypatch.setattr(vector_env, "step", failing_every(3, vector_env.step, calls))
        if size == 4:
            for _ in range(150):
                assert sum(len(e) for e in runner.sample(num_timesteps=size)) >= size
            assert calls["n"] // 3 > batched_runner.FAILED_STEPS_PER_SAMPLE  # failures in all
            return
        with pytest.raises(batched_runner.EnvKeepsFailing) as raised:
            runner.sample(num_timesteps=size)
    failures = batched_runner.FAILED_STEPS_PER_SAMPLE + 1
    assert f"failed {failures} times in one sample" in str(raised.value)
    assert "its last error: ValueError: the game crashed (frame 9)); fix: fix the env's step()" in str(
        raised.value
    )
    assert calls["n"] == 3 * failures


def test_without_restarts_a_failed_env_step_raises_rllibs_error(tmp_path):
    def failing(actions: Any) -> Any:
        raise ValueError("the game crashed")

    with _runner(tmp_path) as runner:
        runner.sample(num_timesteps=5)
        runner.env.step = failing
        with pytest.raises(RuntimeError) as raised:
            runner.sample(num_timesteps=5)
        assert isinstance(raised.value.__cause__, ValueError)


def test_the_vector_env_must_reset_at_the_next_step(tmp_path):
    with _runner(tmp_path) as runner:
        runner.env.metadata["autoreset_mode"] = gym.vector.AutoresetMode.SAME_STEP
        assert "not at the next step" in (runner.why_not() or "")


def _ppo_module(env: gym.Env, model: dict[str, Any], inference_only: bool = True) -> Any:
    from ray.rllib.algorithms.ppo import PPOConfig

    config = PPOConfig().environment(observation_space=env.observation_space, action_space=env.action_space)
    spec = config.rl_module(model_config=model).get_rl_module_spec(env=env, inference_only=inference_only)
    return spec.build()


@pytest.mark.parametrize(
    ("env_id", "model", "inference_only"),
    [
        ("CartPole-v1", {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"}, True),
        ("CartPole-v1", {"fcnet_hiddens": [32], "fcnet_activation": "relu", "vf_share_layers": True}, True),
        ("CartPole-v1", {"fcnet_hiddens": [16, 16], "fcnet_use_layernorm": True}, False),  # critic built too
        ("Pendulum-v1", {"fcnet_hiddens": [64, 64], "fcnet_activation": "silu"}, True),  # log-std clipped
        ("Pendulum-v1", {"fcnet_hiddens": [8], "head_fcnet_hiddens": [8]}, True),
    ],
)
def test_the_policy_pass_gives_exactly_the_modules_outputs(env_id, model, inference_only):
    from envsdk import internals
    from envsdk.training.substitutes.sampling.policy_pass import policy_pass

    env = gym.make(env_id)
    module = _ppo_module(env, model, inference_only)
    fast = policy_pass(module)
    assert fast is not None
    obs = torch.as_tensor(np.stack([env.observation_space.sample() for _ in range(5)]), dtype=torch.float32)
    module.eval()
    with torch.no_grad():
        for explore in (True, False):
            own = internals.module_forward(module, explore)({"obs": obs})["action_dist_inputs"]
            assert torch.equal(fast(obs), own)
            assert fast.same_as_module({"obs": obs}, fast(obs), explore)
        module.set_state({k: v + 0.5 for k, v in module.get_state().items()})  # new weights: read live
        own = internals.module_forward(module, True)({"obs": obs})["action_dist_inputs"]
        assert torch.equal(fast(obs), own)


def test_modules_whose_pass_is_not_rllibs_default_mlp_get_none():
    from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule

    from envsdk.training.substitutes.sampling.policy_pass import policy_pass

    cartpole = gym.make("CartPole-v1")
    image = gym.make("CartPole-v1")
    image.observation_space = gym.spaces.Box(0, 1, (42, 42, 3), np.float32)
    assert policy_pass(_ppo_module(image, {"conv_filters": [[16, 4, 2], [32, 4, 2]]})) is None  # a CNN
    assert policy_pass(_ppo_module(cartpole, {"use_lstm": True})) is None  # recurrent

    class Doubled(DefaultPPOTorchRLModule):
        def _forward(self, batch, **kwargs):
            out = super()._forward(batch, **kwargs)
            return {**out, "action_dist_inputs": out["action_dist_inputs"] * 2}

    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    spec = RLModuleSpec(
        module_class=Doubled,
        observation_space=cartpole.observation_space,
        action_space=cartpole.action_space,
        model_config={"fcnet_hiddens": [8]},
        inference_only=True,
    )
    assert policy_pass(spec.build()) is None  # a user's module of its own pass


def test_a_policy_pass_unlike_the_modules_is_dropped_and_the_module_samples(tmp_path):
    from envsdk.training.substitutes.sampling.policy_pass import PolicyPass

    theirs, ours = _runners(tmp_path, ("PPO", "box", "discrete", False))
    try:
        assert ours.why_not() is None and ours.flat_pass is not None
        ours.flat_pass = PolicyPass(ours.module, ours.flat_pass.layers[:-1])  # the pi head left out
        for runner in (theirs, ours):
            runner.env.action_space.seed(3)
        torch.manual_seed(3)
        expected = theirs.sample(num_timesteps=30, force_reset=True)
        torch.manual_seed(3)
        got = ours.sample(num_timesteps=30, force_reset=True)
        assert ours.flat_pass is None
        for n, (want, have) in enumerate(zip(expected, got, strict=True)):
            _same(_state(want), _state(have), f"episode {n}")
    finally:
        theirs.stop()
        ours.stop()
