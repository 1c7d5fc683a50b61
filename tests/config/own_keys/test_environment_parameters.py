"""environment_parameters and policy_max_steps read as mlagents-learn reads them; mistakes named."""

import pytest

from envsdk.config.own_keys.environment_parameters import PROGRESS, REWARD, Criteria, mean_of, parse
from envsdk.config.yamlio import load_yaml_text
from envsdk.errors import UserError
from unity_bridge.samplers import Sampler

# mlagents' config/ppo/WallJump_curriculum.yaml, its environment_parameters as they are.
WALL_JUMP = """
environment_parameters:
  big_wall_height:
    curriculum:
      - name: Lesson0
        completion_criteria:
          measure: progress
          behavior: BigWallJump
          signal_smoothing: true
          min_lesson_length: 100
          threshold: 0.1
        value:
          sampler_type: uniform
          sampler_parameters:
            min_value: 0.0
            max_value: 4.0
      - name: Lesson1
        completion_criteria:
          measure: progress
          behavior: BigWallJump
          signal_smoothing: true
          min_lesson_length: 100
          threshold: 0.3
        value:
          sampler_type: uniform
          sampler_parameters:
            min_value: 4.0
            max_value: 7.0
      - name: Lesson3
        value: 8.0
  small_wall_height: 1.5
"""


def parsed(text: str, seed: int = 0):
    data = load_yaml_text(text)
    return parse(data.get("environment_parameters"), "exp.yaml", data.get("policy_max_steps"), run_seed=seed)


def test_wall_jump_curriculum():
    plan = parsed(WALL_JUMP, seed=10)
    big, small = plan.parameters
    assert [lesson.name for lesson in big.lessons] == ["Lesson0", "Lesson1", "Lesson3"]
    assert big.lessons[0].criteria == Criteria("BigWallJump", PROGRESS, 100, True, 0.1, False)
    # seeds as mlagents-learn gives them: run seed + place among every lesson's value
    assert big.lessons[0].value == Sampler("uniform", (0.0, 4.0), 10)
    assert big.lessons[1].value == Sampler("uniform", (4.0, 7.0), 11)
    assert big.lessons[2].value == 8.0 and big.lessons[2].criteria is None
    assert small.lessons == (small.lessons[0],) and small.lessons[0].value == 1.5 and not small.curriculum
    assert plan.values_at({"big_wall_height": 2}) == {"big_wall_height": 8.0, "small_wall_height": 1.5}
    assert plan.behaviors() == ["BigWallJump"]


@pytest.mark.parametrize(
    ("text", "criteria"),
    [
        ("{behavior: B}", Criteria("B", REWARD, 0, True, 0.0, False)),  # mlagents' defaults
        (
            "{behavior: B, measure: reward, signal_smoothing: false, threshold: -2, require_reset: true}",
            Criteria("B", REWARD, 0, False, -2.0, True),
        ),
        ("{behavior: B, measure: progress, threshold: 1}", Criteria("B", PROGRESS, 0, True, 1.0, False)),
    ],
)
def test_criteria(text, criteria):
    plan = parsed(
        f"environment_parameters: {{p: {{curriculum: [{{name: a, value: 1, completion_criteria: {text}}},"
        " {name: b, value: {sampler_type: constant, sampler_parameters: {value: 2}}}]}}"
    )
    (parameter,) = plan.parameters
    assert parameter.lessons[0].criteria == criteria
    assert parameter.lessons[1].value == 2.0


def test_policy_max_steps_and_sampler_means():
    plan = parsed(
        "policy_max_steps: {a: 100, b: 5}\nenvironment_parameters:\n"
        "  g: {sampler_type: gaussian, sampler_parameters: {mean: 3, st_dev: 1, seed: 7}}\n"
        "  m: {sampler_type: multirangeuniform, sampler_parameters: {intervals: [[0, 1], [4, 7]]}}\n"
    )
    assert plan.policy_max_steps == {"a": 100, "b": 5}
    g, m = (p.lessons[0].value for p in plan.parameters)
    assert g.seed == 7 and mean_of(g) == 3.0
    assert mean_of(m) == pytest.approx((1 * 0.5 + 3 * 5.5) / 4)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("environment_parameters: [1, 2]", "environment_parameters must be a mapping"),
        ("environment_parameters: {p: abc}", "must be a number or a sampler"),
        ("environment_parameters: {p: {sampler_type: triangle, sampler_parameters: {}}}", "unknown sampler"),
        (
            "environment_parameters: {p: {sampler_type: uniform,"
            " sampler_parameters: {min_value: 5, max_value: 1}}}",
            "greater than the maximum",
        ),
        ("environment_parameters: {p: {curriculum: []}}", "must be a list of lessons"),
        ("environment_parameters: {p: {curriculum: [{name: a}]}}", "has no 'value'"),
        (
            "environment_parameters: {p: {curriculum: [{name: a, value: 1, colour: red}]}}",
            "unknown lesson key 'colour'",
        ),
        (
            "environment_parameters: {p: {curriculum: [{name: a, value: 1}, {name: b, value: 2}]}}",
            "is not the last lesson and has no completion_criteria",
        ),
        (
            "environment_parameters: {p: {curriculum: [{name: a, value: 1,"
            " completion_criteria: {threshold: 1}}, {name: b, value: 2}]}}",
            "needs 'behavior'",
        ),
        (
            "environment_parameters: {p: {curriculum: [{name: a, value: 1, completion_criteria: {behavior: B,"
            " measure: Elo}}, {name: b, value: 2}]}}",
            "Elo (self-play's rating) is not supported",
        ),
        (
            "environment_parameters: {p: {curriculum: [{name: a, value: 1, completion_criteria: {behavior: B,"
            " measure: progress, threshold: 1.5}}, {name: b, value: 2}]}}",
            "between 0 and 1",
        ),
        (
            "environment_parameters: {p: {curriculum: [{name: a, value: 1, completion_criteria: {behavior: B,"
            " min_lesson_length: ten}}, {name: b, value: 2}]}}",
            "min_lesson_length must be a number",
        ),
        (
            "environment_parameters: {p: {curriculum: [{name: a, value: 1, completion_criteria: {behavior: B,"
            " treshold: 1}}, {name: b, value: 2}]}}",
            "did you mean 'threshold'",
        ),
        ("policy_max_steps: {a: -1}", "must be a positive number of agent steps"),
        ("policy_max_steps: [a]", "must map policy ids to agent steps"),
    ],
)
def test_mistakes_are_named(text, message):
    with pytest.raises(UserError) as err:
        parsed(text)
    assert message in str(err.value) + str(err.value.hint)
    assert "exp.yaml" in str(err.value) or "<config>" in str(err.value)


def test_last_lesson_criteria_are_ignored(capsys):
    plan = parsed(
        "environment_parameters: {p: {curriculum: [{name: a, value: 1, completion_criteria: {behavior: B}}]}}"
    )
    assert plan.parameters[0].lessons[0].criteria is None
    assert "they are ignored" in capsys.readouterr().err
