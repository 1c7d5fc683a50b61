"""What an observation or action space means to the default models.

One place decides, for every gymnasium space kind, how the default networks
read it, so that the encoder, the ONNX export, the env checker, the video
recorder and the model descriptions agree:

* an observation is split into *leaves* (:func:`observation_leaves`), walking
  ``Dict`` (in the space's key order) and ``Tuple`` (by index), each leaf with
  the key path that reaches it in an observation and how it is encoded:
  ``onehot`` (``Discrete``, ``MultiDiscrete``), ``image`` (a rank-3 ``Box``
  with a clear channel axis, see :func:`image_layout`), ``text`` (a text part, laid out
  by :mod:`envsdk.envs.observation_layout` as :class:`TextTokens`), ``entities`` (a set of
  entities, :class:`EntitySet`) or ``flat`` (every other ``Box``, ``MultiBinary``);
* an action space is split into the leaves RLlib's action distribution lays
  out side by side in its inputs (:func:`action_leaves`): a ``Box(k)`` takes
  ``2k`` columns (means and log-stds), a ``Discrete(n)`` ``n`` logits, a
  ``MultiDiscrete`` one logit per choice of every branch.  An action mask has
  one entry per choice of every discrete leaf, in the same order
  (:func:`mask_size`), so for ``Tuple(Box(1), Discrete(3))`` it has 3 entries.
"""

from __future__ import annotations

import itertools
import string
from dataclasses import dataclass
from typing import Any, cast

import gymnasium as gym
import numpy as np

from envsdk.envs.keys import MASK_KEY, OBS_KEY, has_action_mask

MIN_IMAGE_SIDE = 8  # pixels; smaller rank-3 boxes are flattened, not convolved
ONEHOT = "onehot"
IMAGE = "image"
TEXT = "text"
ENTITIES = "entities"
FLAT = "flat"
TEXT_FEATURES = 32  # what the default encoder reads from one text part (a character CNN's channels)
TEXT_LENGTH = 128  # characters kept of a text part whose space sets no max_length (MiniGrid's missions)
TEXT_CHARSET = string.ascii_letters + string.digits + string.punctuation + " "  # where the space has none


class TextTokens(gym.spaces.Box):
    """A text part as the default models read it: its first ``max_length`` characters as indices
    into ``charset`` (1 to n; 0 pads, n + 1 stands for a character outside it).  RLlib's
    connectors carry arrays, not strings, so :mod:`envsdk.envs.observation_layout` turns a Text part
    (gymnasium's ``Text``, MiniGrid's ``MissionSpace``) into this before anything else sees it."""

    def __init__(self, charset: str, max_length: int):
        super().__init__(0, len(charset) + 1, (max_length,), np.int64)
        self.charset = charset

    def encode(self, text: str) -> np.ndarray:
        unknown = len(self.charset) + 1
        index = {c: i for i, c in enumerate(self.charset, start=1)}
        codes = [index.get(c, unknown) for c in str(text)[: self.shape[0]]]
        out = np.zeros(self.shape, np.int64)
        out[: len(codes)] = codes
        return out


class EntitySet(gym.spaces.Box):
    """A set of up to ``max_entities`` entities of ``entity_size`` floats each, one per row: their order
    carries no meaning, and rows of zeros are padding (no entity), as ML-Agents' BufferSensor pads its
    variable-length observations.  A ``Box`` to everything else (RLlib's connectors, the checker); the
    default encoder reads it with entity attention (:mod:`envsdk.networks.entities`).  Pickled as a
    ``Box`` is (no state of its own), so checkpoints hold it by this module path."""

    def __init__(self, max_entities: int, entity_size: int):
        super().__init__(-np.inf, np.inf, (max_entities, entity_size), np.float32)


