"""Every use of a private Ray, RLlib, Tune or CPython API, in one place.

Each entry says why it is needed.  ``tests/test_internals.py`` checks each
assumption on the installed versions, so an upgrade that breaks one fails
there by name, not somewhere inside a training run.  The versions these were
checked against are pinned in ``pyproject.toml`` (``ray[rllib,tune]``,
``torch``); to try a newer Ray, change the pin and run
``pytest tests/test_internals.py`` first (docs/development.md: "Trying a newer Ray").

Private *methods* that our classes override live with those classes; their
names are listed in :data:`OVERRIDDEN` so that the test checks them too.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import inspect
import os
import signal
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RAY_VERSION = "2.60.0"  # what the assumptions below were checked against

# ---- CPython ------------------------------------------------------------------------------------


def run_exit_hooks() -> None:
    """Run the ``atexit`` hooks now: :func:`envsdk.errors.exit_now` then skips the interpreter's
    teardown (a second, after RLlib and torch are loaded) with ``os._exit``."""
    atexit._run_exitfuncs()


# ---- Ray core -----------------------------------------------------------------------------------


# The algorithms that, with no remote env runners or learners, make no Ray call in training,
# checkpointing or restoring other than those ``ray.put`` calls.  IMPALA and APPO are not among them:
# they start aggregator actors even then.  Checked per algorithm in tests/test_internals.py.
RAY_FREE_ALGORITHMS = (
    "ray.rllib.algorithms.ppo.ppo:PPO",
    "ray.rllib.algorithms.dqn.dqn:DQN",
    "ray.rllib.algorithms.sac.sac:SAC",
    "envsdk.training.off_policy:DQN",  # RLlib's, with transition replay
    "envsdk.training.off_policy:SAC",
)


def trains_without_ray(algo_class: type) -> bool:
    """Whether ``algo_class`` (exactly: not a subclass, whose code we do not know) is one of those."""
    return f"{algo_class.__module__}:{algo_class.__qualname__}" in RAY_FREE_ALGORITHMS


@contextlib.contextmanager
def without_object_store() -> Iterator[None]:
    """Train an Algorithm whose env runners and learners all live in this process, with no Ray running.

    RLlib's ``EnvRunnerGroup`` puts its config (when built) and the weights
    (at every ``sync_weights``) into Ray's object store for remote env runners
    to fetch, even when there are none; the first such ``ray.put`` would
    start a whole local Ray (GCS, raylet, agents: most of a short run's
    start and shut-down; benchmarks/phases.py).  Inside this block, while Ray is not
    running, ``ray.put`` hands the value back as is.  Nothing resolves it:
    a run trained this way has no remote env runner.  Any other Ray call
    starts Ray as usual, and from then on ``ray.put`` is Ray's own again.
    """
    import ray

    original = ray.put

    def put(value: Any, **kwargs: Any) -> Any:
        return original(value, **kwargs) if ray.is_initialized() else value

    ray.put = put
    try:
        yield
    finally:
        ray.put = original


# Loggers whose warnings are about RLlib's own API (stack banners, deprecations), not the user's run.
RLLIB_API_LOGGERS = ("ray.rllib", "ray._common.deprecation")

# ---- RLlib --------------------------------------------------------------------------------------


def is_deprecated_default(value: Any) -> bool:
    """Whether a config default is RLlib's marker for a setting it no longer reads."""
    from ray._common.deprecation import DEPRECATED_VALUE

    return bool(value == DEPRECATED_VALUE)


def env_to_module_connector(config: Any) -> Any:
    """The ``env_to_module_connector`` a config was given (AlgorithmConfig keeps it privately).

    rollout.py swaps the observation filter's for its frozen, raw-keeping form.
    """
    return config._env_to_module_connector


def module_is_stateful(algo: Any) -> bool:
    """Whether an Algorithm's module is recurrent (kept privately by DQN and SAC's setup), which
    rules out transition replay (envsdk.training.off_policy)."""
    return bool(getattr(algo, "_module_is_stateful", False))


