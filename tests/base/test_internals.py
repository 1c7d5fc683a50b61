"""Each private Ray/RLlib/Tune/CPython API that envsdk.internals relies on, checked on the installed versions.

A failure here names the assumption an upgrade broke; fix it in envsdk/internals/ (one place).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import inspect
import json
import os
import pickle
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from envsdk import internals
from envsdk.internals import patches
from envsdk.substitutions import PATCHES
from tests.helpers import ROOT


def textual(obj: object) -> str:
    """The source of ``obj``, for an assumption checked as text: where a behaviour probe would need
    a trained run, a cluster or a signal to a live Tune run.  It fails when the code changes even
    if the behaviour did not; the failure names what to look at again."""
    return inspect.getsource(obj)  # type: ignore[arg-type]


def assigns(source: str, name: str) -> bool:
    """Whether ``source`` assigns ``self.<name>`` (not merely mentions a longer name that starts so)."""
    return re.search(rf"\bself\.{re.escape(name)}\s*(?::[^=]*)?=(?!=)", source) is not None


def test_the_pinned_ray_is_the_one_checked():
    assert ray.__version__ == internals.RAY_VERSION, "re-check every assumption below, then bump RAY_VERSION"


def test_atexit_runs_its_hooks_on_request():
    assert callable(atexit._run_exitfuncs)
    ran = []
    atexit.register(ran.append, 1)
    internals.run_exit_hooks()
    assert ran == [1]


def test_rllib_api_loggers_exist():
    for name in internals.RLLIB_API_LOGGERS:
        importlib.import_module(name)


def test_deprecated_defaults_are_recognised():
    from ray.rllib.algorithms.ppo import PPOConfig

    defaults = PPOConfig().to_dict()
    assert internals.is_deprecated_default(defaults["sgd_minibatch_size"])  # a Ray 1.x name RLlib keeps
    assert not internals.is_deprecated_default(defaults["lr"])


def test_a_config_keeps_its_env_to_module_connector():
    from ray.rllib.algorithms.ppo import PPOConfig

    made = functools.partial(print)
    config = PPOConfig().env_runners(env_to_module_connector=made)
    assert internals.env_to_module_connector(config) is made


def test_a_config_keeps_its_learner_connector():
    from ray.rllib.algorithms.sac import SACConfig

    made = functools.partial(print)
    assert internals.learner_connector_setting(SACConfig()) is None
    assert internals.learner_connector_setting(SACConfig().training(learner_connector=made)) is made


def test_a_learner_keeps_its_connector_pipeline():
    """normalize_rewards' tests read the normaliser's statistics out of the learner's pipeline."""
    import gymnasium as gym
    from ray.rllib.algorithms.ppo import PPOConfig

    from envsdk.training.hooks.reward_normalization import RewardNormalizer, reward_normalizer

    config = PPOConfig().training(learner_connector=functools.partial(reward_normalizer, gamma=0.9))
    learner = config.build_learner(env=gym.make("CartPole-v1"))
    learner.build()
    pieces = internals.learner_connector(learner).connectors
    assert any(isinstance(p, RewardNormalizer) for p in pieces), pieces


def _short_episodes_runner():
    """A local MultiAgentEnvRunner on a two-agent env whose episodes end every 3 steps."""
    import gymnasium as gym
    import numpy as np
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.multi_agent_env import MultiAgentEnv
    from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner

    class ShortEpisodes(MultiAgentEnv):
        def __init__(self, config=None):
            super().__init__()
            self.possible_agents = self.agents = ["a", "b"]
            self.observation_spaces = {a: gym.spaces.Box(-1, 1, (2,), np.float32) for a in self.agents}
            self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.agents}
            self.t = 0

        def _obs(self):
            return {a: np.full(2, self.t / 3, np.float32) for a in self.agents}

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return self._obs(), {}

        def step(self, action_dict):
            self.t += 1
            done = self.t >= 3
            flags = {a: done for a in self.agents}
            return self._obs(), {a: 1.0 for a in self.agents}, flags | {"__all__": done}, \
                {a: False for a in self.agents} | {"__all__": False}, {}  # fmt: skip

    config = (
        PPOConfig()
        .environment(ShortEpisodes)
        .multi_agent(policies={"p"}, policy_mapping_fn=lambda aid, *a, **k: "p")
        .env_runners(num_env_runners=0)
    )
    return MultiAgentEnvRunner(config=config)


def _counting(monkeypatch, original):
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    calls: dict[int, int] = {}

    def to_numpy(self):
        calls[id(self)] = calls.get(id(self), 0) + 1
        return original(self)

    monkeypatch.setattr(MultiAgentEpisode, "to_numpy", to_numpy)
    return calls


def test_multi_agent_runner_converts_ended_episodes_again_at_every_step(monkeypatch):
    """The RLlib behaviour convert_done_episodes_once works around; when this fails, drop the workaround."""
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    original = getattr(MultiAgentEpisode.to_numpy, "__wrapped__", MultiAgentEpisode.to_numpy)
    calls = _counting(monkeypatch, original)
    episodes = _short_episodes_runner().sample(num_timesteps=30)
    done = [e for e in episodes if e.is_done]
    assert len(done) >= 5
    assert max(calls[id(e)] for e in done) > 3  # the first one ended is converted again ever after


def _agent_states(episode) -> bytes:
    return pickle.dumps({agent: e.get_state() for agent, e in episode.agent_episodes.items()})


def test_converting_an_ended_episode_again_changes_nothing(monkeypatch):
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    original = getattr(MultiAgentEpisode.to_numpy, "__wrapped__", MultiAgentEpisode.to_numpy)
    monkeypatch.setattr(MultiAgentEpisode, "to_numpy", original)
    done = [e for e in _short_episodes_runner().sample(num_timesteps=30) if e.is_done]
    for episode in done:
        before = _agent_states(episode)
        assert original(episode) is episode
        assert _agent_states(episode) == before


