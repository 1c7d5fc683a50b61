"""A stand-in for a Unity ML-Agents player build, for tests, demos and benchmarks."""
