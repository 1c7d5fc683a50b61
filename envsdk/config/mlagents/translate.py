"""mlagents-learn's checked settings (:mod:`~envsdk.config.mlagents.schema`) to one RLlib experiment.

Each behavior trains its own policy, named as the Unity env names a behavior's policy (the behavior
name without ``?team=N``).  The same numbers mean the same things: ``count_steps_by: agent_steps``
makes ``buffer_size`` (``train_batch_size``), ``batch_size`` (``minibatch_size``), ``summary_freq``
(an iteration) and the schedules' ``max_steps`` count agent steps, as mlagents-learn counts them.

:data:`RULES` says, for every key, what it becomes; :class:`Translation` applies them and keeps the
list that ``--dry-run`` prints.  A key with no equivalent gets one notice; one that would change
training and that we cannot honour is a :class:`~envsdk.errors.UserError` before anything starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envsdk.config.mlagents.schema import ENGINE_SETTINGS, checked_run_options, deep_update
from envsdk.config.yamlio import LineDict, where_of
from envsdk.errors import UserError
from envsdk.notices import notice

# mlagents' DecayedValue floors: a linear schedule ends at these values at max_steps.
LEARNING_RATE_FLOOR, BETA_FLOOR, EPSILON_FLOOR = 1e-10, 1e-5, 0.1
# ML-Agents' encoders' convolutions: [channels, kernel, stride] (torch_entities/encoders.py).
CONV_FILTERS = {
    "simple": [[16, [8, 8], 4], [32, [4, 4], 2]],
    "nature_cnn": [[32, [8, 8], 4], [64, [4, 4], 2], [64, [3, 3], 1]],
}
STOP_WHEN_EVERY_POLICY_IS_DONE = "policy_progress/all"
ALGORITHMS = {"ppo": "PPO", "sac": "SAC", "poca": "POCA"}

# What every key becomes, for the docs' table (docs/mlagents-learn.md) and --dry-run.
RULES: dict[str, str] = {
    "behaviors.NAME": "one policy per behavior, which every team plays and learns"
    " (env_config.policy_mapping), env: unity; mlagents-learn 1.1.0 without self_play gives each team"
    " a policy and trains only the last one",
    "trainer_type": "run: PPO, SAC or POCA (envsdk's MA-POCA: a group critic per behavior); PPO and POCA:"
    " use_kl_loss: false (mlagents-learn's losses have no KL penalty)",
    "hyperparameters.batch_size": "minibatch_size (PPO, agent steps); train_batch_size (SAC)",
    "hyperparameters.buffer_size": "train_batch_size (PPO, agent steps); replay_buffer_config.capacity (SAC)",
    "hyperparameters.learning_rate": "lr (SAC: actor_lr, critic_lr and alpha_lr)",
    "hyperparameters.learning_rate_schedule": f"linear: lr [[0, lr], [max_steps, {LEARNING_RATE_FLOOR:g}]]",
    "hyperparameters.beta": "entropy_coeff",
    "hyperparameters.beta_schedule": f"linear: entropy_coeff [[0, beta], [max_steps, {BETA_FLOOR:g}]]",
    "hyperparameters.epsilon": "clip_param",
    "hyperparameters.epsilon_schedule": f"linear: clip_param [[0, epsilon], [max_steps, {EPSILON_FLOOR:g}]]"
    " (read by envsdk's PPO learner; refused with stock: true)",
    "hyperparameters.lambd": "lambda_",
    "behaviors.NAME.hyperparameters": "PPO: a behavior's own learning rate, beta, epsilon and their"
    " schedules in algorithm_config_overrides_per_module; the rest once for all (else refused)",
    "hyperparameters.num_epoch": "num_epochs",
    "hyperparameters.shared_critic": "model.vf_share_layers",
    "hyperparameters.buffer_init_steps": "num_steps_sampled_before_learning_starts",
    "hyperparameters.tau": "tau",
    "hyperparameters.steps_per_update": "training_intensity = batch_size / steps_per_update",
    "hyperparameters.save_replay_buffer": "replay buffer in checkpoints (RLlib always stores it)",
    "hyperparameters.init_entcoef": "initial_alpha",
    "hyperparameters.reward_signal_steps_per_update": "a notice: the signals update with each SAC update",
    "network_settings.normalize": "observation_filter: MeanStdFilter",
    "network_settings.hidden_units, num_layers": "model.fcnet_hiddens [hidden_units] x num_layers, swish",
    "network_settings.vis_encode_type": "model.conv_filters (simple, nature_cnn); others refused",
    "network_settings.memory": "model.use_lstm, max_seq_len: sequence_length, lstm_cell_size: memory_size/2"
    " (PPO; refused with SAC, which has no recurrent policy)",
    "network_settings.goal_conditioning_type": "a notice: goal signals are concatenated",
    "network_settings.deterministic": "a notice: rollout.py plays greedily by default",
    "reward_signals.extrinsic.gamma": "gamma",
    "reward_signals": "extrinsic alone at strength 1: the game's reward, discounted by gamma; else"
    " reward_signals (the same keys and meaning; a behavior's own in algorithm_config_overrides_per_module)",
    "reward_signals.gail.demo_path": "the same key, from the working directory as mlagents-learn reads it",
    "behavioral_cloning": "behavioral_cloning (the same keys and meaning; a behavior's own in"
    " algorithm_config_overrides_per_module)",
    "time_horizon": "time_horizon: each agent's trajectory cut every N of its own steps and bootstrapped"
    " (rollout_fragment_length: N x the agents in one step of the game)",
    "max_steps": "policy_max_steps (agent steps); the run stops when every policy has them",
    "summary_freq": "min_sample_timesteps_per_iteration: one iteration (a progress line) per summary",
    "checkpoint_interval": "checkpoint_freq = checkpoint_interval / summary_freq iterations",
    "keep_checkpoints": "keep_checkpoints_num",
    "even_checkpoints": "checkpoint_interval = max_steps / keep_checkpoints, as mlagents-learn",
    "init_path": "initialize_from: the behavior's policy starts from that checkpoint's (or run's) weights",
    "threaded": "a notice: RLlib samples and trains in turn",
    "self_play": "self_play (the same keys and meaning); a behavior's own values in self_play.policies",
    "environment_parameters": "environment_parameters (the same form: constants, samplers, curriculum)",
    "env_settings.env_path": "env_config.file_name (--env)",
    "env_settings.env_args": "env_config.additional_args (--env-args)",
    "env_settings.base_port": "env_config.base_port",
    "env_settings.num_envs": "num_env_runners (one game each; 1: the game is sampled in train.py)",
    "env_settings.num_areas": "env_config.num_areas",
    "env_settings.timeout_wait": "env_config.timeout_wait",
    "env_settings.seed": "seed and env_config.seed (-1: none)",
    "env_settings.max_lifetime_restarts": "env_config.max_restarts",
    "env_settings.restarts_rate_limit_n, _period_s": "env_config.max_restarts_per_minute",
    "engine_settings.*": "env_config's key of the same name",
    "checkpoint_settings.run_id": "the experiment's name (its folder under results_dir)",
    "checkpoint_settings.results_dir": "storage_path",
    "checkpoint_settings.resume": "--resume",
    "checkpoint_settings.force": "an existing run folder is replaced",
    "checkpoint_settings.initialize_from": "initialize_from: every policy from the run's newest checkpoint",
    "checkpoint_settings.inference": "refused: use rollout.py CHECKPOINT",
    "torch_settings.device": "num_gpus_per_learner (cuda: 1, cpu: 0)",
    "debug": "--debug",
}


@dataclass
class Translation:
    """The experiment being written, and what each mlagents-learn key became (for ``--dry-run``)."""

    source: Path
    config: LineDict = field(default_factory=LineDict)
    spec: LineDict = field(default_factory=LineDict)
    said: list[tuple[str, str]] = field(default_factory=list)

    def put(self, key: str, value: Any, frm: str, where: Any = None, *, top: bool = False) -> None:
        """Set config key (or, with ``top``, experiment key) ``key``; ``frm`` is the mlagents key."""
        target = self.spec if top else self.config
        target[key] = value
        if isinstance(where, tuple) and isinstance(where[0], LineDict) and where[1] in where[0].lines:
            target.lines[key] = where[0].lines[where[1]]
        self.said.append((frm, f"{'' if top else 'config.'}{key}: {value!r}"))

    def overrides(self, per_policy: dict[str, dict[str, Any]], frm: str) -> None:
        """Policies' own settings, merged into ``algorithm_config_overrides_per_module``."""
        merged = dict(self.config.get("algorithm_config_overrides_per_module") or {})
        for policy, own in per_policy.items():
            merged[policy] = {**merged.get(policy, {}), **own}
        self.put("algorithm_config_overrides_per_module", merged, frm)

    def note(self, frm: str, what: str) -> None:
        """A key with no equivalent: one notice, and the line in ``--dry-run``."""
        notice(f"mlagents-learn's {frm}: {what}")
        self.said.append((frm, what))