def test_convert_done_episodes_once_converts_each_episode_once(monkeypatch):
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    original = getattr(MultiAgentEpisode.to_numpy, "__wrapped__", MultiAgentEpisode.to_numpy)
    calls = _counting(monkeypatch, original)
    counting = MultiAgentEpisode.to_numpy
    internals.convert_done_episodes_once()
    internals.convert_done_episodes_once()  # idempotent: one wrapper, not two
    assert MultiAgentEpisode.to_numpy.__wrapped__ is counting
    episodes = _short_episodes_runner().sample(num_timesteps=30)
    assert [calls.get(id(e)) for e in episodes] == [1] * len(episodes)
    assert all(e.is_numpy for e in episodes)


@pytest.mark.parametrize("name", sorted(internals.OVERRIDDEN))
def test_overridden_private_methods_exist_with_their_arguments(name):
    module, qualname = name.split(":")
    owner, method = qualname.split(".")
    function = getattr(getattr(importlib.import_module(module), owner), method)
    expected = internals.OVERRIDDEN[name].split("(")[-1].rstrip(")").split(", ")
    params = [p for p in inspect.signature(function).parameters if p not in ("self", "cls")]
    assert params == expected, (name, params)


def test_tune_gives_a_trainable_its_storage():
    from ray.tune.trainable import Trainable

    assert re.search(r"\bself\._storage = storage\b", textual(Trainable.__init__))

    class Storage:
        experiment_fs_path = "/tmp/exp"

    class Algo:
        _storage = Storage()

    assert str(internals.trial_experiment_dir(Algo())) == "/tmp/exp"
    assert internals.trial_experiment_dir(object()) is None


@pytest.mark.slow  # builds an Algorithm
def test_a_released_utilization_monitor_is_not_joined_by_stop(tmp_path):
    from tests.helpers import built_algorithm

    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "PPO", "box", "discrete", False, minibatch_size=16)
        try:
            thread = algo._monitor
            assert isinstance(thread, threading.Thread) and thread.is_alive(), "RLlib logs sys usage"
            internals.release_utilization_monitor(algo)
            assert algo._monitor is not thread and not algo._monitor.is_alive()
            thread.join(timeout=5)  # it ends by itself once its sleep is over
            assert not thread.is_alive()
        finally:
            algo.stop()


def test_an_iteration_uncounted_in_the_results_hook_is_not_counted():
    """``Trainable.train`` numbers the iteration from ``_iteration`` and then hands the same result to
    ``log_result`` (RLlib's ``on_train_result``): an iteration uncounted there reports the number
    before it, and the next one takes its number (internals.uncount_iteration)."""
    from ray.tune import Trainable

    class Starting(Trainable):
        def step(self):
            return {"starting": self.iteration == 0 and not getattr(self, "waited", False)}

        def log_result(self, result):
            if result["starting"]:
                self.waited = True
                internals.uncount_iteration(self, result)

    trainable = Starting(config={})
    try:
        results = [trainable.train() for _ in range(3)]
        assert [r["training_iteration"] for r in results] == [0, 1, 2]
        assert trainable.iteration == 2
    finally:
        trainable.stop()


def test_tune_stops_gracefully_on_sigusr1():
    import ray.tune.tune as tune_module

    assert "signal.SIGUSR1, signal_interrupt_tune_run" in textual(tune_module)


@pytest.mark.parametrize("name", ["wandb", "mlflow"])
def test_tune_logger_callbacks_read_only_what_a_trial_view_has(name):
    """An in-process trial hands Tune's logger callbacks a TrialView instead of a Trial."""
    import re

    from envsdk.config.loggers import callback_class
    from envsdk.training.run import logger_callbacks

    source = textual(inspect.getmodule(callback_class(name))) + textual(logger_callbacks)
    read = set(re.findall(r"\btrial\.(\w+)", source))
    assert read <= set(internals.TRIAL_ATTRIBUTES_READ_BY_LOGGERS), read
    view = internals.TrialView("abc_00000", "exp_abc_00000", {"lr": 1}, Path("/tmp/exp/trial"))
    assert all(hasattr(view, attribute) for attribute in internals.TRIAL_ATTRIBUTES_READ_BY_LOGGERS)
    assert str(view) == "exp_abc_00000" and view.experiment_dir_name == "exp"


def test_checkpoint_layout_of_connector_pieces(train):
    """A real checkpoint: its env-to-module pieces are where connector_pieces() looks."""
    from envsdk.training.hooks.observation_filter import ObservationMeanStdFilter
    from envsdk.training.run.checkpoints import locate

    out = train("--run", "PPO", "--env", "CartPole-v1", "--stop-iters", "1", "--checkpoint-at-end",
                "--config.observation_filter=MeanStdFilter", "--config.train_batch_size=200",
                "--config.minibatch_size=100")  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    checkpoint = locate(next(train.results.iterdir())).checkpoint
    pieces = internals.connector_pieces(checkpoint)
    classes = [pickle.loads((p / internals.PIECE_CLASS_FILE).read_bytes())["class"] for p in pieces]
    assert ObservationMeanStdFilter in classes
    ours = pieces[classes.index(ObservationMeanStdFilter)]
    state = pickle.loads((ours / internals.PIECE_STATE_FILE).read_bytes())
    assert state["agents"][None]["seen"][()].count > 0


