"""mlagents-learn's lessons on RLlib: after each iteration, each parameter's lesson may advance.

``environment_parameters`` (:mod:`envsdk.config.own_keys.environment_parameters`) hold lessons whose
completion criteria follow a behavior's training.  :func:`advance` (``on_train_result``) applies
mlagents 1.1.0's ``EnvironmentParameterManager.update_lessons`` to this iteration's result:

* ``progress``: the policy's sampled agent steps / its ``policy_max_steps``
  (``policy_progress/<policy>``, which this hook adds to the result, with ``policy_progress/all``,
  the least of them, for a stop key);
* ``reward``: the mean return of the behavior's agent-episodes in its reward buffer, as mlagents
  keeps one per behavior: the returns of the agent-episodes (an episode's, on a single-agent env)
  ended since the last lesson change of any parameter (mlagents clears every buffer then), the last
  ``min_lesson_length`` of them at most (the largest of the behavior's criteria, at least 1), read
  from the episode window's records of the iteration (:mod:`envsdk.training.hooks.episode_window`);
* ``min_lesson_length``: the agent-episodes in that buffer.

A lesson that advances sends its values to every env of every env runner: a game that takes
samplers itself (Unity) gets them through ``set_task``, an env of the user's through the wrapper
that draws them per episode (:class:`envsdk.envs.curriculum.DrawingFactory`).  ``require_reset``
ends the running episodes: each env runner starts afresh at its next sample.

The lessons' state (each parameter's lesson and smoothed value; the reward buffers stay in the
driver's memory, as mlagents keeps them in its trainers) is one item of the algorithm's
MetricsLogger (:data:`STATE`), logged at each iteration: RLlib checkpoints that logger with the
algorithm, so ``--resume`` and ``--restore`` go on in the lesson (:func:`restored`,
``on_checkpoint_loaded``), with no file of ours.  The logger hands the
item back in the next result, where :func:`advance` takes it out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    NUM_MODULE_STEPS_SAMPLED_LIFETIME,
)

from envsdk.config.own_keys.environment_parameters import (
    PROGRESS,
    PROGRESS_KEY,
    EnvironmentParameters,
    mean_of,
)
from envsdk.envs.curriculum import drawing_wrappers, task_settable_envs
from envsdk.internals.sampling import RunnerState
from envsdk.progress import CURRICULUM, lookup
from envsdk.training.hooks.agent_metrics import agent_episode_returns

STATE = "envsdk_lessons"
MODULE_AGENT_RETURN = "module_agent_return_mean"
SINGLE_AGENT_POLICY = DEFAULT_MODULE_ID  # any behavior a single-agent env's criteria name


@dataclass(frozen=True)
class LessonSetup:
    """What the hooks need of the build: the parameters, each behavior's policy, and how the envs
    take values (``takes_samplers``: the game draws samplers itself)."""

    parameters: EnvironmentParameters
    policies: dict[str, str]  # behavior -> policy id
    multi_agent: bool
    takes_samplers: bool
    window: Any = None  # the run's EpisodeWindow: the episodes each iteration ended
    # policy -> its reward buffer, in the driver's memory as mlagents keeps its trainers' (not in the
    # checkpoint: a resumed run starts them empty, as a resumed mlagents-learn's trainers do)
    buffers: dict[str, list[float]] = field(default_factory=dict)

    def buffer_size(self, policy: str) -> int:
        """mlagents' ``get_minimum_reward_buffer_size``: the largest ``min_lesson_length`` of the
        criteria of the policy's behaviors, at least 1."""
        sizes = [
            lesson.criteria.min_lesson_length
            for parameter in self.parameters.parameters
            for lesson in parameter.lessons
            if lesson.criteria is not None and self.policies.get(lesson.criteria.behavior) == policy
        ]
        return max([1, *sizes])

    def new_returns(self) -> dict[str, list[float]]:
        """Policy -> the returns of the agent-episodes (a single-agent env: the episodes) that ended
        in this iteration, in the order they ended."""
        records = list(getattr(self.window, "latest", None) or [])
        if not self.multi_agent:
            return {SINGLE_AGENT_POLICY: [float(r["return"]) for r in records]}
        out: dict[str, list[float]] = {}
        for module, value in agent_episode_returns(records, getattr(self.window, "stable_agent_ids", True)):
            out.setdefault(str(module), []).append(float(value))
        return out