def sample_episodes_with_metrics(worker_set: Any, sample_timeout_s: float | None) -> tuple[Any, Any]:
    """RLlib's ``synchronous_parallel_sample`` as DQN's and SAC's training steps call it: episodes
    from the new env runners, with their metrics (both through private arguments)."""
    from ray.rllib.execution.rollout_ops import synchronous_parallel_sample

    sampled: Any = synchronous_parallel_sample(
        worker_set=worker_set,
        concat=True,
        sample_timeout_s=sample_timeout_s,
        _uses_new_env_runners=True,
        _return_metrics=True,
    )
    return sampled[0], sampled[1]


def catalog_model_config(catalog: Any) -> dict[str, Any]:
    """A Catalog's model config dict (kept privately), read by our SAC catalog's Q encoder."""
    return dict(catalog._model_config_dict)


def sub_env_observations(vector_env: Any) -> list[Any] | None:
    """gymnasium's SyncVectorEnv's per-sub-env observations before it stacks them (kept privately;
    None for other vector envs): the env guard finds which sub-env's observation could not stack."""
    parts = getattr(vector_env, "_env_obs", None)
    return list(parts) if parts is not None else None


def registered_env_creator(name: str) -> Any:
    """The creator Tune's registry holds for an env name (read only by tests)."""
    from ray.tune.registry import ENV_CREATOR, _global_registry

    return _global_registry.get(ENV_CREATOR, name)


def registered_model(name: str) -> Any:
    """The class ``ModelCatalog.register_custom_model(name, cls)`` registered, else None (Ray 1.x
    docs wire a custom ModelV2 that way, often in the env's module)."""
    from ray.tune.registry import RLLIB_MODEL, _global_registry

    if not _global_registry.contains(RLLIB_MODEL, name):
        return None
    return _global_registry.get(RLLIB_MODEL, name)


def time_limit_steps(wrapper: Any) -> int:
    """The limit of a gymnasium ``TimeLimit`` (its spec has none where the env it wraps has no spec)."""
    return int(wrapper._max_episode_steps)


def ray_temp_dir(path: str | None) -> dict[str, Any]:
    """``ray.init``'s keyword for a local Ray's temp folder (a private argument)."""
    return {"_temp_dir": path}


def local_learner(learner_group: Any) -> Any:
    """A local LearnerGroup's Learner (kept privately); tests and benchmarks read its module."""
    return learner_group._learner


def learner_batch(learner: Any, batch: Any) -> Any:
    """A MultiAgentBatch in a Learner's tensors, as its update converts it (a private method)."""
    return learner._convert_batch_type(batch)


# Imported on first use during training: torch._dynamo by the first torch optimizer (seconds),
# tensorboardX by the result log, matplotlib by the reward plot.  train.py imports them while Ray
# starts its processes (the main thread mostly waits then); tests import torch._dynamo first
# (torch's lazy import of it can find torch.ops.prims half-registered once other modules are in).
PRELOAD = ("torch._dynamo", "tensorboardX", "matplotlib.figure", "matplotlib.backends.backend_agg")


def runner_module_to_env(env_runner: Any) -> Any:
    """An EnvRunner's module-to-env connector pipeline (kept privately; None before it is built),
    where the action-input check (envsdk.training.guards) goes in front of RLlib's GetActions."""
    return getattr(env_runner, "_module_to_env", None)


def runner_env_to_module(env_runner: Any) -> Any:
    """An EnvRunner's env-to-module connector pipeline (kept privately; None before it is built)."""
    return getattr(env_runner, "_env_to_module", None)


def module_to_env_connector(config: Any) -> Any:
    """The ``module_to_env_connector`` a config was given (AlgorithmConfig keeps it privately)."""
    return config._module_to_env_connector


def runner_env(env_runner: Any) -> Any:
    """The env an EnvRunner samples from.  The env guard (envsdk.envs.guard) replaces its
    ``reset``/``step``/``close`` on the instance: RLlib's runners call them as ``self.env.step``."""
    return env_runner.env


