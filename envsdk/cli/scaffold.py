"""``python -m envsdk new NAME``: a new env file, its config and a passing test."""

from __future__ import annotations

import keyword
import re
from pathlib import Path

from envsdk.errors import UserError

ENV_TEMPLATE = '''"""{title}: a new environment. Edit reset() and step() to make it yours."""

import numpy as np
from gymnasium import spaces

import envsdk


@envsdk.register("{class_name}-v0", max_episode_steps=200)
class {class_name}(envsdk.Env):
    """Move a point towards 0; observation = position, actions = left/stay/right."""

    def __init__(self, config=None):
        super().__init__(config)
        self.size = float(self.config.get("size", 1.0))
        self.observation_space = spaces.Box(-self.size, self.size, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self.pos = np.zeros(1, dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-self.size, self.size, size=1).astype(np.float32)
        return self.pos.copy(), {{}}

    def step(self, action):
        self.pos = np.clip(self.pos + 0.1 * (int(action) - 1), -self.size, self.size).astype(np.float32)
        reward = -float(abs(self.pos[0]))
        terminated = bool(abs(self.pos[0]) < 0.05)
        return self.pos.copy(), reward, terminated, False, {{}}
'''

CONFIG_TEMPLATE = """{name}-ppo:
  run: PPO
  env: {module}.{class_name}
  stop: {{training_iteration: 20}}
  checkpoint_at_end: true
  config:
    env_config: {{size: 1.0}}
    num_env_runners: 0
    train_batch_size: 1000
    minibatch_size: 250
    num_epochs: 6
    lr: 0.001
"""

TEST_TEMPLATE = '''"""Checks for {module}.{class_name}: spaces honoured, seeded resets reproducible."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from envsdk.envs.checkup.verdict import check_env  # noqa: E402
from envsdk.envs.registry import resolve_env  # noqa: E402
from envsdk.networks.choice import describe  # noqa: E402


def test_env_passes_check():
    resolved = resolve_env("{module}.{class_name}", [Path(__file__).resolve().parent])
    report = check_env(resolved, {{"size": 1.0}}, steps=500, describe=describe)
    assert report.ok, report.render()
'''


def class_name_for(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[^0-9a-zA-Z]+", name) if part)


def scaffold(name: str, folder: Path, force: bool = False) -> list[Path]:
    module = re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()
    if not module or module[0].isdigit() or keyword.iskeyword(module):
        raise UserError(f"'{name}' cannot be a Python module name", "start with a letter, e.g. 'gridworld'")
    cls = class_name_for(name)
    files = {
        folder / f"{module}.py": ENV_TEMPLATE.format(title=name, class_name=cls),
        folder / f"{module}.yaml": CONFIG_TEMPLATE.format(name=module, module=module, class_name=cls),
        folder / f"test_{module}.py": TEST_TEMPLATE.format(module=module, class_name=cls),
    }
    existing = [p for p in files if p.exists()]
    if existing and not force:
        raise UserError(f"{existing[0]} already exists", "choose another name or pass --force")
    folder.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.write_text(text)
    return list(files)
