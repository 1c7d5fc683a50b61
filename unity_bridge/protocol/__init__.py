"""ML-Agents wire schema: the .proto file and the modules compiled from it."""
