"""A user-style multi-agent env: three agents, each a MatrixEnv with spaces of its own.

``a``: a camera + vector Dict with a masked hybrid action; ``b``: a flat vector
with an unmasked Discrete action; ``c``: a grayscale image with a masked
MultiDiscrete action.  Each agent gets its own policy (``policy_a`` ...).
"""

from matrix_env import MatrixEnv
from ray.rllib.env.multi_agent_env import MultiAgentEnv

AGENTS = {
    "a": {"obs": "dict", "act": "hybrid", "mask": True},
    "b": {"obs": "box", "act": "discrete", "mask": False},
    "c": {"obs": "depth", "act": "multidiscrete", "mask": True},
}


def policy_mapping(agent_id, episode=None, **kwargs):
    return f"policy_{agent_id}"


class MatrixMultiEnv(MultiAgentEnv):
    def __init__(self, config=None):
        super().__init__()
        length = int((config or {}).get("length", 8))
        self.envs = {aid: MatrixEnv({**cfg, "length": length}) for aid, cfg in AGENTS.items()}
        self.possible_agents = list(AGENTS)
        self.agents = list(AGENTS)
        self.observation_spaces = {aid: env.observation_space for aid, env in self.envs.items()}
        self.action_spaces = {aid: env.action_space for aid, env in self.envs.items()}

    def reset(self, *, seed=None, options=None):
        obs = {}
        for i, (aid, env) in enumerate(self.envs.items()):
            obs[aid], _ = env.reset(seed=None if seed is None else seed + i)
        return obs, {}

    def step(self, actions):
        obs, rewards, truncated = {}, {}, {}
        for aid, action in actions.items():
            obs[aid], rewards[aid], _, truncated[aid], _ = self.envs[aid].step(action)
        done = all(truncated.values())
        return obs, rewards, {"__all__": False}, {**truncated, "__all__": done}, {}
