"""DQN and SAC trained from a :class:`~envsdk.training.substitutes.replay.buffers.TransitionReplayBuffer`.

RLlib 2.60's DQN and SAC (SAC's training step is DQN's) store episodes, sample
one-step episodes and turn them into a batch in the learner's connector
pipeline, which costs several times the update itself on a small machine
(benchmarks/RESULTS.md).  These subclasses keep RLlib's algorithm, config,
learners, losses, env runners and checkpoints, and change one thing, the RLlib
way (an Algorithm's ``training_step`` is its to override): the replay buffer
holds transitions in arrays and hands the learner a batch, which skips the
learner connector.

They take that path only where it gives the learner the same columns RLlib's
path would: no recurrent state, one of RLlib's own episode buffers
(``EpisodeReplayBuffer``, ``PrioritizedEpisodeReplayBuffer`` or their
``MultiAgent`` counterparts, same capacity, ``alpha`` and ``beta``; for
several modules, the ``independent`` replay mode: each module sampled on its
own), and no learner connector of the user's (``learner_connector``, or
``add_default_connectors_to_learner_pipeline: false``).  Anything else trains
exactly as RLlib's DQN and SAC do.  The classes keep RLlib's names, so trial
folders, results and checkpoints read as before.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
from ray.rllib.algorithms.dqn.dqn import DQN as RLlibDQN
from ray.rllib.algorithms.dqn.dqn import calculate_rr_weights
from ray.rllib.algorithms.sac.sac import SAC as RLlibSAC
from ray.rllib.core import ALL_MODULES, DEFAULT_MODULE_ID
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils import force_list
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    REPLAY_BUFFER_ADD_DATA_TIMER,
    REPLAY_BUFFER_RESULTS,
    REPLAY_BUFFER_SAMPLE_TIMER,
    REPLAY_BUFFER_UPDATE_PRIOS_TIMER,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TD_ERROR_KEY,
    TIMERS,
)
from ray.rllib.utils.numpy import convert_to_numpy
from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer
from ray.rllib.utils.replay_buffers.multi_agent_episode_buffer import MultiAgentEpisodeReplayBuffer
from ray.rllib.utils.replay_buffers.multi_agent_prioritized_episode_buffer import (
    MultiAgentPrioritizedEpisodeReplayBuffer,
)
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import PrioritizedEpisodeReplayBuffer

from envsdk import internals
from envsdk.errors import RunFault
from envsdk.training.substitutes.replay.buffers import ModuleTransitions, TrainBatch

# RLlib's buffers whose batches the transition buffers reproduce; True: prioritized.
EPISODE_BUFFERS: dict[type, bool] = {
    EpisodeReplayBuffer: False,
    PrioritizedEpisodeReplayBuffer: True,
    MultiAgentEpisodeReplayBuffer: False,
    MultiAgentPrioritizedEpisodeReplayBuffer: True,
}

REPLAY_BUFFER = "transition_replay_buffer"  # its key in the Algorithm's state (checkpoints)
# learner_config_dict key (YAML: random_steps, training/build/rules.py take_random_steps): the steps
# sampled at random before the policy acts, as SB3's learning_starts and Ray 1.x's random_timesteps.
RANDOM_STEPS = "random_steps"


class RandomStepsUntaken(RunFault):
    """``random_steps`` asked of a config that keeps RLlib's replay, which never acts at random."""


def why_not_transitions(algo: Any) -> str | None:
    """Why ``algo`` must keep RLlib's episode replay (None: the transition buffer fits)."""
    config = algo.config
    if not config.enable_env_runner_and_connector_v2:
        return "the old API stack"
    if internals.module_is_stateful(algo):
        return "a recurrent module"
    if type(algo.local_replay_buffer) not in EPISODE_BUFFERS:
        return f"replay buffer {type(algo.local_replay_buffer).__name__}"
    mode = config.replay_buffer_config.get("replay_mode", "independent")
    if config.is_multi_agent and mode != "independent":
        return f"replay_mode {mode}"
    if (
        internals.learner_connector_setting(config) is not None
        or not config.add_default_connectors_to_learner_pipeline
    ):
        return "a learner connector of its own"
    return None


