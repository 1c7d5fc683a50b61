"""RLlib's IMPALA and APPO learners, with ``reward_signals`` (ML-Agents' curiosity, RND, GAIL).

Each policy with signals learns from their rewards summed into its reward column (times their
strengths; the env's with ``extrinsic``) by its one value function and V-trace, and its signal
models learn on the same batch, with one Adam per signal
(:class:`~envsdk.training.substitutes.reward_signals.SummedSignalsLearner`).  The sum is taken in
the learner's loss, where the signal models' weights are current: RLlib 2.60 runs these learners'
updates in a learner thread, and with ``num_aggregator_actors_per_learner`` their connector
pipeline in actors of their own.  Without signals both learners are RLlib's, unchanged.
"""

from __future__ import annotations

from ray.rllib.algorithms.appo.torch.appo_torch_learner import APPOTorchLearner as RLlibAPPOTorchLearner
from ray.rllib.algorithms.impala.torch.impala_torch_learner import (
    IMPALATorchLearner as RLlibIMPALATorchLearner,
)

from envsdk.training.substitutes.reward_signals import SummedSignalsLearner


# (mypy: RLlib's bases disagree on remove_module's signature, which a class of several bases shows)
class IMPALATorchLearner(SummedSignalsLearner, RLlibIMPALATorchLearner):  # type: ignore[misc]
    """RLlib's IMPALA learner; reward signals summed."""


class APPOTorchLearner(SummedSignalsLearner, RLlibAPPOTorchLearner):  # type: ignore[misc]
    """RLlib's APPO learner; reward signals summed."""


REPLACES: dict[type, type] = {
    RLlibIMPALATorchLearner: IMPALATorchLearner,
    RLlibAPPOTorchLearner: APPOTorchLearner,
}
