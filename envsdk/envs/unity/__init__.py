"""Unity ML-Agents games as RLlib environments: the adapters over :mod:`unity_bridge`, which speaks
the wire protocol and runs the players and knows nothing of envsdk or RLlib's training."""
