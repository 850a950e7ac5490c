# The two commands a newcomer runs: `make demo` and `make test`.
# Both create .venv if missing and (re)install the package when its metadata changed.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean sandbox-tools

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[runtime,test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/dlsched compare --trace philly --cluster 64x8:V100 --policies fifo,sjf,srtf,tiresias,sjf-ffs,sjf-bsbf --out out/demo

# Tenant isolation (docs/security.md) needs bubblewrap: installed here when missing and root may
# (without it the isolation tests are skipped and `dlsched server` needs --trust-tenants).
sandbox-tools:
	@command -v bwrap >/dev/null || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || \
		apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
		(apt-get update -qq >/dev/null && apt-get install -y -qq bubblewrap >/dev/null) || true
	@command -v bwrap >/dev/null || echo "bubblewrap is missing: tenant isolation tests will be skipped"

test: $(STAMP) sandbox-tools
	$(BIN)/python -m pytest

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

clean:
	rm -rf $(VENV) out build src/*.egg-info
