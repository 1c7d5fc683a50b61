"""PPO: RLlib's learner with every epoch's minibatches shuffled (``advantage_normalization`` too)."""
