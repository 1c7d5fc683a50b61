"""loggers: [wandb, mlflow] through Tune's own logger callbacks, offline, in-process and under Tune."""

from __future__ import annotations

import pytest

from envsdk.config.loggers import parse_loggers
from envsdk.errors import UserError
from tests.helpers import progress_rows, trial_dirs


@pytest.fixture
def offline_wandb(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["csv", "json", "tensorboard"], {}),  # always written: nothing to add
        (["TBXLogger", "CSVLogger", "JsonLogger"], {}),  # Ray 1.x class names
        ("mlflow", {"mlflow": {}}),
        ([{"mlflow": {"experiment_name": "x"}}, "tbx"], {"mlflow": {"experiment_name": "x"}}),
        ([{"wandb": {"project": "p", "entity": "me"}}], {"wandb": {"project": "p", "entity": "me"}}),
    ],
)
def test_loggers_parse(value, expected, offline_wandb):
    assert parse_loggers(value, "f.yaml:3") == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["tensorbord"], "did you mean 'tensorboard'"),
        (["csv", {"csv": {"x": 1}}], "takes no options"),
        (["mlflow", "mlflow"], "named twice"),
        ([{"mlflow": {"tracking_url": "x"}}], "did you mean 'tracking_uri'"),
        ([["wandb"]], "a logger is a name or"),
    ],
)
def test_logger_mistakes(value, message, offline_wandb):
    with pytest.raises(UserError, match=message) as err:
        parse_loggers(value, "f.yaml:3")
    assert str(err.value).startswith("f.yaml:3")


def test_wandb_without_a_key_or_offline_mode_is_refused(monkeypatch, tmp_path):
    for var in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc from `wandb login`
    with pytest.raises(UserError, match="no API key") as err:
        parse_loggers(["wandb"], "f.yaml:3")
    assert "WANDB_MODE=offline" in (err.value.hint or "")
    assert parse_loggers([{"wandb": {"mode": "offline"}}], "f.yaml:3") == {"wandb": {"mode": "offline"}}


def _mlflow_metric(exp_dir, name: str) -> list[tuple[float, int]]:
    """(value, step) rows of one metric of the experiment's only MLflow run (file store layout)."""
    (run,) = [p for p in (exp_dir / "mlruns").glob("*/*") if (p / "metrics").is_dir()]
    rows = (run / "metrics" / name).read_text().split("\n")
    return [(float(r.split()[1]), int(r.split()[2])) for r in rows if r.strip()]


@pytest.mark.parametrize("path", ["in-process", "tune"])
def test_wandb_and_mlflow_log_every_iteration_offline(train, tmp_path, path, offline_wandb):
    config = tmp_path / "logged.yaml"
    config.write_text(
        "cartpole-logged:\n"
        "  run: PPO\n"
        "  env: CartPole-v1\n"
        "  loggers: [csv, json, tensorboard, wandb, {mlflow: {tags: {owner: tests}}}]\n"
        + ("  scheduler: {type: fifo}\n" if path == "tune" else "")  # a scheduler means a Tune run
        + "  config: {num_env_runners: 0, train_batch_size: 200, minibatch_size: 100, num_epochs: 1}\n"
    )
    out = train("-f", str(config), "--stop-iters", "2")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "notice: mlflow: runs go to file://" in out.stdout + out.stderr
    (trial,) = trial_dirs(train.results)
    assert len(progress_rows(trial)) == 2
    (offline,) = trial.glob("wandb/offline-run-*")
    (records,) = offline.glob("run-*.wandb")
    assert records.stat().st_size > 1000, "wandb wrote no history"
    returns = _mlflow_metric(trial.parent, "env_runners/episode_return_mean")
    assert [step for _, step in returns] == [1, 2], returns
    tags = {p.name: p.read_text() for p in next(trial.parent.glob("mlruns/*/*/tags")).iterdir()}
    assert tags.get("owner") == "tests"
