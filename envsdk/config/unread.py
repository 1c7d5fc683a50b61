"""RLlib 2.60 config keys that its new API stack accepts and never reads.

RLlib's config classes still carry old-API-stack settings: DQN's noisy nets,
IMPALA's RMSProp optimizer, its learner-thread queues, CQL's Lagrangian.  On the
new API stack they are taken and go unused without a word, so a Ray 1.x file
that sets them trains as if they were not there.  Stock RLlib trains such a
file, and so does envsdk, but each key in this table that a run sets is named
in a ``notice:`` line with what the new stack does instead.  On the old API
stack (a ModelV2 plugin selects it) RLlib reads them, and nothing is said; nor
where the run's learner reads one itself (its ``READS_UNREAD_KEYS``: envsdk's
DQN learner reads ``adam_epsilon``).

``tests/config/test_legacy.py`` checks that RLlib's new-stack code still reads none of
them, so that an upgrade that starts reading one fails there first.
"""

from __future__ import annotations

from collections.abc import Iterable

_NOISY = "the new stack's DQN module has no noisy layers; it explores by its `epsilon` schedule"
_RMSPROP = "the new stack's IMPALA and APPO learners step Adam at `lr`; RMSProp was the old stack's"
_QUEUES = "the old stack's learner thread and its queues; the new stack has neither"

# key -> (the algorithms whose config has it, what the new API stack does instead)
UNREAD: dict[str, tuple[frozenset[str], str]] = {
    "adam_epsilon": (
        frozenset({"DQN"}),
        "RLlib's DQN learner builds Adam with torch's epsilon (1e-8); envsdk's (dqn-learner) reads it",
    ),
    "noisy": (frozenset({"DQN"}), _NOISY),
    "sigma0": (frozenset({"DQN"}), _NOISY),
    "categorical_distribution_temperature": (
        frozenset({"DQN"}),
        "the new stack's DQN is epsilon-greedy on its Q-values; nothing samples at a temperature",
    ),
    "opt_type": (frozenset({"IMPALA", "APPO"}), _RMSPROP),
    "decay": (frozenset({"IMPALA", "APPO"}), _RMSPROP),
    "momentum": (frozenset({"IMPALA", "APPO"}), _RMSPROP),
    "epsilon": (frozenset({"IMPALA", "APPO"}), _RMSPROP),
    "learner_queue_timeout": (frozenset({"IMPALA", "APPO"}), _QUEUES),
    "replay_buffer_num_slots": (frozenset({"IMPALA", "APPO"}), _QUEUES),
    "timeout_s_aggregator_manager": (frozenset({"IMPALA", "APPO"}), _QUEUES),
    "target_worker_clipping": (
        frozenset({"APPO"}),
        "the new stack's APPO loss clips by `clip_param` and V-trace's thresholds, not per target worker",
    ),
    "lagrangian": (frozenset({"CQL"}), "the new stack's CQL weighs its penalty by `min_q_weight` alone"),
    "lagrangian_thresh": (frozenset({"CQL"}), "the new stack's CQL has no Lagrangian to threshold"),
}


def unread_on_new_stack(algorithm: str, keys: Iterable[str]) -> list[tuple[str, str]]:
    """The keys among ``keys`` that ``algorithm``'s new API stack does not read, each with why."""
    return [(key, UNREAD[key][1]) for key in sorted(keys) if key in UNREAD and algorithm in UNREAD[key][0]]