RAY_FREE_RUN = """
SMALL = {  # seconds, not minutes, per iteration
    "PPO": {"train_batch_size": 256, "minibatch_size": 128, "num_epochs": 1},
    # train_batch_size_per_learner: the new stack's batch (train_batch_size is the old stack's)
    "DQN": {"min_sample_timesteps_per_iteration": 40, "num_steps_sampled_before_learning_starts": 20,
            "train_batch_size_per_learner": 32},
    "SAC": {"min_sample_timesteps_per_iteration": 40, "num_steps_sampled_before_learning_starts": 20,
            "train_batch_size_per_learner": 32},
}
import importlib
import sys
import ray
from envsdk.internals import without_object_store

module, name, env, folder = sys.argv[1:]
algo_class = getattr(importlib.import_module(module), name)
config = algo_class.get_default_config().environment(env).env_runners(num_env_runners=0)
config.update_from_dict(SMALL[name])
with without_object_store():
    algo = algo_class(config=config)
    algo.train()
    algo.save_checkpoint(folder)
    algo.load_checkpoint(folder)
    trained = algo.train()["learners"]["__all_modules__"]["num_module_steps_trained"]
    algo.stop()
assert trained > 0, trained  # the restored algorithm updated its module
assert not ray.is_initialized()
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", internals.RAY_FREE_ALGORITHMS)
def test_algorithms_listed_as_ray_free_train_save_and_restore_without_ray(name, tmp_path):
    """With Ray's auto-start off, any Ray call but the ones without_object_store answers would raise."""
    module, cls_name = name.split(":")
    algo_class = getattr(importlib.import_module(module), cls_name)
    assert internals.trains_without_ray(algo_class)
    env = "Pendulum-v1" if cls_name == "SAC" else "CartPole-v1"
    out = subprocess.run(
        [sys.executable, "-c", RAY_FREE_RUN, module, cls_name, env, str(tmp_path / "ckpt")],
        capture_output=True, text=True, timeout=300,
        # one torch thread, as an in-process trial of one CPU gets: two threads of SAC's updates beside
        # another test's training on two cores took 85 s instead of 14 s
        env={**os.environ, "RAY_ENABLE_AUTO_CONNECT": "0", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]


def test_algorithms_that_start_actors_are_not_ray_free():
    from ray.rllib.algorithms.appo import APPO
    from ray.rllib.algorithms.impala import IMPALA

    assert not internals.trains_without_ray(IMPALA) and not internals.trains_without_ray(APPO)


def test_connectors_find_their_callers_arguments_with_the_cheap_stack():
    """ConnectorV2 records a subclass's constructor arguments from inspect.stack()[1].frame."""
    from ray.rllib.connectors import connector_v2

    source = textual(connector_v2.ConnectorV2.__init__)
    assert "inspect.stack()[1].frame" in source and "inspect.getargvalues(caller_frame)" in source

    class Piece(connector_v2.ConnectorV2):
        def __init__(self, input_observation_space=None, input_action_space=None, *, size=3, name="x"):
            super().__init__(input_observation_space, input_action_space)

        def __call__(self, **kwargs):
            return kwargs["batch"]

    internals.connectors_find_their_caller_cheaply()
    internals.connectors_find_their_caller_cheaply()  # idempotent
    assert type(connector_v2.inspect).__name__ == "_FramesOnlyInspect"
    cheap = Piece(size=5, name="y").get_ctor_args_and_kwargs()
    frames = connector_v2.inspect.stack()
    real = inspect.stack()
    assert [(f.frame, f.function, f.filename) for f in frames[:6]] == [
        (f.frame, f.function, f.filename) for f in real[:6]
    ]
    try:
        connector_v2.inspect = inspect
        full = Piece(size=5, name="y").get_ctor_args_and_kwargs()
    finally:
        internals.connectors_find_their_caller_cheaply()  # back to the cheap one
    assert (
        cheap
        == full
        == ((), {"input_observation_space": None, "input_action_space": None, "size": 5, "name": "y"})
    )


def test_target_networks_are_blended_in_place_as_rllib_blends_them():
    import copy

    import torch
    from ray.rllib.algorithms.dqn import dqn_learner
    from ray.rllib.core.learner import utils as learner_utils
    from ray.rllib.utils import torch_utils

    # RLlib's learners reach the torch function through this module, which looks it up at each call.
    assert re.search(
        r"\bupdate_target_network\(", textual(dqn_learner.DQNLearner.after_gradient_based_update)
    )
    assert "from ray.rllib.utils.torch_utils import update_target_network" in textual(
        learner_utils.update_target_network
    )
    internals.polyak_updates_in_place()
    internals.polyak_updates_in_place()  # idempotent
    assert torch_utils.update_target_network is patches._polyak_in_place
    rllib_polyak = patches._RLLIB_POLYAK
    for net in (
        torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)),
        torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.BatchNorm1d(8)),  # an integer buffer
    ):
        target = copy.deepcopy(net)
        for p in target.parameters():
            p.data.normal_()
        expected = copy.deepcopy(target)
        rllib_polyak(main_net=net, target_net=expected, tau=0.3)
        learner_utils.update_target_network(main_net=net, target_net=target, tau=0.3)
        for (name, ours), theirs in zip(
            target.state_dict().items(), expected.state_dict().values(), strict=True
        ):
            assert torch.allclose(ours.float(), theirs.float(), atol=1e-6), name
        assert all(p.requires_grad for p in target.parameters())
    # the second blend of a pair reads each network's tensors as they are now: a loaded state, or a
    # parameter object set anew, is blended, not the tensors of the first call
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    target = copy.deepcopy(net)
    learner_utils.update_target_network(main_net=net, target_net=target, tau=0.3)
    target.load_state_dict({k: torch.zeros_like(v) for k, v in target.state_dict().items()})
    target[2].bias = torch.nn.Parameter(torch.full((2,), 4.0))
    net[0].weight = torch.nn.Parameter(torch.ones(8, 3))
    learner_utils.update_target_network(main_net=net, target_net=target, tau=0.5)
    torch.testing.assert_close(target[0].weight, torch.full((8, 3), 0.5))
    torch.testing.assert_close(target[2].bias, 2.0 + 0.5 * net[2].bias.detach())


