"""The ``environment_parameters:`` and ``policy_max_steps:`` config keys, in mlagents-learn's form.

::

    environment_parameters:
      gravity: 9.81                                            # a constant
      mass: {sampler_type: uniform, sampler_parameters: {min_value: 1, max_value: 5}}
      wall_height:
        curriculum:
          - name: Short
            completion_criteria: {measure: progress, behavior: Jumper, threshold: 0.2}
            value: 1.5
          - name: Tall                                         # the last lesson: no criteria
            value: {sampler_type: uniform, sampler_parameters: {min_value: 4, max_value: 8}}
    policy_max_steps: {Jumper: 500000}                        # mlagents-learn's max_steps

Keys, defaults and checks are mlagents 1.1.0's (``trainers/settings.py``:
``EnvironmentParameterSettings``, ``Lesson``, ``CompletionCriteriaSettings``); a number or a
sampler is read by :func:`unity_bridge.samplers.parse_parameter`.  ``measure: Elo`` is refused
(self-play ELO as a lesson measure is not implemented; mlagents 1.1.0 itself knows only
``progress`` and ``reward``).  Nothing here starts Ray or builds an env: the lessons advance in
:mod:`envsdk.training.hooks.lessons`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envsdk.config.yamlio import where_of
from envsdk.errors import UserError, did_you_mean
from envsdk.notices import notice

if TYPE_CHECKING:  # the samplers are read when the key is given: a gym run imports no Unity bridge
    from unity_bridge.samplers import Sampler

KEY = "environment_parameters"
MAX_STEPS_KEY = "policy_max_steps"
PROGRESS_KEY = "policy_progress"  # the result's policy_progress/<policy> and /all (a stop key)
PROGRESS, REWARD = "progress", "reward"
MEASURES = (PROGRESS, REWARD)
SMOOTHING_KEPT = 0.25  # mlagents' signal_smoothing: 0.25 * the last smoothed value + 0.75 * the new one
_EXAMPLE_LESSON = "{name: Lesson0, completion_criteria: {behavior: NAME, threshold: 0.5}, value: 1.0}"


@dataclass(frozen=True)
class Criteria:
    """When a lesson is complete (mlagents' ``CompletionCriteriaSettings``, same defaults)."""

    behavior: str
    measure: str = REWARD
    min_lesson_length: int = 0
    signal_smoothing: bool = True
    threshold: float = 0.0
    require_reset: bool = False

    def need_increment(
        self, progress: float, episodes: int, mean_return: float | None, smoothing: float
    ) -> tuple[bool, float]:
        """(whether the lesson is complete, the new smoothed value), as mlagents'
        ``CompletionCriteriaSettings.need_increment``; ``episodes``: those ended since the lesson
        began (mlagents' reward buffer length), ``mean_return``: their mean return (None: none)."""
        if episodes < self.min_lesson_length:
            return False, smoothing
        if self.measure == PROGRESS:
            return progress > self.threshold, smoothing
        if episodes < 1 or mean_return is None or mean_return != mean_return:  # none, or NaN
            return False, smoothing
        measure = mean_return
        if self.signal_smoothing:
            measure = SMOOTHING_KEPT * smoothing + (1 - SMOOTHING_KEPT) * measure
            smoothing = measure
        return measure > self.threshold, smoothing


@dataclass(frozen=True)
class Lesson:
    name: str
    value: float | Sampler
    criteria: Criteria | None  # None: the last lesson


@dataclass(frozen=True)
class Parameter:
    """One environment parameter: a constant or a sampler is one lesson with no criteria."""

    name: str
    lessons: tuple[Lesson, ...]

    @property
    def curriculum(self) -> bool:
        return len(self.lessons) > 1


@dataclass(frozen=True)
class EnvironmentParameters:
    """Both keys, checked; ``parameters`` in the YAML's order, their samplers seeded."""

    parameters: tuple[Parameter, ...] = ()
    policy_max_steps: dict[str, int] = field(default_factory=dict)

    def values_at(self, lessons: Mapping[str, int]) -> dict[str, float | Sampler]:
        """Each parameter's value (a number or a sampler) in the given lessons (0 where not given)."""
        return {p.name: p.lessons[lessons.get(p.name, 0)].value for p in self.parameters}

    def behaviors(self) -> list[str]:
        """The behaviors that the lessons' criteria name, in order, each once."""
        named = [lesson.criteria.behavior for p in self.parameters for lesson in p.lessons if lesson.criteria]
        return list(dict.fromkeys(named))


def mean_of(value: float | Sampler) -> float:
    """A constant, or a sampler's mean (multirange: intervals weighted by their length)."""
    from unity_bridge.samplers import GAUSSIAN, Sampler

    if not isinstance(value, Sampler):
        return float(value)
    if value.kind == GAUSSIAN:
        return value.values[0]
    spans = value.intervals
    total = sum(high - low for low, high in spans)
    if total <= 0:
        return sum(low for low, _ in spans) / len(spans)
    return sum((high - low) * (low + high) / 2 for low, high in spans) / total


def _value(value: Any, where: str, name: str) -> float | Sampler:
    from unity_bridge.errors import SettingsError
    from unity_bridge.samplers import parse_parameter

    try:
        return parse_parameter(value, name)
    except SettingsError as err:
        raise UserError(f"{where}: {err.message}", err.hint) from err


def _checked_keys(given: Mapping, allowed: tuple[str, ...], where: str, what: str) -> None:
    for key in given:
        if key not in allowed:
            raise UserError(
                f"{where_of(given, key, where)}: unknown {what} key '{key}'",
                did_you_mean(str(key), allowed) or f"{what} keys: {', '.join(allowed)}",
            )


def _criteria(raw: Any, where: str, name: str) -> Criteria:
    if not isinstance(raw, Mapping):
        raise UserError(
            f"{where}: {name} must be a mapping, got {raw!r}",
            "e.g. completion_criteria: {measure: reward, behavior: NAME, threshold: 0.5}",
        )
    names = ("behavior", "measure", "min_lesson_length", "signal_smoothing", "threshold", "require_reset")
    _checked_keys(raw, names, where, "completion_criteria")
    if not raw.get("behavior") or not isinstance(raw["behavior"], str):
        raise UserError(
            f"{where}: {name} needs 'behavior', the behavior (policy) whose training the lesson follows",
            "e.g. behavior: WallJump (a single-agent env: any name)",
        )
    measure = raw.get("measure", REWARD)
    if measure in ("Elo", "elo", "ELO"):
        raise UserError(
            f"{where_of(raw, 'measure', where)}: {name}.measure Elo (self-play's rating) is not supported",
            "use measure: reward or measure: progress",
        )
    if measure not in MEASURES:
        raise UserError(
            f"{where_of(raw, 'measure', where)}: {name}.measure must be progress or reward, got {measure!r}",
            "progress: the behavior's steps / its max_steps; reward: its mean episode return",
        )
    checked: dict[str, Any] = {"behavior": raw["behavior"], "measure": measure}
    for key, kinds, example in (
        ("min_lesson_length", (int,), "100"),
        ("threshold", (int, float), "0.5"),
        ("signal_smoothing", (bool,), "true"),
        ("require_reset", (bool,), "false"),
    ):
        if key not in raw:
            continue
        value = raw[key]
        if isinstance(value, bool) != (kinds == (bool,)) or not isinstance(value, kinds):
            raise UserError(
                f"{where_of(raw, key, where)}: {name}.{key} must be"
                f" {'true or false' if kinds == (bool,) else 'a number'}, got {value!r}",
                f"e.g. {key}: {example}",
            )
        checked[key] = float(value) if key == "threshold" else value
    criteria = Criteria(**checked)
    if criteria.measure == PROGRESS and not 0.0 <= criteria.threshold <= 1.0:
        raise UserError(
            f"{where_of(raw, 'threshold', where)}: {name}.threshold is {criteria.threshold:g}; with measure"
            " progress it is a fraction of max_steps",
            "give a threshold between 0 and 1",
        )
    return criteria


def _lesson(raw: Any, where: str, name: str, last: bool) -> Lesson:
    if not isinstance(raw, Mapping):
        raise UserError(f"{where}: {name} must be a mapping, got {raw!r}", f"e.g. - {_EXAMPLE_LESSON}")
    _checked_keys(raw, ("name", "value", "completion_criteria"), where, "lesson")
    for needed in ("name", "value"):
        if needed not in raw:
            raise UserError(
                f"{where}: {name} has no '{needed}'",
                f"every lesson has a name and a value: {_EXAMPLE_LESSON}",
            )
    value = _value(raw["value"], where_of(raw, "value", where), f"{name}.value")
    criteria_raw = raw.get("completion_criteria")
    if criteria_raw is None and not last:
        raise UserError(
            f"{where}: {name} ('{raw['name']}') is not the last lesson and has no completion_criteria",
            "give it completion_criteria (only the last lesson has none)",
        )
    if criteria_raw is not None and last:
        notice(
            f"{where}: the last lesson '{raw['name']}' of {name.split('.')[0]} has completion_criteria;"
            " they are ignored"
        )
        criteria_raw = None
    criteria = (
        None
        if criteria_raw is None
        else _criteria(
            criteria_raw, where_of(raw, "completion_criteria", where), f"{name}.completion_criteria"
        )
    )
    return Lesson(str(raw["name"]), value, criteria)


def _parameter(name: str, raw: Any, where: str) -> Parameter:
    label = f"{KEY}.{name}"
    if not (isinstance(raw, Mapping) and "curriculum" in raw):
        return Parameter(name, (Lesson(name, _value(raw, where, label), None),))
    _checked_keys(raw, ("curriculum",), where, f"{label}")
    lessons = raw["curriculum"]
    if not isinstance(lessons, list) or not lessons:
        raise UserError(
            f"{where}: {label}.curriculum must be a list of lessons, got {lessons!r}",
            f"e.g. - {_EXAMPLE_LESSON}",
        )
    inner = where_of(raw, "curriculum", where)
    return Parameter(
        name,
        tuple(
            _lesson(
                lesson, where_of(lesson, "name", inner), f"{label}.curriculum[{i}]", i == len(lessons) - 1
            )
            for i, lesson in enumerate(lessons)
        ),
    )


def parse_max_steps(raw: Any, where: str) -> dict[str, int]:
    """``policy_max_steps: {policy_id: agent_steps}``."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise UserError(
            f"{where}: {MAX_STEPS_KEY} must map policy ids to agent steps, got {raw!r}",
            "e.g. policy_max_steps: {default_policy: 500000}",
        )
    for policy, steps in raw.items():
        if isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0:
            raise UserError(
                f"{where_of(raw, policy, where)}: {MAX_STEPS_KEY}.{policy} must be a positive number of"
                f" agent steps, got {steps!r}",
                f"e.g. {policy}: 500000",
            )
    return {str(k): int(v) for k, v in raw.items()}


def parse(
    raw: Any, where: str, max_steps: Any = None, max_steps_where: str = "", run_seed: int = 0
) -> EnvironmentParameters:
    """Both keys checked, every mistake a UserError naming the key; samplers without a seed get
    ``run_seed`` + their place, as mlagents-learn seeds them."""
    policy_max_steps = parse_max_steps(max_steps, max_steps_where or where)
    if raw is None:
        return EnvironmentParameters((), policy_max_steps)
    if not isinstance(raw, Mapping):
        raise UserError(
            f"{where}: {KEY} must be a mapping of parameter names to values, got {raw!r}",
            "e.g. environment_parameters: {gravity: 9.81}",
        )
    parsed = [_parameter(str(name), value, where_of(raw, name, where)) for name, value in raw.items()]
    from unity_bridge.samplers import seeded_in_order

    seeded = iter(seeded_in_order([lesson.value for p in parsed for lesson in p.lessons], run_seed))
    parameters = tuple(
        Parameter(p.name, tuple(Lesson(lesson.name, next(seeded), lesson.criteria) for lesson in p.lessons))
        for p in parsed
    )
    return EnvironmentParameters(parameters, policy_max_steps)
