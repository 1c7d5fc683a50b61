# Two commands do all set-up (see README):
#   make train   -> virtualenv + pinned install, then train configs/cartpole-ppo.yaml
#   make test    -> virtualenv + pinned install, then the whole test suite
PYTHON ?= python3
# The torch build: cpu (PyTorch's CPU index), cuda (PyPI's build, CUDA packages pinned by
# requirements-cuda.lock) or auto (cpu where that index answers, else PyPI's); see tools/torch_build.py.
TORCH  ?= auto
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: train test test-fast test-stock lint bench clean sysdeps docs

$(STAMP): requirements.lock requirements-cuda.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and alone, at the lock's version: an unpinned torch pulls a multi-GB CUDA build.
	$(PY) tools/torch_build.py install $(TORCH)
	$(PY) -m pip install -q -c requirements.lock -e '.[test]'
	touch $(STAMP)

# System packages the tests use for real: Xvfb (and the X client libraries SDL loads) for the
# Unity bridge's graphics path; Slurm and munge for the SLURM launcher's tests. Installed with
# apt-get when running as root on Debian/Ubuntu; otherwise a note says what to install.
SYS_PACKAGES := xvfb libx11-6 libxext6 libxrandr2 libxcursor1 libxi6 libxfixes3 libxrender1 libxss1 \
	slurm-wlm munge
sysdeps:
	@if ! command -v Xvfb >/dev/null || ! command -v slurmctld >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(SYS_PACKAGES) >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(SYS_PACKAGES) >/dev/null; }; \
	  else echo "note: Xvfb or Slurm is missing; their tests will be skipped (sudo apt-get install $(SYS_PACKAGES))"; fi; \
	fi

train: $(STAMP)
	$(PY) train.py -f configs/cartpole-ppo.yaml

# The suite runs in $(TEST_WORKERS) pytest-xdist workers, a test file to each at a time (a file's
# module fixtures train once), the longest files first; each worker has its own Ray head and
# players (tests/conftest.py). TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2
test: $(STAMP) sysdeps
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet --site-dir site
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

# The tests that need no trained run, Unity player or cluster: about a minute, under two on a busy
# 2-core machine (tests/conftest.py fails an unmarked test that builds an Algorithm).
test-fast: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) -m pytest -q -m "not slow"

# The fast tests on stock RLlib: every substitution of envsdk/substitutions.py off (a test of one
# of them keeps that one on). `make test` trains every config (in-process trials) and the RLlib-parity
# cases (Tune trials) this way too.
test-stock: $(STAMP)
	ENVSDK_STOCK=1 $(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS)

# The docs site (docs/ and mkdocs.yml) into site/; `.venv/bin/mkdocs serve` shows it live.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

bench: $(STAMP) sysdeps
	$(PY) -m pip install -q -c requirements.lock -e '.[bench]'
	$(PY) benchmarks/solve_suite.py
	$(PY) benchmarks/fixed_budget.py
	$(PY) benchmarks/floor.py
	$(PY) benchmarks/bridge.py
	$(PY) benchmarks/scaling.py
	$(PY) benchmarks/multiagent.py
	$(PY) benchmarks/games_at_once.py
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/sampling.py
	$(PY) benchmarks/startup.py
	$(PY) benchmarks/phases.py
	$(PY) benchmarks/threads.py
	$(PY) benchmarks/replay.py
	$(PY) benchmarks/ecosystem.py
	$(PY) benchmarks/env_checks.py
	$(PY) benchmarks/unity_vs_mlagents.py
	$(PY) benchmarks/mlagents_configs.py
	$(PY) benchmarks/mlagents_configs.py --game Chase
	$(PY) benchmarks/mlagents_configs.py --game Dodgeball
	$(PY) benchmarks/reward_signals.py
	$(PY) benchmarks/poca.py
	$(PY) benchmarks/expensive_env.py
	$(PY) benchmarks/rllib_parity.py
	$(PY) benchmarks/speedups.py
	$(PY) benchmarks/quickstart.py
	$(PY) benchmarks/steps_to_solve.py --variant "2x512, 15 epochs, lr 3e-3" minibatch_size=512 num_epochs=15 lr=0.003

clean:
	rm -rf $(VENV)
