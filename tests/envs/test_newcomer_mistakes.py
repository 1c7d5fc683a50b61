"""A newcomer's mistakes in an env of their own, each named before anything trains, in one or two
lines, and no notice that the run then contradicts (issue 63): the dtype of an observation
(envsdk.envs.spaces.conform, envsdk.envs.checker), the old gym API's returns, and
``envsdk check`` ending in a verdict, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from envsdk.envs.checker import preflight
from envsdk.envs.checkup.verdict import check_env
from envsdk.envs.faults.guard import SingleAgentGuard, Site
from envsdk.envs.faults.records import ObservationFault
from envsdk.envs.registry import EnvFactory, ResolvedEnv
from envsdk.errors import UserError
from tests.helpers import ROOT

IMAGE = gym.spaces.Box(0, 255, (12, 12, 3), np.uint8)

# What the env returns for its image part: (the value, the part of the message that names it).
IMAGES: dict[str, Any] = {
    "np.zeros": np.zeros((12, 12, 3)),  # float64 whole numbers
    "int64": np.full((12, 12, 3), 7, np.int64),
    "python-list": np.full((12, 12, 3), 7).tolist(),  # int64 once numpy reads it
}
OUT = {"out-of-range": np.full((12, 12, 3), 300, np.int64)}  # what uint8 cannot hold


class Returns(gym.Env):
    """An env whose observation is ``{"image": ..., "cell": ...}``; ``config`` says what its
    reset and step return (``image``: a key of IMAGES or ``uint8``; ``cell``: a Discrete value;
    ``api``: ``new``, ``old-reset`` or ``old-step``; ``late``: the step from which ``image`` is
    returned, uint8 before)."""

    observation_space = gym.spaces.Dict({"image": IMAGE, "cell": gym.spaces.Discrete(4)})
    action_space = gym.spaces.Discrete(3)

    def __init__(self, config: dict):
        self.config = config
        self.t = 0

    def obs(self) -> dict:
        kind = self.config.get("image", "uint8")
        late = self.t < self.config.get("late", 0)
        image = np.zeros((12, 12, 3), np.uint8) if kind == "uint8" or late else {**IMAGES, **OUT}[kind]
        return {"image": image, "cell": self.config.get("cell", 1)}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        self.t = 0
        return self.obs() if self.config.get("api") == "old-reset" else (self.obs(), {})

    def step(self, action: Any) -> Any:
        self.t += 1
        if self.config.get("api") == "old-step":
            return self.obs(), 1.0, self.t >= 20, {}
        return self.obs(), 1.0, self.t >= 20, False, {}


class AgentsReturn(MultiAgentEnv):
    """Two agents, each seeing what :class:`Returns` would return."""

    def __init__(self, config: dict):
        super().__init__()
        self.one = Returns(config)
        self.config = config
        self.possible_agents = self.agents = ["scout", "boss"]
        self.observation_spaces = {a: Returns.observation_space for a in self.agents}
        self.action_spaces = {a: Returns.action_space for a in self.agents}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        self.one.t = 0
        obs = {a: self.one.obs() for a in self.agents}
        return obs if self.config.get("api") == "old-reset" else (obs, {})

    def step(self, actions: dict) -> Any:
        self.one.t += 1
        obs = {a: self.one.obs() for a in self.agents}
        rewards = {a: 1.0 for a in self.agents}
        done = {"__all__": self.one.t >= 20}
        if self.config.get("api") == "old-step":
            return obs, rewards, done, {}
        return obs, rewards, done, {"__all__": False}, {}


KINDS = {"single": Returns, "multi": AgentsReturn}


def _resolved(kind: str) -> ResolvedEnv:
    name = f"mistakes.{KINDS[kind].__name__}"
    return ResolvedEnv(name, EnvFactory(KINDS[kind], name), "class")


def _refusal(kind: str, config: dict) -> UserError:
    with pytest.raises(UserError) as caught, preflight(_resolved(kind), config):
        pass
    return caught.value


# ---- 1. a dtype that RLlib does not convert is refused before start, naming both ---------------------


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("image", list(IMAGES))
def test_an_image_of_another_kind_of_number_is_refused_naming_the_part_both_dtypes_and_the_fix(kind, image):
    error = _refusal(kind, {"image": image})
    got = "Python list" if image == "python-list" else IMAGES[image].dtype
    assert f"env 'mistakes.{KINDS[kind].__name__}': reset() observation" in error.message
    assert f"['image']: {got} where the space says uint8" in error.message
    assert "RLlib does not cast" in error.message and "converted" not in error.message
    assert error.hint == "return uint8 arrays: np.zeros(..., np.uint8), or value.astype(np.uint8)"


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_float_for_a_discrete_is_refused_with_its_fix(kind):
    error = _refusal(kind, {"cell": 2.0})
    assert "['cell']: Python float where the space says int64" in error.message
    assert error.hint is not None and "int(value)" in error.hint


@pytest.mark.parametrize("kind", list(KINDS))
def test_values_the_dtype_cannot_hold_are_named_as_out_of_range_not_as_a_cast(kind):
    error = _refusal(kind, {"image": "out-of-range"})
    assert "['image']: values 300..300 outside the space's [0, 255], which uint8 cannot hold" in error.message
    assert "cast" not in error.message and error.hint is not None and "clip" in error.hint


@pytest.mark.parametrize("kind", list(KINDS))
def test_what_the_vector_env_casts_is_a_notice_and_the_vector_env_casts_it(kind, capsys):
    """A float64 observation for a float32 Box: the notice says converted, and gymnasium's vector
    env (RLlib's single-agent runners step one) gives float32."""

    class Wide(Returns):
        observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)

        def obs(self) -> Any:
            return np.full(3, 0.5)

    env_class: Any = Wide
    if kind == "multi":

        class WideAgents(AgentsReturn):
            def __init__(self, config: dict):
                super().__init__(config)
                self.one = Wide(config)
                self.observation_spaces = {a: Wide.observation_space for a in self.agents}

        env_class = WideAgents
    resolved = ResolvedEnv("wide", EnvFactory(env_class, "wide"), "class")
    with preflight(resolved, {}):
        pass
    said = capsys.readouterr().err
    assert (
        "reset() observation" in said and "float64, converted to the space's float32 (as RLlib does)" in said
    )
    vec = gym.vector.SyncVectorEnv([lambda: Wide({})])
    assert vec.reset()[0].dtype == np.float32


