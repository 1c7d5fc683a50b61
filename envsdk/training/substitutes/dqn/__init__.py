"""DQN: RLlib's learner with the config's ``adam_epsilon`` in its Adam optimizer."""
