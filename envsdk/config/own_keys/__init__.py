"""Keys of ours that RLlib's AlgorithmConfig lacks, each read and checked in one module: self-play,
the env checks, mlagents-learn's environment parameters and its reward signals and behavioral cloning."""
