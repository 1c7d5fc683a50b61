"""A scripted CartPole player for ``rollout.py --policy``: it pushes the cart toward the pole's lean."""

NOT_A_FUNCTION = 3


def push(obs):
    """Right (1) where the pole leans or falls right, else left (0): it keeps the pole up for 500 steps."""
    return int(obs[2] + 0.5 * obs[3] > 0)


def out_of_space(obs):
    return 7


def zero(obs):
    """Any env with a Discrete action space: always its first action."""
    return 0