DISCRETE_ACTION_SPACES = {
    "discrete": lambda g: g.spaces.Discrete(3, start=-1),
    "multi-discrete": lambda g: g.spaces.MultiDiscrete([2, 5]),
    "multi-binary": lambda g: g.spaces.MultiBinary(4),
    "nested": lambda g: g.spaces.Dict(
        {"a": g.spaces.Discrete(2), "b": g.spaces.Tuple([g.spaces.MultiDiscrete([3]), g.spaces.Discrete(4)])}
    ),
}


@pytest.mark.parametrize("name", sorted(DISCRETE_ACTION_SPACES))
def test_rllib_copies_no_actions_when_it_neither_normalizes_nor_clips(name):
    """What build_config's normalize_actions/clip_actions: false for discrete actions relies on."""
    import gymnasium as gym
    from ray.rllib.connectors.module_to_env.normalize_and_clip_actions import NormalizeAndClipActions
    from ray.rllib.core.columns import Columns

    space = DISCRETE_ACTION_SPACES[name](gym)
    piece = NormalizeAndClipActions(None, space, normalize_actions=False, clip_actions=False)
    batch = {Columns.ACTIONS: {("env-0", None, "m"): [space.sample()]}}
    out = piece(rl_module=None, batch=batch, episodes=[])
    assert Columns.ACTIONS_FOR_ENV not in out and out[Columns.ACTIONS] is batch[Columns.ACTIONS]


def test_env_runners_send_the_actions_when_no_connector_made_actions_for_env():
    from ray.rllib.env import multi_agent_env_runner, single_agent_env_runner

    for module in (single_agent_env_runner, multi_agent_env_runner):
        assert "to_env.pop(Columns.ACTIONS_FOR_ENV, actions)" in textual(module)


def test_every_learner_registers_its_optimizers_through_register_optimizer():
    from ray.rllib.core.learner.learner import Learner
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner

    assert TorchLearner.framework == "torch"
    parameters = inspect.signature(inspect.unwrap(Learner.register_optimizer)).parameters
    assert {"optimizer", "module_id", "optimizer_name", "params", "lr_or_lr_schedule"} <= set(parameters)
    assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in ("optimizer", "params"))
    assert "self.register_optimizer(" in textual(TorchLearner.configure_optimizers_for_module)


def test_a_fused_optimizer_makes_the_same_updates_and_loads_an_unfused_state():
    import torch

    torch.manual_seed(0)
    make = torch.optim.Adam
    nets = [
        torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)) for _ in range(2)
    ]
    nets[1].load_state_dict(nets[0].state_dict())
    plain = make(nets[0].parameters(), lr=3e-3, eps=1e-7)
    fused = patches._fused_on_cpu(make(nets[1].parameters(), lr=3e-3, eps=1e-7))
    assert fused.defaults["fused"] and all(g["fused"] for g in fused.param_groups) and type(fused) is make
    for _ in range(25):
        x = torch.randn(32, 5)
        for net, optimizer in zip(nets, (plain, fused), strict=True):
            optimizer.zero_grad()
            net(x).pow(2).mean().backward()
            optimizer.step()
    for a, b in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    again = patches._fused_on_cpu(make(nets[1].parameters(), lr=3e-3, eps=1e-7))
    again.load_state_dict(plain.state_dict())  # a checkpoint written before: it goes on from there
    again.step()


def test_optimizers_stated_by_their_builder_stay_as_built():
    import torch

    net = torch.nn.Linear(3, 2)
    for optimizer in (
        torch.optim.Adam(net.parameters(), foreach=False),
        torch.optim.Adam(net.parameters(), fused=False),
        torch.optim.SGD(net.parameters(), lr=0.1),
        torch.optim.AdamW(net.parameters()),
        torch.optim.Adam(torch.nn.Linear(3, 2).to(torch.bfloat16).parameters()),
    ):
        assert patches._fused_on_cpu(optimizer) is optimizer


@pytest.mark.parametrize("algo", ["PPO", "SAC"])
def test_rllib_learners_step_fused_optimizers(algo):
    import torch

    internals.optimizers_fused_on_cpu()
    internals.optimizers_fused_on_cpu()  # idempotent
    learner = _built_learner(algo)
    optimizers = list(learner._named_optimizers.values())
    assert optimizers and all(type(o) is torch.optim.Adam and o.defaults["fused"] for o in optimizers)


def _built_learner(algo: str) -> Any:
    import gymnasium as gym
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.algorithms.sac import SACConfig

    env = gym.make("Pendulum-v1")
    config = {"PPO": PPOConfig, "SAC": SACConfig}[algo]().environment(
        observation_space=env.observation_space, action_space=env.action_space
    )
    torch.manual_seed(0)
    learner = config.learner_class(config=config)
    learner.build()
    return learner


def test_one_sum_finds_every_non_finite_gradient():
    import torch

    grads = [torch.randn(5, 3), torch.randn(4, dtype=torch.float64), torch.randn(2).half()]
    assert patches._all_finite(grads)
    for bad in (float("nan"), float("inf"), -float("inf")):
        for i in range(len(grads)):
            spoiled = [g.clone() for g in grads]
            spoiled[i].view(-1)[-1] = bad
            assert not patches._all_finite(spoiled)
    # a sum that overflows, and gradients on several devices, go to the slow check too
    assert not patches._all_finite([torch.full((2,), 3e38), torch.full((2,), 3e38)])
    assert not patches._all_finite([torch.ones(2), torch.ones(2, device="meta")])


