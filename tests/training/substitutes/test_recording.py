"""``output: DIR`` (envsdk/training/substitutes/sampling/recording.py): experience recorded while
training, read back by ``input: DIR``, on the batched sampler and on RLlib's; what RLlib 2.60 cannot
record is refused before anything starts; a run that wrote none of what it promised has failed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT, run_train


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def recording(tmp_path: Path, out: Path, extra: str) -> Path:
    return write(
        tmp_path / "record.yaml",
        f"""record:
  run: PPO
  env: CartPole-v1
  stop: {{training_iteration: 1}}
  config:
    output: {out}
    num_env_runners: 0
    train_batch_size: 200
    minibatch_size: 100
    num_epochs: 1
    model_config: {{fcnet_hiddens: [16]}}
{extra}""",
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stock", "extra", "sampler", "kind"),
    [
        ("0", "    output_write_episodes: false\n", "batched", "transitions"),
        ("1", "    batch_mode: complete_episodes\n", "rllib", "episodes"),
    ],
    ids=["batched-transitions", "stock-episodes"],
)
def test_output_then_input_trains_bc(
    stock: str,
    extra: str,
    sampler: str,
    kind: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ray_address: str,
) -> None:
    """What PPO records (transitions on our sampler, RLlib's default whole episodes on RLlib's in
    stock mode) is there at the end, in RLlib's layout (a write's rows in one file, RLlib's a file
    per row in stock mode), and BC trains an iteration from it.  BC runs
    in this process's trial either way: in stock mode (a Tune trial) RLlib's offline data pipeline
    waits for a CPU for ever on 2 cores, whatever the data: a limit of stock mode, not of output:.
    Both runs join the session's Ray (Ray Data writes and reads there), as other training tests do."""
    monkeypatch.setenv("ENVSDK_STOCK", stock)
    out = tmp_path / "out"
    runs = str(tmp_path / "runs")
    joined = ["--storage-path", runs, "--ray-address", ray_address]
    recorded = run_train(["-f", str(recording(tmp_path, out, extra)), *joined], timeout=240)
    said = recorded.stdout + recorded.stderr
    assert recorded.returncode == 0, said[-3000:]
    assert f"output: the sampled {kind}" in said, said[-3000:]
    assert ("sampler: RLlib's env runner loop" in said) == (sampler == "rllib" and stock == "0"), said
    files = list(out.glob("cartpoleenv/run-000000-*/*.parquet"))
    assert files, sorted(out.rglob("*"))
    # one-file-per-write: a sample's rows in one file (RLlib's: a file per row, here per episode)
    assert (len(files) <= 2) == (stock == "0"), sorted(f.name for f in files)

    bc = write(
        tmp_path / "bc.yaml",
        f"""clone:
  run: BC
  env: CartPole-v1
  stop: {{training_iteration: 1}}
  config:
    input: {out}
    train_batch_size_per_learner: 64
    evaluation_interval: 1
    evaluation_duration: 1
    evaluation_duration_unit: episodes
    model_config: {{fcnet_hiddens: [16]}}
""",
    )
    monkeypatch.delenv("ENVSDK_STOCK")
    cloned = run_train(["-f", str(bc), *joined], timeout=240)
    said = cloned.stdout + cloned.stderr
    assert cloned.returncode == 0, said[-3000:]
    assert ("input_read_episodes: true" in said) == (kind == "episodes"), said[-3000:]
    assert re.search(r"^done: clone: return \d", said, re.M), said[-3000:]


def test_multi_agent_output_is_refused_before_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RLlib 2.60 has no multi-agent recorder (its EnvRunnerGroup raises once Ray runs): one line."""
    config = write(
        tmp_path / "ma.yaml",
        f"""two:
  run: PPO
  env: multi_agent_env.TwoRunners
  config:
    output: {tmp_path / "out"}
    batch_mode: complete_episodes
    policies: [policy_0, policy_1]
    policy_mapping_fn: multi_agent_env.policy_mapping
""",
    )
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "configs"))
    refused = run_train(["-f", str(config), "--storage-path", str(tmp_path / "runs")], timeout=60)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    assert "error: output: RLlib 2.60 records the experience of single-agent envs only" in refused.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_run_that_wrote_none_of_its_promised_output_has_failed(tmp_path: Path, ray_address: str) -> None:
    """RLlib's recorder holds rows back until output_max_rows_per_file (and logs a failed write and
    goes on): a run that ends with nothing in its output folder says so and exits 1."""
    out = tmp_path / "out"
    extra = "    batch_mode: complete_episodes\n    output_max_rows_per_file: 100000\n"
    config = recording(tmp_path, out, extra)
    ran = run_train(
        ["-f", str(config), "--storage-path", str(tmp_path / "runs"), "--ray-address", ray_address]
    )
    assert ran.returncode == 1, (ran.stdout + ran.stderr)[-3000:]
    assert f"output: {out} holds no experience written by this run" in ran.stdout, ran.stdout[-2000:]