def translate(
    data: LineDict, path: Path, flags: dict[str, dict[str, Any]] | None = None
) -> tuple[LineDict, list[tuple[str, str]]]:
    """``(experiment name -> experiment spec, what each key became)`` for an mlagents-learn file;
    ``flags``: the sections' keys that mlagents-learn's flags set, over the file's
    (:func:`envsdk.cli.mlagents_flags.given`)."""
    flags = dict(flags or {})
    deterministic = flags.pop("network_settings", {}).get("deterministic")
    options = checked_run_options(deep_update(data, {s: LineDict(v) for s, v in flags.items()}))
    t = Translation(path)
    t.config.source = t.spec.source = path
    if deterministic:
        t.note("--deterministic", "rollout.py and brains play the greedy action by default")
    behaviors = options["behaviors"]
    first = next(iter(behaviors.values()))
    _one_algorithm(behaviors)
    kind = first["trainer_type"]
    t.put("run", ALGORITHMS[kind], "trainer_type", top=True)
    t.put("env", "unity", "behaviors", top=True)
    t.put("count_steps_by", "agent_steps", "behaviors (steps are agent steps)")
    _shared(t, behaviors)
    if kind in ("ppo", "poca"):  # POCA's hyperparameters are PPO's (no shared_critic)
        _ppo(t, first, behaviors)
    else:
        _sac(t, first)
    _network(t, first["network_settings"], behaviors)
    _per_behavior(t, behaviors)
    _checkpoints(t, first, options["checkpoint_settings"])
    _initialize_from(t, behaviors, options["checkpoint_settings"])
    _env_config(t, options)
    if options.get("environment_parameters") is not None:
        t.put("environment_parameters", options["environment_parameters"], "environment_parameters")
    if options.get("torch_settings", {}).get("device"):
        device = str(options["torch_settings"]["device"])
        t.put("num_gpus_per_learner", 1 if device.startswith("cuda") else 0, "torch_settings.device")
    if options.get("debug"):
        t.note("debug", "train.py takes it as --debug on the command line (tracebacks)")
    t.spec["config"] = t.config
    name = str(options["checkpoint_settings"]["run_id"])
    out = LineDict({name: t.spec})
    out.source = path
    return out, t.said