@pytest.mark.parametrize(
    "image, said, fix",
    [
        (
            "np.zeros",
            "an observation part ['image'] of dtype float64, where the space says uint8",
            "np.zeros(shape, dtype)",
        ),
        ("out-of-range", "obs['image'][0][0][0] = 300, outside [0, 255]", "clip the values"),
    ],
)
def test_an_image_that_turns_bad_later_is_named_by_the_guard_not_as_a_failed_cast(image, said, fix):
    """The start-up check sees the first steps only: the guard names what the vector env then
    fails to stack (observation_bounds: warn lets a bound pass, not a value the dtype cannot hold)."""
    vec = gym.vector.SyncVectorEnv([lambda: Returns({"image": image, "late": 3}) for _ in range(2)])
    SingleAgentGuard(vec, Site("mistakes.Returns", 0), "warn", 30.0, print, lambda: None)
    vec.reset()
    with pytest.raises(ObservationFault) as caught:
        for _ in range(5):
            vec.step(np.zeros(2, np.int64))
    message = str(caught.value)
    assert f"(the local env runner, sub-env 0) returned {said} at step 3" in message, message
    assert "Cannot cast" not in message and fix in message


# ---- 2. the old gym API's returns, named wherever they show up ----------------------------------------


OLD_API = {
    "old-reset": "reset() must return (obs, info); yours returned an observation",
    "old-step": "step() must return (obs, reward, terminated, truncated, info); yours returned 4 values"
    " (the old gym API's obs, reward, done, info)",
}
OLD_API_MULTI = {
    "old-reset": "reset() must return (observations, infos), dicts keyed by agent id;"
    " yours returned one dict",
    "old-step": "step() must return (obs, rewards, terminateds, truncateds, infos), dicts keyed by agent id",
}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("api", list(OLD_API))
def test_the_old_api_is_named_by_the_start_up_check_with_its_fix(kind, api):
    error = _refusal(kind, {"api": api})
    said = (OLD_API if kind == "single" else OLD_API_MULTI)[api]
    assert error.message.startswith(f"env 'mistakes.{KINDS[kind].__name__}': {said}"), error.message
    assert error.hint is not None and error.hint.startswith("end " + api.removeprefix("old-"))


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("api", list(OLD_API))
def test_envsdk_check_names_the_old_api_in_its_verdict(kind, api):
    report = check_env(_resolved(kind), {"api": api}, steps=50)
    said = (OLD_API if kind == "single" else OLD_API_MULTI)[api]
    assert not report.ok and report.problems[0].startswith(said), report.render()
    assert "  fix   end " in report.render()


