"""``sampler: batched``: RLlib's single-agent env runner sampling whole batches, and the default
PPO module's policy pass it runs as one chain of torch calls."""
