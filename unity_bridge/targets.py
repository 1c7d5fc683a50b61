"""What each Unity inference package loads: the ONNX opset and operators a brain may use.

``rollout.py --export-unity DIR --unity-target barracuda|sentis`` writes brains for one of
them, and :func:`target_problems` checks every node of a file against its table.  The tables
are Unity's published lists of supported ONNX operators (Barracuda 2.0's "Supported ONNX
operators" page; Sentis 2.1's, now the Inference Engine's), with the attributes those pages say
are not supported.  The opsets: ML-Agents' own exporter writes opset 9, which Barracuda's
maintainers recommend (it does not read, for example, Split-13's ``split`` input); Sentis
imports opsets 7 to 15.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# fmt: off
_COMMON = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan", "Atanh",
    "AveragePool", "BatchNormalization", "Cast", "Ceil", "Clip", "Concat", "Constant", "ConstantOfShape",
    "Conv", "ConvTranspose", "Cos", "Cosh", "DepthToSpace", "Div", "Dropout", "Elu", "Equal", "Exp",
    "Expand", "Flatten", "Floor", "Gather", "Gemm", "GlobalAveragePool", "GlobalMaxPool", "Greater",
    "Identity", "InstanceNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax", "LRN",
    "LSTM", "MatMul", "Max", "MaxPool", "Mean", "Min", "Mul", "Multinomial", "Neg", "NonMaxSuppression",
    "NonZero", "Not", "OneHot", "Or", "Pad", "Pow", "PRelu", "RandomNormal", "RandomNormalLike",
    "RandomUniform", "RandomUniformLike", "Reciprocal", "ReduceMax", "ReduceMean", "ReduceMin",
    "ReduceProd", "ReduceSum", "Relu", "Reshape", "Resize", "Round", "Selu", "Shape", "Sigmoid", "Sin",
    "Sinh", "Slice", "Softmax", "SpaceToDepth", "Split", "Sqrt", "Squeeze", "Sub", "Sum", "Tan", "Tanh",
    "Tile", "TopK", "Transpose", "Unsqueeze", "Upsample", "Where", "Xor",
})
BARRACUDA_OPERATORS = _COMMON | {"ImageScaler"}
SENTIS_OPERATORS = _COMMON | {
    "Bernoulli", "CastLike", "Celu", "CumSum", "Einsum", "Erf", "EyeLike", "GatherElements", "GatherND",
    "Gelu", "GreaterOrEqual", "GridSample", "Hardmax", "HardSigmoid", "HardSwish", "IsInf", "IsNaN",
    "LayerNormalization", "Mish", "Mod", "Range", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare", "RoiAlign", "ScatterElements", "ScatterND", "Shrink", "Sign",
    "Size", "Softplus", "Softsign", "ThresholdedRelu", "Trilu",
}
# fmt: on


@dataclass(frozen=True)
class UnityTarget:
    """One Unity inference package: the opsets it imports, its operators, and attribute limits."""

    name: str
    opset: int  # the opset brains are written in (and the highest it imports)
    lowest_opset: int
    loads_in: str  # which ML-Agents and Unity packages load such brains
    operators: frozenset[str]
    # operator -> {attribute: the only value it takes (None: must be absent)}
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # operator -> the most inputs it takes (Split-13's `split` input, for one)
    max_inputs: dict[str, int] = field(default_factory=dict)


TARGETS = {
    "sentis": UnityTarget(
        "sentis",
        15,
        7,
        "com.unity.ml-agents 3.x and 4.x (ML-Agents Release 21 on), with com.unity.sentis 1.x-2.x, since"
        " renamed com.unity.ai.inference (Unity 2023.2 / Unity 6)",
        SENTIS_OPERATORS,
        {
            "AveragePool": {"ceil_mode": 0, "count_include_pad": 0},
            "BatchNormalization": {"momentum": None, "spatial": None, "training_mode": 0},
        },
    ),
    "barracuda": UnityTarget(
        "barracuda",
        9,
        7,
        "com.unity.ml-agents 2.x (ML-Agents Release 17-20), with com.unity.barracuda 2.x (Unity 2019.4+)",
        BARRACUDA_OPERATORS,
        {
            "ArgMax": {"select_last_index": 0},
            "ArgMin": {"select_last_index": 0},
            "Gemm": {"alpha": 1.0, "beta": 1.0, "transA": 0},
            "AveragePool": {"ceil_mode": 0, "count_include_pad": 0},
            "MaxPool": {"ceil_mode": 0, "dilations": None, "storage_order": 0},
            "ConvTranspose": {"dilations": None, "group": 1, "output_shape": None},
            "OneHot": {"axis": None},
            "Constant": {"sparse_value": None},
        },
        {"Split": 1},  # the split sizes as an attribute (opset < 13), not an input
    ),
}
DEFAULT_TARGET = "sentis"


def target_problems(model: Any, target: UnityTarget) -> list[str]:
    """Why ``model`` (an ``onnx.ModelProto``) would not load with ``target``; empty when it would."""
    from onnx import helper

    problems = []
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if not target.lowest_opset <= opset <= target.opset:
        problems.append(
            f"opset {opset} is outside what {target.name} imports ({target.lowest_opset} to {target.opset})"
        )
    for node in model.graph.node:
        where = f"node '{node.name or node.output[0]}' ({node.op_type})"
        if node.op_type not in target.operators:
            problems.append(f"{where}: {target.name} has no {node.op_type} operator")
            continue
        for attribute in node.attribute:
            allowed = target.attributes.get(node.op_type, {})
            if attribute.name not in allowed:
                continue
            value = helper.get_attribute_value(attribute)
            if allowed[attribute.name] is None or value != allowed[attribute.name]:
                problems.append(f"{where}: {target.name} does not support its {attribute.name} ({value!r})")
        most = target.max_inputs.get(node.op_type)
        if most is not None and len([i for i in node.input if i]) > most:
            problems.append(f"{where}: {target.name} takes at most {most} input(s), it has {len(node.input)}")
    return problems
