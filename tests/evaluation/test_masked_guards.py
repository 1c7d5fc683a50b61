"""The divergence guard knows masks (envsdk.training.hooks.faults): a masking module's very negative
logits (-inf, or float32's lowest as RLlib's ActionMaskingTorchRLModule writes them) are masked
choices, not divergence; NaN and +inf are.  A guard's finding in rollout.py is one line, never a
traceback (envsdk.errors.run_cli, envsdk.evaluation.evaluator)."""

from __future__ import annotations

import textwrap

import pytest
import torch
import yaml
from ray.rllib.core.columns import Columns
from ray.rllib.utils.torch_utils import FLOAT_MIN

from envsdk.envs.faults.records import ObservationFault
from envsdk.errors import run_cli
from envsdk.training.hooks.faults import PolicyDiverged, check_action_inputs
from tests.helpers import rollout_here

MASKED = {"float-min": FLOAT_MIN, "-inf": -float("inf")}
BATCHES = {"one env": 1, "several envs": 16}  # under and over the guard's small-batch sum


def _logits(rows: int, masked: float) -> torch.Tensor:
    logits = torch.randn(rows, 10)
    logits[:, 2:] = masked  # two choices open in each row
    return logits


@pytest.mark.parametrize("masked", list(MASKED))
@pytest.mark.parametrize("rows", list(BATCHES.values()), ids=list(BATCHES))
@pytest.mark.parametrize("agents", ["single", "multi"])
def test_masked_logits_are_not_divergence(masked, rows, agents):
    outputs = {Columns.ACTION_DIST_INPUTS: _logits(rows, MASKED[masked])}
    check_action_inputs(outputs if agents == "single" else {"scout": outputs, "boss": dict(outputs)})


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "+inf"])
@pytest.mark.parametrize("rows", list(BATCHES.values()), ids=list(BATCHES))
@pytest.mark.parametrize("agents", ["single", "multi"])
def test_nan_and_overflow_beside_masked_logits_are_divergence(bad, rows, agents):
    logits = _logits(rows, FLOAT_MIN)
    logits[-1, 0] = bad
    outputs = {Columns.ACTION_DIST_INPUTS: logits}
    batch = (
        outputs
        if agents == "single"
        else {"scout": {Columns.ACTION_DIST_INPUTS: _logits(rows, 0.0)}, "boss": outputs}
    )
    with pytest.raises(PolicyDiverged, match=r"policy '(default_policy|boss)' produced NaN or infinite"):
        check_action_inputs(batch)


@pytest.mark.parametrize(
    "fault",
    [
        ObservationFault("env 'x' returned obs = nan; fix: make it finite"),
        PolicyDiverged("policy 'p' diverged; fix: lower lr"),
    ],
)
def test_a_fault_deep_in_rllibs_re_raises_is_one_line_and_exit_1(fault, capsys):
    def main(argv: list[str]) -> int:
        try:
            raise fault
        except type(fault) as err:
            raise RuntimeError from err  # as RLlib's env runner re-raises an env's error

    assert run_cli(main, []) == 1
    said = capsys.readouterr().err
    what, fix = str(fault).split("; fix: ")
    assert said == f"error: {what}\n  fix: {fix}\n"


MASKED_ENV = textwrap.dedent(
    '''
    import gymnasium as gym
    import numpy as np


    class Masked(gym.Env):
        """Ten choices, two of them allowed at each step; a forbidden one raises."""

        observation_space = gym.spaces.Dict(
            {
                "action_mask": gym.spaces.Box(0.0, 1.0, (10,), np.float32),
                "observations": gym.spaces.Box(-1.0, 1.0, (4,), np.float32),
            }
        )
        action_space = gym.spaces.Discrete(10)

        def __init__(self, config=None):
            self.nan_after = (config or {}).get("nan_after", 10**6)
            self.rng = np.random.default_rng(0)

        def _obs(self):
            self.mask = np.zeros(10, np.float32)
            self.mask[self.rng.choice(10, 2, replace=False)] = 1.0
            state = self.rng.uniform(-1, 1, 4).astype(np.float32)
            if self.t >= self.nan_after:
                state[0] = np.nan
            return {"action_mask": self.mask, "observations": state}

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return self._obs(), {}

        def step(self, action):
            if not self.mask[action]:
                raise ValueError(f"forbidden action {action}")
            self.t += 1
            return self._obs(), float(action == 0), self.t >= 12, False, {}
    '''
)


INF_MASKING = textwrap.dedent(
    """
    import torch
    from ray.rllib.core.columns import Columns
    from ray.rllib.examples.rl_modules.classes.action_masking_rlm import ActionMaskingTorchRLModule


    class InfMasking(ActionMaskingTorchRLModule):
        \"\"\"RLlib's masking module, forbidden choices at -inf rather than float32's lowest.\"\"\"

        def _mask_action_logits(self, batch, action_mask):
            logits = batch[Columns.ACTION_DIST_INPUTS]
            batch[Columns.ACTION_DIST_INPUTS] = logits.masked_fill(action_mask == 0, -torch.inf)
            return batch
    """
)
PLUGINS = {
    "float-min": "ray.rllib.examples.rl_modules.classes.action_masking_rlm.ActionMaskingTorchRLModule",
    "-inf": "inf_masking.InfMasking",
}


@pytest.mark.parametrize("masked", list(PLUGINS))
def test_a_masking_module_trains_and_rolls_out_and_a_late_fault_is_one_line(train, tmp_path, masked):
    """RLlib's ActionMaskingTorchRLModule as a plugin (or one that masks with -inf), 8 envs of 10
    choices: one iteration trains, rollout plays, and an env's NaN in rollout is its line."""
    (tmp_path / "masked_choices.py").write_text(MASKED_ENV)
    (tmp_path / "inf_masking.py").write_text(INF_MASKING)
    exp = {
        "masked": {
            "run": "PPO",
            "env": "masked_choices.Masked",
            "stop": {"training_iteration": 1},
            "config": {
                "num_env_runners": 0,
                "num_envs_per_env_runner": 8,
                "train_batch_size": 96,
                "minibatch_size": 48,
                "num_epochs": 1,
                "model": {"custom_model": PLUGINS[masked]},
            },
        }
    }
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(exp))
    done = train("-f", "exp.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (checkpoint,) = train.results.glob("masked/*/checkpoint_000000")
    played = rollout_here(checkpoint, "--episodes", "2", "--no-out", cwd=tmp_path)
    assert played.returncode == 0 and "episode 2: return" in played.stdout, played.stderr[-2000:]
    faulty = rollout_here(
        checkpoint, "--episodes", "1", "--no-out", "--env-config", "{nan_after: 3}", cwd=tmp_path
    )
    assert faulty.returncode == 1 and "Traceback" not in faulty.stderr, faulty.stderr[-3000:]
    assert (
        "error: env 'masked_choices.Masked' (the local env runner) returned a non-finite observation:"
        " obs['observations'][0] = nan at step 3 of its episode\n  fix: " in faulty.stderr
    ), faulty.stderr
