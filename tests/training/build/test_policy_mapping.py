"""Policies and their mapping checked before anything starts (envsdk.training.build.multi_agent):
every id the mapping gives the start-up check's agents is one of ``policies``, else one line names
the id, the agent and the policies there are (RLlib's own answers: a bare ``AssertionError`` deep in
its episode, or ``Observation space is not set``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from envsdk.config.experiment import load_experiments
from envsdk.errors import UserError
from envsdk.training.build import build_config

SQUAD = textwrap.dedent(
    '''
    import gymnasium as gym
    import numpy as np
    from ray.rllib.env.multi_agent_env import MultiAgentEnv


    class Squad(MultiAgentEnv):
        """A scout and a boss; only the scout observes at reset (the boss is in possible_agents)."""

        def __init__(self, config=None):
            super().__init__()
            self.possible_agents = ["scout_1", "boss"]
            self.agents = list(self.possible_agents)
            self.observation_spaces = {a: gym.spaces.Box(-1, 1, (3,), np.float32) for a in self.agents}
            self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.agents}
            self.t = 0

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return {"scout_1": np.zeros(3, np.float32)}, {}

        def step(self, actions):
            self.t += 1
            obs = {a: np.zeros(3, np.float32) for a in self.agents}
            return obs, {a: 1.0 for a in self.agents}, {"__all__": self.t >= 5}, {"__all__": False}, {}


    def by_role(agent_id, episode, **kwargs):
        return "boss_policy" if agent_id == "boss" else "scout_policy"


    def medic_too(agent_id, episode, **kwargs):
        return "medic_policy" if agent_id == "boss" else "scout_policy"


    def boss_forgotten(agent_id, episode, **kwargs):
        return None if agent_id == "boss" else "scout_policy"
    '''
)


def _built(tmp_path: Path, policies: list[str], mapping: str | None) -> object:
    module = f"squad_{tmp_path.name}"  # a module of its own per test: no cached import of another's
    (tmp_path / f"{module}.py").write_text(SQUAD)
    config = {"num_env_runners": 0, "train_batch_size": 32, "minibatch_size": 16, "policies": policies}
    if mapping:
        config["policy_mapping_fn"] = f"{module}.{mapping}"
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"exp": {"run": "PPO", "env": f"{module}.Squad", "config": config}}))
    (exp,) = load_experiments(path)
    return build_config(exp)


@pytest.mark.parametrize(
    "policies, mapping, said, fix",
    [
        (
            ["scout_policy", "bos_policy"],
            "by_role",
            "policy_mapping_fn maps agent 'boss' to policy 'boss_policy', which is not in policies:"
            " [bos_policy, scout_policy]",
            "did you mean 'bos_policy'? ",
        ),
        (
            ["scout_policy", "boss_policy"],
            "medic_too",
            "maps agent 'boss' to policy 'medic_policy', which is not in policies:"
            " [boss_policy, scout_policy]",
            "name the same ids",
        ),
        (
            ["scout_policy", "boss_policy"],
            "boss_forgotten",
            "policy_mapping_fn gives agent 'boss' no policy (it returned None)",
            "return one of the policies",
        ),
        (
            ["scout_policy", "boss_policy"],
            None,
            "no policy_mapping_fn: RLlib maps every agent to 'default_policy', which is not among them",
            "add policy_mapping_fn",
        ),
    ],
)
def test_a_mapping_to_a_policy_not_in_policies_is_named_before_start(tmp_path, policies, mapping, said, fix):
    with pytest.raises(UserError) as caught:
        _built(tmp_path, policies, mapping)
    assert said in caught.value.message and caught.value.hint is not None
    assert caught.value.hint.startswith(fix), caught.value.hint


def test_a_mapping_that_names_the_policies_builds(tmp_path):
    built = _built(tmp_path, ["scout_policy", "boss_policy"], "by_role")
    assert set(built.config.policies) == {"scout_policy", "boss_policy"}