def test_rllib_tests_each_gradient_as_it_sets_it_then_each_optimizers_again():
    """What gradients_checked_once skips, on RLlib 2.60: two isfinite tests per tensor, and the
    attributes that send it back to RLlib's method (grad scalers, torch lr schedulers)."""
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner

    source = textual(inspect.unwrap(TorchLearner.apply_gradients))
    assert source.count("torch.isfinite(") >= 2 and "torch_skip_nan_gradients" in source
    assert "self._params[pid].grad = grad" in source and "optim.step()" in source
    learner = _built_learner("SAC")
    assert learner._grad_scalers is None and learner._lr_scheduler_classes is None
    assert len(learner._module_optimizers["default_policy"]) == 4  # policy, Q, twin Q, alpha


@pytest.mark.parametrize("algo", ["PPO", "SAC"])
@pytest.mark.parametrize("bad", [None, float("nan"), float("inf")])
def test_gradients_checked_once_step_as_rllib_does(algo, bad):
    """One update through RLlib's apply_gradients and one through the patched method, from the
    same weights and gradients, give the same weights; a nan or inf goes to RLlib's method, which
    replaces it with a finite value (stepped as it is, it would leave nan weights)."""
    import torch
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner

    internals.gradients_checked_once()
    internals.gradients_checked_once()  # idempotent
    patched = TorchLearner.apply_gradients
    rllib = inspect.unwrap(patched)
    assert patched is not rllib
    learners = [_built_learner(algo), _built_learner(algo)]
    params = [internals.learner_params(learner) for learner in learners]  # alike, in one order
    before = [p.detach().clone() for p in params[0].values()]
    torch.manual_seed(1)
    grads = [torch.randn_like(p) for p in before]
    if bad is not None:
        grads[0].view(-1)[3] = bad
    for learner, apply in zip(learners, (rllib, patched), strict=True):
        refs = internals.learner_params(learner)
        apply(learner, {pid: g.clone() for pid, g in zip(refs, grads, strict=True)})
    for old, a, b in zip(before, params[0].values(), params[1].values(), strict=True):
        assert not torch.equal(a, old) and torch.equal(a, b) and bool(torch.isfinite(b).all())


