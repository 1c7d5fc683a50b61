"""A scripted player of the stand-in's Pyramids for ``rollout.py --policy``: to the switch, press it,
then to the golden brick (its observation: position, switch and brick relative to it, brick shown)."""

STAY, FORWARD, BACK, PRESS = range(4)


def play(obs):
    obs = obs["observations"] if isinstance(obs, dict) else obs
    shown = obs[2] > 0.5
    target = obs[3] if shown else obs[1]
    if abs(target) < 1e-6:
        return STAY if shown else PRESS
    return FORWARD if target > 0 else BACK
