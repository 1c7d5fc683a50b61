"""The private state of RLlib's env runner and episodes that the batched sampler reads and writes."""

from __future__ import annotations

from typing import Any


class _EnvRunnerState:
    """What RLlib's single- and multi-agent env runners keep alike (ray/rllib/env/env_runner.py and
    both runners on 2.60): the reset flag, the weights' sequence number, the ongoing episode of each
    sub-env and those kept for the runner's metrics, the reset of every sub-env, the env step with
    its failure handling, and Ray's counters of env steps."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.failed_steps = 0  # this state's env steps that failed (one sample() call's)
        self.last_failure: Exception | None = None  # the error of the last of them

    @property
    def needs_reset(self) -> bool:
        return bool(self.runner._needs_initial_reset)

    @property
    def weights_seq_no(self) -> int:
        return int(self.runner._weights_seq_no)

    def finished(self, done: list[Any], chunks: list[Any]) -> None:
        """Remember a sample's ended episodes and ongoing chunks for the runner's episode metrics
        (``get_metrics`` sums an episode's chunks by id)."""
        self.runner._done_episodes_for_metrics.extend(done)
        for chunk in chunks:
            self.runner._ongoing_episodes_for_metrics[chunk.id_].append(chunk)

    def count_env_steps(self, steps: int) -> None:
        """Ray's counter of env steps sampled (``_log_env_steps``), once per sample."""
        self.runner._log_env_steps(metric=self.runner._metrics_num_env_steps_sampled, num_steps=steps)

    @property
    def episodes(self) -> list[Any]:
        """The ongoing episode (chunk) of each sub-env."""
        return list(self.runner._ongoing_episodes)

    @episodes.setter
    def episodes(self, episodes: list[Any]) -> None:
        self.runner._ongoing_episodes = episodes

    def reset(self, explore: bool) -> None:
        """Reset every sub-env, start new episodes (``on_episode_created``/``_start``), and compute
        the module's input for the first step."""
        self.runner._reset_envs_and_episodes(explore)

    def step(self, actions: Any) -> Any:
        """``env.step`` as RLlib's ``_try_env_step`` takes it, less its per-step timer and counter
        (:meth:`count_steps` logs them once per sample): on an error, the env is made again and
        None returned with ``restart_failed_sub_environments`` (counted in ``failed_steps``),
        else RuntimeError from the error."""
        try:
            return self.runner.env.step(actions)
        except Exception as error:
            return self._step_failed(error)

    def _step_failed(self, error: Exception) -> None:
        import logging

        from ray.rllib.env.env_errors import StepFailedRecreateEnvError
        from ray.rllib.env.env_runner import NUM_ENV_STEP_FAILURES_LIFETIME

        runner, log = self.runner, logging.getLogger("ray.rllib.env.env_runner")
        self.failed_steps += 1
        self.last_failure = error
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

    def new_episode(self, index: int) -> None:
        """A new, empty episode for sub-env ``index`` (``on_episode_created``)."""
        episodes = self.runner._ongoing_episodes
        self.runner._new_episode(index, episodes)

    def episode_callback(self, which: str, index: int) -> None:
        """``on_episode_start``/``_end`` for sub-env ``index``'s ongoing episode."""
        self.runner._make_on_episode_callback(which, index, self.runner._ongoing_episodes)


class RunnerState(_EnvRunnerState):
    """The private state of RLlib's ``SingleAgentEnvRunner`` that a replacement of its ``_sample``
    loop (envsdk.training.substitutes.sampling.batched_runner) reads and writes, named for what the
    loop does with it.

    Each member is one attribute or method of ray/rllib/env/single_agent_env_runner.py (or
    env_runner.py) on 2.60, used as RLlib's own loop uses it; tests/base/test_internals.py checks them.
    """

    def reset_at_next_sample(self) -> None:
        self.runner._needs_initial_reset = True

    def take_module_input(self) -> Any:
        """The module's input for the next step (the env-to-module output the last step left)."""
        batch, self.runner._cached_to_module = self.runner._cached_to_module, None
        return batch

    def keep_module_input(self, batch: Any) -> None:
        self.runner._cached_to_module = batch

    def count_sampled(self, steps: int, episodes: int) -> None:
        """The sample's env steps and ended episodes in the runner's metrics and Ray's counter."""
        self.count_env_steps(steps)
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


def keeps_forward_of(cls: type, base: type) -> bool:
    """Whether an RLModule class keeps ``base``'s ``_forward`` (the pass RLlib's exploration,
    inference and training passes call), not one of its own; policy_pass.py stands in for PPO's."""
    return bool(cls._forward is base._forward)  # type: ignore[attr-defined]


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


class MultiRunnerState(_EnvRunnerState):
    """The private state of RLlib's ``MultiAgentEnvRunner`` that the agents-batched loop
    (envsdk.training.substitutes.sampling.agents_batched) reads and writes.

    Each member is one attribute or method of ray/rllib/env/multi_agent_env_runner.py on 2.60, used as
    RLlib's own loop uses it; tests/base/test_internals.py checks them.
    """

    def started(self) -> None:
        """Every game started afresh by the loop itself: no reset due (``_needs_initial_reset``)."""
        self.runner._needs_initial_reset = False

    def chunks_before(self, episode_id: str) -> list[Any]:
        """The chunks of an episode returned by earlier samples (``prev_episode_chunks``)."""
        return list(self.runner._ongoing_episodes_for_metrics.get(episode_id, ()))

    def forget_ongoing(self) -> None:
        """At a reset of every game, as ``_reset_envs`` does: chunks of episodes that will not end."""
        self.runner._ongoing_episodes_for_metrics.clear()

    @property
    def callback_objects(self) -> list[Any]:
        """The runner's callbacks objects (``callbacks_class``'s, made by the runner)."""
        return list(self.runner._callbacks)

    def prune(self, episode: Any) -> None:
        """Drop the agents of a MultiAgentEpisode (chunk) that have no step in it, as RLlib's loop
        does before it returns an episode (``_prune_zero_len_sa_episodes``)."""
        self.runner._prune_zero_len_sa_episodes(episode)

    def life_callback(self, which: str, episode: Any, env: Any) -> None:
        """``on_episode_*`` for an episode the loop built, with the arguments RLlib's
        ``_make_on_episode_callback`` gives (``prev_episode_chunks`` at its end)."""
        from ray.rllib.callbacks.utils import make_callback

        runner = self.runner
        kwargs = dict(
            episode=episode, env_runner=runner, metrics_logger=runner.metrics, env=env,
            rl_module=runner.module, env_index=0,
        )  # fmt: skip
        if which == "on_episode_end":
            kwargs["prev_episode_chunks"] = self.chunks_before(episode.id_)
        make_callback(
            which,
            callbacks_objects=runner._callbacks,
            callbacks_functions=getattr(runner.config, f"callbacks_{which}"),
            kwargs=kwargs,
        )


def one_agent_episode(agent_episode: Any, episode_id: str, mapping_fn: Any, spaces: tuple[Any, Any]) -> Any:
    """A MultiAgentEpisode holding one agent's finalized SingleAgentEpisode (chunk), with the state
    ``add_env_step`` would have left: the agent acted at every env step of it (env_t = agent t), its
    module, its clock, and whether it ended.  RLlib's learner connectors read ``agent_episodes`` and
    each one's ``module_id``; the runner's metrics read ``len``, ``get_return`` and ``get_duration_s``."""
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
    from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer

    aid = agent_episode.agent_id
    episode = MultiAgentEpisode(
        id_=episode_id,
        observation_space={aid: spaces[0]},  # type: ignore[arg-type]  # a dict, as RLlib's runner passes
        action_space={aid: spaces[1]},  # type: ignore[arg-type]
        agent_to_module_mapping_fn=mapping_fn,
        agent_module_ids={aid: agent_episode.module_id},
        env_t_started=agent_episode.t_started,
    )
    episode.agent_episodes[aid] = agent_episode
    episode.agent_t_started[aid] = agent_episode.t_started
    episode.env_t = agent_episode.t
    episode.env_t_to_agent_t[aid] = InfiniteLookbackBuffer(
        data=list(range(len(agent_episode) + 1)), lookback=0
    )
    episode.is_terminated = agent_episode.is_terminated
    episode.is_truncated = agent_episode.is_truncated
    episode._start_time = agent_episode._start_time
    episode._last_step_time = agent_episode._last_step_time
    return episode
