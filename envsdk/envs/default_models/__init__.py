"""Default networks for every gymnasium space, plugged into RLlib's own default RLModules.

Layers, each a module: ``spaces`` (what a space means to the networks) ->
``encoder`` (an RLlib encoder for any observation) -> ``catalogs`` (RLlib
Catalogs that build it) and ``masking`` (default modules that honour action
masks) -> ``choice`` (which module a run gets, and a check that it works).
"""
