"""Reading an experiment: YAML with line numbers, Ray 1.x names, value checks, stop conditions, offline input.

Nothing here starts Ray or builds an env; the layers above (``envs``, ``training``) do.
"""
