"""The policies' networks: model plugins (``custom_model: NAME`` loads ``models/NAME.py``) and the
default networks for every gymnasium space, plugged into RLlib's own default RLModules.

Layers, each a module: :mod:`envsdk.envs.spaces` (what a space means, below this package) ->
``entities`` (entity attention over sets of entities) -> ``encoder`` (an RLlib encoder for any
observation) -> ``catalogs`` (RLlib Catalogs that build it) and ``masking`` (default modules that
honour action masks) -> ``choice`` (which module a run gets, and a check that it works);
``plugins`` beside them (a user's network by name).
"""
