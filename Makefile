# Two commands set everything up on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test docs install clean bench bench-engine bench-scale bench-plan

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --upgrade "pip>=24" "setuptools<70" wheel
	$(BIN)/pip install -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	DGLBACKEND=pytorch $(BIN)/fourdb run -m experiment=default

# One test process per core (TEST_WORKERS=1 for a single process); each runs torch on one thread, since
# two processes with a thread per core each would contend for the same cores. The slowest cases are listed.
TEST_WORKERS ?= auto
test: $(STAMP) docs
	DGLBACKEND=pytorch OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=15

# The documentation site (mkdocs.yml, docs/) into site/; --strict fails on a broken link or anchor, or a page
# left out of the nav. `make test` builds it first.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

# Performance comparisons, one `BENCH name=... ratio=...` line each (not part of `make test`).
# `bench` runs every benchmark group of the project; each group is a target it depends on.
ENGINE_BENCH := bench_sampler.py bench_store.py bench_layerwise.py model_cost.py
bench: bench-engine bench-dfs bench-parallel bench-plan

bench-engine: $(STAMP)
	cd benchmarks && for s in $(ENGINE_BENCH); do DGLBACKEND=pytorch ../$(BIN)/python $$s || exit 1; done

# DFS against featuretools 1.31, which needs pandas<2.2 and numpy<2: it gets its own environment.
FT_VENV := .venv-bench-ft
.PHONY: bench-dfs
$(FT_VENV)/.installed:
	$(PY) -m venv $(FT_VENV)
	$(FT_VENV)/bin/pip install -q "featuretools==1.31.0" "pandas<2.2" "numpy<2" "pyarrow<19" psutil
	touch $@

bench-dfs: $(STAMP) $(FT_VENV)/.installed
	$(BIN)/python benchmarks/dfs_vs_featuretools.py

clean:
	rm -rf $(VENV) outputs multirun .fourdb_cache site

# Data-parallel scaling: 1-process vs 2-process epoch time (torchrun), with the cost model's prediction;
# and the embedding syncs (dense, sparse, tiered) of learned row vectors on 2 processes.
.PHONY: bench-parallel
bench-parallel: $(STAMP)
	cd benchmarks && DGLBACKEND=pytorch ../$(BIN)/python ddp_scaling.py
	cd benchmarks && DGLBACKEND=pytorch ../$(BIN)/python ddp_embeddings.py

# The cost model's accuracy: 8 strategies on two databases, each trained in a process of its own, predicted
# against measured epoch time and peak memory, and the pick under a memory limit (benchmarks/plan_accuracy.py).
bench-plan: $(STAMP)
	cd benchmarks && DGLBACKEND=pytorch ../$(BIN)/python plan_accuracy.py

# How each stage grows with the database: the synthetic shop at 1M, 10M and 100M rows, peak RSS capped
# at 16 GB per size (benchmarks/bench_scale.py; the largest size takes a while on 2 cores).
bench-scale: $(STAMP)
	DGLBACKEND=pytorch $(BIN)/python benchmarks/bench_scale.py

# The shop tasks' SQL under DuckDB's default and its partitioned hash join, at 1M, 10M and 100M rows: where
# the tasks stage's growth comes from (benchmarks/task_sql.py).
.PHONY: bench-task-sql
bench-task-sql: $(STAMP)
	$(BIN)/python benchmarks/task_sql.py --users 6849,68493,684931
