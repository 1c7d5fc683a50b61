"""The ``reward_signals:`` config key: ML-Agents' reward signals, each with its own strength and
discount, read and checked before anything starts.

    config:
      gamma: 0.99
      reward_signals:
        extrinsic: {strength: 1.0}                 # the env's reward; gamma: the run's
        curiosity: {strength: 0.02, gamma: 0.99, learning_rate: 3.0e-4, encoding_size: 256}
        rnd: {strength: 0.01, network_settings: {hidden_units: 64, num_layers: 3}}
        gail: {strength: 0.01, demo_path: expert.demo, use_actions: true, use_vail: false}
      algorithm_config_overrides_per_module:
        blue: {reward_signals: {extrinsic: {}, rnd: {strength: 0.05}}}   # one policy's own

The names, keys, defaults and types are mlagents-learn's (:mod:`envsdk.config.mlagents.schema`
holds them once for both dialects), with one difference: in RLlib YAML a signal's ``gamma``
defaults to the run's (or the policy's) ``gamma``.  As in ML-Agents, a mapping without
``extrinsic`` trains without the env's reward, and ``encoding_size`` sets the encoder's width
where ``network_settings`` is not given.  What the signals do is in
:mod:`envsdk.networks.reward_signals` (the models) and
:mod:`envsdk.training.substitutes.ppo.signals` (the rewards, values and advantages).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envsdk.config.mlagents import schema
from envsdk.config.yamlio import LineDict, where_of
from envsdk.errors import UserError, did_you_mean
from envsdk.notices import notice

KEY = "reward_signals"
PER_MODULE = "algorithm_config_overrides_per_module"
EXTRINSIC = "extrinsic"
NAMES = schema.REWARD_SIGNALS
IGNORE_DONE = ("curiosity", "rnd")  # ML-Agents' providers whose value bootstraps past an episode's end


@dataclass(frozen=True)
class Signal:
    """One signal's settings, every default filled in."""

    name: str
    gamma: float
    strength: float
    learning_rate: float = 0.0  # extrinsic: nothing to learn
    hidden_units: int = 128  # the encoder's width (ML-Agents' network_settings.hidden_units)
    num_layers: int = 2
    normalize: bool = False
    use_actions: bool = False  # gail
    use_vail: bool = False  # gail
    demo_path: str | None = None  # gail

    @property
    def ignore_done(self) -> bool:
        """Whether its value bootstraps from an episode's last observation at a termination (ML-Agents'
        ``ignore_done``: curiosity and RND are about novelty, which an episode's end does not end)."""
        return self.name in IGNORE_DONE


@dataclass(frozen=True)
class RewardSignals:
    """One policy's signals, in the YAML's order."""

    signals: tuple[Signal, ...]

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.signals]

    @property
    def intrinsic(self) -> tuple[Signal, ...]:
        """The signals with a model to learn (all but extrinsic)."""
        return tuple(s for s in self.signals if s.name != EXTRINSIC)

    def only_extrinsic_at_one(self, gamma: float) -> bool:
        """The env's reward alone at strength 1, discounted by the policy's ``gamma``: plain RLlib
        PPO, nothing to add."""
        if len(self.signals) != 1 or self.signals[0].name != EXTRINSIC:
            return False
        return self.signals[0].strength == 1 and self.signals[0].gamma == gamma

    def to_config(self) -> list[dict[str, Any]]:
        """Plain values for a module's ``model_config`` (checkpoints pickle it)."""
        return [asdict(s) for s in self.signals]

    @classmethod
    def from_config(cls, values: list[dict[str, Any]]) -> RewardSignals:
        return cls(tuple(Signal(**v) for v in values))


def parse(
    value: Any, where: str, run_gamma: float, section: str = KEY, base: Path | None = None
) -> RewardSignals:
    """The YAML mapping -> settings; a wrong name, key or type is a UserError naming its line.
    ``base``: the YAML's folder, where a relative ``demo_path`` is looked for first (then the
    working directory)."""
    if not isinstance(value, Mapping) or not value:
        raise UserError(
            f"{where}: {section} must be a mapping of signal names to their settings, got {value!r}",
            f"e.g. {KEY}: {{extrinsic: {{strength: 1.0}}, curiosity: {{strength: 0.02}}}}; signals: "
            + ", ".join(NAMES),
        )
    signals = []
    for name, given in value.items():
        at = where_of(value, name, where)
        if name not in NAMES:
            raise UserError(
                f"{at}: {section}: '{name}' is no reward signal",
                did_you_mean(str(name), NAMES) or "signals: " + ", ".join(NAMES),
            )
        settings = schema.checked(
            given, {**schema.REWARD_SIGNAL, **schema.REWARD_SIGNAL_EXTRA[name]}, f"{section}.{name}", at
        )
        signals.append(_signal(str(name), settings, dict(given or {}), at, run_gamma, section, base))
    return RewardSignals(tuple(signals))


