"""ML-Agents' .demo files: ours read back whole, load in mlagents 1.1.0's own demo_loader with the same
contents, and a file mlagents' own writer made reads in ours as its loader reads it.

The counterpart runs in the side venv the Unity benchmark makes (benchmarks/unity_vs_mlagents.py);
where it is absent those tests skip, and the recorded file's expected contents still test ours."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import ROOT
from unity_bridge.demo_files import (
    INITIAL_POS,
    DemoFileError,
    Demonstration,
    check_demo,
    read_demo,
    write_demo,
)
from unity_bridge.protocol import communicator_objects_pb2 as pb

MLAGENTS_PYTHON = Path("/root/.cache/envsdk/mlagents-1.1.0/bin/python")
DEMOS = ROOT / "tests" / "data" / "demos"
SIDE = DEMOS / "mlagents_side.py"
needs_mlagents = pytest.mark.skipif(
    not MLAGENTS_PYTHON.exists(), reason=f"mlagents 1.1.0's side venv is absent ({MLAGENTS_PYTHON})"
)

# name -> (observation shapes, continuous size, discrete branches)
LAYOUTS = {
    "one-vector": (((5,),), 2, ()),
    "two-vectors": (((3,), (4,)), 0, (3,)),
    "visual-hwc": (((6, 8, 3),), 1, ()),
    "continuous": (((4,),), 3, ()),
    "multi-branch": (((4,),), 0, (3, 2, 4)),
    "hybrid": (((2,), (5, 7, 1)), 2, (2, 3)),
}
# Three episodes: ended by the game, ended by the step limit, and one the recording cut short.
DONES = np.array([0, 0, 0, 1, 0, 1, 0, 0], bool)
MAX_STEP = np.array([0, 0, 0, 0, 0, 1, 0, 0], bool)


def make_demo(layout: str, masks: bool = False, seed: int = 0) -> Demonstration:
    shapes, continuous, branches = LAYOUTS[layout]
    rng = np.random.default_rng(seed)
    rows = len(DONES)
    return Demonstration(
        behavior_name=f"{layout}?team=0",
        observation_shapes=shapes,
        continuous_size=continuous,
        discrete_branches=branches,
        observations=tuple(rng.uniform(-1, 1, (rows, *s)).astype(np.float32) for s in shapes),
        continuous_actions=rng.uniform(-1, 1, (rows, continuous)).astype(np.float32),
        discrete_actions=np.asarray([rng.integers(0, b, rows) for b in branches], np.int64).T.reshape(
            rows, len(branches)
        ),
        rewards=rng.uniform(-1, 1, rows).astype(np.float32),
        dones=DONES,
        max_step_reached=MAX_STEP,
        action_masks=rng.random((rows, sum(branches))) > 0.3 if masks else None,
        final_observations=tuple(rng.uniform(-1, 1, (3, *s)).astype(np.float32) for s in shapes),
    )


def assert_same(ours: Demonstration, theirs: Demonstration) -> None:
    assert (ours.behavior_name, ours.observation_shapes) == (theirs.behavior_name, theirs.observation_shapes)
    assert (ours.continuous_size, ours.discrete_branches) == (
        theirs.continuous_size,
        theirs.discrete_branches,
    )
    for a, b in zip(ours.observations, theirs.observations, strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(ours.final_observations or (), theirs.final_observations or (), strict=True):
        np.testing.assert_array_equal(a, b)
    for name in ("continuous_actions", "discrete_actions", "rewards", "dones", "max_step_reached"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name), err_msg=name)
    if theirs.action_masks is None:
        assert ours.action_masks is None
    else:
        np.testing.assert_array_equal(ours.action_masks, theirs.action_masks)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_written_demo_reads_back_whole(tmp_path: Path, layout: str) -> None:
    demo = make_demo(layout, masks=bool(LAYOUTS[layout][2]))
    write_demo(tmp_path / "play.demo", demo)
    back = read_demo(tmp_path / "play.demo")
    assert_same(back, demo)
    assert back.episodes == 3
    assert back.episode_returns() == pytest.approx(
        [demo.rewards[:4].sum(), demo.rewards[4:6].sum(), demo.rewards[6:].sum()]
    )
    assert [p.name for p in tmp_path.iterdir()] == ["play.demo"]  # no temporary file left


@pytest.fixture(scope="module")
def mlagents_loaded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, np.ndarray]]:
    """What mlagents' loader reads of each layout's file (written by ours) and of mlagents' own file,
    in one run of the side venv's python."""
    folder = tmp_path_factory.mktemp("mlagents")
    files = {layout: folder / f"{layout}.demo" for layout in LAYOUTS}
    for layout, path in files.items():
        write_demo(path, make_demo(layout, masks=bool(LAYOUTS[layout][2])))
    files["mlagents_written"] = DEMOS / "mlagents_written.demo"
    pairs = [str(p) for name, path in files.items() for p in (path, folder / f"{name}.npz")]
    done = subprocess.run(
        [str(MLAGENTS_PYTHON), str(SIDE), "load", *pairs], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = {}
    for name in files:
        with np.load(folder / f"{name}.npz") as data:
            loaded[name] = dict(data)
    return loaded


def assert_mlagents_reads(theirs: dict[str, np.ndarray], demo: Demonstration) -> None:
    """mlagents' buffer pairs each record with the next one's reward and done, as our rows do; its rows
    from records that end an episode (an observation with no decision) are left out of the comparison."""
    decisions = ~theirs["record_done"][:-1]
    assert int(theirs["continuous_size"]) == demo.continuous_size
    assert tuple(theirs["branches"]) == demo.discrete_branches
    for index, shape in enumerate(demo.observation_shapes):
        seen = theirs[f"obs_{index}"][decisions]
        if len(shape) == 3:  # mlagents 1.x lays a camera out channels first
            assert tuple(theirs[f"shape_{index}"]) == (shape[2], shape[0], shape[1])
            seen = seen.transpose(0, 2, 3, 1)
        else:
            assert tuple(theirs[f"shape_{index}"]) == shape
        np.testing.assert_allclose(seen, demo.observations[index], atol=1e-6)
    if demo.continuous_size:
        np.testing.assert_array_equal(theirs["continuous"][decisions], demo.continuous_actions)
    if demo.discrete_branches:
        np.testing.assert_array_equal(theirs["discrete"][decisions], demo.discrete_actions)
    np.testing.assert_array_equal(theirs["reward"][decisions], demo.rewards)
    np.testing.assert_array_equal(theirs["done"][decisions], demo.dones)
    ends = theirs["record_done"]
    np.testing.assert_array_equal(theirs["record_max_step"][ends], demo.max_step_reached[demo.dones])


@needs_mlagents
@pytest.mark.parametrize("layout", LAYOUTS)
def test_mlagents_loader_reads_ours(mlagents_loaded: dict[str, dict[str, np.ndarray]], layout: str) -> None:
    demo = make_demo(layout, masks=bool(LAYOUTS[layout][2]))
    theirs = mlagents_loaded[layout]
    assert (
        int(theirs["expected"]) == len(theirs["record_done"]) == len(DONES) + 3
    )  # a record per step and end
    assert_mlagents_reads(theirs, demo)


# tests/data/demos/mlagents_written.demo: what mlagents' writer was given (mlagents_side.py write).
WRITTEN_REWARDS = [1, 2, 3, 4, 1, 2, 1, 2, 3]
WRITTEN_DONES = [0, 0, 0, 1, 0, 1, 0, 0, 1]


def test_reads_mlagents_written_file() -> None:
    demo = read_demo(DEMOS / "mlagents_written.demo")
    assert demo.behavior_name == "Hallway?team=0"
    assert demo.observation_shapes == ((2,), (6, 8, 3))
    assert (demo.continuous_size, demo.discrete_branches) == (0, (3, 2))
    assert demo.rewards.tolist() == WRITTEN_REWARDS
    assert demo.dones.tolist() == [bool(d) for d in WRITTEN_DONES]
    assert demo.max_step_reached.tolist() == [False] * 5 + [True] + [False] * 3
    assert demo.discrete_actions.tolist() == [[s % 3, (s + 1) % 2] for s in (0, 1, 2, 3, 0, 1, 0, 1, 2)]
    assert demo.action_masks is not None
    assert demo.action_masks[:, 1].tolist() == [s % 2 == 0 for s in (0, 1, 2, 3, 0, 1, 0, 1, 2)]
    assert demo.episodes == 3 and demo.episode_returns() == [10.0, 3.0, 6.0]
    assert demo.observations[1].min() >= 0.0 and demo.observations[1].max() <= 1.0


@needs_mlagents
def test_mlagents_written_file_reads_as_its_loader_reads_it(
    mlagents_loaded: dict[str, dict[str, np.ndarray]],
) -> None:
    assert_mlagents_reads(mlagents_loaded["mlagents_written"], read_demo(DEMOS / "mlagents_written.demo"))


def test_folder_merges_files_in_name_order(tmp_path: Path) -> None:
    first, second = make_demo("hybrid", seed=1), make_demo("hybrid", seed=2)
    write_demo(tmp_path / "b.demo", second)
    write_demo(tmp_path / "a.demo", first)
    (tmp_path / "notes.txt").write_text("not a demonstration")
    merged = read_demo(tmp_path)
    assert merged.steps == 2 * len(DONES) and merged.episodes == 6
    np.testing.assert_array_equal(merged.rewards, np.concatenate([first.rewards, second.rewards]))
    np.testing.assert_array_equal(merged.observations[1][: len(DONES)], first.observations[1])
    assert merged.dones[len(DONES) - 1] and merged.max_step_reached[len(DONES) - 1]  # ends with its file


def _one_line(error: pytest.ExceptionInfo[DemoFileError], *words: str) -> None:
    assert "\n" not in error.value.message and error.value.hint
    for word in words:
        assert word in error.value.message


def _one_record_file(obs: pb.ObservationProto) -> bytes:
    """A file of one record holding ``obs``, each message short enough for a one-byte length."""
    record = pb.AgentInfoActionPairProto(agent_info=pb.AgentInfoProto(observations=[obs]))
    brain = pb.BrainParametersProto(brain_name="B", action_spec=pb.ActionSpecProto(num_continuous_actions=1))
    meta = pb.DemonstrationMetaProto(api_version=1, number_steps=1)
    framed = [bytes([len(m.SerializeToString())]) + m.SerializeToString() for m in (meta, brain, record)]
    return framed[0].ljust(INITIAL_POS, b"\0") + framed[1] + framed[2]


def test_files_that_cannot_be_read(tmp_path: Path) -> None:
    write_demo(tmp_path / "good.demo", make_demo("one-vector"))
    data = (tmp_path / "good.demo").read_bytes()
    (tmp_path / "cut.demo").write_bytes(data[: len(data) - 7])
    (tmp_path / "noise.demo").write_bytes(bytes(range(256)) * 3)
    (tmp_path / "play.npz").write_bytes(b"")
    (tmp_path / "badpng.demo").write_bytes(
        _one_record_file(
            pb.ObservationProto(shape=[3, 4, 4], compression_type=pb.PNG, compressed_data=b"no image")
        )
    )
    (tmp_path / "empty").mkdir()
    cases = {
        "missing.demo": "does not exist",
        "play.npz": "is not a .demo file",
        "empty": "holds no .demo files",
        "cut.demo": "cut short",
        "noise.demo": str(tmp_path / "noise.demo"),
        "badpng.demo": "is corrupt: compressed observation does not start with a PNG image",
    }
    for name, words in cases.items():
        with pytest.raises(DemoFileError) as error:
            read_demo(tmp_path / name)
        _one_line(error, words)
    assert data[INITIAL_POS - 1] == 0  # the metadata padded up to where the brain parameters start


def test_folder_of_two_behaviors_is_refused(tmp_path: Path) -> None:
    write_demo(tmp_path / "a.demo", make_demo("one-vector"))
    write_demo(tmp_path / "b.demo", make_demo("continuous"))
    with pytest.raises(DemoFileError) as error:
        read_demo(tmp_path)
    _one_line(error, "b.demo", "continuous?team=0")


@pytest.mark.parametrize(
    ("shapes", "continuous", "branches", "words"),
    [
        ([(2,)], 2, (2, 3), "2 observations [(2,), (5, 7, 1)], the behavior has 1 [(2,)]"),
        ([(2,), (5, 7, 2)], 2, (2, 3), "observation 1 has shape (5, 7, 1), the behavior's is (5, 7, 2)"),
        ([(3,), (5, 7, 1)], 2, (2, 3), "observation 0 has shape (2,), the behavior's is (3,)"),
        (
            [(2,), (5, 7, 1)],
            0,
            (2, 3),
            "actions are 2 continuous + discrete branches [2, 3], the behavior's are 0",
        ),
        ([(2,), (5, 7, 1)], 2, (2, 4), "the behavior's are 2 continuous + discrete branches [2, 4]"),
    ],
)
def test_check_demo_names_the_mismatch(
    shapes: list[tuple[int, ...]], continuous: int, branches: tuple[int, ...], words: str
) -> None:
    demo = make_demo("hybrid")
    check_demo(demo, LAYOUTS["hybrid"][0], 2, (2, 3), "play.demo")
    with pytest.raises(DemoFileError) as error:
        check_demo(demo, shapes, continuous, branches, "play.demo")
    _one_line(error, "play.demo: ", words)


def test_demonstration_rows_must_agree() -> None:
    demo = make_demo("one-vector")
    with pytest.raises(DemoFileError, match=r"continuous_actions is \(8, 3\), not \(8, 2\)"):
        Demonstration(**{**vars(demo), "continuous_actions": np.zeros((8, 3), np.float32)})