def _one_algorithm(behaviors: LineDict) -> None:
    """One trainer type for all behaviors (RLlib trains one algorithm per run)."""
    kinds = {b["trainer_type"] for b in behaviors.values()}
    if len(kinds) > 1:
        raise UserError(
            f"{behaviors.where(None)}: behaviors with different trainer types ({', '.join(sorted(kinds))})",
            "give every behavior one trainer_type (RLlib trains one algorithm in a run), or train them apart",
        )


# Keys that RLlib sets once for the whole run: every behavior must give them the same value.
GLOBAL = (
    "hyperparameters",  # but PER_POLICY's (RLlib's algorithm config is one for all policies)
    "network_settings",
    "time_horizon",
    "summary_freq",
    "checkpoint_interval",
    "keep_checkpoints",
    "even_checkpoints",
    "threaded",
)
# PPO's hyperparameters that RLlib's learners read per policy (AlgorithmConfig.get_config_for_module):
# a behavior's own go into algorithm_config_overrides_per_module.
PER_POLICY = {
    "ppo": (
        "learning_rate",
        "learning_rate_schedule",
        "beta",
        "beta_schedule",
        "epsilon",
        "epsilon_schedule",
    ),
    "sac": (),
}
PER_POLICY["poca"] = PER_POLICY["ppo"]


