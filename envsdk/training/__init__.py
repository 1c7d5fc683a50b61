"""An experiment to checkpoints, in rooms that import only from the ones before them:

* ``hooks``: what rides inside RLlib while it trains (callbacks, env faults, restarts, SIGTERM,
  the observation filter, reward normalisation, self-play);
* ``substitutes``: our stand-ins for pieces of RLlib, one subpackage per algorithm family;
* ``build``: the experiment's ``config:`` to an RLlib AlgorithmConfig, with the run's envs;
* ``report``: the summary and the reward figures;
* ``run``: one trial in this process or many under Tune, and their checkpoints.
"""