def learner_connector_setting(config: Any) -> Any:
    """The ``learner_connector`` a config was given (None: RLlib's default pipeline alone).

    DQN and SAC replay transitions only where the learner would see RLlib's default columns.
    """
    return config._learner_connector


def learner_connector(learner: Any) -> Any:
    """A Learner's connector pipeline (kept privately), to read what ``normalize_rewards`` learned."""
    return learner._learner_connector


def sac_losses(learner: Any) -> dict[tuple[str, str], Any]:
    """The losses RLlib's SAC learner keeps between ``compute_loss_for_module`` and ``compute_gradients``.

    Keys are ``(module_id, optimizer_name + "_loss")``; ``compute_gradients`` pops each one and
    asserts the dict is empty at its end.  training/sac_learner.py sums them for one backward pass.
    """
    losses: dict[tuple[str, str], Any] = learner._temp_losses
    return losses


def learner_params(learner: Any) -> dict[Any, Any]:
    """A Learner's parameter dict (param ref -> tensor), the one ``filter_param_dict_for_optimizer``
    takes and ``compute_gradients`` builds its gradient dict from."""
    params: dict[Any, Any] = learner._params
    return params


def update_without_reduce(learner_group: Any, **kwargs: Any) -> None:
    """One ``LearnerGroup.update`` whose metrics the local learner keeps for the next update to reduce.

    ``Learner.update(_no_metrics_reduce=True)`` logs as usual and skips the ``metrics.reduce()``
    that costs a share of every SAC update (benchmarks/replay.py); the next plain update reduces both
    (sums add up, window-1 values keep the last).  Local learner groups only: remote learners'
    sharding does not take the flag.
    """
    assert learner_group.is_local, "update_without_reduce needs a local learner group"
    learner_group.update(_no_metrics_reduce=True, **kwargs)


def _string_keys(tree_: Any) -> Any:
    if not isinstance(tree_, dict):
        return tree_
    return {k if isinstance(k, str) else str(k): _string_keys(v) for k, v in tree_.items()}


def replay_metrics_with_string_agent_ids(buffer: Any) -> None:
    """Make ``buffer.get_metrics()`` key its per-agent metrics by ``str(agent_id)``, as env runners do.

    RLlib 2.60's multi-agent episode buffers log their per-agent counts under the env's agent ids
    as they are, and ``training_step`` adds them to the Algorithm's ``MetricsLogger``, whose
    ``get_state`` joins key paths with ``"--"``: with integer agent ids (0, 1, ...) the first
    checkpoint fails (``TypeError: sequence item 2: expected str instance, int found``).
    Only RLlib's own replay path (a recurrent module, a learner connector of the user's) has them.
    """
    reduce = buffer.get_metrics
    buffer.get_metrics = lambda: _string_keys(reduce())


# RLlib's checkpoint layout (Checkpointable.save_to_path; tests/test_internals.py reads checkpoints
# that RLlib wrote).  Each component is a folder with class_and_ctor_args.pkl ({"class": ...,
# "ctor_args_and_kwargs": ...}) and state.pkl (its get_state()); the env runner's env-to-module
# connector pieces too.
CHECKPOINT_MARKER = "rllib_checkpoint.json"
ENV_RUNNER_DIR = "env_runner"
MODULE_DIR = Path("learner_group") / "learner" / "rl_module"  # a folder per module id
MODULE_STATE_FILE = "module_state.pkl"
ALGORITHM_STATE_FILE = "algorithm_state.pkl"  # the old API stack's whole state, config included
CONNECTOR_DIRS = ("env_to_module_connector", "module_to_env_connector")
ENV_TO_MODULE_PIECES = (ENV_RUNNER_DIR, CONNECTOR_DIRS[0])
PIECE_CLASS_FILE = "class_and_ctor_args.pkl"
PIECE_STATE_FILE = "state.pkl"
# What a SingleAgentEpisode's state keeps of the wall clock (differs from run to run).
EPISODE_CLOCKS = ("_start_time", "_last_step_time")
# AlgorithmConfig.to_dict() (and so Tune's params.json) keeps model_config under its private field.
MODEL_CONFIG_FIELD = "_model_config"


