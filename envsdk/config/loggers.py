"""The ``loggers:`` experiment key: where a run's results go besides its trial folder.

    loggers: [csv, json, tensorboard, wandb, mlflow]
    loggers: [{wandb: {project: dodgeball, group: sweep-3}}, {mlflow: {tracking_uri: "http://host:5000"}}]

``csv``, ``json`` and ``tensorboard`` are the files every trial folder gets
(progress.csv, result.json, TensorBoard events): the summary, the reward plot
and ``--resume`` read them, so they are always written and naming them changes
nothing.  ``wandb`` and ``mlflow`` are Tune's own ``WandbLoggerCallback`` and
``MLflowLoggerCallback``; a mapping's keys are their arguments.  Everything is
checked here, before Ray starts: the names, the arguments, that the package is
installed, and that wandb has a key or runs offline.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
from pathlib import Path
from typing import Any

from envsdk.errors import UserError, did_you_mean

BUILT_IN = ("csv", "json", "tensorboard")
EXTERNAL = ("wandb", "mlflow")
ALIASES = {  # Ray 1.x logger class names, and what people type
    "tbx": "tensorboard",
    "tbxlogger": "tensorboard",
    "tbxloggercallback": "tensorboard",
    "csvlogger": "csv",
    "csvloggercallback": "csv",
    "jsonlogger": "json",
    "jsonloggercallback": "json",
    "wandblogger": "wandb",
    "wandbloggercallback": "wandb",
    "mlflowlogger": "mlflow",
    "mlflowloggercallback": "mlflow",
}
INSTALL = "pip install 'envsdk[loggers]'"
WANDB_OFFLINE_MODES = ("offline", "disabled", "dryrun")


def parse_loggers(value: Any, where: str) -> dict[str, dict[str, Any]]:
    """``loggers:`` as written -> {wandb|mlflow: its arguments}; the built-in ones need no entry."""
    items = value if isinstance(value, list) else [value]
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        name, options = _entry(item, where)
        key = ALIASES.get(name.lower().replace("_", "").replace("-", ""), name.lower())
        if key not in BUILT_IN + EXTERNAL:
            raise UserError(
                f"{where}: unknown logger '{name}'",
                did_you_mean(key, [*BUILT_IN, *EXTERNAL]) or f"loggers: {', '.join(BUILT_IN + EXTERNAL)}",
            )
        if key in BUILT_IN:
            if options:
                raise UserError(f"{where}: logger '{key}' takes no options", f"write just {key}")
            continue
        if key in out:
            raise UserError(f"{where}: logger '{key}' is named twice", "keep one entry")
        _check_external(key, options, where)
        out[key] = options
    return out


def _entry(item: Any, where: str) -> tuple[str, dict[str, Any]]:
    if isinstance(item, str):
        return item, {}
    if isinstance(item, dict) and len(item) == 1:
        ((name, options),) = item.items()
        if isinstance(name, str) and isinstance(options, dict | None):
            return name, dict(options or {})
    raise UserError(
        f"{where}: a logger is a name or {{name: {{argument: value}}}}, not {item!r}",
        "e.g. loggers: [tensorboard, {wandb: {project: my-project}}]",
    )


def _check_external(key: str, options: dict[str, Any], where: str) -> None:
    if importlib.util.find_spec(key) is None:
        raise UserError(f"{where}: logger '{key}' needs the {key} package, which is not installed", INSTALL)
    accepted = set(inspect.signature(callback_class(key)).parameters)
    if "kwargs" not in accepted:  # wandb passes unknown keys on to wandb.init
        for option in options:
            if option not in accepted:
                raise UserError(
                    f"{where}: logger '{key}' has no argument '{option}'",
                    did_you_mean(option, sorted(accepted)) or f"its arguments: {', '.join(sorted(accepted))}",
                )
    if key == "wandb" and not _wandb_can_log(options):
        raise UserError(
            f"{where}: logger 'wandb' has no API key",
            "set WANDB_API_KEY (or api_key_file:), or WANDB_MODE=offline to log here and `wandb sync` later",
        )


def _wandb_can_log(options: dict[str, Any]) -> bool:
    if (
        os.environ.get("WANDB_MODE", "").lower() in WANDB_OFFLINE_MODES
        or options.get("mode") in WANDB_OFFLINE_MODES
    ):
        return True
    if os.environ.get("WANDB_API_KEY") or options.get("api_key") or options.get("api_key_file"):
        return True
    netrc = Path.home() / ".netrc"  # where `wandb login` keeps the key
    return netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="replace")


def callback_class(key: str) -> type:
    """Tune's logger callback for ``wandb`` or ``mlflow``."""
    if key == "wandb":
        from ray.air.integrations.wandb import WandbLoggerCallback

        return WandbLoggerCallback
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    return MLflowLoggerCallback
