"""Run Unity ML-Agents players as RLlib environments, speaking the wire protocol ourselves."""