def per_learner_batch_unset(defaults: dict[str, Any]) -> bool:
    """Whether an algorithm's default config leaves ``train_batch_size_per_learner`` to be derived
    from ``train_batch_size`` (RLlib keeps the set value in a private field of the same name)."""
    return defaults.get("_train_batch_size_per_learner") is None


def connector_pieces(checkpoint: Path) -> list[Path]:
    """The folders of a checkpoint's env-to-module connector pieces, in pipeline order."""
    return sorted(p.parent for p in checkpoint.joinpath(*ENV_TO_MODULE_PIECES).glob(f"*/{PIECE_CLASS_FILE}"))


class RunnerState:
    """The private state of RLlib's ``SingleAgentEnvRunner`` that a replacement of its ``_sample``
    loop (envsdk.training.batched_runner) reads and writes, named for what the loop does with it.

    Each member is one attribute or method of ray/rllib/env/single_agent_env_runner.py (or
    env_runner.py) on 2.60, used as RLlib's own loop uses it; tests/test_internals.py checks them.
    """

    def __init__(self, runner: Any) -> None:
        self.runner = runner

    @property
    def episodes(self) -> list[Any]:
        """The ongoing episode (chunk) of each sub-env."""
        return list(self.runner._ongoing_episodes)

    @episodes.setter
    def episodes(self, episodes: list[Any]) -> None:
        self.runner._ongoing_episodes = episodes

    @property
    def needs_reset(self) -> bool:
        return bool(self.runner._needs_initial_reset)

    def reset_at_next_sample(self) -> None:
        self.runner._needs_initial_reset = True

    def reset(self, explore: bool) -> None:
        """Reset every sub-env, start new episodes (``on_episode_created``/``_start``), and compute
        the module's input for the first step."""
        self.runner._reset_envs_and_episodes(explore)

    def take_module_input(self) -> Any:
        """The module's input for the next step (the env-to-module output the last step left)."""
        batch, self.runner._cached_to_module = self.runner._cached_to_module, None
        return batch

    def keep_module_input(self, batch: Any) -> None:
        self.runner._cached_to_module = batch

    def step(self, actions: Any) -> Any:
        """``env.step`` as RLlib's ``_try_env_step`` takes it, less its per-step timer and counter
        (:meth:`count_steps` logs them once per sample): on an error, the env is made again and
        None returned with ``restart_failed_sub_environments``, else RuntimeError from the error."""
        try:
            return self.runner.env.step(actions)
        except Exception as error:
            return self._step_failed(error)

    def _step_failed(self, error: Exception) -> None:
        import logging

        from ray.rllib.env.env_errors import StepFailedRecreateEnvError
        from ray.rllib.env.env_runner import NUM_ENV_STEP_FAILURES_LIFETIME

        runner, log = self.runner, logging.getLogger("ray.rllib.env.env_runner")
        runner.metrics.log_value(NUM_ENV_STEP_FAILURES_LIFETIME, 1, reduce="lifetime_sum")
        if not runner.config.restart_failed_sub_environments:
            log.exception(
                "RLlib %s: Environment step failed and 'config.restart_failed_sub_environments' is False. "
                "This env will not be recreated. The original error type: %s. %s",
                type(runner).__name__,
                type(error),
                error,
            )
            raise RuntimeError from error
        if not isinstance(error, StepFailedRecreateEnvError):
            log.exception(
                "RLlib %s: Environment step failed. Will force reset env(s) in this EnvRunner. "
                "The original error is: %s",
                type(runner).__name__,
                error,
            )
        runner.make_env()
        return None

    def count_steps(self, calls: int, seconds: float) -> None:
        """What ``_try_env_step`` logs at each call, for ``calls`` calls that took ``seconds``."""
        from ray.rllib.utils.metrics import ENV_STEP_TIMER

        if calls:
            self.runner.metrics.log_value(ENV_STEP_TIMER, seconds / calls, reduce="ema")
            self.runner._log_env_steps(metric=self.runner._metrics_num_try_env_step, num_steps=calls)

    @property
    def weights_seq_no(self) -> int:
        return int(self.runner._weights_seq_no)

    def new_episode(self, index: int) -> None:
        """A new, empty episode for sub-env ``index`` (``on_episode_created``)."""
        episodes = self.runner._ongoing_episodes
        self.runner._new_episode(index, episodes)

    def episode_callback(self, which: str, index: int) -> None:
        """``on_episode_start``/``_end`` for sub-env ``index``'s ongoing episode."""
        self.runner._make_on_episode_callback(which, index, self.runner._ongoing_episodes)

    def finished(self, done: list[Any], chunks: list[Any]) -> None:
        """Remember a sample's ended episodes and ongoing chunks for the runner's episode metrics."""
        self.runner._done_episodes_for_metrics.extend(done)
        for chunk in chunks:
            self.runner._ongoing_episodes_for_metrics[chunk.id_].append(chunk)

    def count_sampled(self, steps: int, episodes: int) -> None:
        """The sample's env steps and ended episodes in the runner's metrics and Ray's counter."""
        self.runner._log_env_steps(metric=self.runner._metrics_num_env_steps_sampled, num_steps=steps)
        self.runner._increase_sampled_metrics(steps, episodes)