@dataclass
class LessonState:
    lessons: dict[str, int] = field(default_factory=dict)
    smoothing: dict[str, float] = field(default_factory=dict)
    buffers: dict[str, list[float]] = field(default_factory=dict)  # policy -> its reward buffer

    def as_item(self) -> dict[str, Any]:
        return {"lessons": self.lessons, "smoothing": self.smoothing}  # the buffers: LessonSetup's

    @classmethod
    def from_item(cls, item: Any, buffers: dict[str, list[float]] | None = None) -> LessonState:
        """The logged state, with the reward ``buffers`` kept in memory (LessonSetup.buffers)."""
        if not isinstance(item, dict):
            return cls(buffers=buffers if buffers is not None else {})
        kept = buffers if buffers is not None else {}
        return cls(dict(item["lessons"]), dict(item["smoothing"]), kept)


def policy_progress(setup: LessonSetup, result: dict[str, Any]) -> dict[str, float]:
    """Each policy of ``policy_max_steps``: its sampled agent steps / its max steps."""
    out = {}
    for policy, max_steps in setup.parameters.policy_max_steps.items():
        steps = lookup(result, f"{ENV_RUNNER_RESULTS}/{NUM_MODULE_STEPS_SAMPLED_LIFETIME}/{policy}") or 0
        out[policy] = float(steps) / max_steps
    return out


def update_lessons(
    setup: LessonSetup, state: LessonState, progress: dict[str, float], new_returns: dict[str, list[float]]
) -> tuple[bool, bool]:
    """mlagents' ``update_lessons`` on ``state``, after this iteration's agent-episodes' returns
    (``new_returns``, by policy) went into the reward buffers: (whether a lesson changed, whether to
    reset)."""
    for policy, returns in new_returns.items():
        state.buffers[policy] = [*state.buffers.get(policy, []), *returns][-setup.buffer_size(policy) :]
    updated = must_reset = False
    for parameter in setup.parameters.parameters:
        number = state.lessons.get(parameter.name, 0)
        criteria = parameter.lessons[number].criteria
        if criteria is None or number + 1 >= len(parameter.lessons):
            continue
        policy = setup.policies[criteria.behavior]
        buffer = state.buffers.get(policy, [])
        done, state.smoothing[parameter.name] = criteria.need_increment(
            progress.get(policy, 0.0) if criteria.measure == PROGRESS else 0.0,
            len(buffer),
            sum(buffer) / len(buffer) if buffer else None,
            state.smoothing.get(parameter.name, 0.0),
        )
        if done:
            state.lessons[parameter.name] = number + 1
            updated = True
            must_reset = must_reset or criteria.require_reset
    if updated:
        state.buffers.clear()  # mlagents clears every trainer's reward buffer at a lesson change
    return updated, must_reset


def send(algorithm: Any, setup: LessonSetup, lessons: dict[str, int], reset: bool) -> None:
    """The lessons' values to every env of every env runner; ``reset``: their episodes end."""
    values = setup.parameters.values_at(lessons)

    def update(env_runner: Any) -> None:
        if setup.takes_samplers:
            for env, _ in task_settable_envs(env_runner):
                env.set_task(values)
        for wrapper in drawing_wrappers(env_runner):
            wrapper.set_values(values)
        if reset:
            RunnerState(env_runner).reset_at_next_sample()

    algorithm.env_runner_group.foreach_env_runner(update, local_env_runner=True)


def report(setup: LessonSetup, state: LessonState, result: dict[str, Any]) -> None:
    """``curriculum/<name>/lesson`` and ``/value`` (a sampler: its mean) into the result."""
    block = result.setdefault(CURRICULUM, {})
    for parameter in setup.parameters.parameters:
        number = state.lessons.get(parameter.name, 0)
        lesson = parameter.lessons[number]
        block[parameter.name] = {"lesson": number, "value": mean_of(lesson.value)}


def advance(*, algorithm: Any, metrics_logger: Any, result: dict, setup: LessonSetup, **_: Any) -> None:
    """``on_train_result``: progress into the result, the lessons advanced, the state logged."""
    state = LessonState.from_item(result.pop(STATE, None), setup.buffers)
    progress = policy_progress(setup, result)
    if progress:
        result[PROGRESS_KEY] = {**progress, "all": min(progress.values())}
    updated, must_reset = update_lessons(setup, state, progress, setup.new_returns())
    if updated or must_reset:
        send(algorithm, setup, state.lessons, must_reset)
    report(setup, state, result)
    metrics_logger.log_value(STATE, state.as_item(), reduce="item")


def restored(*, algorithm: Any, setup: LessonSetup, **_: Any) -> None:
    """``on_checkpoint_loaded``: the envs take the checkpoint's lessons."""
    state = LessonState.from_item(algorithm.metrics.peek(STATE, default=None))
    if any(state.lessons.values()):
        send(algorithm, setup, state.lessons, reset=False)
