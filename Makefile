# The two commands a newcomer runs: `make demo` and `make test`.
# Both create .venv if missing and (re)install the package when its metadata changed.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[runtime,test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/dlsched compare --trace philly --cluster 64x8:V100 --policies fifo,sjf,srtf,tiresias,sjf-ffs,sjf-bsbf --out out/demo

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/sim_speed.py
	$(BIN)/python benchmarks/sim_speed.py --policies tiresias,elastic-tiresias,elastic-fifo --elastic-fraction 0.5
	$(BIN)/python benchmarks/sharing_pass.py --repeat 9
	$(BIN)/python benchmarks/scaling.py --repeat 3

clean:
	rm -rf $(VENV) out build src/*.egg-info
