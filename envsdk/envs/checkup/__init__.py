"""``python -m envsdk check``: the fuller verdict on an env, beside the start-up check
(:mod:`envsdk.envs.checker`) that every run makes."""
