"""Train an RLlib agent from a YAML file: ``python train.py -f configs/cartpole-ppo.yaml``."""

from envsdk.cli.train import entry

if __name__ == "__main__":
    entry()