class TransitionReplay:
    """Mixin for RLlib's DQN and SAC: the transition buffer and the training step that uses it."""

    def setup(self, config: Any) -> None:
        super().setup(config)  # type: ignore[misc]
        algo: Any = self
        why = why_not_transitions(algo)
        self.replays_transitions = why is None
        self.random_steps = int(algo.config.learner_config_dict.get(RANDOM_STEPS, 0))
        if self.random_steps and why is not None:
            raise RandomStepsUntaken(
                f"random_steps: {self.random_steps} is taken by envsdk's transition replay, which this config"
                f" cannot use ({why}): RLlib's own training step never acts at random; remove random_steps"
            )
        if self.replays_transitions:
            config = algo.config
            settings = config.replay_buffer_config
            trained = config.policies_to_train
            algo.local_replay_buffer = ModuleTransitions(
                settings.get("capacity", 10_000),
                alpha=settings.get("alpha", 1.0) if EPISODE_BUFFERS[type(algo.local_replay_buffer)] else None,
                seed=config.seed,
                multi_agent=config.is_multi_agent,
                # A module nobody trains needs no replay (self-play's frozen snapshots, say).
                modules=set(trained) if isinstance(trained, list | set | tuple | frozenset) else None,
                default_module=DEFAULT_MODULE_ID,
            )
        elif algo.config.is_multi_agent and hasattr(algo.local_replay_buffer, "get_metrics"):
            internals.replay_metrics_with_string_agent_ids(algo.local_replay_buffer)

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> Any:
        """RLlib's state, plus the stored transitions with ``store_buffer_in_checkpoints: true``.

        (RLlib 2.60's new API stack reads that key only on the old stack: its own buffers never
        reach a checkpoint, so a resumed run started from an empty buffer.)
        """
        algo: Any = self
        state = super().get_state(components, not_components=not_components, **kwargs)  # type: ignore[misc]
        wanted = (components is None or REPLAY_BUFFER in force_list(components)) and (
            REPLAY_BUFFER not in force_list(not_components)
        )
        if wanted and self.replays_transitions and algo.config.store_buffer_in_checkpoints:
            state[REPLAY_BUFFER] = algo.local_replay_buffer.get_state()
        return state

    def set_state(self, state: Any) -> None:
        super().set_state(state)  # type: ignore[misc]
        if REPLAY_BUFFER in state and self.replays_transitions:
            algo: Any = self
            algo.local_replay_buffer.set_state(state[REPLAY_BUFFER])

    # training_step and the steps below restate RLlib 2.60's DQN._training_step_new_api_stack
    # (ray/rllib/algorithms/dqn/dqn.py, lines 648-768; SAC's is DQN's); each step names the lines
    # it mirrors, for a Ray upgrade to diff.

    def training_step(self) -> None:
        """Store what the env runners sample; once learning has started, update from replayed
        batches and send the new weights to the env runners (RLlib: lines 648-768)."""
        if not self.replays_transitions:
            super().training_step()  # type: ignore[misc]
            return
        algo: Any = self
        store_weight, sample_and_train_weight = (int(w) for w in calculate_rr_weights(algo.config))
        for _ in range(store_weight):
            self._sample_and_store()
        buffer: ModuleTransitions = algo.local_replay_buffer
        if not self._learning_started() or not len(buffer):
            return  # an empty buffer: e.g. no agent of a trained module has acted yet
        # Priorities need every update's TD errors; otherwise the learner reduces its metrics once,
        # at the last update (calculate_rr_weights gives at least one).
        reduce_each = buffer.prioritized or not algo.learner_group.is_local
        for _ in range(sample_and_train_weight - 1):
            self._update_from_replay(buffer, reduce=reduce_each)
        learner_results = self._update_from_replay(buffer, reduce=True)
        assert learner_results is not None  # a reduced update's
        self._sync_weights(learner_results)

    def _sample_and_store(self) -> None:
        """Sample the env runners once and store their episodes (RLlib: lines 653-668); at random
        while fewer than ``random_steps`` have been sampled."""
        algo: Any = self
        metrics = algo.metrics
        at_random = self.random_steps > 0 and self._sampled() < self.random_steps  # no peek without it
        with metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            episodes, env_runner_results = internals.sample_episodes_with_metrics(
                algo.env_runner_group, algo.config.sample_timeout_s, random_actions=at_random
            )
        metrics.aggregate(env_runner_results, key=ENV_RUNNER_RESULTS)
        with metrics.log_time((TIMERS, REPLAY_BUFFER_ADD_DATA_TIMER)):
            algo.local_replay_buffer.add(episodes)

    def _learning_started(self) -> bool:
        """Whether the steps sampled so far reach ``num_steps_sampled_before_learning_starts``
        (RLlib: lines 670-682)."""
        algo: Any = self
        return self._sampled() >= float(algo.config.num_steps_sampled_before_learning_starts)

    def _sampled(self) -> float:
        """The steps sampled so far, as the config counts them (env or agent steps)."""
        algo: Any = self
        by_agents = algo.config.count_steps_by == "agent_steps"
        sampled = algo.metrics.peek(
            (
                ENV_RUNNER_RESULTS,
                NUM_AGENT_STEPS_SAMPLED_LIFETIME if by_agents else NUM_ENV_STEPS_SAMPLED_LIFETIME,
            ),
            default={} if by_agents else 0,
        )
        return float(sum(sampled.values()) if by_agents else sampled)

    def _update_from_replay(self, buffer: ModuleTransitions, reduce: bool) -> list[Any] | None:
        """Sample a batch from the buffer, update the learners on it and the priorities from their TD
        errors (RLlib: lines 684-756); the learners' results, or None where ``reduce`` is off (their
        metrics are then reduced with a later update's, and no priorities are updated)."""
        algo: Any = self
        metrics = algo.metrics
        batch = self._replayed_batch(buffer)
        timesteps = {
            NUM_ENV_STEPS_SAMPLED_LIFETIME: metrics.peek(
                (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME)
            ),
            # per agent id; none where agents get a new id every episode (Unity: metrics dropped)
            NUM_AGENT_STEPS_SAMPLED_LIFETIME: metrics.peek(
                (ENV_RUNNER_RESULTS, NUM_AGENT_STEPS_SAMPLED_LIFETIME), default={}
            ),
        }
        with metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            if not reduce:
                internals.update_without_reduce(algo.learner_group, batch=batch, timesteps=timesteps)
                return None
            learner_results: list[Any] = algo.learner_group.update(batch=batch, timesteps=timesteps)
            td_errors = _take_td_errors(learner_results, keep=buffer.prioritized)
            metrics.aggregate(learner_results, key=LEARNER_RESULTS)
        with metrics.log_time((TIMERS, REPLAY_BUFFER_UPDATE_PRIOS_TIMER)):
            if buffer.prioritized:
                buffer.update_priorities({m: np.concatenate(e) for m, e in td_errors.items() if e})
        return learner_results

    def _replayed_batch(self, buffer: ModuleTransitions) -> MultiAgentBatch:
        """A train batch sampled from the buffer, each module's rows on their own (RLlib: lines 686-712,
        where the buffer samples one-step episodes for the learner connector to batch)."""
        algo: Any = self
        config = algo.config
        metrics = algo.metrics
        with metrics.log_time((TIMERS, REPLAY_BUFFER_SAMPLE_TIMER)):
            per_module: dict[str, TrainBatch] = buffer.sample(
                config.total_train_batch_size,
                n_step=config.n_step,
                gamma=config.gamma,
                beta=config.replay_buffer_config.get("beta", 0.4),
            )
            metrics.log_dict(buffer.get_metrics(), key=REPLAY_BUFFER_RESULTS, window=1)
        return MultiAgentBatch(
            {mid: SampleBatch(columns) for mid, columns in per_module.items()},
            env_steps=config.total_train_batch_size,
        )

    def _sync_weights(self, learner_results: list[Any]) -> None:
        """Send the updated modules' weights to the env runners (RLlib: lines 758-768)."""
        algo: Any = self
        with algo.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            algo.env_runner_group.sync_weights(
                from_worker_or_learner_group=algo.learner_group,
                policies=set(learner_results[0].keys()) - {ALL_MODULES},
                global_vars=None,
                inference_only=True,
            )


def _take_td_errors(learner_results: list[Any], keep: bool) -> dict[str, list[np.ndarray]]:
    """Take the TD errors out of the learners' results (they are not logged); with ``keep``, each
    module's, flat, in the order the batch was split (RLlib: lines 734-748)."""
    td_errors: dict[str, list[np.ndarray]] = defaultdict(list)
    for result in learner_results:  # one per learner, in the order the batch was split
        for module_id, module_results in result.items():
            if TD_ERROR_KEY not in module_results:
                continue
            series = module_results.pop(TD_ERROR_KEY)  # an item series: one array per update
            if keep:  # else nothing reads them: not converted
                logged: Any = convert_to_numpy(series.peek())
                td_errors[module_id] += [
                    np.ravel(a) for a in (logged if isinstance(logged, list) else [logged])
                ]
    return td_errors


class DQN(TransitionReplay, RLlibDQN):
    """RLlib's DQN, trained from a transition buffer where that gives the same batches."""


class SAC(TransitionReplay, RLlibSAC):
    """RLlib's SAC, trained from a transition buffer where that gives the same batches."""


# RLlib's class -> ours.
REPLACEMENTS: dict[type, type] = {RLlibDQN: DQN, RLlibSAC: SAC}