def text_tokens(space: gym.Space) -> TextTokens | None:
    """The :class:`TextTokens` a text space is read as, or None for a space that is not text:
    gymnasium's ``Text``, or a space of another package whose values are strings."""
    if isinstance(space, gym.spaces.Text):
        return TextTokens("".join(sorted(space.character_set)), int(space.max_length))
    numbers = gym.spaces.Box | gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary
    nested = gym.spaces.Dict | gym.spaces.Tuple | gym.spaces.Graph | gym.spaces.Sequence
    if isinstance(space, numbers | nested):
        return None
    try:
        sample = space.sample()
    except Exception:
        return None
    return TextTokens(TEXT_CHARSET, TEXT_LENGTH) if isinstance(sample, str) else None


class SpaceError(ValueError):
    """A space the default models cannot take (the message says which and why)."""


@dataclass(frozen=True)
class ObsLeaf:
    """One part of an observation and how the default encoder reads it."""

    path: tuple[Any, ...]  # keys/indices from the (unmasked) observation to this part
    space: gym.Space
    kind: str  # ONEHOT | IMAGE | TEXT | ENTITIES | FLAT
    channels_first: bool = False  # images only

    @property
    def name(self) -> str:
        """A readable, file- and ONNX-safe name: ``camera``, ``sensors.depth``, ``obs_0`` (Tuple part 0)."""
        name = ".".join(str(p) for p in self.path) or "obs"
        return f"obs_{name}" if self.path and isinstance(self.path[0], int) else name

    @property
    def width(self) -> int:
        """Features this leaf contributes before any convolution (images: pixels x channels)."""
        if isinstance(self.space, gym.spaces.Discrete):
            return int(self.space.n)
        if isinstance(self.space, gym.spaces.MultiDiscrete):
            return int(np.sum(self.space.nvec))
        if self.kind == TEXT:
            return TEXT_FEATURES
        return int(np.prod(self.box_shape))

    @property
    def box_shape(self) -> tuple[int, ...]:
        """The shape of a Box leaf (gymnasium types ``Space.shape`` as optional)."""
        assert self.space.shape is not None, f"{self.space} has no shape"
        return self.space.shape

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(height, width, channels) of an image leaf."""
        shape = self.box_shape
        return (shape[1], shape[2], shape[0]) if self.channels_first else (shape[0], shape[1], shape[2])


def image_layout(space: gym.Space) -> str | None:
    """``"hwc"``, ``"chw"`` or None: whether a space is an image for the default CNN.

    An image is a ``Box`` of rank 3 whose channel axis is clear and whose two
    other sides are at least :data:`MIN_IMAGE_SIDE` pixels (:func:`shape_layout`).
    """
    if not isinstance(space, gym.spaces.Box):
        return None
    return shape_layout(space.shape)


def shape_layout(shape: tuple[int, ...]) -> str | None:
    """``"hwc"``, ``"chw"`` or None for an array shape (see :func:`image_layout`).

    Channels come last (gymnasium's and RLlib's convention) when the last
    axis has at most 4 entries or is smaller than the other two; they come
    first when the first axis is smaller than the other two (PyTorch's and
    ML-Agents' ``3x84x84``).  Anything else of rank 3 is read channels-last.
    """
    if len(shape) != 3:
        return None
    a, b, c = shape
    if c <= 4 or c < min(a, b):
        layout, sides = "hwc", (a, b)
    elif a < min(b, c):
        layout, sides = "chw", (b, c)
    else:
        layout, sides = "hwc", (a, b)
    return layout if min(sides) >= MIN_IMAGE_SIDE else None


def inner_space(space: gym.Space) -> gym.Space:
    """The observation without its action mask (the space itself when unmasked)."""
    return cast(gym.spaces.Dict, space)[OBS_KEY] if has_action_mask(space) else space


def observation_leaves(space: gym.Space) -> list[ObsLeaf]:
    """The parts of an (unmasked) observation space, in a fixed order; raises SpaceError."""
    leaves: list[ObsLeaf] = []

    def walk(sub: gym.Space, path: tuple[Any, ...]) -> None:
        children = _children(sub, path)
        if children is None:
            leaves.append(_leaf(sub, path))
            return
        for child, child_path in children:
            walk(child, child_path)

    walk(space, ())
    return leaves


def _children(sub: gym.Space, path: tuple[Any, ...]) -> list[tuple[gym.Space, tuple[Any, ...]]] | None:
    """A Dict's or Tuple's subspaces with their paths (None for any other space); raises SpaceError
    where there are none."""
    if isinstance(sub, gym.spaces.Dict):
        if not sub.spaces:
            raise SpaceError(f"the Dict observation at '{'.'.join(map(str, path)) or 'obs'}' is empty")
        return [(child, (*path, key)) for key, child in sub.spaces.items()]
    if isinstance(sub, gym.spaces.Tuple):
        if not sub.spaces:
            raise SpaceError("an empty Tuple observation carries nothing to learn from")
        return [(child, (*path, i)) for i, child in enumerate(sub.spaces)]
    return None


def _leaf(sub: gym.Space, path: tuple[Any, ...]) -> ObsLeaf:
    """A part that is not a Dict or Tuple, with how the default network reads it; raises SpaceError for
    a space with no default encoding."""
    if isinstance(sub, gym.spaces.Discrete | gym.spaces.MultiDiscrete):
        return ObsLeaf(path, sub, ONEHOT)
    if isinstance(sub, TextTokens):
        return ObsLeaf(path, sub, TEXT)
    if isinstance(sub, EntitySet):
        return ObsLeaf(path, sub, ENTITIES)
    if isinstance(sub, gym.spaces.Box):
        layout = image_layout(sub)
        if layout is None:
            return ObsLeaf(path, sub, FLAT)
        return ObsLeaf(path, sub, IMAGE, channels_first=layout == "chw")
    if isinstance(sub, gym.spaces.MultiBinary):
        return ObsLeaf(path, sub, FLAT)
    key = ".".join(map(str, path))
    what = f"the observation part '{key}' is" if path else "the observations are"
    drop = f", drop it (config: drop_observation_keys: [{key}])" if path else ""
    raise SpaceError(
        f"{what} {type(sub).__name__} ({sub!s:.80}), which has no default encoding; "
        f"convert it to Box/Discrete in the env{drop}, or give a custom_model"
    )


def pick(obs: Any, path: tuple[Any, ...]) -> Any:
    """The part of an observation at ``path`` (see :attr:`ObsLeaf.path`)."""
    for key in path:
        obs = obs[key]
    return obs


def nest(space: gym.Space, parts: dict[tuple[Any, ...], Any]) -> Any:
    """The inverse of :func:`pick` over all leaves: an observation of ``space`` from its parts by path."""

    def build(sub: gym.Space, path: tuple[Any, ...]) -> Any:
        if isinstance(sub, gym.spaces.Dict):
            return {key: build(child, (*path, key)) for key, child in sub.spaces.items()}
        if isinstance(sub, gym.spaces.Tuple):
            return tuple(build(child, (*path, i)) for i, child in enumerate(sub.spaces))
        return parts[path]

    return build(space, ())


@dataclass(frozen=True)
class Conversion:
    """An observation part whose values fit its space in another type (``got``), converted to
    the space's (``want``) as RLlib's vector env does when it stacks observations.

    ``refused`` says why a run could not take it (empty when it can): gymnasium's vector env
    stacks observations into arrays of the space's dtype under numpy's ``same_kind`` rule, so
    float64 for a uint8 image, int64 for a uint8 Box or ``3.0`` for a Discrete fail at the first
    sample (and a multi-agent env's would reach the network as another type); values the
    space's dtype cannot hold (300 for uint8) would wrap.  ``fix`` is the line that mends it."""

    path: str  # ``['image']``, ``[0]``; empty for the whole observation
    got: str
    want: str
    refused: str = ""
    fix: str = ""


def _kind(value: Any) -> str:
    if isinstance(value, np.ndarray | np.generic):
        return str(value.dtype)
    return f"Python {type(value).__name__}"


def conform(value: Any, space: gym.Space, path: str = "") -> tuple[Any, list[Conversion]]:
    """``value`` in the representation ``space`` declares, and the parts that needed converting.

    What RLlib accepts by converting (gymnasium's vector env stacks every observation into
    arrays of the space's dtype): float64 for float32, Python numbers, lists and tuples for a
    Box, MultiDiscrete or MultiBinary, lists for a Tuple.  A conversion the vector env would
    not make (another kind of number: :attr:`Conversion.refused`) is made here and said; values
    the space's dtype cannot hold are left as they are, with the conversion refused.  A value
    that cannot be converted is returned as it is, for the checks to explain; so is a value of a
    space kind that holds no numbers (Text, Graph, Sequence)."""
    if isinstance(space, gym.spaces.Dict) and isinstance(value, dict):
        out, notes = dict(value), []
        for key, sub in space.spaces.items():
            if key in value:
                out[key], more = conform(value[key], sub, f"{path}[{key!r}]")
                notes += more
        return out, notes
    if isinstance(space, gym.spaces.Tuple) and isinstance(value, list | tuple):
        if len(value) != len(space.spaces):
            return value, []
        pairs = enumerate(zip(value, space.spaces, strict=True))
        parts = [conform(v, sub, f"{path}[{i}]") for i, (v, sub) in pairs]
        notes = [n for _, more in parts for n in more]
        if isinstance(value, list):
            notes.insert(0, Conversion(path, "Python list", "tuple"))
        return tuple(v for v, _ in parts), notes
    if isinstance(space, gym.spaces.Discrete):
        return _conform_integer(value, path)
    if isinstance(space, gym.spaces.Box | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary):
        return _conform_array(value, space, path)
    return value, []


def _conform_integer(value: Any, path: str) -> tuple[Any, list[Conversion]]:
    """A Discrete value: any integral number (``3.0``, ``np.array(3)``) as an int64; a float
    one is converted, and refused (the vector env's int64 array takes no float)."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return value, []
    number = np.asarray(value)
    if number.shape != () or number.dtype.kind not in "iuf" or number != np.round(number):
        return value, []
    fix = "return a Python int (int(value)) for a Discrete"
    return np.int64(number), [_conversion(path, value, number.dtype, np.dtype(np.int64), fix)]


def _conform_array(value: Any, space: gym.Space, path: str) -> tuple[Any, list[Conversion]]:
    """A Box, MultiDiscrete or MultiBinary value of the right shape in the space's dtype."""
    want = np.dtype(space.dtype)
    if isinstance(value, np.ndarray) and value.dtype == want:
        return value, []
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        return value, []
    if array.dtype.kind not in "biuf" or array.shape != space.shape:
        return value, []
    if want.kind in "iub" and array.dtype.kind == "f" and not (array == np.round(array)).all():
        return value, []  # 0.5 for an integer space is a wrong value, not a wrong type
    held = _unheld(array, want)
    if held is not None:
        bounds = (
            f"the space's [{space.low.min()}, {space.high.max()}], "
            if isinstance(space, gym.spaces.Box)
            else ""
        )
        refused = f"values {held} outside {bounds}which {want} cannot hold (they would wrap around)"
        fix = "clip the values to the space's bounds, or declare a dtype that holds them"
        return value, [Conversion(path, _kind(value), str(want), refused, fix)]
    fix = f"return {want} arrays: np.zeros(..., np.{want}), or value.astype(np.{want})"
    return array.astype(want), [_conversion(path, value, array.dtype, want, fix)]


def _unheld(array: np.ndarray, want: np.dtype) -> str | None:
    """``min..max`` of ``array`` where some of its values are beyond what ``want`` can hold."""
    if array.size == 0 or want.kind not in "iu" or array.dtype.kind == "b":
        return None
    info = np.iinfo(want)
    low, high = array.min(), array.max()
    return f"{low}..{high}" if low < info.min or high > info.max else None


def _conversion(path: str, value: Any, got: np.dtype, want: np.dtype, fix: str) -> Conversion:
    """The conversion of ``value`` (read as ``got``) to ``want``, refused (``fix`` the line that
    mends it) where gymnasium's vector env would not make it: numpy's ``same_kind`` casting, as
    it stacks."""
    if np.can_cast(got, want, "same_kind"):
        return Conversion(path, _kind(value), str(want))
    refused = (
        f"{_kind(value)} where the space says {want}, and RLlib does not cast {got} to {want}"
        " (gymnasium's vector env refuses it as it stacks observations)"
    )
    return Conversion(path, _kind(value), str(want), refused, fix)


@dataclass(frozen=True)
class ActLeaf:
    """One part of an action and where its distribution inputs sit."""

    path: tuple[Any, ...]
    space: gym.Space
    start: int  # first column in the action distribution inputs
    width: int  # columns it takes there
    mask_start: int | None  # first mask entry (discrete leaves only)

    @property
    def discrete(self) -> bool:
        return self.mask_start is not None

    @property
    def choices(self) -> int:
        """Mask entries of a discrete leaf (0 for a Box)."""
        return self.width if self.discrete else 0


def action_leaves(space: gym.Space) -> list[ActLeaf]:
    """The parts of an action space in RLlib's distribution order (Dict keys sorted); raises SpaceError."""
    leaves: list[ActLeaf] = []
    columns = mask = 0

    def walk(sub: gym.Space, path: tuple[Any, ...]) -> None:
        nonlocal columns, mask
        if isinstance(sub, gym.spaces.Tuple):
            for i, child in enumerate(sub.spaces):
                walk(child, (*path, i))
            return
        if isinstance(sub, gym.spaces.Dict):
            for key in sorted(sub.spaces):
                walk(sub.spaces[key], (*path, key))
            return
        if isinstance(sub, gym.spaces.Box):
            if len(sub.shape) > 1:
                raise SpaceError(f"a Box action of shape {sub.shape} has no default distribution; flatten it")
            if np.issubdtype(sub.dtype, np.integer):
                raise SpaceError(
                    f"an integer Box action ({sub}) has no default distribution; use MultiDiscrete"
                )
            width = 2 * int(np.prod(sub.shape))
            leaves.append(ActLeaf(path, sub, columns, width, None))
        elif isinstance(sub, gym.spaces.Discrete):
            width = int(sub.n)
            leaves.append(ActLeaf(path, sub, columns, width, mask))
            mask += width
        elif isinstance(sub, gym.spaces.MultiDiscrete):
            if sub.nvec.ndim != 1:
                raise SpaceError(
                    f"a MultiDiscrete action of shape {sub.nvec.shape} has no default distribution"
                )
            width = int(np.sum(sub.nvec))
            leaves.append(ActLeaf(path, sub, columns, width, mask))
            mask += width
        else:
            raise SpaceError(f"{type(sub).__name__} actions ({sub}) have no default distribution")
        columns += width

    walk(space, ())
    return leaves


def branch_sizes(space: gym.Space) -> list[int]:
    """Choices per branch of a Discrete (one branch) or MultiDiscrete space."""
    if isinstance(space, gym.spaces.Discrete):
        return [int(space.n)]
    if isinstance(space, gym.spaces.MultiDiscrete):
        return [int(n) for n in space.nvec.ravel()]
    raise TypeError(f"not a discrete space: {space}")


def mask_size(action_space: gym.Space) -> int:
    """Entries an action mask must have for this action space (0: nothing to mask)."""
    return sum(leaf.choices for leaf in action_leaves(action_space))


def split_mask(action_space: gym.Space, mask: np.ndarray) -> Any:
    """A flat mask -> the ``mask=`` argument of ``action_space.sample`` (per leaf, per branch)."""
    flat = np.asarray(mask, dtype=np.int8).ravel()

    def per_branch(sub: gym.Space, start: int) -> Any:
        if isinstance(sub, gym.spaces.Discrete):
            return flat[start : start + int(sub.n)]
        bounds = np.cumsum([0, *branch_sizes(sub)]) + start
        return tuple(flat[lo:hi] for lo, hi in itertools.pairwise(bounds))

    by_path = {leaf.path: leaf for leaf in action_leaves(action_space)}

    def build(sub: gym.Space, path: tuple[Any, ...]) -> Any:
        if isinstance(sub, gym.spaces.Tuple):
            return tuple(build(child, (*path, i)) for i, child in enumerate(sub.spaces))
        if isinstance(sub, gym.spaces.Dict):
            return {key: build(child, (*path, key)) for key, child in sub.spaces.items()}
        leaf = by_path[path]
        return per_branch(sub, leaf.mask_start) if leaf.mask_start is not None else None

    return build(action_space, ())


def allowed_version(action_space: gym.Space, action: Any, mask: np.ndarray) -> Any:
    """``action`` with each forbidden discrete choice replaced by the first allowed one of its branch."""
    per_leaf = split_mask(action_space, mask)

    def fix(sub: gym.Space, value: Any, allowed: Any) -> Any:
        if isinstance(sub, gym.spaces.Tuple):
            return tuple(fix(s, v, a) for s, v, a in zip(sub.spaces, value, allowed, strict=True))
        if isinstance(sub, gym.spaces.Dict):
            return {k: fix(s, value[k], allowed[k]) for k, s in sub.spaces.items()}
        if isinstance(sub, gym.spaces.Discrete):
            choice = int(value) - int(sub.start)
            return value if allowed[choice] or not allowed.any() else int(sub.start) + int(np.argmax(allowed))
        if isinstance(sub, gym.spaces.MultiDiscrete):
            out = np.array(value, copy=True)
            for i, branch in enumerate(allowed):
                if not branch[int(out[i])] and branch.any():
                    out[i] = int(np.argmax(branch))
            return out
        return value

    return fix(action_space, action, per_leaf)


def sample_allowed(action_space: gym.Space, observation: Any) -> Any:
    """A random action; only allowed ones when the observation carries an action mask."""
    if isinstance(observation, dict) and MASK_KEY in observation and mask_size(action_space):
        return action_space.sample(mask=split_mask(action_space, observation[MASK_KEY]))
    return action_space.sample()


def describe_space(space: gym.Space) -> str:
    """A short human description: ``Discrete(3)``, ``24x24x3 uint8 image``, ``Box(4,)``."""
    if isinstance(space, TextTokens):
        return f"text ({space.shape[0]} characters)"
    if isinstance(space, EntitySet):
        return f"set of up to {space.shape[0]} entities x {space.shape[1]}"
    if isinstance(space, gym.spaces.Box):
        layout = image_layout(space)
        if layout is not None:
            dims = "x".join(str(d) for d in space.shape)
            return f"{dims} {space.dtype} image" + (" (channels first)" if layout == "chw" else "")
        return f"Box{space.shape}"
    if isinstance(space, gym.spaces.Discrete):
        return f"Discrete({space.n})"
    if isinstance(space, gym.spaces.MultiDiscrete):
        return f"MultiDiscrete({space.nvec.tolist()})"
    if isinstance(space, gym.spaces.MultiBinary):
        return f"MultiBinary({space.n})"
    if isinstance(space, gym.spaces.Dict):
        if has_action_mask(space):
            return f"{describe_space(space[OBS_KEY])} + action mask"
        return "Dict(" + ", ".join(f"{k}: {describe_space(v)}" for k, v in space.spaces.items()) + ")"
    if isinstance(space, gym.spaces.Tuple):
        return "Tuple(" + ", ".join(describe_space(s) for s in space.spaces) + ")"
    return str(space)


def describe_actions(space: gym.Space) -> str:
    """``Discrete(5)``, ``2 continuous``, ``hybrid 1 continuous + Discrete(3)``."""
    leaves = action_leaves(space)
    continuous = sum(leaf.width // 2 for leaf in leaves if not leaf.discrete)
    parts = [f"{continuous} continuous"] if continuous else []
    parts += [describe_space(leaf.space) for leaf in leaves if leaf.discrete]
    text = " + ".join(parts)
    return f"hybrid {text}" if continuous and len(parts) > 1 else text