def _signal(
    name: str,
    settings: LineDict,
    given: dict[str, Any],
    where: str,
    run_gamma: float,
    section: str,
    base: Path | None,
) -> Signal:
    network = schema.checked(
        settings["network_settings"], schema.NETWORK, f"{section}.{name}.network_settings", where
    )
    if network["memory"] is not None:
        notice(
            f"{section}.{name}.network_settings.memory: ignored, as ML-Agents ignores it for reward signals"
        )
    hidden = network["hidden_units"]
    defaults = schema.checked(None, schema.NETWORK, "network_settings", where)
    if settings.get("encoding_size") is not None and dict(network) == dict(defaults):
        # ML-Agents' older spelling of the encoder's width, where network_settings is not given (or
        # is all defaults: mlagents-learn's translated blocks carry every default)
        hidden = settings["encoding_size"]
    gamma = settings["gamma"] if "gamma" in given else run_gamma
    if not 0 <= gamma <= 1:
        raise UserError(f"{where}: {section}.{name}.gamma is {gamma}", "give a gamma from 0 to 1")
    if settings["strength"] < 0:
        raise UserError(f"{where}: {section}.{name}.strength is {settings['strength']}", "give 0 or more")
    if name == "gail" and not settings.get("demo_path"):
        raise UserError(
            f"{where}: {section}.gail needs demo_path", "give the .demo file (or folder) to imitate"
        )
    if hidden < 1 or network["num_layers"] < 1 or settings.get("learning_rate", 1.0) <= 0:
        raise UserError(
            f"{where}: {section}.{name}: hidden_units (or encoding_size), num_layers and learning_rate"
            " must be above 0",
            "e.g. network_settings: {hidden_units: 128, num_layers: 2}, learning_rate: 3.0e-4",
        )
    return Signal(
        name=name,
        gamma=float(gamma),
        strength=float(settings["strength"]),
        learning_rate=float(settings.get("learning_rate", 0.0)),
        hidden_units=int(hidden),
        num_layers=int(network["num_layers"]),
        normalize=bool(network["normalize"]),
        use_actions=bool(settings.get("use_actions", False)),
        use_vail=bool(settings.get("use_vail", False)),
        demo_path=demo_path(settings.get("demo_path"), base, where, f"{section}.{name}.demo_path"),
    )


def demo_path(given: str | None, base: Path | None, where: str, key: str) -> str | None:
    """A ``demo_path`` (``key`` names it) made absolute: next to the YAML, else from the working
    directory."""
    if given is None:
        return None
    path = Path(given).expanduser()
    candidates = [path] if path.is_absolute() else [(base or Path.cwd()) / path, Path.cwd() / path]
    for candidate in candidates:
        if candidate.exists():
            return str(candidate.resolve())
    raise UserError(
        f"{where}: {key} '{given}' is not there"
        + ("" if path.is_absolute() else " (looked next to the YAML and in the working directory)"),
        "give a .demo file (or a folder of them); rollout.py records one from a checkpoint or a scripted"
        " player (docs/commands.md)",
    )


@dataclass(frozen=True)
class SignalPlan:
    """The run's ``reward_signals`` and each policy's own, taken out of the config's values."""

    run: Any = None  # the run's mapping as written (None: not set)
    where: str = ""
    gammas: Mapping[str, float] | None = None  # policy -> its own gamma, where its overrides set one
    own: Mapping[str, RewardSignals] | None = None  # policy -> its own signals
    run_gamma: float = 0.99
    base: Path | None = None  # the YAML's folder (demo_path)

    @property
    def given(self) -> bool:
        return self.run is not None or bool(self.own)

    def gamma_of(self, policy: str) -> float:
        """The policy's discount: its own (``algorithm_config_overrides_per_module``), else the run's."""
        return (self.gammas or {}).get(policy, self.run_gamma)

    def of(self, policy: str) -> RewardSignals | None:
        """One policy's signals: its own, else the run's with its gamma as the default discount."""
        if self.own and policy in self.own:
            return self.own[policy]
        if self.run is None:
            return None
        return parse(self.run, self.where, self.gamma_of(policy), base=self.base)


