# The seed tutorial's BasicEnv (../shared/seeds/002_*, "Create a custom Gym environment"),
# as its readers wrote it: the old gym API, `import gym`, a Discrete observation.
import gym


class BasicEnv(gym.Env):
    def __init__(self):
        self.action_space = gym.spaces.Discrete(5)  # --> Actions take values in the 0-4 interval
        self.observation_space = gym.spaces.Discrete(2)  # --> Two possible states [0,1]

    def reset(self):
        state = 0
        return state

    def step(self, action):
        state = 1

        if action == 2:
            reward = 1
        else:
            reward = -1

        done = True
        info = {}

        return state, reward, done, info
