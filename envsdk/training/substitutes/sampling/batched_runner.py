"""``sampler: batched``: RLlib's single-agent env runner with a sampling loop that works on whole batches.

RLlib's ``SingleAgentEnvRunner`` steps a gymnasium vector env, but between two steps it splits
every batch into per-env items: the env-to-module and module-to-env connector pipelines run piece
by piece over each item, and each sub-env's episode takes its step as Python objects
(``add_env_step``), to be stacked into arrays again at the end.  ``benchmarks/sampling.py``
measures what that bookkeeping costs against the env's own stepping.

:class:`BatchedEnvRunner` keeps RLlib's runner (its env, module, connectors, state, checkpoints,
metrics and fault handling) and replaces only the loop of ``_sample``, where the connector
pipelines are RLlib's defaults:

* one torch tensor of the vector env's observations, one forward pass, and RLlib's own
  ``GetActions`` piece of the pipeline (so the env-fault guard's check of its inputs runs), with
  actions unsquashed or clipped for the env on the whole batch;
* each step's arrays kept as they came; at the end of the sample, the steps are stacked once and
  each episode chunk is filled from slices of them;
* episode callbacks (``on_episode_created``/``_start``/``_end``) then run in the order RLlib's loop
  calls them, each with its episode.  That is later than RLlib calls them, so a callback that
  reads the env while its episode runs would see a later state: the build
  (:func:`why_not_batched`) falls back to RLlib's loop for callbacks that are not ours.

The episodes it returns equal RLlib's, step for step, with the same seeds
(tests/training/substitutes/test_sampling.py, over every space kind).  It falls back to RLlib's
loop, with a notice, for what it does not cover: other connector pieces (``observation_filter:
MeanStdFilter``, a user's connector), recurrent modules, episode callbacks of the user's, and
multi-agent envs (their own runner).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import tree
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.connectors.env_to_module import (
    AddObservationsFromEpisodesToBatch,
    AddStatesFromEpisodesToBatch,
    AddTimeDimToBatchAndZeroPad,
    BatchIndividualItems,
    NumpyToTensor,
)
from ray.rllib.connectors.module_to_env import (
    GetActions,
    ListifyDataForVectorEnv,
    NormalizeAndClipActions,
    RemoveSingleTsTimeRankFromBatch,
    TensorToNumpy,
    UnBatchToIndividualItems,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical, TorchDiagGaussian
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer
from ray.rllib.utils.metrics import RLMODULE_INFERENCE_TIMER, WEIGHTS_SEQ_NO
from ray.rllib.utils.numpy import convert_to_numpy
from ray.rllib.utils.spaces.space_utils import batch, clip_action, get_base_struct_from_space, unsquash_action
from ray.rllib.utils.torch_utils import convert_to_torch_tensor

from envsdk import internals
from envsdk.errors import RunFault
from envsdk.training.hooks import faults
from envsdk.training.hooks.callbacks import READS_THE_EPISODE_ONLY, hook_list
from envsdk.training.hooks.observation_filter import is_mean_std_filter
from envsdk.training.substitutes.sampling.policy_pass import PolicyPass, policy_pass

logger = logging.getLogger(__name__)

SAMPLERS = ("batched", "rllib")
ENV_TO_MODULE = (
    AddObservationsFromEpisodesToBatch,
    AddTimeDimToBatchAndZeroPad,
    AddStatesFromEpisodesToBatch,
    BatchIndividualItems,
    NumpyToTensor,
)
MODULE_TO_ENV = (
    GetActions,
    TensorToNumpy,
    UnBatchToIndividualItems,
    RemoveSingleTsTimeRankFromBatch,
    NormalizeAndClipActions,
    ListifyDataForVectorEnv,
)
EPISODE_EVENTS = ("on_episode_created", "on_episode_start", "on_episode_step", "on_episode_end")


def why_not_batched(config: Any) -> str | None:
    """Why a config's single-agent runners sample with RLlib's loop (None: the batched one can).

    What only the built runner knows (a recurrent module, a connector piece RLlib adds for a
    model) :meth:`BatchedEnvRunner.why_not` checks again there.
    """
    if config.is_multi_agent:
        return "multi-agent envs sample with RLlib's MultiAgentEnvRunner"
    return why_not_our_loop(config)


def why_not_our_loop(config: Any, takes_filter: bool = False) -> str | None:
    """What keeps a config on RLlib's own sampling loop, single- or multi-agent alike (None: nothing):
    recording whole episodes, a connector piece (``takes_filter``: but ``observation_filter:
    MeanStdFilter``'s, which the loop applies itself), a recurrent model, a user's episode callbacks."""
    if config.output and config.output_write_episodes:
        return (
            "output: records whole episodes, which RLlib's recorder packs before they become numpy"
            " (output_write_episodes: false records transitions on the batched loop)"
        )
    for side, made in zip(
        internals.CONNECTOR_DIRS,
        (internals.env_to_module_connector(config), internals.module_to_env_connector(config)),
        strict=True,
    ):
        ours = takes_filter and is_mean_std_filter(made) and not made.keywords.get("evaluation")
        if made is not None and not ours:
            return f"an {side} is set (observation_filter: MeanStdFilter, or one of yours)"
    model = config.model_config if isinstance(config.model_config, dict) else {}
    if model.get("use_lstm") or model.get("use_attention"):
        return "recurrent models need RLlib's loop"
    for event in EPISODE_EVENTS:
        theirs = [h for h in hook_list(getattr(config, f"callbacks_{event}")) if not _ours(h)]
        if theirs:
            return f"{event} callback {_name(theirs[0])} may read the env while the episode runs"
    for cls in hook_list(config.callbacks_class):
        if not isinstance(cls, type):  # a factory of callbacks objects: what they do is not known here
            return f"callbacks_class {_name(cls)} is not a class"
        for event in EPISODE_EVENTS:
            if getattr(cls, event) is not getattr(RLlibCallback, event):
                return f"callbacks class {cls.__name__} has {event}"
    return None


def resets_at_next_step(env: Any, unsaid: bool) -> bool:
    """Whether a vector env resets a sub-env at the step after its episode ended (gymnasium's
    ``AutoresetMode.NEXT_STEP``, RLlib's multi-agent ``"next_step"``), as RLlib 2.60's env runners read
    every vector env; ``unsaid``: the answer for an env whose metadata names no mode."""
    mode = getattr(env, "metadata", {}).get("autoreset_mode")
    if mode is None:
        return unsaid
    return str(getattr(mode, "value", mode)).lower().replace("_", "") == "nextstep"


def why_not_next_step(env: Any) -> str | None:
    """Why a loop that reads every vector env as resetting at the next step cannot sample ``env``
    (None: it can, or the env names no mode)."""
    if resets_at_next_step(env, unsaid=True):
        return None
    mode = env.metadata["autoreset_mode"]
    return f"the vector env resets its sub-envs in mode {mode}, not at the next step"


def default_pieces(pieces: list[Any], wanted: tuple[type, ...]) -> bool:
    """Exactly RLlib's default pieces; GetActions may be the env-fault guard's, which checks first."""
    return len(pieces) == len(wanted) and all(
        type(p) is w or (w is GetActions and type(p) is faults.GetActions)
        for p, w in zip(pieces, wanted, strict=True)
    )


def _ours(hook: Any) -> bool:
    return bool(getattr(getattr(hook, "func", hook), READS_THE_EPISODE_ONLY, False))


def _name(hook: Any) -> str:
    hook = getattr(hook, "func", hook)
    return f"{getattr(hook, '__module__', '?')}.{getattr(hook, '__qualname__', type(hook).__name__)}"


HALF_LOG_TWO_PI = 0.5 * math.log(2 * math.pi)


def _categorical(logits: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """An action and its log-probability per row of logits, as TorchCategorical samples them
    (int32 and float32, as RLlib's TensorToNumpy leaves them), in numpy, without building
    torch.distributions objects at every step.  An action of probability 0 (a masked one) is never
    drawn: the uniform number scaled by the row's total stays below its last cumulative step."""
    z = logits - logits.max(axis=-1, keepdims=True)
    cdf = np.exp(z).cumsum(axis=-1)
    total = cdf[..., -1:]
    actions = (cdf <= rng.random(total.shape) * total).sum(axis=-1, dtype=np.int32)
    flat = z.reshape(-1, z.shape[-1])
    chosen = flat[np.arange(len(flat)), actions.reshape(-1)].reshape(actions.shape) - np.log(total[..., 0])
    return actions, chosen.astype(np.float32, copy=False)


def _diag_gaussian(inputs: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """An action and its log-density per row of [means, log stds], as TorchDiagGaussian samples
    them, in numpy (float32)."""
    loc, log_std = np.split(inputs.astype(np.float32), 2, axis=-1)
    scale = np.exp(log_std)
    actions = loc + scale * rng.standard_normal(loc.shape, dtype=np.float32)
    logp = -((actions - loc) ** 2) / (2 * scale**2) - log_std - np.float32(HALF_LOG_TWO_PI)
    return actions, logp.sum(axis=-1, dtype=np.float32)


# Env steps that may fail in one sample() call, each failed env made again, before the sample ends the
# run (check_failed_steps).
FAILED_STEPS_PER_SAMPLE = 100


class EnvKeepsFailing(RunFault):
    """A sample's env steps failed more often than :data:`FAILED_STEPS_PER_SAMPLE`."""


def check_failed_steps(state: Any) -> None:
    """End the run where this sample's env steps failed more than :data:`FAILED_STEPS_PER_SAMPLE`
    times.  With ``restart_failed_sub_environments`` RLlib's runners make a failed env again and count
    the sample afresh (RLlib 2.60: ``ts = 0`` in ``SingleAgentEnvRunner._sample``, ``env_ts = 0`` in
    ``MultiAgentEnvRunner._sample``), as both batched loops do: an env that fails more often than a
    sample's length would sample for ever, saying nothing but the logged errors.  A remote runner
    logs the fault too, for the driver's record of runner errors (hooks/restarts.py)."""
    if state.failed_steps <= FAILED_STEPS_PER_SAMPLE:
        return
    last = root = state.last_failure
    while root.__cause__ is not None:  # the env's own error, under the env guard's
        root = root.__cause__
    said = " ".join(str(root).split())  # one line
    fault = EnvKeepsFailing(
        f"the env's step failed {state.failed_steps} times in one sample, made again each time "
        "(restart_failed_sub_environments: true), and a sample counts its steps afresh after a failure, "
        f"so it would never end (its last error: {type(root).__name__}: {said}); fix: fix the env's "
        "step(), or turn restart_failed_sub_environments off to stop at the first failure"
    )
    fault.__cause__ = last
    if getattr(state.runner, "worker_index", 0):
        logger.error("%s", fault, exc_info=fault)
    raise fault


# RLlib's action distributions whose exploring draw the batched loop takes in numpy.
DRAWS = {TorchCategorical: _categorical, TorchDiagGaussian: _diag_gaussian}


def on_cpu(value: Any) -> bool:
    """A tensor numpy can read in place (a GPU module's outputs are drawn by the GetActions piece)."""
    return isinstance(value, torch.Tensor) and value.device.type == "cpu"


REDUCED = (np.dtype(np.float32), np.dtype(np.int32))  # what RLlib's convert_to_numpy leaves as they are


def outputs_to_numpy(out: dict[str, Any]) -> dict[str, Any]:
    """RLlib's ``convert_to_numpy`` (TensorToNumpy) for the usual output, a flat dict of CPU tensors
    and arrays: floats as float32 and signed ints as int32.  Anything else goes through RLlib's."""
    if not all(
        isinstance(v, np.ndarray) or (isinstance(v, torch.Tensor) and v.dim() > 0 and not v.is_cuda)
        for v in out.values()
    ):
        return dict(convert_to_numpy(out))
    converted = {}
    for key, value in out.items():
        array = value if isinstance(value, np.ndarray) else value.detach().numpy()
        if array.dtype not in REDUCED:
            if np.issubdtype(array.dtype, np.floating):
                array = array.astype(np.float32)
            elif np.issubdtype(array.dtype, int):
                array = array.astype(np.int32)
        converted[key] = array
    return converted


def obs_to_tensor(obs: Any, device: Any) -> Any:
    """RLlib's ``convert_to_torch_tensor`` (NumpyToTensor): one array as a float32 (or integer)
    tensor without a copy, anything else through RLlib's own function."""
    if isinstance(obs, np.ndarray) and obs.dtype != object and device.type == "cpu" and obs.flags.writeable:
        tensor = torch.from_numpy(obs)
        return tensor.float() if tensor.is_floating_point() and tensor.dtype != torch.float16 else tensor
    return convert_to_torch_tensor(obs, device=device)


def actions_for_env(normalize_and_clip: Any, action_space: gym.Space) -> Callable[[Any], Any]:
    """RLlib's NormalizeAndClipActions piece on a whole batch of ``action_space``'s actions: Box
    parts unsquashed (``normalize_actions``) or clipped (``clip_actions``), the rest as they are."""
    struct = get_base_struct_from_space(action_space)
    has_box = any(isinstance(s, gym.spaces.Box) for s in tree.flatten(struct))
    if has_box and normalize_and_clip.normalize_actions:
        return lambda actions: unsquash_action(actions, struct)
    if has_box and normalize_and_clip.clip_actions:
        return lambda actions: clip_action(actions, struct)
    return lambda actions: actions


class _Steps:
    """One ``sample()`` call's vector steps as the env returned them (no per-env split), and the
    module's outputs for each."""

    def __init__(self, resets: np.ndarray) -> None:
        self.next_resets = resets  # sub-envs whose next step is a reset (its first observation)
        self.obs: list[Any] = []
        self.actions: list[Any] = []
        self.rewards: list[np.ndarray] = []  # gymnasium vector envs return arrays
        self.terminated: list[np.ndarray] = []
        self.truncated: list[np.ndarray] = []
        self.infos: list[list[dict]] = []
        self.extra: list[dict[str, Any]] = []
        self.resets: list[np.ndarray] = []
        self.ends: list[np.ndarray] = []  # sub-envs whose episode ended at the step (resets aside)
        self.times: list[float] = []
        self.env_steps = 0  # resets aside, as RLlib counts
        self.forward_s = self.step_s = 0.0
        self.ended = 0
        self.failed = False

    def add(self, obs: Any, actions: Any, results: tuple, extra: dict[str, Any]) -> None:
        _, rewards, terminated, truncated, infos = results
        resets = self.next_resets
        self.obs.append(obs)
        self.actions.append(actions)
        self.rewards.append(rewards)
        self.terminated.append(terminated)
        self.truncated.append(truncated)
        self.infos.append(infos)
        self.extra.append(extra)
        self.resets.append(resets)
        self.times.append(time.perf_counter())
        self.env_steps += int(len(resets) - resets.sum())
        self.next_resets = (terminated | truncated) & ~resets
        self.ends.append(self.next_resets)
        self.ended += int(self.next_resets.sum())


class _Stacked:
    """A sample's steps stacked once: every array is [step, sub-env, ...]."""

    def __init__(self, steps: _Steps, seq_no: int) -> None:
        self.obs = batch(steps.obs)
        self.actions = batch(steps.actions)
        self.rewards = np.stack(steps.rewards)  # as SyncVectorEnv gives them: float64
        self.terminated = np.stack(steps.terminated).astype(bool, copy=False)
        self.truncated = np.stack(steps.truncated).astype(bool, copy=False)
        self.resets = np.stack(steps.resets)
        self.ends = np.stack(steps.ends)
        self.extra = {k: np.stack([e[k] for e in steps.extra]) for k in steps.extra[0]}
        self.extra[WEIGHTS_SEQ_NO] = np.full(self.rewards.shape, seq_no)
        self.infos = steps.infos
        self.times = steps.times

    def observation(self, step: int, env: int) -> Any:
        return _take(self.obs, (step, env))

    def fill(self, episode: Any, env: int, first: int, end: int) -> None:
        """Add steps ``first``..``end - 1`` of sub-env ``env`` to ``episode``: the data that
        ``add_env_step`` would have added one by one, as finalized (numpy) buffers."""
        part = (slice(first, end), env)
        _extend(episode.observations, _take(self.obs, part))
        _extend(episode.actions, _take(self.actions, part))
        _extend(episode.rewards, self.rewards[part])
        for key, values in self.extra.items():
            if key in episode.extra_model_outputs:
                _extend(episode.extra_model_outputs[key], values[part])
            else:
                episode.extra_model_outputs[key] = InfiniteLookbackBuffer(data=values[part])
        infos = [self.infos[s][env] for s in range(first, end)]
        episode.infos.data.extend(infos)
        episode.t = episode.t_started + len(episode.rewards)
        episode.is_terminated = bool(self.terminated[end - 1, env])
        episode.is_truncated = bool(self.truncated[end - 1, env])
        internals.episode_filled(
            episode, self.observation(end - 1, env), infos[-1], self.times[first], self.times[end - 1]
        )


def _take(data: Any, index: tuple) -> Any:
    """``data[index]``, for one array or each array of a struct (a Dict or Tuple space's)."""
    return data[index] if isinstance(data, np.ndarray) else tree.map_structure(lambda x: x[index], data)


def _extend(buffer: InfiniteLookbackBuffer, new: Any) -> None:
    """Make ``buffer``'s data (lookback included) followed by ``new`` one finalized array (or struct
    of arrays), in place: its lookback and space stay as they are."""
    old = buffer.data if buffer.finalized else batch(list(buffer.data)) if len(buffer.data) else None
    if old is None:
        buffer.data = new
    elif isinstance(new, np.ndarray):
        buffer.data = np.concatenate([old, new])
    else:
        buffer.data = tree.map_structure(lambda a, b: np.concatenate([a, b]), old, new)
    buffer.finalized = True


class BatchedEnvRunner(SingleAgentEnvRunner):
    """RLlib's single-agent env runner whose sampling loop works on whole batches (module docstring)."""

    def __init__(self, *, config: Any, **kwargs: Any) -> None:
        super().__init__(config=config, **kwargs)
        self._why_not: str | None = None
        self._checked = False
        self.draws = dict(DRAWS)  # empty: every action drawn by the GetActions piece, as RLlib's loop does
        self.flat_pass: PolicyPass | None = None  # None: the module's own pass (policy_pass.py)
        seed = config.seed
        self.rng = np.random.default_rng(None if seed is None else [seed, self.worker_index or 0])

    def why_not(self) -> str | None:
        """Why this runner samples with RLlib's loop (None: the batched one), decided once."""
        if not self._checked:
            self._checked = True
            self._why_not = self._find_why_not()
            if self._why_not is not None:
                logger.warning("sampler: RLlib's loop samples this env runner: %s", self._why_not)
            else:
                self.flat_pass = policy_pass(self.module)
        return self._why_not

    def _find_why_not(self) -> str | None:
        if self.module is None:
            return "the runner has no RLModule"
        if self.module.is_stateful():
            return "recurrent models need RLlib's loop"
        for pipeline, wanted in (
            (internals.runner_env_to_module(self), ENV_TO_MODULE),
            (internals.runner_module_to_env(self), MODULE_TO_ENV),
        ):
            pieces = list(getattr(pipeline, "connectors", ()))
            if not default_pieces(pieces, wanted):
                return f"connector pieces {[type(p).__name__ for p in pieces]} are not RLlib's defaults"
        return why_not_next_step(self.env)

    def _sample(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> list[Any]:
        if self.why_not() is not None:
            size = {"num_timesteps": num_timesteps, "num_episodes": num_episodes}
            return super()._sample(
                **size, explore=explore, random_actions=random_actions, force_reset=force_reset
            )
        state = internals.RunnerState(self)
        if force_reset or num_episodes is not None or state.needs_reset:
            state.reset(explore)
        if num_episodes is not None:
            state.reset_at_next_sample()
        done: list[Any] = []
        while True:
            steps = self._run_steps(state, num_timesteps, num_episodes, len(done), explore, random_actions)
            done += self._end_episodes(
                state, steps, None if num_episodes is None else num_episodes - len(done)
            )
            if not steps.failed:
                break
            check_failed_steps(state)
            state.reset(explore)  # a sub-env's step failed and RLlib made the env again: go on afresh
        chunks: list[Any] = []
        if num_timesteps is not None:
            ongoing = state.episodes
            state.episodes = [
                e.cut(len_lookback_buffer=self.config.episode_lookback_horizon) for e in ongoing
            ]
            for episode in ongoing:
                if episode.t > 0:  # else just created: no data yet
                    chunks.append(episode.to_numpy())
        state.finished(done, chunks)
        state.count_sampled(steps.env_steps, len(done))
        state.count_steps(len(steps.times) + steps.failed, steps.step_s)
        if steps.times and not random_actions:
            self.metrics.log_value(RLMODULE_INFERENCE_TIMER, steps.forward_s / len(steps.times), reduce="ema")
        return done + chunks

    def _run_steps(
        self,
        state: internals.RunnerState,
        num_timesteps: int | None,
        num_episodes: int | None,
        ended: int,
        explore: bool,
        random_actions: bool,
    ) -> _Steps:
        """Step the vector env until the sample is complete (or a step failed)."""
        module: Any = self.module
        steps = _Steps(np.array([not e.is_reset for e in state.episodes]))
        runners = self.config.num_env_runners or 1
        lifetime = self.num_env_steps_sampled_lifetime // runners
        forward = self._forward_function(explore, lifetime, runners)
        get_actions = internals.runner_module_to_env(self).connectors[0]
        draw = self.draws.get(module.get_exploration_action_dist_cls()) if explore else None
        episodes = state.episodes  # GetActions reads whether they are multi-agent
        for_env = self._for_env_function()
        device = next(iter(module.parameters()), torch.zeros(0)).device
        no_grad = torch.no_grad()  # one context object for the sample's steps
        was_training = bool(module.training)
        module.eval()
        try:
            while (
                steps.env_steps < num_timesteps
                if num_timesteps is not None
                else ended + steps.ended < int(num_episodes or 0)
            ):
                to_module = state.take_module_input()
                if random_actions:
                    out: dict[str, Any] = {}
                    actions, env_actions = self._random_actions()
                else:
                    began = time.perf_counter()
                    with no_grad:
                        out = forward(to_module, steps.env_steps)
                    steps.forward_s += time.perf_counter() - began
                    inputs: Any = out.get(Columns.ACTION_DIST_INPUTS)
                    array = (
                        inputs.numpy()
                        if draw is not None and Columns.ACTIONS not in out and on_cpu(inputs)
                        else None
                    )
                    if draw is not None and array is not None and np.isfinite(array).all():
                        out[Columns.ACTION_DIST_INPUTS] = array
                        out[Columns.ACTIONS], out[Columns.ACTION_LOGP] = draw(array, self.rng)
                    else:  # the piece samples, or raises on NaN inputs (the env-fault guard's error)
                        out = get_actions(rl_module=module, batch=out, episodes=episodes, explore=explore)
                    out = outputs_to_numpy(out)
                    actions = out.pop(Columns.ACTIONS)
                    out.pop(Columns.ACTIONS_FOR_ENV, None)
                    env_actions = for_env(actions)
                began = time.perf_counter()
                results = state.step(env_actions)
                steps.step_s += time.perf_counter() - began
                if results is None:
                    steps.failed = True
                    break
                steps.add(results[0], actions, results, out)
                state.keep_module_input({Columns.OBS: obs_to_tensor(results[0], device)})
        finally:
            if was_training:
                module.train()
        return steps

    def _forward_function(self, explore: bool, lifetime: int, runners: int) -> Callable[[Any, int], Any]:
        """The module's exploration or inference pass, as a function of the module input and the
        sample's env steps so far: the row of torch calls of :mod:`policy_pass` where the module
        allows it (checked against the module's own pass at its first call), else the module's."""
        module: Any = self.module
        own = internals.module_forward(module, explore)

        def module_pass(batch: Any, env_steps: int) -> Any:
            return own(batch, t=(lifetime + env_steps) * runners) if explore else own(batch)

        fast = self.flat_pass
        if fast is None:
            return module_pass
        bound = fast.bind()

        def fast_pass(batch: Any, env_steps: int) -> Any:
            if self.flat_pass is not fast or len(batch) != 1 or Columns.OBS not in batch:
                return module_pass(batch, env_steps)
            out = bound(batch[Columns.OBS])
            if not fast.checked and not fast.same_as_module(batch, out, explore):
                self.flat_pass = None  # for good: this sample's next steps too
                return module_pass(batch, env_steps)
            return {Columns.ACTION_DIST_INPUTS: out}

        return fast_pass

    def _for_env_function(self) -> Callable[[Any], Any]:
        env: Any = self.env
        return actions_for_env(self._normalize_and_clip(), env.single_action_space)

    def _normalize_and_clip(self) -> Any:
        return internals.runner_module_to_env(self).connectors[MODULE_TO_ENV.index(NormalizeAndClipActions)]

    def _random_actions(self) -> tuple[Any, Any]:
        """The vector env's own uniform draw, as RLlib's loop takes it, as (what the batch stores,
        what the env gets): where the runner unsquashes Box actions (``normalize_actions``), each
        bounded float Box part is stored normalized into [-1, 1], the space the policy's own
        actions are stored in.  RLlib's loop stores the env's draw as it is, which the policy's
        space reads as actions beyond its bounds (Pendulum's 2.0 as twice the largest)."""
        env: Any = self.env
        drawn = env.action_space.sample()
        if not self._normalize_and_clip().normalize_actions:
            return drawn, drawn
        struct = get_base_struct_from_space(env.single_action_space)

        def normalized(action: Any, space: gym.Space) -> Any:
            if (
                not isinstance(space, gym.spaces.Box)
                or space.dtype not in (np.float32, np.float64)
                or not (np.all(space.bounded_below) and np.all(space.bounded_above))
                or (np.all(space.low == -1.0) and np.all(space.high == 1.0))
            ):
                return action  # what unsquash_action leaves as it is
            return ((action - space.low) * 2.0 / (space.high - space.low) - 1.0).astype(space.dtype)

        return tree.map_structure(normalized, drawn, struct), drawn

    def _end_episodes(self, state: internals.RunnerState, steps: _Steps, wanted: int | None) -> list[Any]:
        """Fill the sample's steps into their episodes, calling the episode callbacks in the order
        RLlib's loop calls them; the episodes that ended (at most ``wanted``), as numpy."""
        if not steps.times:
            return []
        stacked = _Stacked(steps, state.weights_seq_no)
        first = [0] * self.num_envs  # each sub-env's first step not in an episode yet
        done: list[Any] = []
        for s, i in zip(*np.nonzero(stacked.resets | stacked.ends), strict=True):
            episode = state.episodes[i]
            if stacked.resets[s, i]:
                episode.add_env_reset(observation=stacked.observation(s, i), infos=stacked.infos[s][i])
                internals.episode_started(episode, stacked.times[s])
                state.episode_callback("on_episode_start", i)
                first[i] = s + 1
                continue
            stacked.fill(episode, i, first[i], s + 1)
            state.episode_callback("on_episode_end", i)
            done.append(episode.to_numpy())
            state.new_episode(i)
            if wanted is not None and len(done) >= wanted:
                return done
        if wanted is None:
            for i, episode in enumerate(state.episodes):
                if episode.is_reset and first[i] < len(steps.times):
                    stacked.fill(episode, i, first[i], len(steps.times))
        return done
