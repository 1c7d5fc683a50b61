"""mlagents-learn's lessons on RLlib: after each iteration, each parameter's lesson may advance.

``environment_parameters`` (:mod:`envsdk.config.environment_parameters`) hold lessons whose
completion criteria follow a behavior's training.  :func:`advance` (``on_train_result``) applies
mlagents 1.1.0's ``EnvironmentParameterManager.update_lessons`` to this iteration's result:

* ``progress``: the policy's sampled agent steps / its ``policy_max_steps``
  (``policy_progress/<policy>``, which this hook adds to the result, with ``policy_progress/all``,
  the least of them, for a stop key);
* ``reward``: the policy's mean episode return (``env_runners/module_agent_return_mean/<policy>``
  on a multi-agent env, ``env_runners/episode_return_mean`` on a single-agent one: RLlib's
  smoothing window, where mlagents averages the episodes since the lesson began);
* ``min_lesson_length``: episodes ended (``env_runners/num_episodes_lifetime``) since the last
  lesson change of any parameter (mlagents clears every reward buffer then).

A lesson that advances sends its values to every env of every env runner: a game that takes
samplers itself (Unity) gets them through ``set_task``, an env of the user's through the wrapper
that draws them per episode (:class:`envsdk.envs.curriculum.DrawingFactory`).  ``require_reset``
ends the running episodes: each env runner starts afresh at its next sample.

The lessons' state (each parameter's lesson and smoothed value, the episode count at the last
change) is one item of the algorithm's MetricsLogger (:data:`STATE`), logged at each iteration:
RLlib checkpoints that logger with the algorithm, so ``--resume`` and ``--restore`` go on in the
lesson (:func:`restored`, ``on_checkpoint_loaded``), with no file of ours.  The logger hands the
item back in the next result, where :func:`advance` takes it out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_MODULE_RETURN_MEAN,
    EPISODE_RETURN_MEAN,
    NUM_EPISODES_LIFETIME,
    NUM_MODULE_STEPS_SAMPLED_LIFETIME,
)

from envsdk.config.environment_parameters import PROGRESS, PROGRESS_KEY, EnvironmentParameters, mean_of
from envsdk.envs.curriculum import drawing_wrappers, task_settable_envs
from envsdk.internals.sampling import RunnerState
from envsdk.progress import CURRICULUM, lookup

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


@dataclass
class LessonState:
    lessons: dict[str, int] = field(default_factory=dict)
    smoothing: dict[str, float] = field(default_factory=dict)
    episodes_at_change: int = 0

    def as_item(self) -> dict[str, Any]:
        return {
            "lessons": self.lessons,
            "smoothing": self.smoothing,
            "episodes_at_change": self.episodes_at_change,
        }

    @classmethod
    def from_item(cls, item: Any) -> LessonState:
        if not isinstance(item, dict):
            return cls()
        return cls(dict(item["lessons"]), dict(item["smoothing"]), int(item["episodes_at_change"]))


def policy_progress(setup: LessonSetup, result: dict[str, Any]) -> dict[str, float]:
    """Each policy of ``policy_max_steps``: its sampled agent steps / its max steps."""
    out = {}
    for policy, max_steps in setup.parameters.policy_max_steps.items():
        steps = lookup(result, f"{ENV_RUNNER_RESULTS}/{NUM_MODULE_STEPS_SAMPLED_LIFETIME}/{policy}") or 0
        out[policy] = float(steps) / max_steps
    return out


def mean_return(setup: LessonSetup, result: dict[str, Any], policy: str) -> float | None:
    """The policy's mean episode return per agent (RLlib's per-module return where the
    per-agent one is not reported); a single-agent env's mean episode return."""
    if not setup.multi_agent:
        keys = [EPISODE_RETURN_MEAN]
    else:
        keys = [f"{MODULE_AGENT_RETURN}/{policy}", f"{EPISODE_MODULE_RETURN_MEAN}/{policy}"]
    for key in keys:
        value = lookup(result, f"{ENV_RUNNER_RESULTS}/{key}")
        if value is not None:
            return float(value)
    return None


def update_lessons(
    setup: LessonSetup, state: LessonState, progress: dict[str, float], episodes: int, result: dict[str, Any]
) -> tuple[bool, bool]:
    """mlagents' ``update_lessons`` on ``state``: (whether a lesson changed, whether to reset)."""
    updated = must_reset = False
    since = episodes - state.episodes_at_change
    for parameter in setup.parameters.parameters:
        number = state.lessons.get(parameter.name, 0)
        criteria = parameter.lessons[number].criteria
        if criteria is None or number + 1 >= len(parameter.lessons):
            continue
        policy = setup.policies[criteria.behavior]
        done, state.smoothing[parameter.name] = criteria.need_increment(
            progress.get(policy, 0.0) if criteria.measure == PROGRESS else 0.0,
            since,
            mean_return(setup, result, policy),
            state.smoothing.get(parameter.name, 0.0),
        )
        if done:
            state.lessons[parameter.name] = number + 1
            updated = True
            must_reset = must_reset or criteria.require_reset
    if updated:
        state.episodes_at_change = episodes
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
    state = LessonState.from_item(result.pop(STATE, None))
    progress = policy_progress(setup, result)
    if progress:
        result[PROGRESS_KEY] = {**progress, "all": min(progress.values())}
    episodes = int(lookup(result, f"{ENV_RUNNER_RESULTS}/{NUM_EPISODES_LIFETIME}") or 0)
    updated, must_reset = update_lessons(setup, state, progress, episodes, result)
    if updated or must_reset:
        send(algorithm, setup, state.lessons, must_reset)
    report(setup, state, result)
    metrics_logger.log_value(STATE, state.as_item(), reduce="item")


def restored(*, algorithm: Any, setup: LessonSetup, **_: Any) -> None:
    """``on_checkpoint_loaded``: the envs take the checkpoint's lessons."""
    state = LessonState.from_item(algorithm.metrics.peek(STATE, default=None))
    if any(state.lessons.values()):
        send(algorithm, setup, state.lessons, reset=False)