def episode_started(episode: Any, when: float) -> None:
    """A SingleAgentEpisode's start time (kept privately; ``add_env_reset`` takes the clock's time):
    the batched runner adds the reset observation after the sample, and gives when it came."""
    episode._start_time = when


def episode_filled(episode: Any, observation: Any, infos: dict, first: float, last: float) -> None:
    """What ``add_env_step`` keeps privately besides the data, for an episode filled in one go: the
    last observation and infos, and the clock (``get_duration_s``, RLlib's episode metrics)."""
    episode._last_added_observation = observation
    episode._last_added_infos = infos
    if episode._start_time is None:  # a chunk continued from an earlier sample
        episode._start_time = first
    episode._last_step_time = last


def module_forward(module: Any, explore: bool) -> Any:
    """A TorchRLModule's exploration or inference pass without its eval()/train() switch.

    ``TorchRLModule.forward_exploration`` switches the module to eval mode and back around every
    call, which walks all its submodules twice.  The batched runner puts the module in eval mode
    once per sample instead, and calls the passes inside.
    """
    return module._forward_exploration if explore else module._forward_inference


def keeps_default_passes(module: Any) -> bool:
    """Whether a TorchRLModule's class keeps ``TorchRLModule``'s exploration and inference passes,
    which call ``_forward`` under ``no_grad``; the batched runner's policy pass (policy_pass.py)
    stands in for them only then."""
    from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule

    cls = type(module)
    return (
        cls._forward_exploration is TorchRLModule._forward_exploration
        and cls._forward_inference is TorchRLModule._forward_inference
    )


def convert_done_episodes_once() -> None:
    """Make a repeat ``MultiAgentEpisode.to_numpy()`` on an ended, converted episode a no-op.

    RLlib 2.60's ``MultiAgentEnvRunner._sample`` converts every episode that ended so far in a
    ``sample()`` call again at each env step (the loop sits inside the step loop), so a call's cost
    grows with the square of the episodes it ends: games with short episodes and many agents
    sampled several times slower.  An ended episode takes no more data, and converting one twice
    changes nothing (tests/test_internals.py checks both), so the repeat is skipped.  Idempotent;
    :mod:`envsdk.speedups` installs it (``episodes-converted-once``).
    """
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    original = MultiAgentEpisode.to_numpy
    if getattr(original, "converts_once", False):
        return

    @functools.wraps(original)
    def to_numpy(self: Any) -> Any:
        if self.is_done and all(
            sa.observations.finalized and (sa.rewards.finalized or len(sa) == 0)
            for sa in self.agent_episodes.values()
        ):
            return self  # what a conversion would leave as it is (episodes have __slots__: no flag)
        return original(self)

    to_numpy.converts_once = True  # type: ignore[attr-defined]
    MultiAgentEpisode.to_numpy = to_numpy  # type: ignore[method-assign]


