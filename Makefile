# Two commands set everything up on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test install clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --upgrade "pip>=24" "setuptools<70" wheel
	$(BIN)/pip install -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	DGLBACKEND=pytorch $(BIN)/fourdb run -m experiment=default

test: $(STAMP)
	DGLBACKEND=pytorch $(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) outputs multirun .fourdb_cache
