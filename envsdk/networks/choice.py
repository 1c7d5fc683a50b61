"""Which default RLModule a run gets, what it looks like, and a check that it works.

:func:`module_spec` picks, for an algorithm and the env's spaces, the
``RLModuleSpec`` train.py puts into the config when the YAML names no
custom model: RLlib's own default module, with our catalog where a space
needs it (:mod:`envsdk.networks.catalogs`) and our masking subclass
where observations carry an action mask (:mod:`envsdk.networks.masking`).
A run with only flat float observations and no masks keeps RLlib's defaults
untouched.

:func:`check_modules` builds every policy's module in the driver, before Ray
starts, and runs it on the env's first observation, so that a space, size or
option the network cannot take is a clear error instead of a crash inside a
remote worker; it returns one line per policy saying what the network is.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
import tree
from ray.rllib.algorithms.appo.torch.default_appo_torch_rl_module import DefaultAPPOTorchRLModule
from ray.rllib.algorithms.bc.torch.default_bc_torch_rl_module import DefaultBCTorchRLModule
from ray.rllib.algorithms.cql.torch.default_cql_torch_rl_module import DefaultCQLTorchRLModule
from ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module import DefaultDQNTorchRLModule
from ray.rllib.algorithms.iql.torch.default_iql_torch_rl_module import DefaultIQLTorchRLModule
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module import DefaultSACTorchRLModule
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule, MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.torch_utils import convert_to_torch_tensor

from envsdk.envs.keys import MASK_KEY, has_action_mask
from envsdk.envs.spaces import (
    ENTITIES,
    IMAGE,
    ONEHOT,
    TEXT,
    TEXT_FEATURES,
    SpaceError,
    describe_actions,
    describe_space,
    inner_space,
    mask_size,
    observation_leaves,
)
from envsdk.errors import UserError
from envsdk.networks.catalogs import (
    Q_NETWORK,
    Q_NETWORKS,
    VALUE_HEADS,
    AnySpaceBCCatalog,
    AnySpaceDQNCatalog,
    AnySpacePPOCatalog,
    AnySpaceSACCatalog,
    rllib_encodes,
)
from envsdk.networks.encoder import default_conv_filters
from envsdk.networks.entities import EMBEDDING, HEADS
from envsdk.networks.masking import (
    MaskedAPPOTorchRLModule,
    MaskedDQNTorchRLModule,
    MaskedPPOTorchRLModule,
    MaskedSACTorchRLModule,
)
from envsdk.notices import notice

# RLlib's default module class -> (our catalog, our masking module or None, action spaces it takes)
SUPPORT: dict[type, tuple[type, type | None, tuple[type, ...] | None]] = {
    DefaultPPOTorchRLModule: (AnySpacePPOCatalog, MaskedPPOTorchRLModule, None),
    DefaultAPPOTorchRLModule: (AnySpacePPOCatalog, MaskedAPPOTorchRLModule, None),
    DefaultDQNTorchRLModule: (AnySpaceDQNCatalog, MaskedDQNTorchRLModule, (gym.spaces.Discrete,)),
    DefaultSACTorchRLModule: (
        AnySpaceSACCatalog,
        MaskedSACTorchRLModule,
        (gym.spaces.Box, gym.spaces.Discrete),
    ),
    DefaultCQLTorchRLModule: (AnySpaceSACCatalog, None, (gym.spaces.Box,)),
    DefaultIQLTorchRLModule: (AnySpaceSACCatalog, None, (gym.spaces.Box,)),
    DefaultBCTorchRLModule: (AnySpaceBCCatalog, None, None),
}
MASKING_ALGOS = "PPO, APPO, IMPALA, DQN or SAC"


def _check_spaces(algo: str, default: type, obs: gym.Space, act: gym.Space, who: str) -> None:
    """UserErrors for a space the algorithm's default model cannot take."""
    try:
        observation_leaves(inner_space(obs))  # raises for a space with no default encoding
        wanted = mask_size(act)
    except SpaceError as err:
        raise UserError(f"{who}: {err}", "see docs/environments.md's table of spaces and models") from err
    _, masked_class, actions = SUPPORT.get(default, (None, None, None))
    if actions is not None and not isinstance(act, actions):
        kinds = " or ".join(k.__name__ for k in actions)
        raise UserError(
            f"{who}: {algo} takes {kinds} actions; this env's are {describe_actions(act)}",
            "use PPO (or APPO/IMPALA), which take every action space",
        )
    if not has_action_mask(obs):
        return
    if masked_class is None:
        raise UserError(
            f"{who}: the observations carry an action mask, which {algo}'s default model cannot honour",
            f"use {MASKING_ALGOS}, or a custom_model that reads '{MASK_KEY}'",
        )
    got = int(np.prod(cast(gym.spaces.Dict, obs)[MASK_KEY].shape or ()))
    if wanted == 0:
        raise UserError(
            f"{who}: the observations carry an action mask but the actions ({act}) have no discrete part",
            f"drop '{MASK_KEY}' from the observations",
        )
    if got != wanted:
        raise UserError(
            f"{who}: the action mask has {got} entries but {describe_actions(act)} has {wanted} choices",
            "give one mask entry per choice of every discrete branch, in the action space's order",
        )


