"""SAC: RLlib's learner with one backward pass per update, and its default module with a leaner
training pass for Box actions (the same networks, outputs and checkpoints)."""
