"""Running trials: one in train.py's own process or many under Tune, sized to the cluster,
with their checkpoints and Tune's logger callbacks."""