class _FramesOnlyInspect:
    """``inspect`` as ``connector_v2`` uses it, with a ``stack()`` that lists frames and nothing else."""

    def __getattr__(self, name: str) -> Any:
        return getattr(inspect, name)

    @staticmethod
    def stack(context: int = 1) -> list[inspect.FrameInfo]:
        frames = []
        frame: types.FrameType | None = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            frames.append(
                inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name, None, None)
            )
            frame = frame.f_back
        return frames


def connectors_find_their_caller_cheaply() -> None:
    """Let ``ConnectorV2.__init__`` find its caller's frame without reading every frame's source.

    RLlib 2.60's ``ConnectorV2.__init__`` records a subclass's constructor arguments (for
    checkpoints) from ``inspect.stack()[1].frame``.  ``inspect.stack()`` reads the source lines of
    every frame on the stack, to be thrown away, for each connector piece, in every process that
    builds connectors (benchmarks/speedups.py, ``connector-frames``).  The module's ``inspect`` is
    swapped for one whose ``stack()`` gives the same frames, names and line numbers without source
    context; everything else is ``inspect``'s own.  Idempotent; :mod:`envsdk.speedups` installs it.
    """
    from ray.rllib.connectors import connector_v2

    if not isinstance(getattr(connector_v2, "inspect"), _FramesOnlyInspect):  # noqa: B009 (not re-exported)
        setattr(connector_v2, "inspect", _FramesOnlyInspect())  # noqa: B010


def _polyak_in_place(main_net: Any, target_net: Any, tau: float) -> None:
    """RLlib's ``update_target_network`` (``tau * main + (1 - tau) * target``), in place."""
    import torch

    main, target = main_net.state_dict(keep_vars=True), target_net.state_dict(keep_vars=True)
    if main.keys() != target.keys() or not all(t.is_floating_point() for t in target.values()):
        _RLLIB_POLYAK(main_net, target_net, tau)  # what RLlib does with integer buffers: its own way
        return
    with torch.no_grad():
        for name, tensor in target.items():
            tensor.lerp_(main[name], tau)


_RLLIB_POLYAK: Any = None


def polyak_updates_in_place() -> None:
    """Make RLlib's target-network update (DQN, SAC, APPO) blend the weights in place.

    ``ray.rllib.utils.torch_utils.update_target_network`` builds both networks'
    state dicts, a third from them, and loads it back, at every update with
    SAC's default ``tau`` (benchmarks/speedups.py, ``polyak-in-place``).  The
    replacement blends each weight of the target network in place (``lerp_``),
    the same formula.  RLlib looks the function up in that
    module at every call (``ray.rllib.core.learner.utils``), so swapping it
    there reaches every learner.  Idempotent; :mod:`envsdk.speedups` installs it.
    """
    global _RLLIB_POLYAK
    from ray.rllib.utils import torch_utils

    if torch_utils.update_target_network is not _polyak_in_place:
        _RLLIB_POLYAK = torch_utils.update_target_network
        torch_utils.update_target_network = _polyak_in_place


def _fused_on_cpu(optimizer: Any) -> Any:
    """``optimizer`` as a fused Adam where it is torch's default Adam over CPU float weights."""
    import torch

    defaults = optimizer.defaults
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if (
        type(optimizer) is not torch.optim.Adam
        or optimizer.state
        or defaults.get("fused") is not None  # stated by whoever built it: theirs to choose
        or defaults.get("foreach") is not None
        or defaults.get("differentiable")
        or defaults.get("capturable")
        or not params
        or not all(p.device.type == "cpu" and p.dtype in (torch.float32, torch.float64) for p in params)
    ):
        return optimizer
    groups = [{**group, "fused": True, "foreach": None} for group in optimizer.param_groups]
    return torch.optim.Adam(groups, **{**defaults, "fused": True, "foreach": None})