def _check_q_network(
    algo: str, default: type, model_config: dict[str, Any], spaces: dict[str, tuple[gym.Space, gym.Space]]
) -> bool:
    """Whether the YAML asks for ``q_network: concat``; UserErrors where it cannot apply."""
    choice = model_config.get(Q_NETWORK)
    if choice is None:
        return False
    where = f"model_config.{Q_NETWORK}"
    if choice not in Q_NETWORKS:
        raise UserError(
            f"{where}: '{choice}' is not a Q-network",
            "; ".join(f"{Q_NETWORK}: {name} ({what})" for name, what in Q_NETWORKS.items()),
        )
    if SUPPORT.get(default, (None,))[0] is not AnySpaceSACCatalog:
        raise UserError(f"{where} is a setting of SAC, CQL and IQL's Q-functions; {algo}'s model has none")
    if choice != "concat":
        return False
    for who, (_, act) in spaces.items():
        if not isinstance(act, gym.spaces.Box):
            raise UserError(
                f"{where}: concat reads Box actions; {who} has {describe_actions(act)} "
                "(with Discrete actions the Q-network outputs one value per action and reads no action)",
                f"drop {Q_NETWORK}",
            )
    fusion = sorted(k for k in model_config if k.startswith("fusionnet_"))
    if fusion:
        raise UserError(
            f"model_config.{fusion[0]} has no effect with {Q_NETWORK}: concat (no fusion layers)",
            f"drop it, or set {Q_NETWORK}: streams",
        )
    return True


def _check_memory(algo: str, default: type, model_config: dict[str, Any]) -> None:
    """RLlib 2.60's SAC, CQL and IQL modules have no recurrent pass: their catalog would build an
    LSTM encoder that the module then feeds single steps, which fails on the first observation."""
    if model_config.get("use_lstm") and SUPPORT.get(default, (None,))[0] is AnySpaceSACCatalog:
        raise UserError(
            f"model_config.use_lstm: {algo}'s default model has no memory (RLlib's SAC, CQL and IQL"
            " modules are not recurrent)",
            "drop use_lstm (give the policy what it must remember in its observations, e.g. stacked"
            " frames), or use PPO, APPO or IMPALA, which take use_lstm",
        )


def module_spec(
    algo: str,
    config: Any,
    spaces: dict[str, tuple[gym.Space, gym.Space]],
    model_config: dict[str, Any] | None = None,
) -> RLModuleSpec | None:
    """The default module for these policies' spaces; None where RLlib's own default fits all of them.

    ``model_config`` is the YAML's (only :data:`Q_NETWORK` is read here).
    """
    default = config.get_default_rl_module_spec().module_class
    for who, (obs, act) in spaces.items():
        _check_spaces(algo, default, obs, act, who)
    _check_memory(algo, default, model_config or {})
    concat = _check_q_network(algo, default, model_config or {}, spaces)
    plain = all(rllib_encodes(obs) for obs, _ in spaces.values())
    if plain and not concat:
        return None
    if default not in SUPPORT:
        raise UserError(
            f"{algo}'s default model takes flat Box observations only; this env has "
            + ", ".join(describe_space(obs) for obs, _ in spaces.values()),
            "give a custom_model (docs/environments.md, Model plugins), or use PPO",
        )
    catalog, masked_class, _ = SUPPORT[default]
    masked = any(has_action_mask(obs) for obs, _ in spaces.values())
    return RLModuleSpec(module_class=masked_class if masked else default, catalog_class=catalog)


def describe(obs: gym.Space, act: gym.Space, model_config: dict[str, Any] | None = None) -> str:
    """One line about the default network for these spaces (docs/environments.md has the table).

    It names what a user may have set: layer sizes and activations, an LSTM, head layers and the
    concat critic, so that a translated Ray 1.x ``model:`` can be read back before training.
    """
    model_config = {**dataclasses.asdict(DefaultModelConfig()), **(model_config or {})}
    hidden = list(model_config["fcnet_hiddens"])
    mlp = f"MLP {hidden} {model_config['fcnet_activation']}"
    if rllib_encodes(obs):
        reads = f"{describe_space(obs)} -> {mlp}"
    else:
        parts, sets = [], []
        for leaf in observation_leaves(inner_space(obs)):
            label = f"{leaf.name} " if leaf.path else ""
            what = describe_space(leaf.space)
            if leaf.kind == ENTITIES:
                sets.append(f"{label}{what}")
            elif leaf.kind == ONEHOT:
                parts.append(f"{label}{what} one-hot")
            elif leaf.kind == TEXT:
                parts.append(f"{label}{what} -> character CNN {TEXT_FEATURES}")
            elif leaf.kind == IMAGE:
                height, width, _ = leaf.image_shape
                layers = len(model_config.get("conv_filters") or default_conv_filters(height, width))
                parts.append(f"{label}{what} -> CNN {layers} layers {model_config['conv_activation']}")
            else:
                parts.append(f"{label}{what} flattened")
        if sets:
            parts.append(f"{' + '.join(sets)} -> entity attention {EMBEDDING} ({HEADS} heads, masked mean)")
        reads = " + ".join(parts) + f" -> {mlp}"
    if model_config["use_lstm"]:
        reads += f" -> LSTM {model_config['lstm_cell_size']}"
    heads = list(model_config["head_fcnet_hiddens"])
    if heads:
        reads += f" -> heads MLP {heads} {model_config['head_fcnet_activation']}"
    mask = ", masked" if has_action_mask(obs) else ""
    critic = f"; Q-networks: [obs, action] -> {mlp}" if model_config.get(Q_NETWORK) == "concat" else ""
    if model_config.get(VALUE_HEADS):
        critic += f"; a value per reward signal: {', '.join(model_config[VALUE_HEADS])}"
    return f"{reads}; actions {describe_actions(act)}{mask}{critic}"


