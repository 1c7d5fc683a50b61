"""The hooks that ride inside RLlib while it trains: our callbacks beside the user's, the env's
faults caught in every env runner, runner restarts counted, SIGTERM, the observation filter, reward
normalisation, self-play and per-agent metrics.  Nothing here builds a config or runs a trial."""