def _builds_defaults(learner_class: type) -> bool:
    """Whether a learner's optimizers come from RLlib's (or envsdk's) own
    ``configure_optimizers_for_module``, not a user's."""
    builder = getattr(learner_class, "configure_optimizers_for_module", None)
    return str(getattr(builder, "__module__", "")).startswith(("ray.rllib.", "envsdk."))


def optimizers_fused_on_cpu() -> None:
    """Let every RLlib learner step torch's fused Adam where it registers a default one on CPU.

    RLlib's learners build ``torch.optim.Adam`` with torch's defaults, which on CPU is the
    per-tensor Python loop, several times slower than the fused kernel for small networks, at
    every minibatch update (benchmarks/speedups.py, ``fused-adam``; SAC registers four).  The
    fused kernel computes the same update (tests/test_internals.py compares them).  An optimizer
    that states ``fused`` or ``foreach``, any other class, and weights on a GPU are left as they
    are, and so are the optimizers of a learner whose ``configure_optimizers_for_module`` is a
    user's.  Wraps ``Learner.register_optimizer``, which every learner's
    ``configure_optimizers_for_module`` calls.  Idempotent; :mod:`envsdk.speedups` installs it.
    """
    from ray.rllib.core.learner.learner import Learner

    original = Learner.register_optimizer
    if getattr(original, "fuses_on_cpu", False):
        return

    @functools.wraps(original)
    def register_optimizer(self: Any, *, optimizer: Any, **kwargs: Any) -> None:
        if self.framework == "torch" and _builds_defaults(type(self)):
            optimizer = _fused_on_cpu(optimizer)
        original(self, optimizer=optimizer, **kwargs)

    register_optimizer.fuses_on_cpu = True  # type: ignore[attr-defined]
    Learner.register_optimizer = register_optimizer  # type: ignore[method-assign]


def _all_finite(gradients: list[Any]) -> bool:
    """Whether every element of these tensors is finite, from one sum over them all.

    A nan or an infinity anywhere makes the sum nan or infinite; so does an overflow of finite
    values, which only sends the caller to the slower check, as do gradients on several devices.
    """
    import torch

    if len({g.device for g in gradients}) > 1:
        return False
    return bool(torch.isfinite(torch.stack([g.sum() for g in gradients]).sum()))


def gradients_checked_once() -> None:
    """Let RLlib's torch learners test their gradients for nan/inf once per update.

    RLlib 2.60's ``TorchLearner.apply_gradients`` (``torch_skip_nan_gradients`` off, its
    default) tests every gradient with ``isfinite().all()`` as it sets it, then every
    parameter of every optimizer again before stepping it: two full passes, a temporary tensor
    and a Python bool per tensor, at every minibatch update (SAC: 19 tensors, four optimizers).
    Where one sum over all the gradients is finite, none of those tests can fail: the gradients
    are set and the optimizers stepped as RLlib's method then does.  Anything else (a nan or an
    infinity, a ``None`` gradient, grad scalers, torch lr schedulers, the skip option) runs
    RLlib's own method.  Idempotent; :mod:`envsdk.speedups` installs it.
    """
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner

    original = TorchLearner.apply_gradients
    if getattr(original, "checks_once", False):
        return

    @functools.wraps(original)
    def apply_gradients(self: Any, gradients_dict: Any) -> None:
        grads = list(gradients_dict.values())
        if (
            self.config.torch_skip_nan_gradients  # RLlib's method tests nothing then
            or self._grad_scalers is not None
            or self._lr_scheduler_classes is not None
            or not grads
            or any(g is None for g in grads)
            or not _all_finite(grads)
        ):
            original(self, gradients_dict)
            return
        for pid, grad in gradients_dict.items():
            self._params[pid].grad = grad
        for module_id, optimizer_names in self._module_optimizers.items():
            for optimizer_name in optimizer_names:
                self.get_optimizer(module_id, optimizer_name).step()

    apply_gradients.checks_once = True  # type: ignore[attr-defined]
    TorchLearner.apply_gradients = apply_gradients  # type: ignore[method-assign]