@contextlib.contextmanager
def _sac_and_batch(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """A SAC run as train.py builds it, and a batch of 16 transitions of its env."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    from envsdk.training.substitutes.replay.buffers import TransitionReplayBuffer
    from tests.helpers import built_algorithm

    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "SAC", "box", "box", False)
        try:
            replay = TransitionReplayBuffer(100, seed=0)
            replay.add(algo.env_runner.sample(num_timesteps=40, random_actions=True))
            batch = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(replay.sample(16))}, env_steps=16)
            yield algo, batch
        finally:
            algo.stop()


@pytest.mark.slow  # builds an Algorithm
def test_sac_learner_keeps_one_loss_per_optimizer_until_compute_gradients(tmp_path):
    """training/substitutes/sac/learner.py: the losses are keyed (module, optimizer + "_loss"), popped by
    compute_gradients, and each parameter's gradient is read from ``learner._params``."""
    from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner
    from ray.rllib.core import DEFAULT_MODULE_ID

    with _sac_and_batch(tmp_path) as (algo, batch):
        learner = algo.learner_group._learner
        tensors = learner._convert_batch_type(batch).policy_batches
        fwd = learner.module.forward_train(tensors)
        learner.compute_losses(fwd_out=fwd, batch=tensors)
        names = [name for name, _ in learner.get_optimizers_for_module(DEFAULT_MODULE_ID)]
        assert sorted(internals.sac_losses(learner)) == sorted(
            (DEFAULT_MODULE_ID, n + "_loss") for n in names
        )
        grads = SACTorchLearner.compute_gradients(learner, {DEFAULT_MODULE_ID: None})
        assert internals.sac_losses(learner) == {}
        params = internals.learner_params(learner)
        assert grads.keys() == params.keys() and all(grads[pid] is params[pid].grad for pid in grads)
        learner.metrics.reduce()


@pytest.mark.slow  # builds an Algorithm
def test_a_learner_update_without_reduce_leaves_its_metrics_to_the_next(tmp_path):
    from ray.rllib.core import ALL_MODULES
    from ray.rllib.core.learner.learner import Learner

    assert "_no_metrics_reduce" in inspect.signature(Learner.update).parameters
    with _sac_and_batch(tmp_path) as (algo, batch):
        group = algo.learner_group
        timesteps = {"num_env_steps_sampled_lifetime": 100}
        assert group.is_local
        internals.update_without_reduce(group, batch=batch, timesteps=timesteps)
        result = group.update(batch=batch, timesteps=timesteps)[0]
        assert result[ALL_MODULES]["num_env_steps_trained"].peek() == 32  # both updates' 16 steps


PATCHED = {  # what envsdk.speedups replaces: module, attribute
    "connector-frames": ("ray.rllib.connectors.connector_v2", "inspect"),
    "polyak-in-place": ("ray.rllib.utils.torch_utils", "update_target_network"),
    "fused-adam": ("ray.rllib.core.learner.learner", "Learner.register_optimizer"),
    "finite-check-once": ("ray.rllib.core.learner.torch.torch_learner", "TorchLearner.apply_gradients"),
    "episodes-converted-once": ("ray.rllib.env.multi_agent_episode", "MultiAgentEpisode.to_numpy"),
}

PROBE = """
import gc, importlib, json, os, sys
def get(module, path):
    value = importlib.import_module(module)
    for part in path.split("."):
        value = getattr(value, part)
    return value
patched = json.loads(sys.argv[1])
import ray.rllib.connectors.connector_v2, ray.rllib.utils.torch_utils, ray.rllib.core.learner.learner
import ray.rllib.env.multi_agent_episode, ray.rllib.core.learner.torch.torch_learner
before = {name: get(*where) for name, where in patched.items()}
freeze = gc.get_freeze_count()
import envsdk
from envsdk import Env, register
import envsdk.envs.base, envsdk.training.build
same = {name: get(*where) is before[name] for name, where in patched.items()}
print(json.dumps({"same": same, "gc": [gc.isenabled(), gc.get_freeze_count() == freeze]}))
from envsdk import speedups
from envsdk.substitutions import Stock
speedups.install(Stock.resolve())
print(json.dumps({name: get(*where) is before[name] for name, where in patched.items()}))
"""


@pytest.mark.substitution(*PATCHES)
@pytest.mark.parametrize("off", ["", "1", "fused-adam", "episodes-converted-once"])
def test_importing_envsdk_changes_nothing_and_install_changes_what_is_asked(off):
    from envsdk import speedups

    assert set(PATCHED) == set(speedups.SPEEDUPS)
    env = {**os.environ, "ENVSDK_NO_PATCHES": off}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(PATCHED)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    imported, installed = (json.loads(line) for line in out.stdout.splitlines()[-2:])
    assert all(imported["same"].values()) and imported["gc"] == [True, True]
    skipped = set(speedups.SPEEDUPS) if off == "1" else {off} - {""}
    assert {name for name, same in installed.items() if same} == skipped


@pytest.mark.substitution("frozen-imports")
def test_rollout_and_train_import_rllib_untracked_and_frozen():
    code = (
        "import gc\n"
        "from envsdk.speedups import untracked_imports\n"
        "from envsdk.substitutions import Stock\n"
        "with untracked_imports(Stock.resolve()):\n"
        "    import envsdk.training.build\n"
        "print(gc.isenabled(), gc.get_freeze_count())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    enabled, frozen = out.stdout.split()
    assert enabled == "True" and int(frozen) > 100_000  # RLlib's, torch's and Ray's objects


def _int_agent_episodes():
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    config = (
        DQNConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=lambda aid, *a, **k: f"p{aid}")
        .env_runners(num_env_runners=0)
    )
    return MultiAgentEnvRunner(config=config).sample(num_timesteps=40, random_actions=True)


@pytest.mark.parametrize(
    "buffer", ["MultiAgentEpisodeReplayBuffer", "MultiAgentPrioritizedEpisodeReplayBuffer"]
)
def test_replay_metrics_keyed_by_int_agent_ids_fail_a_checkpoint_unless_stringified(buffer):
    """The RLlib behaviour replay_metrics_with_string_agent_ids works around; when the first
    assertion fails, drop the workaround."""
    from ray.rllib.utils import replay_buffers
    from ray.rllib.utils.metrics import REPLAY_BUFFER_RESULTS
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    episodes = _int_agent_episodes()

    def checkpointed_metrics(wrap: bool) -> dict:
        replay = getattr(replay_buffers, buffer)(capacity=1000)
        if wrap:
            internals.replay_metrics_with_string_agent_ids(replay)
        replay.add(episodes)
        replay.sample(num_items=8)
        logger = MetricsLogger()
        logger.aggregate([replay.get_metrics()], key=REPLAY_BUFFER_RESULTS)
        return logger.get_state()["stats"]

    with pytest.raises(TypeError, match="expected str instance, int found"):
        checkpointed_metrics(wrap=False)
    stats = checkpointed_metrics(wrap=True)
    per_agent = [k for k in stats if k.endswith(("--0", "--1"))]
    assert per_agent, sorted(stats)  # the agents' counts are kept, under "0" and "1"


@pytest.mark.parametrize("kind", ["single-agent", "multi-agent"])
def test_runners_step_their_env_through_its_instance_methods_and_sample_after_get_actions(kind):
    """The env guard replaces ``reset``/``step`` on ``runner_env(runner)``; the action-input check
    goes in front of GetActions in ``runner_module_to_env(runner)``, built once the runner is."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.module_to_env import GetActions
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    runner = (
        _short_episodes_runner()
        if kind == "multi-agent"
        else SingleAgentEnvRunner(
            config=PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0)
        )
    )
    env = internals.runner_env(runner)
    calls = {"reset": 0, "step": 0}
    for name in calls:
        original = getattr(env, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        setattr(env, name, counted)
    try:
        runner.sample(num_timesteps=20, random_actions=False)
        assert calls["reset"] >= 1 and calls["step"] >= 19
        pipeline = internals.runner_module_to_env(runner)
        assert isinstance(pipeline.connectors[0], GetActions)
    finally:
        runner.stop()


def test_private_names_that_off_policy_sac_and_the_guard_read_exist():
    """module_is_stateful, sample_episodes_with_metrics, catalog_model_config, sub_env_observations,
    ray_temp_dir, registered_env_creator, registered_model, time_limit_steps, local_learner,
    learner_batch and PRELOAD, on 2.60."""
    import gymnasium as gym
    import numpy as np
    from ray.rllib.algorithms.dqn.dqn import DQN
    from ray.rllib.algorithms.sac.sac_catalog import SACCatalog
    from ray.rllib.core.learner.learner import Learner
    from ray.rllib.core.learner.learner_group import LearnerGroup
    from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
    from ray.tune.registry import register_env

    assert assigns(textual(inspect.getmodule(DQN)), "_module_is_stateful")
    params = inspect.signature(synchronous_parallel_sample).parameters
    assert {"_uses_new_env_runners", "_return_metrics"} <= set(params)
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    catalog = SACCatalog(box, box, {"fcnet_hiddens": [8]})
    assert internals.catalog_model_config(catalog)["fcnet_hiddens"] == [8]
    vec = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    vec.reset(seed=0)
    parts = internals.sub_env_observations(vec)
    assert parts is not None and len(parts) == 2 and parts[0].shape == (4,)
    assert 'kwargs.pop("_temp_dir", None)' in textual(ray.init)  # taken from **kwargs
    assert set(internals.ray_temp_dir("/x")) == {"_temp_dir"}
    register_env("envsdk-internals-probe", lambda cfg: gym.make("CartPole-v1"))
    assert internals.registered_env_creator("envsdk-internals-probe")({}).spec.id == "CartPole-v1"
    from ray.rllib.examples._old_api_stack.models.fast_model import TorchFastModel
    from ray.rllib.models import ModelCatalog

    ModelCatalog.register_custom_model("envsdk-internals-model", TorchFastModel)
    assert internals.registered_model("envsdk-internals-model") is TorchFastModel
    assert internals.registered_model("envsdk-no-such-model") is None
    assert internals.time_limit_steps(gym.wrappers.TimeLimit(gym.make("CartPole-v1"), 7)) == 7
    assert assigns(textual(LearnerGroup.__init__), "_learner")  # not "num_learners"
    assert callable(Learner._convert_batch_type)
    for name in internals.PRELOAD:
        importlib.import_module(name)


def test_private_runner_state_the_loop_uses_exists():
    """internals.RunnerState's attributes and methods, on 2.60's SingleAgentEnvRunner."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
    from ray.rllib.env.env_runner import EnvRunner
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    init = textual(SingleAgentEnvRunner.__init__) + textual(EnvRunner.__init__)
    for name in (
        "_ongoing_episodes",
        "_needs_initial_reset",
        "_cached_to_module",
        "_weights_seq_no",
        "_done_episodes_for_metrics",
        "_ongoing_episodes_for_metrics",
        "_metrics_num_env_steps_sampled",
        "_metrics_num_try_env_step",
    ):
        assert assigns(init, name), name  # not _ongoing_episodes_for_metrics for _ongoing_episodes
    for method in ("_reset_envs_and_episodes", "_new_episode", "_make_on_episode_callback", "_log_env_steps"):
        assert callable(getattr(SingleAgentEnvRunner, method)), method
    assert "_increase_sampled_metrics" in SingleAgentEnvRunner.__dict__
    step = textual(EnvRunner._try_env_step)
    parts = (
        "log_time(ENV_STEP_TIMER)",
        "NUM_ENV_STEP_FAILURES_LIFETIME",
        "restart_failed_sub_environments",
        "StepFailedRecreateEnvError",
        "self.make_env()",
        "return ENV_STEP_FAILURE",
        "raise RuntimeError from e",
    )
    for part in parts:  # what RunnerState.step does in its place
        assert part in step, part
    assert {"_start_time", "_last_step_time", "_last_added_observation", "_last_added_infos"} <= set(
        SingleAgentEpisode.__slots__
    )
    for name in ("forward_exploration", "forward_inference"):
        source = textual(getattr(TorchRLModule, name))
        assert "self.eval()" in source and f"self._{name}(batch, **kwargs)" in source, name
    # the state as a runner built now has it: no episodes before its first reset, then one per sub-env
    runner = SingleAgentEnvRunner(
        config=PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=2)
    )
    try:
        state = internals.RunnerState(runner)
        assert state.needs_reset and isinstance(state.weights_seq_no, int)
        state.reset(explore=True)
        assert len(state.episodes) == 2 and all(e.t == 0 for e in state.episodes)
        assert state.take_module_input() is not None and state.take_module_input() is None
    finally:
        runner.stop()