class Raises(gym.Env):
    """An env that raises where ``config`` says (``where``: init, reset, step)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict):
        self.where = config["where"]
        if self.where == "init":
            raise KeyError(0)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        if self.where == "reset":
            raise KeyError(0)
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> Any:
        if self.where == "step":
            raise ZeroDivisionError("division by zero")
        return np.zeros(2, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize(
    "where, line",
    [
        ("init", "its constructor raised KeyError: 0"),
        ("reset", "reset(seed=123) raised KeyError: 0"),
        ("step", "step() raised ZeroDivisionError: division by zero"),
    ],
)
def test_envsdk_check_ends_in_a_verdict_whatever_the_env_raises(where, line):
    report = check_env(ResolvedEnv("raises", EnvFactory(Raises, "raises"), "class"), {"where": where})
    assert report.problems == [line] and isinstance(report.error, Exception), report.render()
    assert report.render().endswith("verdict: FAIL (1 problem(s))")


def test_the_envsdk_check_command_prints_one_line_and_no_traceback(tmp_path):
    (tmp_path / "old_api.py").write_text(
        "import gymnasium as gym, numpy as np\n"
        "class OldApi(gym.Env):\n"
        "    observation_space = gym.spaces.Dict({'grid': gym.spaces.Box(0, 1, (2,)),"
        " 'goal': gym.spaces.Discrete(2)})\n"
        "    action_space = gym.spaces.Discrete(2)\n"
        "    def reset(self, *, seed=None, options=None):\n"
        "        return {'grid': np.zeros(2, np.float32), 'goal': 0}\n"
        "    def step(self, action):\n"
        "        return self.reset(), 0.0, True, False, {}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "envsdk", "check", "old_api.OldApi"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
    )
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr, done.stderr
    assert "FAIL  reset() must return (obs, info); yours returned an observation" in done.stdout


# ---- 8. what RLlib's set-up would fail on with a bare exception, named before start -------------------


def test_rllibs_connect4_without_possible_agents_is_named_not_a_stop_iteration():
    from ray.rllib.examples.envs.classes.multi_agent.pettingzoo_connect4 import MultiAgentConnect4

    resolved = ResolvedEnv("connect4", EnvFactory(MultiAgentConnect4, "connect4"), "class")
    with pytest.raises(UserError) as caught, preflight(resolved, {}):
        pass
    assert caught.value.message.startswith(
        "env 'connect4': RLlib's env runner finds no agent in its observation_spaces (possible_agents: [])"
    )
    assert caught.value.hint is not None and "self.possible_agents" in caught.value.hint
    assert check_env(resolved, {}).problems[0].startswith("RLlib's env runner finds no agent")


EMPTY = {
    "observation": gym.spaces.Dict({}),
    "action": gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Dict({})]),
}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("part", list(EMPTY))
def test_an_empty_dict_in_a_space_is_named_before_start(kind, part):
    class Empty(Returns):
        observation_space = EMPTY["observation"] if part == "observation" else Returns.observation_space
        action_space = EMPTY["action"] if part == "action" else Returns.action_space

    env_class: Any = Empty
    if kind == "multi":

        class EmptyAgents(AgentsReturn):
            def __init__(self, config: dict):
                super().__init__(config)
                self.observation_spaces["boss"] = Empty.observation_space
                self.action_spaces["boss"] = Empty.action_space

        env_class = EmptyAgents
    resolved = ResolvedEnv("empty", EnvFactory(env_class, "empty"), "class")
    with pytest.raises(UserError) as caught, preflight(resolved, {}):
        pass
    who = " of agent 'boss'" if kind == "multi" else ""
    said = "is an empty Dict: nothing to observe" if part == "observation" else "holds an empty Dict at [1]"
    assert caught.value.message.startswith(f"env 'empty': the {part} space{who} {said}"), caught.value.message


# ---- 7. a mask under another name is named, with how to name it -----------------------------------


class MaskedOtherwise(gym.Env):
    """A mask called ``legal_moves_mask``; ``config["strict"]``: any step raises (as a game that
    trusts its mask fails on a forbidden choice), else it plays on."""

    observation_space = gym.spaces.Dict(
        {"board": gym.spaces.Box(-1.0, 1.0, (4,), np.float32), "legal_moves_mask": gym.spaces.MultiBinary(3)}
    )
    action_space = gym.spaces.Discrete(3)

    def __init__(self, config: dict):
        self.strict = config.get("strict", False)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        return {"board": np.zeros(4, np.float32), "legal_moves_mask": np.array([1, 0, 0], np.int8)}, {}

    def step(self, action: Any) -> Any:
        if self.strict:
            raise ValueError(f"illegal move {action}")
        return self.reset()[0], 0.0, True, False, {}


class AgentsMaskedOtherwise(MultiAgentEnv):
    def __init__(self, config: dict):
        super().__init__()
        self.one = MaskedOtherwise(config)
        self.possible_agents = self.agents = ["white", "black"]
        self.observation_spaces = {a: MaskedOtherwise.observation_space for a in self.agents}
        self.action_spaces = {a: MaskedOtherwise.action_space for a in self.agents}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        return {"white": self.one.reset()[0]}, {}

    def step(self, actions: dict) -> Any:
        self.one.step(actions)
        return {"black": self.one.reset()[0]}, {"black": 0.0}, {"__all__": True}, {"__all__": False}, {}


MASKED_KINDS = {"single": MaskedOtherwise, "multi": AgentsMaskedOtherwise}
LOOKALIKE = (
    "the observation part 'legal_moves_mask'{who} is shaped like an action mask (0/1, one entry per"
    " choice), but is read as features and the actions are not kept to it; to mask with it, name it"
    " 'action_mask'"
)


@pytest.mark.parametrize("kind", list(MASKED_KINDS))
def test_a_mask_under_another_name_is_said_at_start_and_named_in_the_fix(kind, capsys):
    resolved = ResolvedEnv("masked", EnvFactory(MASKED_KINDS[kind], "masked"), "class")
    said = LOOKALIKE.format(who=" of agent 'white'" if kind == "multi" else "")
    with preflight(resolved, {}):
        pass
    assert f"notice: env 'masked': {said}" in capsys.readouterr().err
    with pytest.raises(UserError) as caught, preflight(resolved, {"strict": True}):
        pass
    assert "failed in step(): ValueError: illegal move" in caught.value.message and caught.value.hint == said


def test_check_env_still_imports_from_where_earlier_scaffolds_import_it():
    """``envsdk new`` wrote ``from envsdk.envs.checker import check_env`` into users' tests."""
    from envsdk.envs import checker
    from envsdk.envs.checkup import verdict

    assert checker.check_env is verdict.check_env
    with pytest.raises(AttributeError):
        checker.no_such_name  # noqa: B018