# Private RLlib methods our classes override, and why.
OVERRIDDEN = {
    "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._sample": (
        "training/batched_runner.py: the sampling loop, batched "
        "(num_timesteps, num_episodes, explore, random_actions, force_reset)"
    ),
    "ray.rllib.core.models.catalog:Catalog._get_encoder_config": (
        "default_models/catalogs.py: the one hook of RLlib's Catalogs that chooses the encoder "
        "(observation_space, model_config_dict, action_space)"
    ),
    "ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module:DefaultDQNTorchRLModule._qf_forward_helper": (
        "default_models/masking.py: Q-values of masked actions set to -inf (batch, encoder, head)"
    ),
}

# ---- Tune ---------------------------------------------------------------------------------------


def trial_experiment_dir(algorithm: Any) -> Path | None:
    """The experiment folder of the Tune trial an Algorithm runs in (None outside Tune).

    Tune gives a trainable its storage privately; the SIGTERM checkpoint request is a file there.
    """
    storage = getattr(algorithm, "_storage", None)
    return Path(storage.experiment_fs_path) if storage is not None else None


def release_utilization_monitor(trainable: Any) -> None:
    """Let ``trainable.stop()`` return without joining Tune's utilization monitor thread.

    ``Trainable.__init__`` starts a ``UtilMonitor`` (``log_sys_usage``, on in RLlib's configs): a
    daemon thread that reads CPU and memory every 0.7 s for the ``perf/`` metrics and sleeps in
    between.  ``Trainable.stop`` joins it, which waits out the sleep (most of ``algo.stop()``
    for a trial in this process).  Once no result is wanted, the thread is told to
    stop and the trainable gets a monitor that never started; the daemon thread ends when its sleep
    does, and the process may exit before that.
    """
    from ray.tune.utils.util import UtilMonitor

    monitor = getattr(trainable, "_monitor", None)
    if isinstance(monitor, UtilMonitor):
        monitor.stop()
        trainable._monitor = UtilMonitor(start=False)


def stop_tune_gracefully() -> None:
    """Tune's own graceful stop: ``tune.run``/``Tuner.fit`` treat SIGUSR1 like Ctrl-C, ending the
    trials as unfinished so that ``Tuner.restore`` resumes them."""
    os.kill(os.getpid(), signal.SIGUSR1)


# Tune's logger callbacks (WandbLoggerCallback, MLflowLoggerCallback) take a Tune ``Trial``, of which
# they read only these attributes (and str(trial) as the run's name).  A trial trained in this
# process has no Tune Trial, so it hands them this view of itself.
TRIAL_ATTRIBUTES_READ_BY_LOGGERS = (
    "trial_id",
    "config",
    "experiment_dir_name",
    "local_path",
    "path",
    "checkpoint",
)


class TrialView:
    """What Tune's logger callbacks read of a Trial, for a trial that runs without Tune.

    Hashed by identity, as Trials are: the callbacks key their per-trial state by it.
    """

    def __init__(self, trial_id: str, name: str, config: dict[str, Any], trial_dir: Path) -> None:
        self.trial_id = trial_id
        self.config = config
        self.experiment_dir_name = trial_dir.parent.name
        self.local_path = str(trial_dir)
        self.path = str(trial_dir)  # where Tune copies a trial's files (the same folder here)
        self.checkpoint = None  # wandb uploads checkpoints only when asked; no Tune checkpoint here
        self._name = name

    def __str__(self) -> str:
        return self._name