def _comparable(settings: LineDict, key: str) -> Any:
    """A behavior's ``key`` as the once-per-run check compares it (per-policy hyperparameters left out)."""
    if key != "hyperparameters":
        return settings[key]
    own = PER_POLICY[settings["trainer_type"]]
    return {k: v for k, v in settings[key].items() if k not in own}


def _shared(t: Translation, behaviors: LineDict) -> None:
    """The settings RLlib keeps once per run, the same for every behavior (else refused)."""
    names = list(behaviors)
    first = behaviors[names[0]]
    for other in names[1:]:
        for key in GLOBAL:
            if _comparable(behaviors[other], key) != _comparable(first, key):
                raise UserError(
                    f"{where_of(behaviors[other], key, behaviors.where(other))}: behaviors {names[0]} and"
                    f" {other} differ in {key}, which RLlib sets once for a run",
                    f"give both the same {key}, or keep only the behaviors the game has (mlagents-learn"
                    " reads only those)",
                )
    if first["threaded"]:
        t.note(
            "threaded", "no equivalent: RLlib samples, then trains (num_env_runners > 0 samples meanwhile)"
        )
    _reward_signals(t, behaviors)
    t.put(
        "min_sample_timesteps_per_iteration", first["summary_freq"], "summary_freq", (first, "summary_freq")
    )
    _self_play(t, behaviors)


def _self_play(t: Translation, behaviors: LineDict) -> None:
    """Each behavior's self_play block: the first's for all, each other's differences under
    ``self_play.policies`` (its policy's own, as each behavior has its own ghost trainer)."""
    from unity_bridge.behavior_names import default_policy_id

    blocks = {default_policy_id(str(n)): s["self_play"] for n, s in behaviors.items()}
    given = {p: b for p, b in blocks.items() if b is not None}
    if not given:
        return
    if len(given) < len(blocks):
        name = next(n for n, s in behaviors.items() if s["self_play"] is None)
        raise UserError(
            f"{behaviors.where(name)}: behavior {name} has no self_play, and {', '.join(given)} do",
            "give every behavior of a self-play game a self_play block (as mlagents-learn's examples do)",
        )
    first = dict(next(iter(given.values())))
    own = {p: {k: v for k, v in b.items() if v != first[k]} for p, b in given.items()}
    settings = {**first, "policies": {p: o for p, o in own.items() if o}} if any(own.values()) else first
    t.put("self_play", settings, "self_play")


def _plain(value: Any) -> Any:
    """A checked mapping as plain data, its unset (None) keys left out for the run's defaults."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    return value


def _demos_resolved(block: dict[str, Any]) -> dict[str, Any]:
    """``demo_path`` from the working directory, as mlagents-learn opens it."""
    if "demo_path" in block:
        block = {**block, "demo_path": str(Path(block["demo_path"]).expanduser().resolve())}
    return block


def _reward_signals(t: Translation, behaviors: LineDict) -> None:
    """Each behavior's reward signals and behavioral cloning.  The game's reward alone (extrinsic at
    strength 1) is RLlib's own reward, discounted by ``gamma``; anything else is ``reward_signals``
    (:mod:`envsdk.config.own_keys.reward_signals`), the first behavior's for all and each other's under
    ``algorithm_config_overrides_per_module``, as each behavior has its own signals in mlagents-learn."""
    from unity_bridge.behavior_names import default_policy_id

    def signals(settings: LineDict) -> dict[str, Any]:
        return {name: _demos_resolved(_plain(block)) for name, block in settings["reward_signals"].items()}

    def cloning(settings: LineDict) -> dict[str, Any] | None:
        block = settings["behavioral_cloning"]
        return None if block is None else _demos_resolved(_plain(block))

    first = next(iter(behaviors.values()))
    own = {default_policy_id(str(n)): (signals(s), cloning(s)) for n, s in behaviors.items()}
    mine = own[next(iter(own))]
    game_reward_only = (
        all(
            set(sig) == {"extrinsic"} and sig["extrinsic"].get("strength", 1.0) == 1.0
            for sig, _ in own.values()
        )
        and len({sig["extrinsic"].get("gamma", 0.99) for sig, _ in own.values()}) == 1
    )
    rewards = first["reward_signals"]
    gamma_from = rewards["extrinsic"] if "extrinsic" in rewards else next(iter(rewards.values()))
    t.put("gamma", gamma_from["gamma"], "reward_signals.extrinsic.gamma")
    if not game_reward_only:
        t.put("reward_signals", mine[0], "reward_signals", (first, "reward_signals"))
    if mine[1] is not None:
        t.put("behavioral_cloning", mine[1], "behavioral_cloning", (first, "behavioral_cloning"))
    overrides: dict[str, dict[str, Any]] = {}
    for policy, (sig, bc) in own.items():
        if not game_reward_only and sig != mine[0]:
            overrides.setdefault(policy, {})["reward_signals"] = sig
        if bc != mine[1]:
            overrides.setdefault(policy, {})["behavioral_cloning"] = bc
    if overrides:
        t.overrides(overrides, "reward_signals, behavioral_cloning (a behavior's own)")


def _schedule(value: float, kind: str, max_steps: int, floor: float) -> Any:
    """A constant, or RLlib's piecewise-linear schedule from ``value`` at 0 to ``floor`` at max_steps."""
    return value if kind == "constant" else [[0, value], [max_steps, floor]]


