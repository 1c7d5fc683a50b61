"""An experiment to checkpoints: the AlgorithmConfig, the hooks that ride inside RLlib (callbacks,
failure checks, SIGTERM, observation filter), one trial in this process or many under Tune, checkpoints,
and the summary and plots at the end."""
