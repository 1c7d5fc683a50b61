"""Turn an experiment's ``config:`` mapping into an RLlib 2.60 AlgorithmConfig.

Every config key a YAML file may hold is handled in this module:

* Ray 1.x names are translated (:mod:`envsdk.config.legacy`), one notice each;
* any other key must be a 2.60 config key of the chosen algorithm, else a
  UserError names the key, its ``file:line`` and the closest valid names;
* ``{grid_search|choice|uniform|loguniform|randint|...: [...]}`` values
  become Tune search spaces;
* ``env``/``env_config`` pick the environment (:mod:`envsdk.envs.registry`);
* ``model: {custom_model: NAME, custom_model_config: {...}}`` loads a plugin
  (:mod:`envsdk.networks.plugins`); other ``model`` keys become the new stack's
  ``model_config``;
* ``curriculum: module.fn`` installs :func:`envsdk.envs.curriculum.apply_curriculum`;
* ``policies`` (a list of ids), ``policy_mapping_fn`` (an import path) and
  ``policies_to_train`` go to ``config.multi_agent``; the Ray 1.x
  ``multiagent: {...}`` sub-dict is flattened into them;
* ``self_play: {...}`` (:mod:`envsdk.config.own_keys.self_play`) sets up the opponent
  modules, the mapping and the ELO callbacks (:mod:`envsdk.training.hooks.self_play`).
"""

from __future__ import annotations

from envsdk.training.build.built import BuiltConfig, algorithm_class
from envsdk.training.build.stages import build_config
from envsdk.training.build.translate import valid_keys

__all__ = ["BuiltConfig", "algorithm_class", "build_config", "valid_keys"]