def _ppo_per_policy(settings: LineDict) -> dict[str, Any]:
    """A behavior's learning rate, entropy and clip, with its schedules to its own max_steps."""
    h, steps = settings["hyperparameters"], settings["max_steps"]
    return {
        "lr": _schedule(h["learning_rate"], h["learning_rate_schedule"], steps, LEARNING_RATE_FLOOR),
        "entropy_coeff": _schedule(h["beta"], h["beta_schedule"], steps, BETA_FLOOR),
        "clip_param": _schedule(h["epsilon"], h["epsilon_schedule"], steps, EPSILON_FLOOR),
    }


def _ppo(t: Translation, settings: LineDict, behaviors: LineDict) -> None:
    h = settings["hyperparameters"]
    t.put("train_batch_size", h["buffer_size"], "hyperparameters.buffer_size", (h, "buffer_size"))
    t.put("minibatch_size", h["batch_size"], "hyperparameters.batch_size", (h, "batch_size"))
    t.put("num_epochs", h["num_epoch"], "hyperparameters.num_epoch", (h, "num_epoch"))
    shared = _ppo_per_policy(settings)
    t.put("lr", shared["lr"], "hyperparameters.learning_rate", (h, "learning_rate"))
    t.put("entropy_coeff", shared["entropy_coeff"], "hyperparameters.beta", (h, "beta"))
    t.put("clip_param", shared["clip_param"], "hyperparameters.epsilon", (h, "epsilon"))
    from unity_bridge.behavior_names import default_policy_id

    overrides = {}
    for name, other in behaviors.items():
        own = {k: v for k, v in _ppo_per_policy(other).items() if v != shared[k]}
        if isinstance(own.get("clip_param"), list):  # RLlib's per-module config: a number; ours: the schedule
            own["learner_config_dict"] = {"clip_param_schedule": own["clip_param"]}
            own["clip_param"] = own["clip_param"][0][1]
        elif "clip_param" in own and isinstance(shared["clip_param"], list):  # its own clip stays fixed
            own["learner_config_dict"] = {"clip_param_schedule": None}
        if own:
            overrides[default_policy_id(str(name))] = own
    if overrides:
        t.overrides(overrides, "hyperparameters (a behavior's own)")
    t.put("lambda_", h["lambd"], "hyperparameters.lambd", (h, "lambd"))
    t.put("time_horizon", settings["time_horizon"], "time_horizon", (settings, "time_horizon"))
    # mlagents-learn's PPO and POCA losses have no KL penalty (RLlib's PPO adds one by default), and
    # weigh the value loss 0.5 (RLlib's: 1)
    t.put("use_kl_loss", False, "trainer_type")
    t.put("vf_loss_coeff", 0.5, "trainer_type")