def take(values: LineDict, default_gamma: float, base: Path | None = None) -> SignalPlan:
    """Pop ``reward_signals`` from ``values`` and from each policy's entry of
    ``algorithm_config_overrides_per_module`` (RLlib would refuse our key there); every mapping is
    checked here, before anything starts."""
    run_gamma = float(values.get("gamma", default_gamma))
    run = values.pop(KEY, None)
    if run is not None:
        parse(run, values.where(KEY), run_gamma, base=base)
    own: dict[str, RewardSignals] = {}
    gammas: dict[str, float] = {}
    overrides = values.get(PER_MODULE)
    for policy, entry in overrides.items() if isinstance(overrides, Mapping) else ():
        if not isinstance(entry, dict):
            continue
        gamma = float(entry.get("gamma", run_gamma))
        gammas[str(policy)] = gamma
        if KEY in entry:
            at = where_of(entry, KEY, values.where(PER_MODULE))
            section = f"{PER_MODULE}.{policy}.{KEY}"
            own[str(policy)] = parse(entry.pop(KEY), at, gamma, section, base)
    return SignalPlan(run, values.where(KEY), gammas, own, run_gamma, base)


def check_one_discount(plan: SignalPlan, run: str, values: LineDict, defaults: Any) -> None:
    """What a learner of one value function (``run``'s, with ``defaults`` its default config) cannot
    take, refused with one line before anything starts: it learns the signals' summed rewards, so
    a signal's gamma must be its policy's; a replayed row's n-step return (``n_step``) is no one
    step's reward; APPO's and IMPALA's aggregator actors leave out the next observations curiosity
    reads and the episode ends GAIL's ``use_actions`` reads; several learners do not average the
    signal models' gradients (their module's DDP forward never runs).  A policy whose signals
    bootstrap through a termination and stop at it both gets a notice: its one value stops."""
    named: list[tuple[str | None, float, RewardSignals | None]] = []
    if plan.run is not None:
        named.append((None, plan.run_gamma, parse(plan.run, plan.where, plan.run_gamma, base=plan.base)))
    named += [(p, plan.gamma_of(p), plan.of(p)) for p in sorted(set(plan.gammas or {}) | set(plan.own or {}))]
    n_step = values.get("n_step", getattr(defaults, "n_step", 1))
    key = "num_aggregator_actors_per_learner"
    aggregated = values.get(key, getattr(defaults, key, 0))
    learners = values.get("num_learners", getattr(defaults, "num_learners", 0))
    for policy, gamma, signals in named:
        whose = "the run's" if policy is None else f"policy {policy}'s"
        for signal in signals.signals if signals is not None else ():
            if signal.gamma != gamma:
                raise UserError(
                    f"{plan.where}: {KEY}.{signal.name}.gamma is {signal.gamma}, {whose} gamma {gamma}:"
                    f" {run} learns one value of the signals' summed rewards, with one discount",
                    f"set its gamma to {gamma}, or run: PPO, which has a value head per signal",
                )
        intrinsic = signals.intrinsic if signals is not None else ()
        if intrinsic and n_step != 1:
            raise UserError(
                f"{values.where('n_step')}: n_step is {n_step} with {KEY}: a replayed row's reward is"
                " n steps' return, a signal's reward one step's",
                f"set n_step: 1, or drop {', '.join(s.name for s in intrinsic)} from {KEY}",
            )
        if aggregated and any(s.name == "curiosity" for s in intrinsic):
            raise UserError(
                f"{values.where(key)}: curiosity reads next observations, which {run}'s aggregator"
                " actors leave out of the batch",
                f"set {key}: 0, or drop curiosity",
            )
        if aggregated and any(s.name == "gail" and s.use_actions for s in intrinsic):
            raise UserError(
                f"{values.where(key)}: gail with use_actions reads where episodes ended, which {run}'s"
                " aggregator actors leave out of the batch",
                f"set {key}: 0, or use_actions: false",
            )
        if intrinsic and isinstance(learners, int) and learners > 1:
            raise UserError(
                f"{values.where('num_learners')}: num_learners is {learners} with {KEY}: {run}'s learners"
                " would not average the signal models' gradients",
                f"set num_learners: 1 (or 0), or run: PPO, which takes several learners with {KEY}",
            )
        if signals is not None and len({s.ignore_done for s in signals.signals}) > 1:
            notice(
                f"{whose} {KEY} ({', '.join(signals.names)}) in {run}: one value learns their summed"
                " rewards and stops at an episode's termination, where ML-Agents bootstraps curiosity's"
                " and rnd's through it; PPO has a value head per signal"
            )