def test_private_multi_agent_runner_state_and_one_agent_episodes():
    """internals.MultiRunnerState's attributes and methods on 2.60's MultiAgentEnvRunner, and a
    one-agent MultiAgentEpisode as ``one_agent_episode`` builds it: valid, and read by the runner's
    metrics (len, return, duration) and the learner connectors (its agent's module) as RLlib's own."""
    import gymnasium as gym
    import numpy as np
    from ray.rllib.env.env_runner import EnvRunner
    from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    init = textual(MultiAgentEnvRunner.__init__) + textual(EnvRunner.__init__)
    for name in ("_needs_initial_reset", "_done_episodes_for_metrics", "_ongoing_episodes_for_metrics",
                 "_metrics_num_env_steps_sampled", "_metrics_num_try_env_step", "_weights_seq_no",
                 "_callbacks", "_ongoing_episodes"):  # fmt: skip
        assert assigns(init, name), name
    for method in ("_log_env_steps", "_reset_envs_and_episodes", "_new_episode", "_make_on_episode_callback",
                   "_prune_zero_len_sa_episodes"):  # fmt: skip
        assert callable(getattr(MultiAgentEnvRunner, method)), method
    sample = textual(MultiAgentEnvRunner._sample)
    for part in ("self._prune_zero_len_sa_episodes(", "eps.cut(len_lookback_buffer=", "eps.validate()",
                 "agent_ts += len(observations[env_index])",
                 "self._try_env_step(actions_for_env)"):  # fmt: skip
        assert part in sample, part  # what agent_rounds.py's loop does as RLlib's does
    callback = textual(MultiAgentEnvRunner._make_on_episode_callback)
    for part in ("env_index=idx", "prev_episode_chunks", "callbacks_objects=self._callbacks"):
        assert part in callback, part  # what MultiRunnerState.life_callback passes in its place
    metrics = textual(MultiAgentEnvRunner.get_metrics)
    for part in ("self._done_episodes_for_metrics", "self._ongoing_episodes_for_metrics[eps.id_]", "len(eps)",
                 "eps.get_return()", "eps.get_duration_s()", "sa_eps.module_id"):  # fmt: skip
        assert part in metrics, part
    box = gym.spaces.Box(-1, 1, (2,), np.float32)
    single = SingleAgentEpisode(
        id_="e1", agent_id="a/1", module_id="p", observations=np.zeros((4, 2), np.float32),
        infos=[{}] * 4, actions=np.zeros((3, 2), np.float32), rewards=np.ones(3, np.float32),
        terminated=True, t_started=5, len_lookback_buffer=0, observation_space=box, action_space=box,
    )  # fmt: skip
    internals.episode_filled(single, np.zeros(2, np.float32), {}, 1.0, 3.5)
    episode = internals.one_agent_episode(single, "e1", lambda aid, ep: "p", (box, box))
    episode.validate()
    assert len(episode) == 3 and episode.get_return() == 3.0 and episode.get_duration_s() == 2.5
    assert episode.is_done and episode.module_for("a/1") == "p" and episode.env_t == 8
    assert episode.agent_steps() == 3 and episode.get_agents_that_stepped() == {"a/1"}