def _sac(t: Translation, settings: LineDict) -> None:
    h = settings["hyperparameters"]
    t.note("time_horizon", "SAC learns from single steps here, as mlagents-learn's SAC (1-step returns)")
    lr = _schedule(
        h["learning_rate"], h["learning_rate_schedule"], settings["max_steps"], LEARNING_RATE_FLOOR
    )
    for key in ("actor_lr", "critic_lr", "alpha_lr"):
        t.put(key, lr, "hyperparameters.learning_rate", (h, "learning_rate"))
    t.put("train_batch_size", h["batch_size"], "hyperparameters.batch_size", (h, "batch_size"))
    buffer = {"type": "EpisodeReplayBuffer", "capacity": h["buffer_size"]}
    t.put("replay_buffer_config", buffer, "hyperparameters.buffer_size", (h, "buffer_size"))
    starts = h["buffer_init_steps"]
    t.put("num_steps_sampled_before_learning_starts", starts, "hyperparameters.buffer_init_steps")
    t.put("tau", h["tau"], "hyperparameters.tau", (h, "tau"))
    intensity = h["batch_size"] / h["steps_per_update"]
    t.put("training_intensity", intensity, "hyperparameters.steps_per_update", (h, "steps_per_update"))
    t.put("initial_alpha", h["init_entcoef"], "hyperparameters.init_entcoef", (h, "init_entcoef"))
    if h["save_replay_buffer"]:
        t.note("save_replay_buffer", "RLlib's checkpoints hold the replay buffer always")
    if h["reward_signal_steps_per_update"] is not None:
        t.note("reward_signal_steps_per_update", "the signals' models update with each SAC update")


def _network(t: Translation, network: LineDict, behaviors: LineDict) -> None:
    model: dict[str, Any] = {
        "fcnet_hiddens": [network["hidden_units"]] * network["num_layers"],
        "fcnet_activation": "swish",  # ML-Agents' LinearEncoder: Swish between its layers
    }
    first = next(iter(behaviors.values()))
    if first["trainer_type"] == "ppo":
        model["vf_share_layers"] = bool(first["hyperparameters"]["shared_critic"])
    encoder = network["vis_encode_type"]
    if encoder not in CONV_FILTERS:
        raise UserError(
            f"{where_of(network, 'vis_encode_type', t.source.name)}: vis_encode_type {encoder} has no"
            " default network here",
            "use vis_encode_type: simple or nature_cnn (or a custom_model plugin)",
        )
    model["conv_filters"] = CONV_FILTERS[encoder]
    memory = network["memory"]
    if memory is not None and first["trainer_type"] == "sac":
        raise UserError(
            f"{where_of(network, 'memory', t.source.name)}: network_settings.memory with trainer_type sac:"
            " RLlib's SAC has no recurrent policy",
            "train it with trainer_type: ppo (memory works there), or remove memory",
        )
    if memory is not None:
        model.update(
            use_lstm=True,
            max_seq_len=memory["sequence_length"],
            lstm_cell_size=memory["memory_size"]
            // 2,  # ML-Agents' memory holds the cell and the hidden state
        )
    t.put("model", model, "network_settings", (network, "hidden_units"))
    if network["normalize"]:
        t.put("observation_filter", "MeanStdFilter", "network_settings.normalize", (network, "normalize"))
    if network["goal_conditioning_type"] != "hyper":
        t.note("goal_conditioning_type", "goal signals are concatenated with the other observations")
    if network["deterministic"]:
        t.note("deterministic", "rollout.py and brains play the greedy action by default")


def _per_behavior(t: Translation, behaviors: LineDict) -> None:
    """``max_steps`` per behavior's policy, and the stop when every policy has its steps."""
    from unity_bridge.behavior_names import default_policy_id

    policies = {str(name): default_policy_id(str(name)) for name in behaviors}
    steps = {policies[name]: settings["max_steps"] for name, settings in behaviors.items()}
    t.put("policy_max_steps", steps, "max_steps")
    t.put("stop", {STOP_WHEN_EVERY_POLICY_IS_DONE: 1.0}, "max_steps", top=True)


