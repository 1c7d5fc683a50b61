"""``sampler: batched``: RLlib's single-agent env runner sampling whole batches, and the default
PPO module's policy pass it runs as one chain of torch calls; a costly env's copies stepped in
processes of their own (``parallel_envs``)."""