def _batch(value: Any) -> Any:
    """One observation as a batch of one, in tensors, as RLlib's connectors hand it to modules
    (``convert_to_torch_tensor``: float64 observations become float32, as in training)."""
    if isinstance(value, dict):
        return {k: _batch(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_batch(v) for v in value)
    return convert_to_torch_tensor(np.asarray(value)[None])


def check_modules(
    config: Any, env: Any, first_obs: dict[str, Any], policy_of: dict[str, str], custom: str | None
) -> list[str]:
    """Build each policy's module and run it on the env's first observation; one line per policy.

    ``first_obs``: agent id -> observation; ``policy_of``: agent id -> policy id
    (``DEFAULT_MODULE_ID`` for single-agent envs).  Errors are UserErrors.
    """
    modules = _build_modules(config, env, custom)
    for agent, obs in first_obs.items():
        pid = policy_of.get(agent, DEFAULT_MODULE_ID)
        if pid in modules:
            _first_pass(pid, modules[pid], obs, custom)
    lines = []
    for pid, module in sorted(modules.items()):
        if custom and (module.model_config or {}).get("use_lstm") and not module.is_stateful():
            notice(  # the default model's memory is RLlib's catalog's: a custom module has its own or none
                f"model_config.use_lstm: the {custom} keeps no memory (its is_stateful() is False), so"
                " use_lstm changes nothing; drop it, or give the module a memory of its own"
                " (get_initial_state)"
            )
        what = custom or describe(
            module.observation_space, module.action_space, dict(module.model_config or {})
        )
        lines.append(f"{pid}: {what}")
    return lines


def _build_modules(config: Any, env: Any, custom: str | None) -> dict[str, Any]:
    """Each policy's module as the config builds it, by policy id; UserErrors for what the model
    (``custom``, or the default one) cannot be built with."""
    try:
        if config.is_multi_agent or isinstance(config.rl_module_spec, MultiRLModuleSpec):
            spec: Any = config.get_multi_rl_module_spec(env=env, inference_only=False)
            specs = dict(spec.rl_module_specs)
        else:
            spec = config.get_rl_module_spec(env=env, inference_only=False)
            specs = {DEFAULT_MODULE_ID: spec}
        for one in specs.values():  # RLModule swallows a Catalog's error and fails later, unreadably
            if one.catalog_class is not None:
                one.catalog_class(one.observation_space, one.action_space, one.model_config or {})
        built = spec.build()
    except KeyError as err:
        if not custom:
            raise
        raise UserError(
            f"model {custom} reads the setting {err} from its model_config, which has none",
            f"add it to the YAML's model: custom_model_config: {{{err.args[0]}: ...}}",
        ) from err
    except (SpaceError, ValueError, TypeError, AssertionError, NotImplementedError) as err:
        raise UserError(
            f"the {'model ' + custom if custom else 'default model'} cannot be built for this env: "
            f"{type(err).__name__}: {err}",
            "run with --debug for the traceback; see docs/environments.md's table of spaces and models",
        ) from err
    return dict(built.items()) if isinstance(built, MultiRLModule) else {DEFAULT_MODULE_ID: built}


def _first_pass(pid: str, module: Any, obs: Any, custom: str | None) -> None:
    """Run ``module`` (policy ``pid``'s) on one observation, as a batch of one; a UserError where it
    fails or returns something other than a dict."""
    batch: dict[str, Any] = {Columns.OBS: _batch(obs)}
    if module.is_stateful():  # a batch of one sequence of one step, from the initial state
        batch[Columns.OBS] = tree.map_structure(lambda x: x[:, None], batch[Columns.OBS])
        state = convert_to_torch_tensor(module.get_initial_state())  # some modules give numpy arrays
        batch[Columns.STATE_IN] = tree.map_structure(lambda s: s[None], state)
    try:
        with torch.no_grad():
            out = module.forward_inference(batch)
    except Exception as err:
        raise UserError(
            f"policy '{pid}': its {'model ' + custom if custom else 'default model'} failed on the env's "
            f"first observation: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}",
            "run with --debug for the traceback",
        ) from err
    if not isinstance(out, dict):
        raise UserError(f"policy '{pid}': the module's forward returned {type(out).__name__}, not a dict")
