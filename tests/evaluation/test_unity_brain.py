"""rollout.py --export-unity: ML-Agents brains for each kind of behavior, and the games that run them.

The chase round trip (trained to its target) and the SeekWatch pair (masked hybrid + camera only) are
checked in test_unity_training.py, on the runs trained there; here: continuous actions, a camera beside
a vector (two inputs, in the game's order), a plugin network on two behaviors, and the refusal.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.helpers import export_and_check_brains, rollout_here, trial_dirs

BRIEF = ["--stop-iters", "1", "--config.train_batch_size=200", "--config.minibatch_size=100"]


def _trained(train, *args: str) -> str:
    before = set(trial_dirs(train.results))
    out = train(*args, *BRIEF, "--checkpoint-at-end", timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (trial,) = set(trial_dirs(train.results)) - before
    return str(trial)


@pytest.mark.parametrize(
    ("extra", "inputs", "outputs"),
    [
        (["--actions", "continuous"], ["obs_0"], "continuous_actions"),
        (["--visual", "16"], ["obs_0", "obs_1", "action_masks"], "discrete_actions"),  # vector, camera
    ],
    ids=["continuous", "vector-and-camera"],
)
def test_chase_layouts_export_as_brains_for_each_unity_target(train, tmp_path, extra, inputs, outputs):
    """Brains for Sentis (opset 15) and Barracuda (opset 9), each checked against that package's operator
    table, and each playing the stand-in, which exits on a masked choice or an action outside [-1, 1]."""
    import onnx

    args = ", ".join(f"'{a}'" for a in [*extra, "--max-steps", "30"])
    trial = _trained(train, "-f", "configs/unity-chase.yaml", f"--config.env_config.additional_args=[{args}]")
    for target, opset in (("sentis", 15), ("barracuda", 9)):
        index = export_and_check_brains(trial, tmp_path / target, target)
        (entry,) = index["behaviors"].values()
        names = [name for name, _ in entry["observations"]]
        assert names == (["vector", "camera"] if "--visual" in extra else ["vector"])
        model = onnx.load(str(tmp_path / target / "brains" / entry["file"]))
        assert [i.name for i in model.graph.input] == inputs
        assert outputs in [o.name for o in model.graph.output]
        assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == opset
        played = subprocess.run(
            [sys.executable, "-m", "unity_bridge.standin.player", "--game", "chase", *extra,
             "--max-steps", "30", "-nographics", "--brain", str(tmp_path / target / "brains"),
             "--episodes", "5", "--stochastic"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert played.returncode == 0, played.stdout + played.stderr[-2000:]


def test_target_tables_refuse_what_the_package_does_not_load():
    """The checks themselves, on graphs made to break them: an operator Barracuda lacks, Split-13's
    ``split`` input, a Gemm attribute it ignores, and an opset above what each target imports."""
    from onnx import TensorProto, helper

    from unity_bridge.targets import TARGETS, target_problems

    def model(nodes: list, opset: int) -> object:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        graph = helper.make_graph(nodes, "g", [x], [y])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])

    erf = model([helper.make_node("Erf", ["x"], ["y"])], 9)
    assert any("has no Erf" in p for p in target_problems(erf, TARGETS["barracuda"]))
    assert target_problems(model([helper.make_node("Erf", ["x"], ["y"])], 13), TARGETS["sentis"]) == []
    split = model([helper.make_node("Split", ["x", "sizes"], ["y", "z"], axis=1)], 13)
    problems = target_problems(split, TARGETS["barracuda"])
    assert any("opset 13" in p for p in problems) and any("at most 1 input" in p for p in problems)
    gemm = model([helper.make_node("Gemm", ["x", "w"], ["y"], alpha=2.0)], 9)
    assert any("alpha" in p for p in target_problems(gemm, TARGETS["barracuda"]))
    assert any("opset 17" in p for p in target_problems(model([], 17), TARGETS["sentis"]))


def test_dodgeball_plugin_brains_play_both_teams(train, tmp_path):
    """models/dodgenet.py on two behaviors (camera + vector, masked branches), one policy each."""
    trial = _trained(
        train, "-f", "configs/unity-dodgeball.yaml", "--config.env_config.no_graphics=true",
        f"--config.env_config.log_folder={tmp_path / 'logs'}",
    )  # fmt: skip
    index = export_and_check_brains(trial, tmp_path)
    assert {b: e["file"] for b, e in index["behaviors"].items()} == {
        "Dodgeball?team=0": "blue.onnx",
        "Dodgeball?team=1": "red.onnx",
    }
    game = ["--game", "dodgeball", "--agents", "2", "--visual", "16", "--max-steps", "60", "-nographics"]
    for mode in ([], ["--stochastic"]):  # the player exits 5 on a masked action
        played = subprocess.run(
            [sys.executable, "-m", "unity_bridge.standin.player", *game, "--brain", str(tmp_path / "brains"),
             "--episodes", "10", *mode],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert played.returncode == 0, played.stdout + played.stderr[-2000:]
        assert re.search(r"brain: 10 rounds, return mean -?[\d.]+", played.stdout), played.stdout


def test_refused_without_a_game(train, tmp_path):
    """A checkpoint whose env is not a Unity game (brains with memory: test_memory_export.py)."""
    cartpole = _trained(train, "-f", "configs/cartpole-ppo.yaml")
    out = rollout_here(cartpole, "--export-unity", str(tmp_path / "brains"))
    assert out.returncode == 2 and "is not a Unity game" in out.stderr and "Traceback" not in out.stderr, (
        out.stderr
    )
    assert not (tmp_path / "brains" / "brains.json").exists()
