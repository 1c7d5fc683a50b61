"""Envs written for other APIs, run as RLlib envs: the old gym API (and `import gym` answered by
gymnasium), PettingZoo games, and the standard Atari preprocessing from YAML alone."""
