"""mlagents-learn's trainer config (``behaviors:`` at the top) as an input dialect of train.py.

A Unity user's file runs unchanged: ``python train.py -f config/ppo/3DBall.yaml --env
builds/3DBall --run-id first``.  The layers, each a module:

* :mod:`~envsdk.config.mlagents.schema`: every key of mlagents-learn 1.1.0's settings, its default
  and its type, in one place, with the checks its loader makes (unknown keys refused);
* :mod:`~envsdk.config.mlagents.upgrade`: the pre-1.0 format (``trainer: ppo``, flat keys,
  ``parameter_randomization``, a ``curriculum`` per behavior) read as ``mlagents-upgrade-config``
  converts it;
* :mod:`~envsdk.config.mlagents.translate`: the checked settings to an RLlib experiment, key by key,
  with a notice for each key that has no equivalent and a refusal for each we cannot honour;
* the flags typed after ``mlagents-learn`` are train.py's: :mod:`envsdk.cli.mlagents_flags`.
"""
