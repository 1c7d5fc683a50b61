"""Several games per env runner step at once: ``num_envs_per_env_runner`` > 1 for envs whose step
waits on another process (a Unity player), as mlagents-learn's ``--num-envs`` steps its games.

RLlib's vector envs (gymnasium's ``SyncVectorEnv`` for single-agent runners, RLlib's
``SyncVectorMultiAgentEnv`` for multi-agent ones) step their sub-envs one after another.  A game's
step sends the actions to its player and waits for the player's frame: with K games, a vector step
waits for K frames in a row while the other players sit idle.  Here each sub-env's step (or its
reset at the next step, gymnasium's ``NEXT_STEP`` autoreset) runs in a thread of its own, so every
player computes its frame at the same time; the vector env's own ``step`` then collects the
results as it always does, in order, so its outputs (types, autoreset bookkeeping, infos) are its
own.  The waits release the GIL (sockets), so the threads overlap where the work is the players'.

How it fits in: an ``on_environment_created`` hook (:func:`step_games_at_once`, added before the
env guard, which then wraps this step) swaps the vector env's ``step`` on the instance, as the env
guard does.  Before calling the vector env's own ``step``, each sub-env gets a one-shot
``step``/``reset`` attribute that hands back its prepared result; the other one raises, so a vector
env that would call a sub-env otherwise than predicted (a different autoreset rule) fails loudly
instead of stepping a game twice.  The prediction is gymnasium's ``NEXT_STEP`` rule, read from
what the vector env returned: a sub-env whose episode ended is reset at its next step.

Only for env classes that declare ``steps_in_another_process`` (``envsdk.envs.base.RLlibHooks``;
``UnityEnv`` and ``UnityGymEnv`` do): an env that computes its step in this process would only
take turns on the GIL.  Listed in envsdk/substitutions.py as ``games-at-once``; stock mode steps
the games one after another, as RLlib does.  ``benchmarks/games_at_once.py`` measures it.
"""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium.vector.utils import iterate

from envsdk import internals
from envsdk.envs.base import hooks
from envsdk.errors import RunFault
from envsdk.notices import notice
from envsdk.training.substitutes.sampling.batched_runner import resets_at_next_step

ALL = "__all__"


class SteppedOtherwise(RunFault):
    """The vector env called a sub-env otherwise than gymnasium's next-step autoreset predicts."""


class GamesAtOnce:
    """A vector env's ``step`` with its sub-envs' own steps (or next-step resets) run in threads."""

    def __init__(self, env: Any, multi_agent: bool) -> None:
        self.env = env
        self.multi_agent = multi_agent
        self.subs = list(env.envs)
        self.pool = concurrent.futures.ThreadPoolExecutor(len(self.subs), thread_name_prefix="envsdk-game")
        self.resetting = np.zeros(len(self.subs), bool)  # sub-envs whose next step is their reset
        self._reset, self._step, self._close = env.reset, env.step, env.close
        env.reset, env.step, env.close = self.reset, self.step, self.close
        env.games_at_once = self  # a loop that steps the games itself (agents_batched.py) takes the pool

    def run(self, call: Callable[[Any], Any]) -> list[Any]:
        """``call(sub_env)`` for every sub-env at once, in its thread; the results in order."""
        return list(self.pool.map(call, self.subs))

    def reset(self, *args: Any, **kwargs: Any) -> Any:
        out = self._reset(*args, **kwargs)
        self.resetting[:] = False
        return out

    def step(self, actions: Any) -> Any:
        per_env = list(actions) if self.multi_agent else list(iterate(self.env.action_space, actions))
        calls: list[Callable[[], Any]] = [
            sub.reset if self.resetting[i] else functools.partial(sub.step, per_env[i])
            for i, sub in enumerate(self.subs)
        ]
        futures = [self.pool.submit(call) for call in calls]
        concurrent.futures.wait(futures)  # every game has answered (or failed) before anything goes on
        results = [f.result() for f in futures]  # the first sub-env's error, as the vector env would raise
        for i, sub in enumerate(self.subs):
            _hand_over(sub, i, results[i], reset=bool(self.resetting[i]))
        try:
            out = self._step(actions)
        finally:
            for sub in self.subs:
                _take_back(sub)
        terminated, truncated = out[2], out[3]
        if self.multi_agent:
            self.resetting = np.array(
                [bool(t.get(ALL)) or bool(u.get(ALL)) for t, u in zip(terminated, truncated, strict=True)]
            )
        else:
            self.resetting = np.logical_or(terminated, truncated)
        return out

    def close(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._close(*args, **kwargs)
        finally:
            self.pool.shutdown(wait=True)


def _hand_over(sub: Any, index: int, result: Any, reset: bool) -> None:
    """Give ``sub`` one-shot ``step``/``reset`` attributes: the expected one returns ``result``."""

    def prepared(*_: Any, **__: Any) -> Any:
        return result

    def unexpected(*_: Any, **__: Any) -> Any:
        called = "step" if reset else "reset"
        raise SteppedOtherwise(
            f"games-at-once: the vector env called sub-env {index}'s {called}() where gymnasium's next-step"
            " autoreset calls the other; turn the substitution off (ENVSDK_STOCK=games-at-once)"
        )

    sub.reset, sub.step = (prepared, unexpected) if reset else (unexpected, prepared)


def _take_back(sub: Any) -> None:
    for name in ("reset", "step"):
        sub.__dict__.pop(name, None)


def step_games_at_once(*, env_runner: Any, **_: Any) -> None:
    """``on_environment_created`` hook: step the runner's games at once where there are several of
    an env that steps in another process, and its vector env resets them at the next step."""
    env = internals.runner_env(env_runner)
    subs = list(getattr(env, "envs", ()))
    if len(subs) < 2 or not all(hooks(sub.unwrapped).steps_in_another_process for sub in subs):
        return
    if not resets_at_next_step(env, unsaid=False):
        return
    GamesAtOnce(env, multi_agent=hasattr(env, "single_action_spaces"))
    notice(
        f"games-at-once: the {len(subs)} games of env runner {getattr(env_runner, 'worker_index', 0)} step at"
        " the same time (ENVSDK_STOCK=games-at-once: one after another)"
    )