def test_module_passes_are_torch_rl_modules_forward_under_no_grad():
    """``module_forward`` calls the passes RLlib's ``forward_exploration``/``forward_inference``
    wrap; ``keeps_default_passes`` says whether a class kept TorchRLModule's, which run ``_forward``
    under ``no_grad`` (policy_pass.py stands in for those only)."""
    import gymnasium as gym
    import numpy as np
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    env = gym.make("CartPole-v1")
    module = PPOConfig().environment("CartPole-v1").get_rl_module_spec(env=env, inference_only=True).build()
    batch = {"obs": torch.as_tensor(np.stack([env.observation_space.sample() for _ in range(3)]))}
    for explore, public in ((True, module.forward_exploration), (False, module.forward_inference)):
        own = internals.module_forward(module, explore)(batch)["action_dist_inputs"]
        assert torch.equal(own, public(batch)["action_dist_inputs"]) and not own.requires_grad
    assert internals.keeps_default_passes(module)
    assert internals.keeps_forward_of(type(module), DefaultPPOTorchRLModule)

    class Forwarding(DefaultPPOTorchRLModule):
        def _forward(self, batch, **kwargs):
            return super()._forward(batch, **kwargs)

    assert not internals.keeps_forward_of(Forwarding, DefaultPPOTorchRLModule)

    class Exploring(DefaultPPOTorchRLModule):
        def _forward_exploration(self, batch, **kwargs):
            return self._forward(batch, **kwargs)

    spec = RLModuleSpec(
        module_class=Exploring, observation_space=env.observation_space, action_space=env.action_space
    )
    assert not internals.keeps_default_passes(spec.build())


def test_the_checkpoint_layout_is_rllibs():
    """internals' names for RLlib's checkpoint files: a module saved now by RLlib, and checkpoints
    of both API stacks that train.py wrote through RLlib (tests/data/checkpoints)."""
    import tempfile

    import gymnasium as gym
    from ray.rllib.algorithms.ppo import PPOConfig

    env = gym.make("CartPole-v1")
    module = PPOConfig().environment("CartPole-v1").get_rl_module_spec(env=env).build()
    with tempfile.TemporaryDirectory() as folder:
        module.save_to_path(folder)
        assert (Path(folder) / internals.MODULE_STATE_FILE).is_file()
        assert (Path(folder) / internals.PIECE_CLASS_FILE).is_file()
    kept = sorted((ROOT / "tests" / "data" / "checkpoints").glob("*/cartpole-ppo"))[-1]
    assert (kept / internals.CHECKPOINT_MARKER).is_file()
    assert (kept / internals.MODULE_DIR / "default_policy" / internals.MODULE_STATE_FILE).is_file()
    for connector in internals.CONNECTOR_DIRS:
        assert (kept / internals.ENV_RUNNER_DIR / connector / internals.PIECE_STATE_FILE).is_file()
    old_stack = sorted((ROOT / "tests" / "data" / "checkpoints").glob("*/custom-model-modelv2"))[-1]
    assert (old_stack / internals.ALGORITHM_STATE_FILE).is_file()


def test_the_private_config_fields_are_rllibs():
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.algorithms.sac import SACConfig

    config = PPOConfig().rl_module(model_config={"fcnet_hiddens": [7]})
    assert config.to_dict()[internals.MODEL_CONFIG_FIELD]["fcnet_hiddens"] == [7]
    assert internals.per_learner_batch_unset(PPOConfig().to_dict())  # derived from train_batch_size
    assert not internals.per_learner_batch_unset(SACConfig().to_dict())  # SAC sets its own


def test_episode_clocks_are_fields_of_an_episodes_state():
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    state = SingleAgentEpisode().get_state()
    assert set(internals.EPISODE_CLOCKS) <= set(state)


@pytest.mark.slow  # builds an Algorithm
def test_a_learners_lr_schedules_are_found_per_module_and_set_as_rllib_sets_them(tmp_path):
    """internals.module_lr_schedules / set_optimizer_lr: RLlib's Learner keeps each optimizer's lr
    Scheduler privately (_module_optimizers, _named_optimizers, _optimizer_lr_schedules) and logs
    its lr under (module, '<optimizer>_learning_rate'); the PPO learner steps each policy's by its own
    agent steps through them."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    from tests.helpers import built_algorithm

    with internals.without_object_store():
        algo = built_algorithm(
            tmp_path,
            "PPO",
            "box",
            "discrete",
            False,
            lr=[[0, 0.01], [100, 0.001]],
            train_batch_size=32,
            minibatch_size=16,
            num_epochs=1,
        )
        try:
            learner = internals.local_learner(algo.learner_group)
            ((metric, optimizer, schedule),) = internals.module_lr_schedules(learner, DEFAULT_MODULE_ID)
            assert metric == "default_optimizer_learning_rate"
            internals.set_optimizer_lr(learner, optimizer, schedule.update(timestep=50))
            assert [g["lr"] for g in optimizer.param_groups] == [pytest.approx(0.0055)]
            assert internals.module_lr_schedules(learner, "no_such_module") == []
            result = algo.train()
            assert metric in result["learners"][DEFAULT_MODULE_ID]  # where RLlib logs it
        finally:
            algo.stop()
