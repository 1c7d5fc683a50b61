"""RLlib's DQN learner, with the config's ``adam_epsilon`` in its Adam optimizer.

RLlib 2.60's ``DQNConfig`` takes ``adam_epsilon`` (Ray 1.x files set it: 1.5e-4
in the Rainbow and Atari DQN examples), and its old-stack policy passed it to
Adam.  Its new-stack learner builds ``torch.optim.Adam(params)`` with torch's
default epsilon (1e-8), so the key goes unused without a word.  This learner
builds the same optimizer with ``eps=config.adam_epsilon``; the default,
1e-8, is torch's, so a config that does not set it trains exactly as RLlib's
learner does.  With ``reward_signals`` it learns from the signals' summed rewards
(:class:`~envsdk.training.substitutes.reward_signals.SummedSignalsLearner`).  Everything else (losses,
target updates, checkpoints) is RLlib's.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner as RLlibDQNTorchLearner
from ray.rllib.utils.typing import ModuleID

from envsdk.training.substitutes.reward_signals import SummedSignalsLearner


class DQNTorchLearner(SummedSignalsLearner, RLlibDQNTorchLearner):
    """RLlib's DQN learner; its Adam takes the config's ``adam_epsilon``; reward signals summed."""

    # config keys RLlib's new API stack leaves unread (envsdk/config/unread.py) that this learner reads
    READS_UNREAD_KEYS = frozenset({"adam_epsilon"})

    def configure_optimizers_for_module(self, module_id: ModuleID, config: Any = None) -> None:
        if self.signal_optimizers(module_id):
            return
        # TorchLearner.configure_optimizers_for_module's optimizer, with the epsilon asked for
        params = self.get_parameters(self.module[module_id])
        self.register_optimizer(
            module_id=module_id,
            optimizer=torch.optim.Adam(params, eps=config.adam_epsilon),
            params=params,
            lr_or_lr_schedule=config.lr,
        )
