"""An RLlib encoder for any observation space: one reader per part, concatenated, then an MLP.

RLlib 2.60's default encoders take a flat float ``Box`` (an MLP) or an image
of 84, 64, 42 or 10 pixels (a CNN), nothing else.  :class:`SpaceEncoderConfig`
is a ``ModelConfig`` like RLlib's own, built by the catalogs in
:mod:`envsdk.networks.catalogs`, so RLlib's default RLModules (PPO,
APPO, IMPALA, DQN, SAC, ...) use it without any change to them.

Each part of the observation (see :func:`~envsdk.envs.spaces.observation_leaves`)
gets a reader:

* ``Discrete``/``MultiDiscrete``: one-hot (one block per branch);
* ``Box`` that is not an image, ``MultiBinary``: flattened to floats;
* image: ``uint8`` scaled to [0, 1], then a CNN (:func:`default_conv_filters`,
  or ``model_config.conv_filters`` when given, with ``conv_activation``),
  flattened;
* sets of entities (:class:`~envsdk.envs.spaces.EntitySet`, ML-Agents' BufferSensor): together,
  by entity attention over every set, reading each entity beside the other parts' features
  (:class:`~envsdk.networks.entities.EntityAttention`), appended after them.

The readers' outputs are concatenated and go through an MLP of
``fcnet_hiddens`` with ``fcnet_activation`` (the last size is the latent size
the heads see), exactly like RLlib's MLP encoder for a flat ``Box``.  An
action mask in the observation is not encoded: the masking modules in
:mod:`envsdk.networks.masking` apply it to the outputs.

With ``use_lstm``, RLlib's own LSTM encoder reads a single-tensor observation
through this encoder (its "tokenizer").  RLlib's tokenizing reads one tensor
only, so an observation of several parts (a ``Dict``, a ``Tuple``, an action
mask) gets :class:`RecurrentSpaceEncoderConfig`: the same encoder on every step
of every sequence, then RLlib's LSTM over the steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
import tree
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT, Encoder
from ray.rllib.core.models.configs import ModelConfig, RecurrentEncoderConfig
from ray.rllib.core.models.torch.base import TorchModel
from ray.rllib.core.models.torch.encoder import TorchLSTMEncoder
from ray.rllib.core.models.torch.primitives import TorchCNN, TorchMLP
from torch import nn

from envsdk.envs.keys import OBS_KEY, has_action_mask
from envsdk.envs.spaces import (
    ENTITIES,
    IMAGE,
    ONEHOT,
    TEXT,
    TEXT_FEATURES,
    ObsLeaf,
    inner_space,
    observation_leaves,
    pick,
)
from envsdk.networks.entities import EMBEDDING, EntityAttention

LAST_SIDE = 6  # default CNNs stop halving once an image side is this small
CHANNELS = (16, 32, 64)  # filters of the default CNN's layers, the last one repeated


def default_conv_filters(height: int, width: int) -> list[list[int]]:
    """The default CNN for an image of ``height x width`` pixels.

    Every layer is a 4x4 convolution with stride 2 and "same" padding, which
    halves both sides; layers are added until the smaller side is at most
    :data:`LAST_SIDE` pixels, with 16, 32, then 64 filters.  So an 8x8 image
    gets one layer (4x4x16 features), 16x16 two (4x4x32), 24x24 two (6x6x32),
    84x84 four (6x6x64) and 120x160 five (4x5x64).  The sizes follow ML-Agents'
    reasoning (its "simple" encoder needs 20 pixels, "nature" 36, "resnet"
    15): small images get shallow stacks, large ones are reduced to a few
    pixels before the dense layers, keeping the flattened width in the low
    thousands whatever the input.
    """
    filters: list[list[int]] = []
    side = min(height, width)
    while side > LAST_SIDE or not filters:
        filters.append([CHANNELS[min(len(filters), len(CHANNELS) - 1)], 4, 2])
        side = (side + 1) // 2
    return filters


@dataclass
class SpaceEncoderConfig(ModelConfig):
    """Encoder settings for one observation space (see the module docstring)."""

    observation_space: gym.Space | None = None  # the whole space, action mask included if any
    hidden_layer_dims: list[int] = field(default_factory=lambda: [256, 256])
    hidden_layer_activation: str = "tanh"
    hidden_layer_use_layernorm: bool = False
    hidden_layer_weights_initializer: Any = None
    hidden_layer_weights_initializer_config: dict | None = None
    hidden_layer_bias_initializer: Any = None
    hidden_layer_bias_initializer_config: dict | None = None
    conv_filters: list | None = None  # None: default_conv_filters per image
    conv_activation: str = "relu"
    conv_use_layernorm: bool = False
    conv_kernel_initializer: Any = None
    conv_kernel_initializer_config: dict | None = None
    conv_bias_initializer: Any = None
    conv_bias_initializer_config: dict | None = None

    @classmethod
    def from_model_config(cls, observation_space: gym.Space, model: dict[str, Any]) -> SpaceEncoderConfig:
        """Settings from an RLlib model config dict (``DefaultModelConfig`` keys)."""
        return cls(
            observation_space=observation_space,
            hidden_layer_dims=list(model["fcnet_hiddens"]),
            hidden_layer_activation=model["fcnet_activation"],
            hidden_layer_use_layernorm=bool(model.get("fcnet_use_layernorm", False)),
            hidden_layer_weights_initializer=model["fcnet_kernel_initializer"],
            hidden_layer_weights_initializer_config=model["fcnet_kernel_initializer_kwargs"],
            hidden_layer_bias_initializer=model["fcnet_bias_initializer"],
            hidden_layer_bias_initializer_config=model["fcnet_bias_initializer_kwargs"],
            conv_filters=model.get("conv_filters"),
            conv_activation=model["conv_activation"],
            conv_kernel_initializer=model["conv_kernel_initializer"],
            conv_kernel_initializer_config=model["conv_kernel_initializer_kwargs"],
            conv_bias_initializer=model["conv_bias_initializer"],
            conv_bias_initializer_config=model["conv_bias_initializer_kwargs"],
        )

    @property
    def leaves(self) -> list[ObsLeaf]:
        """The parts read one by one (every part but the sets of entities)."""
        return [leaf for leaf in self.all_leaves if leaf.kind != ENTITIES]

    @property
    def entity_sets(self) -> list[ObsLeaf]:
        """The sets of entities, read together after the other parts."""
        return [leaf for leaf in self.all_leaves if leaf.kind == ENTITIES]

    @property
    def all_leaves(self) -> list[ObsLeaf]:
        return observation_leaves(inner_space(self.space))

    @property
    def space(self) -> gym.Space:
        assert self.observation_space is not None, "SpaceEncoderConfig needs its observation_space"
        return self.observation_space

    def filters_for(self, leaf: ObsLeaf) -> list:
        height, width, _ = leaf.image_shape
        return self.conv_filters or default_conv_filters(height, width)

    @property
    def output_dims(self) -> tuple[int, ...]:
        if self.hidden_layer_dims:
            return (int(self.hidden_layer_dims[-1]),)
        attention = EMBEDDING if self.entity_sets else 0
        return (sum(_reader(leaf, self).width for leaf in self.leaves) + attention,)

    def build(self, framework: str = "torch") -> Encoder:
        if framework != "torch":
            raise ValueError(f"SpaceEncoderConfig builds torch models only, not {framework}")
        return TorchSpaceEncoder(self)


class _Reader(nn.Module):
    """Reads one observation leaf into ``width`` feature columns."""

    width: int


class _OneHot(_Reader):
    """Discrete / MultiDiscrete values -> one block of one-hot columns per branch.

    With ``use_lstm`` RLlib pads the learner's sequences with zeros, below the values of a space
    that starts above 0; those steps are left out of the loss, and are read here as the space's
    first value.
    """

    offsets: torch.Tensor
    starts: torch.Tensor | None

    def __init__(self, space: gym.Space):
        super().__init__()
        if isinstance(space, gym.spaces.Discrete):
            sizes, starts = np.array([space.n]), np.array([space.start])
        else:
            multi = cast(gym.spaces.MultiDiscrete, space)
            sizes, starts = multi.nvec.ravel(), np.asarray(multi.start).ravel()
        self.width = int(sizes.sum())
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]) - starts
        self.register_buffer("offsets", torch.as_tensor(offsets, dtype=torch.long), persistent=False)
        # float: ONNX opset 9 (Barracuda's brains) takes Max of floats only
        lowest = torch.as_tensor(starts, dtype=torch.float32) if starts.any() else None
        self.register_buffer("starts", lowest, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = x.reshape(x.shape[0], -1)
        if self.starts is not None:
            values = torch.maximum(values.float(), self.starts)
        index = values.long() + self.offsets
        out = torch.zeros(x.shape[0], self.width, device=x.device)
        return out.scatter(1, index, 1.0)


class _Flat(_Reader):
    def __init__(self, width: int):
        super().__init__()
        self.width = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1).float()


def is_flat_reader(reader: nn.Module) -> bool:
    """Whether a reader only flattens its part to floats (a Box without images or text)."""
    return isinstance(reader, _Flat)


class _Image(_Reader):
    """An image (HWC or CHW; uint8 scaled to [0, 1]) through a CNN, flattened."""

    def __init__(self, leaf: ObsLeaf, config: SpaceEncoderConfig):
        super().__init__()
        height, width, channels = leaf.image_shape
        self.channels_first = leaf.channels_first
        self.scale = 1.0 / 255.0 if leaf.space.dtype == np.uint8 else None
        # RLlib's CNN primitive (initializers, layernorm, "same"/"valid" padding); its
        # Sequential runs on channels-first input, which is what is fed here.
        self.cnn = TorchCNN(
            input_dims=[height, width, channels],
            cnn_filter_specifiers=config.filters_for(leaf),
            cnn_activation=config.conv_activation,
            cnn_use_layernorm=config.conv_use_layernorm,
            cnn_kernel_initializer=config.conv_kernel_initializer,
            cnn_kernel_initializer_config=config.conv_kernel_initializer_config,
            cnn_bias_initializer=config.conv_bias_initializer,
            cnn_bias_initializer_config=config.conv_bias_initializer_config,
        ).cnn
        with torch.no_grad():
            self.width = int(self.cnn(torch.zeros(1, channels, height, width)).numel())
        self.layers = sum(isinstance(m, nn.Conv2d) for m in self.cnn.modules())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if self.scale is not None:
            x = x * self.scale
        if not self.channels_first:
            x = x.permute(0, 3, 1, 2)
        features: torch.Tensor = self.cnn(x)
        return features.reshape(x.shape[0], -1)


class _Text(_Reader):
    """A text part's character indices (:class:`TextTokens`) -> an embedding per character, one
    convolution over neighbouring characters (word pieces, in any position) and the largest of
    each channel over the text: what a mission says, whatever its length."""

    EMBEDDING = 16

    def __init__(self, leaf: ObsLeaf):
        super().__init__()
        self.embed = nn.Embedding(
            int(np.max(cast(gym.spaces.Box, leaf.space).high)) + 1, self.EMBEDDING, padding_idx=0
        )
        self.conv = nn.Conv1d(self.EMBEDDING, TEXT_FEATURES, kernel_size=3, padding=1)
        self.width = TEXT_FEATURES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(x.shape[0], -1).long()
        present = (tokens > 0).unsqueeze(1).float()  # (batch, 1, characters): padding reads as nothing
        features = torch.relu(self.conv(self.embed(tokens).transpose(1, 2))) * present
        return features.amax(dim=2)


def _reader(leaf: ObsLeaf, config: SpaceEncoderConfig) -> _Reader:
    if leaf.kind == ONEHOT:
        return _OneHot(leaf.space)
    if leaf.kind == TEXT:
        return _Text(leaf)
    if leaf.kind == IMAGE:
        return _Image(leaf, config)
    return _Flat(leaf.width)


class TorchSpaceEncoder(TorchModel, Encoder):
    """The encoder :class:`SpaceEncoderConfig` builds."""

    def __init__(self, config: SpaceEncoderConfig) -> None:
        TorchModel.__init__(self, config)
        Encoder.__init__(self, config)
        self.masked = has_action_mask(config.space)
        self.paths = [leaf.path for leaf in config.leaves]
        readers = [_reader(leaf, config) for leaf in config.leaves]
        self.readers = nn.ModuleList(readers)
        width = sum(r.width for r in readers)
        sets = config.entity_sets
        self.set_paths = [leaf.path for leaf in sets]
        self.attention = EntityAttention(width, [leaf.box_shape[1] for leaf in sets]) if sets else None
        width += self.attention.width if self.attention is not None else 0
        hidden = list(config.hidden_layer_dims)
        self.mlp: nn.Module = nn.Identity()
        if hidden:
            self.mlp = TorchMLP(
                input_dim=width,
                hidden_layer_dims=hidden[:-1],
                hidden_layer_activation=config.hidden_layer_activation,
                hidden_layer_use_layernorm=config.hidden_layer_use_layernorm,
                hidden_layer_weights_initializer=config.hidden_layer_weights_initializer,
                # RLlib types these *_config arguments as str | Callable, but hands them dicts itself.
                hidden_layer_weights_initializer_config=config.hidden_layer_weights_initializer_config,  # type: ignore[arg-type]
                hidden_layer_bias_initializer=config.hidden_layer_bias_initializer,
                hidden_layer_bias_initializer_config=config.hidden_layer_bias_initializer_config,
                output_dim=hidden[-1],
                output_activation=config.hidden_layer_activation,
                output_use_bias=True,
                output_layer_use_layernorm=config.hidden_layer_use_layernorm,
                output_weights_initializer=config.hidden_layer_weights_initializer,
                output_weights_initializer_config=config.hidden_layer_weights_initializer_config,
                output_bias_initializer=config.hidden_layer_bias_initializer,
                output_bias_initializer_config=config.hidden_layer_bias_initializer_config,
            )

    def _forward(self, input_dict: dict, **kwargs: Any) -> dict:
        obs = input_dict[Columns.OBS]
        if self.masked:
            obs = obs[OBS_KEY]
        parts = [reader(pick(obs, path)) for reader, path in zip(self.readers, self.paths, strict=True)]
        if self.attention is not None:
            own = torch.cat(parts, dim=-1) if parts else None
            parts.append(self.attention(own, [pick(obs, path) for path in self.set_paths]))
        features = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
        return {ENCODER_OUT: self.mlp(features)}


@dataclass
class RecurrentSpaceEncoderConfig(RecurrentEncoderConfig):
    """RLlib's LSTM encoder settings, reading an observation of several parts through ``reader``.

    ``reader`` (a :class:`SpaceEncoderConfig`) turns each step's parts into one vector, exactly
    as without ``use_lstm``; the LSTM (``input_dims``: the reader's width) reads the steps.
    """

    reader: SpaceEncoderConfig | None = None

    @classmethod
    def reading_through_tokenizer(cls, config: RecurrentEncoderConfig) -> RecurrentSpaceEncoderConfig:
        """RLlib's own settings (from ``Catalog._get_encoder_config``), its tokenizer as the reader."""
        reader = config.tokenizer_config
        assert isinstance(reader, SpaceEncoderConfig), "the catalog's tokenizer is a SpaceEncoderConfig"
        settings = {f.name: getattr(config, f.name) for f in fields(config)}
        return cls(
            **{**settings, "tokenizer_config": None, "input_dims": reader.output_dims, "reader": reader}
        )

    def build(self, framework: str = "torch") -> Encoder:
        # only our torch catalogs make it, from RLlib's LSTM settings
        assert framework == "torch" and self.recurrent_layer_type == "lstm", "a torch LSTM only"
        return TorchRecurrentSpaceEncoder(self)


class TorchRecurrentSpaceEncoder(TorchLSTMEncoder):
    """The encoder :class:`RecurrentSpaceEncoderConfig` builds: the reader reads every step of every
    sequence (``[batch, time]`` folded into one dimension), then RLlib's LSTM encoder runs on the
    vectors, as it does with no tokenizer."""

    def __init__(self, config: RecurrentSpaceEncoderConfig) -> None:
        super().__init__(config)
        assert config.reader is not None, "RecurrentSpaceEncoderConfig needs its reader"
        self.reader = TorchSpaceEncoder(config.reader)

    # RLlib names this argument `inputs` here and `input_dict` in Encoder; callers pass it by position.
    def _forward(self, input_dict: dict, **kwargs: Any) -> dict:  # type: ignore[override]
        obs = input_dict[Columns.OBS]
        batch, steps = tree.flatten(obs)[0].shape[:2]
        folded = tree.map_structure(lambda part: part.reshape(batch * steps, *part.shape[2:]), obs)
        features = self.reader({Columns.OBS: folded})[ENCODER_OUT].reshape(batch, steps, -1)
        out: dict = super()._forward({**input_dict, Columns.OBS: features}, **kwargs)
        return out


@dataclass
class ObsActionEncoderConfig(SpaceEncoderConfig):
    """A Q-function's encoder that reads the observation and the action as one ``Tuple``.

    ``observation_space`` is ``Tuple((observations, actions))``: each part gets its
    reader as above, then one MLP of ``fcnet_hiddens`` -- the critic of the SAC
    paper, Stable-Baselines3 and CleanRL.  Built for ``model_config: {q_network:
    concat}`` by :class:`~envsdk.networks.catalogs.AnySpaceSACCatalog`.
    """

    def build(self, framework: str = "torch") -> Encoder:
        if framework != "torch":
            raise ValueError(f"ObsActionEncoderConfig builds torch models only, not {framework}")
        return TorchObsActionEncoder(self)


class TorchObsActionEncoder(TorchSpaceEncoder):
    """The encoder :class:`ObsActionEncoderConfig` builds: RLlib's SAC modules hand it obs and actions."""

    def _forward(self, input_dict: dict, **kwargs: Any) -> dict:
        pair = (input_dict[Columns.OBS], input_dict[Columns.ACTIONS])
        return super()._forward({Columns.OBS: pair}, **kwargs)