def _initialize_from(t: Translation, behaviors: LineDict, checkpoint: LineDict) -> None:
    """``--initialize-from RUN_ID`` (every behavior from that run of ours) and each behavior's
    ``init_path`` (a checkpoint or run folder of ours): ``initialize_from``, paths from the working
    directory as mlagents-learn reads them."""
    from unity_bridge.behavior_names import default_policy_id

    given: dict[str, str] = {}
    if checkpoint["initialize_from"]:
        given["*"] = str((Path(checkpoint["results_dir"]) / checkpoint["initialize_from"]).resolve())
    for name, settings in behaviors.items():
        path = settings["init_path"]
        if path is None:
            continue
        if Path(path).suffix in (".pt", ".onnx"):
            raise UserError(
                f"{where_of(settings, 'init_path', behaviors.where(name))}: init_path {path} is an"
                " mlagents-learn model, which RLlib's policies cannot read",
                "pass a checkpoint (or a run's folder) of a run of ours, or train from scratch",
            )
        given[default_policy_id(str(name))] = str(Path(path).expanduser().resolve())
    if given:
        t.put("initialize_from", given, "checkpoint_settings.initialize_from, init_path")


def _checkpoints(t: Translation, first: LineDict, checkpoint: LineDict) -> None:
    interval = first["checkpoint_interval"]
    if first["even_checkpoints"]:
        interval = int(first["max_steps"] / first["keep_checkpoints"])
    every = max(1, math.ceil(interval / first["summary_freq"]))
    t.put("checkpoint_freq", every, "checkpoint_interval (in summaries)", top=True)
    t.put("keep_checkpoints_num", first["keep_checkpoints"], "keep_checkpoints", top=True)
    t.put("checkpoint_at_end", True, "max_steps (mlagents-learn saves at the end)", top=True)
    t.put("storage_path", str(checkpoint["results_dir"]), "checkpoint_settings.results_dir", top=True)
    if checkpoint["inference"]:
        raise UserError(
            f"{where_of(checkpoint, 'inference', t.source.name)}: checkpoint_settings.inference is not read"
            " here",
            "play a checkpoint with rollout.py CHECKPOINT (it trains nothing)",
        )
    for key, flag in (("resume", "--resume"), ("force", "--force")):
        if checkpoint[key]:
            t.note(f"checkpoint_settings.{key}", f"train.py takes it as {flag} on the command line")
    if checkpoint["load_model"] or checkpoint["train_model"]:
        t.note("load_model/train_model", "mlagents-learn dropped them too (use resume)")


def _env_config(t: Translation, options: LineDict) -> None:
    """The player's launch settings (env_settings, engine_settings) and the number of games."""
    env, engine = options["env_settings"], options["engine_settings"]
    env_config: dict[str, Any] = {}
    if env["env_path"] is not None:
        env_config["file_name"] = env["env_path"]
    if env["env_args"]:
        env_config["additional_args"] = [str(a) for a in env["env_args"]]
    for ours, theirs in (
        ("base_port", "base_port"),
        ("num_areas", "num_areas"),
        ("timeout_wait", "timeout_wait"),
    ):
        env_config[ours] = env[theirs]
    env_config["max_restarts"] = env["max_lifetime_restarts"]
    period = env["restarts_rate_limit_period_s"]
    env_config["max_restarts_per_minute"] = max(1, round(env["restarts_rate_limit_n"] * 60 / period))
    for key in ENGINE_SETTINGS:
        env_config[key] = engine[key]
    if env["seed"] != -1:
        env_config["seed"] = env["seed"]
        t.put("seed", env["seed"], "env_settings.seed")
    # Every team of a behavior ('Striker?team=0') plays and learns the behavior's one policy; without
    # self_play mlagents-learn 1.1.0 gives each team a policy and trains only the last (RULES).
    from unity_bridge.behavior_names import default_policy_id

    env_config["policy_mapping"] = {str(name): default_policy_id(str(name)) for name in options["behaviors"]}
    t.put("env_config", env_config, "env_settings, engine_settings")
    t.put("num_env_runners", 0 if env["num_envs"] == 1 else env["num_envs"], "env_settings.num_envs")
