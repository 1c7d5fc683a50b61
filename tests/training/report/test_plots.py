"""Reward figures: drawn by the painter process of a train.py run, else in the training process."""

from __future__ import annotations

import csv
import os
import signal
import time
from pathlib import Path

import pytest

from envsdk.cluster.ray_session import children_running
from envsdk.progress import RETURN, STEPS
from envsdk.training.report import plots
from envsdk.training.report.plots import Painter, plot_reward_curve

PNG = b"\x89PNG\r\n\x1a\n"


SIGNAL = "learners/main/reward_signals/curiosity/reward_mean"


def write_progress(trial: Path, rows: int, elo: bool = False, signals: bool = False) -> None:
    columns = (
        [STEPS, "time_total_s", RETURN]
        + (["self_play/main/elo"] if elo else [])
        + ([SIGNAL] if signals else [])
    )
    with (trial / "progress.csv").open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(columns)
        for i in range(rows):
            extra = ([1200 + i] if elo else []) + ([0.01 * i] if signals else [])
            out.writerow([1000 * i, 0.5 * i, "" if i == 0 else 10.0 * i, *extra])


def painter_pids() -> list[int]:
    """Live painter processes started by this process."""
    return children_running(b"reward_figure.py")


def the_painter() -> int:
    """The one painter just started.  Popen returns once the exec is past its point of no return,
    but the kernel sets the new program's command line a moment later (an empty
    ``/proc/PID/cmdline`` until then), so a loaded machine needs a short wait."""
    deadline = time.monotonic() + 10
    while not (pids := painter_pids()) and time.monotonic() < deadline:
        time.sleep(0.01)
    (pid,) = pids
    return pid


def gone(pid: int) -> bool:
    """Ended and reaped (a zombie still has its /proc entry)."""
    return not Path(f"/proc/{pid}").exists()


def ignores_sigint(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    ignored = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    return bool(ignored & (1 << (signal.SIGINT - 1)))


def no_drawing_here(*args: object) -> None:
    raise AssertionError("drawn in the training process")


@pytest.mark.parametrize(("elo", "signals"), [(False, False), (True, False), (True, True)])
def test_one_painter_draws_every_figure_of_a_run_and_ends_with_it(tmp_path, monkeypatch, elo, signals):
    trials = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    for i, trial in enumerate(trials):
        trial.mkdir()
        write_progress(trial, 5 + i, elo=elo, signals=signals)
    monkeypatch.setattr(plots, "draw", no_drawing_here)
    with Painter() as painter:
        pid = the_painter()
        outs = [plot_reward_curve(trial, f"trial {trial.name}", painter) for trial in trials]
        assert painter_pids() == [pid]  # the same process, still there for the next trial
    assert gone(pid)
    for trial, out in zip(trials, outs, strict=True):
        assert out == trial / "reward.png"
        data = out.read_bytes()
        assert data.startswith(PNG)
        width = int.from_bytes(data[16:20], "big")
        assert width == 1000 + 500 * (elo + signals)  # the ELO and signals panels widen it (dpi 100)
    if signals:
        assert plots.read_progress(trials[0])[-1]["signals"] == {"main curiosity": 0.04}


def test_a_figure_the_painter_cannot_draw_is_drawn_here_and_the_painter_ends(tmp_path, monkeypatch):
    write_progress(tmp_path, 5)
    drawn_here = []
    monkeypatch.setattr(plots, "draw", lambda rows, title, out: drawn_here.append(out))
    with Painter() as painter:
        pid = the_painter()
        # A folder where the PNG should be: the painter's savefig fails, and it answers why.
        (tmp_path / "reward.png").mkdir()
        assert plot_reward_curve(tmp_path, "", painter) == tmp_path / "reward.png"
        assert drawn_here == [tmp_path / "reward.png"]
        assert gone(pid)
        assert plot_reward_curve(tmp_path, "", painter) is not None  # the next figure: here too
        assert len(drawn_here) == 2 and painter_pids() == []


def test_a_painter_that_died_leaves_the_figure_to_this_process(tmp_path):
    write_progress(tmp_path, 5)
    with Painter() as painter:
        pid = the_painter()
        os.kill(pid, signal.SIGKILL)
        out = plot_reward_curve(tmp_path, "", painter)
        assert gone(pid)
    assert out is not None and out.read_bytes().startswith(PNG)


def test_the_painter_outlives_a_ctrl_c_to_the_process_group(tmp_path, monkeypatch):
    """train.py answers the first Ctrl-C by checkpointing and stopping: the figure is still wanted."""
    write_progress(tmp_path, 5)
    monkeypatch.setattr(plots, "draw", no_drawing_here)
    with Painter() as painter:
        pid = the_painter()
        deadline = time.monotonic() + 30
        while not ignores_sigint(pid):  # past its interpreter's start-up
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(pid, signal.SIGINT)
        assert plot_reward_curve(tmp_path, "", painter) is not None


def test_a_painter_with_nothing_to_draw_ends_with_the_block(tmp_path):
    with Painter():
        pid = the_painter()
    assert gone(pid)
    assert plot_reward_curve(tmp_path, "") is None  # no progress.csv: no figure, nothing started
    write_progress(tmp_path, 1)  # one row, and its return is empty
    with Painter() as painter:
        pid = the_painter()
        assert plot_reward_curve(tmp_path, "", painter) is None
    assert gone(pid)


def test_no_interpreter_to_start_leaves_the_figure_to_this_process(tmp_path, monkeypatch):
    write_progress(tmp_path, 5)
    monkeypatch.setattr(plots.sys, "executable", str(tmp_path / "no-python"))
    with Painter() as painter:
        assert painter_pids() == []
        out = plot_reward_curve(tmp_path, "", painter)
    assert out is not None and out.read_bytes().startswith(PNG)
