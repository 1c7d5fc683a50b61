"""Lesson sequences from mlagents 1.1.0's own EnvironmentParameterManager, for
tests/training/hooks/test_lessons.py.  Made with (the side venv that holds mlagents):

    /root/.cache/envsdk/mlagents-1.1.0/bin/python tests/data/lessons/mlagents_lessons.py \
        > tests/data/lessons/mlagents_lessons.json

Each case: a curriculum (mlagents-learn's YAML form), then per iteration the behavior's steps and
the episode returns that ended in it; mlagents' trainer keeps them in a reward buffer of length
max(min_lesson_length) that every lesson change clears.  Recorded per iteration: each parameter's
lesson after update_lessons, and whether it asked for a reset.
"""

import collections
import json

from mlagents.trainers.environment_parameter_manager import EnvironmentParameterManager
from mlagents.trainers.settings import EnvironmentParameterSettings

CASES = {
    "reward_smoothed": {
        "max_steps": 1000,
        "parameters": {
            "wall": {
                "curriculum": [
                    {
                        "name": "A",
                        "value": 1.0,
                        "completion_criteria": {"behavior": "B", "threshold": 0.5, "min_lesson_length": 3},
                    },
                    {
                        "name": "B",
                        "value": 2.0,
                        "completion_criteria": {
                            "behavior": "B",
                            "threshold": 0.8,
                            "min_lesson_length": 2,
                            "require_reset": True,
                        },
                    },
                    {"name": "C", "value": 3.0},
                ]
            },
            "mass": 4.0,
        },
        "iterations": [
            [100, [0.9]],
            [200, [0.9, 0.9]],
            [300, [0.6, 0.6]],
            [400, [1.0]],
            [500, [1.0, 1.0]],
            [600, [1.0, 1.0]],
        ],
    },
    "reward_unsmoothed_and_progress": {
        "max_steps": 1000,
        "parameters": {
            "height": {
                "curriculum": [
                    {
                        "name": "A",
                        "value": 1.0,
                        "completion_criteria": {"behavior": "B", "threshold": 0.5, "signal_smoothing": False},
                    },
                    {"name": "B", "value": 2.0},
                ]
            },
            "width": {
                "curriculum": [
                    {
                        "name": "A",
                        "value": 1.0,
                        "completion_criteria": {
                            "behavior": "B",
                            "measure": "progress",
                            "threshold": 0.25,
                            "min_lesson_length": 1,
                        },
                    },
                    {
                        "name": "B",
                        "value": 2.0,
                        "completion_criteria": {"behavior": "B", "measure": "progress", "threshold": 0.45},
                    },
                    {"name": "C", "value": 3.0},
                ]
            },
        },
        "iterations": [[100, []], [200, [0.2]], [300, [0.7]], [400, []], [500, [0.1]], [600, [0.3]]],
    },
}


def run(case):
    settings = EnvironmentParameterSettings.structure(case["parameters"], EnvironmentParameterSettings)
    manager = EnvironmentParameterManager(settings, run_seed=1, restore=False)
    buffer = collections.deque(maxlen=manager.get_minimum_reward_buffer_size("B"))
    out = []
    for steps, returns in case["iterations"]:
        for value in returns:
            buffer.appendleft(value)
        updated, reset = manager.update_lessons({"B": steps}, {"B": case["max_steps"]}, {"B": list(buffer)})
        if updated:
            buffer.clear()
        out.append({"lessons": manager.get_current_lesson_number(), "reset": reset})
    return out


print(json.dumps({name: {**case, "expected": run(case)} for name, case in CASES.items()}, indent=1))
