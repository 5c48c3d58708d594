# Two set-up commands on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
TRITON_READY := $(VENV)/.tritonserver-checked
# Where `make models` exports the defaults (the service serves BIONEMO_MODEL_REPOSITORY, model_repository unless set),
# which of them (EXPORT_MODELS, default: all) and in which precision: `make serve PRECISION=int8` serves the encoder and
# language-model graphs in INT8 where they pass the accuracy gate (docs/performance.md).
REPOSITORY ?= model_repository
EXPORT_MODELS ?=
PRECISION ?= fp32
MODELS_READY := $(REPOSITORY)/.exported
PRECISION_ASKED := $(REPOSITORY)/.precision
# The tritonserver base image's Python and glibc (bentofile.yaml); tests/unit/test_packaging.py checks they agree.
IMAGE_PYTHON := 3.12
IMAGE_PLATFORM := x86_64-manylinux_2_39
EXPORT_SOURCES := bionemo_serving/model_catalog.py \
	$(wildcard bionemo_serving/exporter/*.py bionemo_serving/exporter/*/*.py bionemo_serving/preprocessing/*.py bionemo_serving/runtimes/*.py bionemo_serving/runtimes/*/*.py weights/*/*)

# bentoml finds tritonserver on PATH: the one in $(BIN) (see tritonserver_setup).
export PATH := $(CURDIR)/$(BIN):$(PATH)
export HF_HUB_OFFLINE := 1

.PHONY: install models serve serve-grpc test test-fast test-client audit lock image bench bench-molecules bench-growth \
	train-megamolbart soak clean FORCE

install: $(INSTALLED) $(TRITON_READY)

# torch first, by itself: `torch==2.13.0` alone takes the local CPU wheel.
# Triton Model Navigator without its GPU-only requirements (see requirements/navigator-cpu.txt); MOSES's data files
# without its unbuildable pins (requirements/moses-data.txt).
$(INSTALLED): pyproject.toml requirements/navigator-cpu.txt requirements/moses-data.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0 numpy==1.26.4
	$(BIN)/pip install --quiet -e '.[cpu,export,local-triton,test]'
	$(BIN)/pip install --quiet --no-deps -r requirements/navigator-cpu.txt
	$(BIN)/pip install --quiet --no-deps -r requirements/moses-data.txt
	touch $@

$(TRITON_READY): $(INSTALLED) $(wildcard operations/tritonserver_setup/*.py)
	$(BIN)/python -m operations.tritonserver_setup --check-timeout 120
	touch $@

models: $(MODELS_READY)

# Export again whenever the descriptions or the exporter change; then time each encoder's runtimes on this machine
# (bionemo_serving.startup.launch does it too, where a record does not hold for the machine it starts on).
# `exporter defaults --force` never exports over a version another export wrote (a user's own checkpoint): it says so.
$(MODELS_READY): $(INSTALLED) $(EXPORT_SOURCES) $(PRECISION_ASKED)
	$(BIN)/python -m bionemo_serving.exporter defaults --force --precision $(PRECISION) --repository $(REPOSITORY) \
		$(if $(EXPORT_MODELS),--models $(EXPORT_MODELS))
	$(BIN)/python -m bionemo_serving.runtimes.choice --repository $(REPOSITORY)
	touch $@

# Rewritten only when PRECISION changes, so that a change exports again.
$(PRECISION_ASKED): FORCE
	@mkdir -p $(@D)
	@echo $(PRECISION) | cmp -s - $@ || echo $(PRECISION) > $@

serve: install models
	$(BIN)/python -m bionemo_serving.startup.launch service:svc

# BentoML's gRPC server (BentoService, BioNeMo's GenerativeSampler services, health, reflection) on the same settings.
serve-grpc: install models
	$(BIN)/python -m bionemo_serving.startup.launch --grpc service:svc

# The image's tests run containers: podman (or docker with its daemon) and debootstrap, installed with apt as root,
# else `make test` stops naming them (operations/container/engine.py).
CONTAINER_ENGINE_READY := $(VENV)/.container-engine

$(CONTAINER_ENGINE_READY): $(INSTALLED) operations/container/engine.py
	$(BIN)/python -m operations.container.engine --provision
	touch $@

# Spark's tests (tests/e2e/test_spark_cluster_e2e.py) and make bench's Spark lines start JVMs: Java,
# installed with apt as root, else `make test` stops naming it (operations/tools/java_runtime.py).
JAVA_READY := $(VENV)/.java-checked

$(JAVA_READY): $(INSTALLED) operations/tools/java_runtime.py
	$(BIN)/python -m operations.tools.java_runtime --provision
	touch $@

# The client package (clients/python) in an environment of its own, without the server's packages: its own tests
# there, against a stand-in; the server's end-to-end tests run its CLI from there against the real service.
CLIENT_VENV := .venv-client
CLIENT_READY := $(CLIENT_VENV)/.installed

$(CLIENT_READY): clients/python/pyproject.toml
	test -x $(CLIENT_VENV)/bin/python || $(PYTHON) -m venv $(CLIENT_VENV)
	$(CLIENT_VENV)/bin/pip install --quiet -e './clients/python[test]'
	touch $@

test-client: $(CLIENT_READY)
	cd clients/python && ../../$(CLIENT_VENV)/bin/python -m pytest -q

# The audit after the tests: a new advisory fails `make test` without hiding the tests' results.
test: install models $(CONTAINER_ENGINE_READY) $(JAVA_READY) test-client
	$(BIN)/python -m pytest
	$(MAKE) --no-print-directory audit

# The fast layer, in under 2 minutes: every test but the e2e ones (the real service, the exporter, runtime timings, the
# default export) and the image's (pyproject.toml's markers). It needs no model export, no container engine and no
# tritonserver: the packages alone, not `install`'s check that tritonserver starts.
test-fast: $(INSTALLED) test-client
	$(BIN)/python -m pytest -m "not e2e and not container"

# Every target's image pins (operations/container/requirements-*.lock) against OSV's advisories, with pip-audit: exit 1 on a
# known vulnerability or a pin left unaudited. Where the service is unreachable (a closed network, CI's too) it prints
# `dependency audit NOT RUN` and passes, unless AUDIT_REQUIRED=1.
# Through a mirror: `make audit AUDIT_OSV_URL=https://osv.example/v1/query AUDIT_REQUIRED=1`.
AUDIT_OSV_URL ?= https://api.osv.dev/v1/query

audit: $(INSTALLED)
	$(BIN)/python -m operations.tools.dependency_audit --osv-url $(AUDIT_OSV_URL)

# Not part of `make test`: five servers of the same esm2nv weights, all up at once, measured in alternation 5 times
# (benchmarks/run.py: its JSON in benchmarks/results/bench-<cpu>.json, this CPU's report rendered from it anew:
# docs/benchmarks-<cpu>.md and its .png, e.g. benchmarks-amd-epyc.md), then the client files, Spark and the overload
# step (about 75 minutes on 2 cores with these defaults). Longer: `make bench BENCH_SECONDS=60`.
BENCH_READY := $(VENV)/.bench-installed
BENCH_SECONDS ?= 10
BENCH_USERS ?= 1 4 16 32
BENCH_GENERATE_USERS ?= 1 16
# The client package on a 10,000-protein FASTA against the service's saturation, then on a 1,000,000-protein one for
# this long (its memory must not grow with the file; benchmarks/client_files.py).
BENCH_CLIENT_SECONDS ?= 600
# bentoml.batch.run_in_spark of the bento (esm2nv on onnxruntime) over this many proteins, in local[2], then on a
# standalone cluster of two one-core workers started here, the bento shipped by BentoML (benchmarks/spark_*.py).
BENCH_SPARK_SEQUENCES ?= 2000
# The overload step (benchmarks/overload.py): /embed at 2x, 4x and 8x its saturating concurrency, each request's
# X-Request-Timeout BENCH_DEADLINE_S, each step BENCH_OVERLOAD_SECONDS; at 8M the CLI on a FASTA of this many proteins
# under 4x. It runs last: a missed target exits 1 once every other figure is written.
BENCH_OVERLOAD_SECONDS ?= 10
BENCH_DEADLINE_S ?= 5
BENCH_OVERLOAD_FILE ?= 10000
# At a real size a request of 8 proteins is seconds of work on 2 cores (150M: about 8 s): there each request holds one
# protein, the deadline is longer and each step too, so that each answers a few dozen requests.
BENCH_SIZED_OVERLOAD := --proteins 1 --deadline 20 --seconds 20

$(BENCH_READY): $(INSTALLED)
	$(BIN)/pip install --quiet -e '.[bench]'
	touch $@

# `make bench MODEL_SIZE=150M` (or 650M): esm2nv at that published shape, random-init, exported in FP32 and in INT8
# (each export says how long it took and the disk it used) and its runtimes timed here, then run side by side
# in-process with transformers and esm-cpp on esm.cpp's workloads (benchmarks/real_sizes.py), then served, each
# precision in turn: start-up, memory per process, /embed at 16 users, a 300-residue scan (benchmarks/served_memory.py).
MODEL_SIZE ?=
SIZED_REPOSITORY := model_repository-$(MODEL_SIZE)
# At 650M the side by side runs the short workload alone (8 x 256: about 20 s a contender on 2 cores, 5 repeats in
# alternation; the long one, 256 proteins, would take about 6 minutes a contender and repeat).
REAL_SIZES_OPTIONS := $(if $(filter 650M,$(MODEL_SIZE)),--workloads 8x256)

# Every step runs, whatever the others' targets; a step that missed one makes `make bench` exit 1 at the end.
bench: install models $(BENCH_READY) $(CLIENT_READY) $(JAVA_READY)
ifeq ($(MODEL_SIZE),)
	status=0; \
	$(BIN)/python -m benchmarks.run --seconds $(BENCH_SECONDS) --users $(BENCH_USERS) \
		--generate-users $(BENCH_GENERATE_USERS) || status=1; \
	$(BIN)/python -m benchmarks.client_files --million-seconds $(BENCH_CLIENT_SECONDS) || status=1; \
	$(BIN)/python -m benchmarks.spark_throughput --sequences $(BENCH_SPARK_SEQUENCES) --cluster 2 || status=1; \
	$(BIN)/python -m benchmarks.molecules --repository $(REPOSITORY) || status=1; \
	$(BIN)/python -m benchmarks.molecule_tasks --repository $(REPOSITORY) || status=1; \
	$(BIN)/python -m benchmarks.overload --label 8M --seconds $(BENCH_OVERLOAD_SECONDS) --deadline $(BENCH_DEADLINE_S) \
		--client-file $(BENCH_OVERLOAD_FILE) || status=1; \
	exit $$status
else
	$(BIN)/python -m bionemo_serving.exporter defaults --models esm2nv --size $(MODEL_SIZE) --repository $(SIZED_REPOSITORY)
	$(BIN)/python -m bionemo_serving.exporter defaults --models esm2nv --size $(MODEL_SIZE) --repository $(SIZED_REPOSITORY)-int8 \
		--precision int8
	$(BIN)/python -m bionemo_serving.runtimes.choice --repository $(SIZED_REPOSITORY)
	$(BIN)/python -m bionemo_serving.runtimes.choice --repository $(SIZED_REPOSITORY)-int8
	status=0; \
	$(BIN)/python -m benchmarks.real_sizes --size $(MODEL_SIZE) --fp32 $(SIZED_REPOSITORY) \
		--int8 $(SIZED_REPOSITORY)-int8 $(REAL_SIZES_OPTIONS) || status=1; \
	$(BIN)/python -m benchmarks.served_memory --repository $(SIZED_REPOSITORY) || status=1; \
	$(BIN)/python -m benchmarks.served_memory --repository $(SIZED_REPOSITORY)-int8 || status=1; \
	$(BIN)/python -m benchmarks.overload --repository $(SIZED_REPOSITORY) --label $(MODEL_SIZE) \
		$(BENCH_SIZED_OVERLOAD) || status=1; \
	exit $$status
endif

# The molecule default on MOSES test_scaffolds, through the service (benchmarks/molecules.py): reconstruction, sampling
# around held-out seeds, MOSES's metrics beside its baselines; then the property-guided tasks (benchmarks/
# molecule_tasks.py): CMA-ES on the QED and penalized-logP tasks beside the published figures, about 20 minutes on 2
# cores. Both steps run; exit 1 on a missed target of either, after their JSON is written.
bench-molecules: install models $(BENCH_READY)
	status=0; \
	$(BIN)/python -m benchmarks.molecules --repository $(REPOSITORY) || status=1; \
	$(BIN)/python -m benchmarks.molecule_tasks --repository $(REPOSITORY) || status=1; \
	exit $$status

# megamolbart's default, trained here on MOSES train (bionemo_serving/training/): each call trains TRAIN_MINUTES more, from the run's
# checkpoint where there is one, on TRAIN_DEVICE (cpu, or cuda with bf16); the weights that ship are exported from it into
# weights/ (docs/checkpoints.md).
TRAIN_MINUTES ?= 60
TRAIN_DEVICE ?= cpu
TRAIN_RUN := runs/megamolbart

train-megamolbart: $(INSTALLED)
	$(BIN)/python -m bionemo_serving.training.megamolbart --run-dir $(TRAIN_RUN) $(if $(wildcard $(TRAIN_RUN)/checkpoint.pt),--resume) \
		--minutes $(TRAIN_MINUTES) --device $(TRAIN_DEVICE) $(if $(filter cuda%,$(TRAIN_DEVICE)),--bf16)

# How cost grows with the model and the protein: /embed tokens/s and a scan's time, esm2nv served at 8M (the
# defaults) and at each size `make bench MODEL_SIZE=...` has exported, for proteins of 100, 300 and 1,000 residues,
# each load BENCH_GROWTH_SECONDS long; no 504 and every scan answered or refused at once, else exit 1
# (benchmarks/growth.py, its JSON in benchmarks/results/growth.json).
BENCH_GROWTH_SECONDS ?= 20

bench-growth: install models $(BENCH_READY)
	$(BIN)/python -m benchmarks.growth --seconds $(BENCH_GROWTH_SECONDS) 8M=$(REPOSITORY) \
		$(foreach size,150M 650M,$(if $(wildcard model_repository-$(size)/esm2nv),$(size)=model_repository-$(size)))

# Not part of `make test`: minutes of mixed /embed, /generate and head-graph (/logits, /score, /contacts, layers)
# load in rounds; its JSON into benchmarks/results/soak.json (`python -m benchmarks.soak --render ...json` into the CPU's page),
# exit 1 on a failed request or on the settled memory (read after each round) of the API side or a model instance
# growing past the margin. Longer: `make soak SOAK_SECONDS=900`;
# every graph on one runtime: `make soak SOAK_RUNTIME=openvino` (onnxruntime, onnxruntime-fused, torchscript, openvino).
SOAK_SECONDS ?= 300
SOAK_USERS ?= 24
SOAK_RUNTIME ?=

soak: install models $(BENCH_READY)
	$(BIN)/python -m benchmarks.soak --seconds $(SOAK_SECONDS) --users $(SOAK_USERS) $(if $(SOAK_RUNTIME),--runtime $(SOAK_RUNTIME))

# The bento's packages, one lock per onnxruntime build (pyproject's runtime extras: cpu for the cpu target, gpu for
# gpu and gpu-tensorrt), resolved for the Python and glibc of bentofile.yaml's base image.
RUNTIMES := cpu gpu

# The stand-in base (make image BASE_IMAGE=stand-in) has Debian 12's Python 3.11 and glibc 2.36: its lock keeps the cpu
# lock's pins but those it cannot install (perf-analyzer 2.60, which tritonclient[all] pulls in, has wheels for glibc
# 2.38 and newer only).
STAND_IN_PYTHON := 3.11
STAND_IN_PLATFORM := x86_64-manylinux_2_36
STAND_IN_UNPINNED := perf-analyzer

lock: $(INSTALLED)
	for runtime in $(RUNTIMES); do \
		$(BIN)/uv pip compile pyproject.toml --extra $$runtime --python-version $(IMAGE_PYTHON) \
			--python-platform $(IMAGE_PLATFORM) --only-binary :all: --no-python-downloads --quiet \
			-o operations/container/requirements-$$runtime.lock || exit 1; \
	done
	grep -v '^$(STAND_IN_UNPINNED)==' operations/container/requirements-cpu.lock > $(VENV)/stand-in-constraints.txt
	$(BIN)/uv pip compile pyproject.toml --extra cpu --python-version $(STAND_IN_PYTHON) \
		--python-platform $(STAND_IN_PLATFORM) --only-binary :all: --no-python-downloads --quiet \
		-c $(VENV)/stand-in-constraints.txt -o operations/container/requirements-cpu-stand-in.lock

# The bento's image, with docker, podman or buildah (operations/container/image.py): on bentofile.yaml's base image, any other
# with tritonserver on PATH (BASE_IMAGE=...), or BASE_IMAGE=stand-in, a stand-in for it built here first.
BASE_IMAGE ?=
TARGET ?= cpu

image: install models
	$(BIN)/python -m operations.container.image $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) --target $(TARGET)

clean:
	rm -rf $(VENV) $(CLIENT_VENV) checkpoints model_repository/*/ $(MODELS_READY) $(PRECISION_ASKED) model_repository-*/
