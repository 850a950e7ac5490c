# The two commands a newcomer runs: `make demo` and `make test`; `make check` is the inner loop
# (CONTRIBUTING.md). All create .venv if missing and (re)install the package when its metadata
# changed.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check lint format bench clean test-tools

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[runtime,test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/dlsched compare --trace philly --cluster 64x8:V100 --policies fifo,sjf,srtf,tiresias,sjf-ffs,sjf-bsbf --out out/demo

# What the suite needs that pip cannot bring: bubblewrap for tenant isolation (docs/security.md)
# and Debian's chromium for the dashboard's browser test. Installed when missing and root may;
# otherwise the tests that need them are skipped and the run's last lines name them.
test-tools:
	@missing=""; command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing$$missing (Debian packages) for the tests"; \
		apt-get install -y -qq $$missing >/dev/null 2>&1 || \
			(apt-get update -qq >/dev/null && apt-get install -y -qq $$missing >/dev/null) || true; \
	fi
	@command -v bwrap >/dev/null || echo "WARNING: no bubblewrap: the tenant isolation tests will be skipped"
	@command -v chromium >/dev/null || echo "WARNING: no chromium: the dashboard's browser test will be skipped"

# format, lint and types: fails on any violation (`make format` fixes what a tool can)
lint: $(STAMP)
	$(BIN)/ruff format --check --quiet
	$(BIN)/ruff check --quiet
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format --quiet
	$(BIN)/ruff check --quiet --fix

# The suite writes bytecode even where PYTHONDONTWRITEBYTECODE is set (as on this machine):
# without it, each of the hundreds of Python processes the suite starts compiles what it imports
# anew, and each pytest process rewrites the asserts of every test module and of pytest plugins'
# whole packages (399 modules, most of them schemathesis's) again: 3 s of its 10 s collection.
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE

# the inner loop: the checks and every test that needs neither Ray nor fresh PyTorch processes
# building DDP (32 s of test time between them), with a quarter of each property test's examples
# and of the API fuzz (tests/example_counts.py)
check: lint
	DLSCHED_EXAMPLES_SCALE=0.25 $(TEST_ENV) $(BIN)/python -m pytest -m "not runtime and not torch_processes"

test: lint test-tools
	$(TEST_ENV) $(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[runtime,test,bench]'
	$(BIN)/python benchmarks/sim_speed.py
	$(BIN)/python benchmarks/sim_speed.py --policies tiresias,elastic-tiresias,elastic-fifo --elastic-fraction 0.5
	$(BIN)/python benchmarks/sim_speed.py --policies fifo,edf,genie,genie-oracle --deadlines
	$(BIN)/python benchmarks/sim_speed.py --cluster 64x8:V100,16x8:V100@inference --policies aryl-base,aryl --elastic-fraction 0.5
	$(BIN)/python benchmarks/knapsack.py
	$(BIN)/python benchmarks/sim_speed.py --policies tiresias,drf,ftf --quotas philly-vc
	$(BIN)/python benchmarks/dashboard.py
	$(BIN)/python benchmarks/sharing_pass.py --repeat 9
	$(BIN)/python benchmarks/scaling.py --repeat 3
	$(BIN)/python benchmarks/whole_process.py
	$(BIN)/python benchmarks/decision_cost.py --rounds 3

clean:
	rm -rf $(VENV) out build src/*.egg-info
