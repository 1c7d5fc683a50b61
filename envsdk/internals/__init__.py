"""Every use of a private Ray, RLlib, Tune or CPython API, in one place.

Each entry says why it is needed.  ``tests/base/test_internals.py`` checks each
assumption on the installed versions, so an upgrade that breaks one fails
there by name, not somewhere inside a training run.  The versions these were
checked against are pinned in ``pyproject.toml`` (``ray[rllib,tune]``,
``torch``); to try a newer Ray, change the pin and run
``pytest tests/base/test_internals.py`` first (docs/development.md: "Trying a newer Ray").

Private *methods* that our classes override live with those classes; their
names are listed in :data:`OVERRIDDEN` so that the test checks them too.

The modules are split by what needs them (process, rllib, layout, sampling, patches, tune); this
package's names are theirs, so that callers write ``internals.NAME`` wherever it lives.
"""

from __future__ import annotations

from envsdk.internals.checkpoint_layout import (
    ALGORITHM_STATE_FILE as ALGORITHM_STATE_FILE,
)
from envsdk.internals.checkpoint_layout import (
    CHECKPOINT_MARKER as CHECKPOINT_MARKER,
)
from envsdk.internals.checkpoint_layout import (
    CONNECTOR_DIRS as CONNECTOR_DIRS,
)
from envsdk.internals.checkpoint_layout import (
    ENV_RUNNER_DIR as ENV_RUNNER_DIR,
)
from envsdk.internals.checkpoint_layout import (
    ENV_TO_MODULE_PIECES as ENV_TO_MODULE_PIECES,
)
from envsdk.internals.checkpoint_layout import (
    EPISODE_CLOCKS as EPISODE_CLOCKS,
)
from envsdk.internals.checkpoint_layout import (
    MODEL_CONFIG_FIELD as MODEL_CONFIG_FIELD,
)
from envsdk.internals.checkpoint_layout import (
    MODULE_DIR as MODULE_DIR,
)
from envsdk.internals.checkpoint_layout import (
    MODULE_STATE_FILE as MODULE_STATE_FILE,
)
from envsdk.internals.checkpoint_layout import (
    PIECE_CLASS_FILE as PIECE_CLASS_FILE,
)
from envsdk.internals.checkpoint_layout import (
    PIECE_STATE_FILE as PIECE_STATE_FILE,
)
from envsdk.internals.checkpoint_layout import (
    connector_pieces as connector_pieces,
)
from envsdk.internals.checkpoint_layout import (
    per_learner_batch_unset as per_learner_batch_unset,
)
from envsdk.internals.patches import (
    OVERRIDDEN as OVERRIDDEN,
)
from envsdk.internals.patches import (
    connectors_find_their_caller_cheaply as connectors_find_their_caller_cheaply,
)
from envsdk.internals.patches import (
    convert_done_episodes_once as convert_done_episodes_once,
)
from envsdk.internals.patches import (
    gradients_checked_once as gradients_checked_once,
)
from envsdk.internals.patches import (
    optimizers_fused_on_cpu as optimizers_fused_on_cpu,
)
from envsdk.internals.patches import (
    polyak_updates_in_place as polyak_updates_in_place,
)
from envsdk.internals.process import (
    RAY_FREE_ALGORITHMS as RAY_FREE_ALGORITHMS,
)
from envsdk.internals.process import (
    RLLIB_API_LOGGERS as RLLIB_API_LOGGERS,
)
from envsdk.internals.process import (
    run_exit_hooks as run_exit_hooks,
)
from envsdk.internals.process import (
    trains_without_ray as trains_without_ray,
)
from envsdk.internals.process import (
    without_object_store as without_object_store,
)
from envsdk.internals.rllib import (
    PRELOAD as PRELOAD,
)
from envsdk.internals.rllib import (
    catalog_model_config as catalog_model_config,
)
from envsdk.internals.rllib import (
    env_to_module_connector as env_to_module_connector,
)
from envsdk.internals.rllib import (
    is_deprecated_default as is_deprecated_default,
)
from envsdk.internals.rllib import (
    learner_batch as learner_batch,
)
from envsdk.internals.rllib import (
    learner_connector as learner_connector,
)
from envsdk.internals.rllib import (
    learner_connector_setting as learner_connector_setting,
)
from envsdk.internals.rllib import (
    learner_params as learner_params,
)
from envsdk.internals.rllib import (
    local_learner as local_learner,
)
from envsdk.internals.rllib import (
    module_is_stateful as module_is_stateful,
)
from envsdk.internals.rllib import (
    module_lr_schedules as module_lr_schedules,
)
from envsdk.internals.rllib import (
    module_to_env_connector as module_to_env_connector,
)
from envsdk.internals.rllib import (
    ray_temp_dir as ray_temp_dir,
)
from envsdk.internals.rllib import (
    registered_env_creator as registered_env_creator,
)
from envsdk.internals.rllib import (
    registered_model as registered_model,
)
from envsdk.internals.rllib import (
    replay_metrics_with_string_agent_ids as replay_metrics_with_string_agent_ids,
)
from envsdk.internals.rllib import (
    runner_env as runner_env,
)
from envsdk.internals.rllib import (
    runner_env_to_module as runner_env_to_module,
)
from envsdk.internals.rllib import (
    runner_module_to_env as runner_module_to_env,
)
from envsdk.internals.rllib import (
    sac_losses as sac_losses,
)
from envsdk.internals.rllib import (
    sample_episodes_with_metrics as sample_episodes_with_metrics,
)
from envsdk.internals.rllib import (
    set_optimizer_lr as set_optimizer_lr,
)
from envsdk.internals.rllib import (
    sub_env_observations as sub_env_observations,
)
from envsdk.internals.rllib import (
    time_limit_steps as time_limit_steps,
)
from envsdk.internals.rllib import (
    update_without_reduce as update_without_reduce,
)
from envsdk.internals.sampling import (
    MultiRunnerState as MultiRunnerState,
)
from envsdk.internals.sampling import (
    RunnerState as RunnerState,
)
from envsdk.internals.sampling import (
    episode_filled as episode_filled,
)
from envsdk.internals.sampling import (
    episode_started as episode_started,
)
from envsdk.internals.sampling import (
    keeps_default_passes as keeps_default_passes,
)
from envsdk.internals.sampling import (
    keeps_forward_of as keeps_forward_of,
)
from envsdk.internals.sampling import (
    module_forward as module_forward,
)
from envsdk.internals.sampling import (
    one_agent_episode as one_agent_episode,
)
from envsdk.internals.tune import (
    TRIAL_ATTRIBUTES_READ_BY_LOGGERS as TRIAL_ATTRIBUTES_READ_BY_LOGGERS,
)
from envsdk.internals.tune import (
    TrialView as TrialView,
)
from envsdk.internals.tune import (
    release_utilization_monitor as release_utilization_monitor,
)
from envsdk.internals.tune import (
    stop_tune_gracefully as stop_tune_gracefully,
)
from envsdk.internals.tune import (
    trial_experiment_dir as trial_experiment_dir,
)
from envsdk.internals.tune import (
    uncount_iteration as uncount_iteration,
)

RAY_VERSION = "2.60.0"  # what the assumptions were checked against
