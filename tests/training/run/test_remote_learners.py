"""Shipped configs with a remote learner (``num_learners: 1``): envsdk's learner classes, modules and
connector pieces train in the learner's own Ray actor, and the checkpoint rolls out.

RLlib builds a remote learner from the config in another process, so whatever envsdk swaps in
(``stage_finish``: its PPO, SAC and DQN learners, the lean SAC module; the PPO learner's ``ShuffleRows``
piece) must travel with the config, not with a patch of this process.  The run joins the session's
Ray, as a user's run on a node or a cluster does.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import ROOT, progress_rows, rollout_here, trial_dirs

HOOK = """
import hashlib
import json

from envsdk import internals, notices


def record(algorithm, **kwargs):
    def classes(learner):
        pipeline = internals.learner_connector(learner)
        module = next(iter(learner.module.values()))
        module = module.unwrapped()  # several learners: RLlib's DDP wrapper around the module
        tensors = module.state_dict().values()
        weights = hashlib.sha256(b"".join(t.detach().cpu().numpy().tobytes() for t in tensors))
        return {
            # Ray Train's worker group runs a subclass of the learner's class (_WrappedExecutable)
            "learner": [f"{c.__module__}.{c.__qualname__}" for c in type(learner).__mro__],
            "module": f"{type(module).__module__}.{type(module).__qualname__}",
            "pieces": [type(p).__name__ for p in (pipeline.connectors if pipeline else [])],
            "single_pass": getattr(learner, "single_pass", None),
            "notices": sorted(notices._seen),  # what the learner's process said (its output is not read)
            "weights": weights.hexdigest(),
        }

    group = algorithm.learner_group
    found = [] if group.is_local else [r.get() for r in group.foreach_learner(classes)]
    with open("learners.jsonl", "a") as fh:
        fh.write(json.dumps({"local": group.is_local, "learners": found}) + "\\n")
"""

SAC = "envsdk.training.substitutes.sac.learner.SACTorchLearner"
LEAN_SAC = "envsdk.training.substitutes.sac.module.LeanSACTorchRLModule"
CASES = {
    # id: (config, learners, env steps, learner class, module class or None,
    #      a piece of the learner connector or None)
    "cartpole-ppo": (
        "cartpole-ppo",
        1,
        2048,
        "envsdk.training.substitutes.ppo.learner.PPOTorchLearner",
        None,
        "ShuffleRows",
    ),
    "pendulum-sac": ("pendulum-sac", 1, 512, SAC, LEAN_SAC, None),
    # envsdk's transition replay feeds a remote learner through RLlib's learner group
    "cartpole-dqn": (
        "cartpole-dqn",
        1,
        1200,
        "envsdk.training.substitutes.dqn.learner.DQNTorchLearner",
        None,
        None,
    ),
    # DDP: the SAC learner keeps RLlib's passes without its one-pass check (sac_learner.py)
    "pendulum-sac-2-learners": ("pendulum-sac", 2, 512, SAC, LEAN_SAC, None),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_a_remote_learner_trains_with_envsdks_classes_and_the_checkpoint_rolls_out(train, tmp_path, case):
    config, learners, steps, learner, module, piece = CASES[case]
    (tmp_path / "remote_hook.py").write_text(HOOK)
    out = train(
        "-f", str(ROOT / "configs" / f"{config}.yaml"),
        "--stop-timesteps", str(steps),
        f"--config.num_learners={learners}",
        "--config.callbacks_on_train_result=remote_hook.record",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]

    records = [json.loads(line) for line in (tmp_path / "learners.jsonl").read_text().splitlines()]
    assert records and not any(r["local"] for r in records)
    seen = records[-1]["learners"]
    assert len(seen) == learners
    assert len({s["weights"] for s in seen}) == 1, "the learners' weights went apart"
    for each in seen:
        if learner:
            assert learner in each["learner"]
        if module:
            assert each["module"] == module
        if piece:
            assert piece in each["pieces"]
    if learner == SAC:
        # one learner: the one-pass check passes on RLlib's default module; several: not made
        assert {passes for each in seen for passes in each["single_pass"].values()} == {learners == 1}
        said = [n for each in seen for n in each["notices"] if "one backward pass" in n]
        assert not said, said

    (trial,) = trial_dirs(train.results)
    last = progress_rows(trial)[-1]
    assert float(last["learners/__all_modules__/num_module_steps_trained_lifetime"]) > 0
    (checkpoint,) = trial.glob("checkpoint_*")
    done = rollout_here(str(checkpoint), "--episodes", "1")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1 episodes" in done.stdout
