# Two commands do all set-up (see README):
#   make train   -> virtualenv + pinned install, then train configs/cartpole-ppo.yaml
#   make test    -> virtualenv + pinned install, then the whole test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: train test lint bench clean

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and alone: 2.13.0 is the CPU build; unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c requirements.lock -e '.[test]'
	touch $(STAMP)

train: $(STAMP)
	$(PY) train.py -f configs/cartpole-ppo.yaml

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/solve_cartpole.py

clean:
	rm -rf $(VENV)
