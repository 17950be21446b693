# fulmen: `make demo` trains the C MNIST example, `make test` runs every suite.
# libtorch: $LIBTORCH or LIBTORCH_USE_PYTORCH=1 if set, else a CPU libtorch
# 2.13.0 assembled from PyPI wheels into .deps/libtorch (once).

SHELL := /bin/bash
ROOT := $(CURDIR)
DEPS := $(ROOT)/.deps
MNIST := $(DEPS)/data/mnist_5k.csv.gz
# The Lee corpus (360 kB of news prose) for the character language model.
LEE := $(DEPS)/data/lee_background.txt
# The El Nino series (monthly sea surface temperatures) for the forecaster.
ELNINO := $(DEPS)/data/elnino.csv
# Fair's affairs survey (statsmodels), for examples/c/finetune.c.
FAIR := $(DEPS)/data/fair.csv
# Python with torch 2.13.0 (CPU), Lightning and safetensors, timm and
# transformers, wandb, comet_ml: interop tests, benchmarks. The stamp is the last layer's
# that scripts/setup-venv.sh writes, so an older venv gets the layers it lacks.
VENV := $(DEPS)/venv
VENV_STAMP := $(VENV)/.fulmen-venv-comet-ready
# MLflow's tracking server and client (tests/interop/mlflow_logger.py), in
# a venv of their own.
MLFLOW_VENV := $(DEPS)/mlflow-venv
MLFLOW_STAMP := $(MLFLOW_VENV)/.fulmen-mlflow-ready
PREFIX ?= /usr/local

ifeq ($(origin LIBTORCH),undefined)
ifeq ($(LIBTORCH_USE_PYTORCH),)
LIBTORCH := $(DEPS)/libtorch
endif
endif
# The fetched libtorch, also when it comes through the environment (the
# phases of `make test` are sub-makes, which inherit the export below).
ifeq ($(LIBTORCH),$(DEPS)/libtorch)
LIBTORCH_STAMP := $(LIBTORCH)/build-version
endif
ifneq ($(LIBTORCH),)
export LIBTORCH
endif
# gloo's headers (for c10d's ProcessGroupGloo) unless the user points at some.
ifeq ($(FULMEN_GLOO_INCLUDE),)
GLOO_STAMP := $(DEPS)/gloo/include/gloo/config.h
endif

CARGO ?= cargo
# How many programs `make test` builds, and how many of its C tests and
# fuzz targets it runs, at a time (`make test TEST_JOBS=1`: one).
TEST_JOBS ?= $(shell nproc)
CARGO_FLAGS := --release
LIBDIR := $(ROOT)/target/release
BUILD := $(ROOT)/build
# The C API: the umbrella header and its area headers (make header).
C_HEADERS := include/fulmen.h $(wildcard include/fulmen/*.h)
CC ?= cc
CFLAGS_STRICT := -std=c11 -Wall -Wextra -Werror -pedantic -g
SAN := -fsanitize=address,undefined -fno-omit-frame-pointer
C_INC := -I$(ROOT)/include
C_LINK := -L$(LIBDIR) -Wl,-rpath,$(LIBDIR) -lfulmen -lm
# libtorch's own allocations outlive exit on purpose; leak checking covers
# fulmen's handles through fulmen_live_handles() in every C test.
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

C_TESTS := $(patsubst tests/c/%.c,$(BUILD)/tests/%,$(wildcard tests/c/test_*.c))

.PHONY: all deps lib libs header bench bench-fsdp lint-bench test test-conformance lib-torch-2.11 test-torch-2.11 test-c-torch-2.11 lib-xla test-xla gpu-kit test-gpu-kit test-rust test-c test-pkgconfig test-cpp test-go test-interop test-coverage test-valgrind test-fuzz test-soak fuzz fuzz-libfuzzer demo example example-exported lint fmt dist test-dist install clean

all: lib

deps: $(LIBTORCH_STAMP) $(GLOO_STAMP) $(MNIST)

$(DEPS)/libtorch/build-version:
	bash scripts/fetch-libtorch.sh $(DEPS)/libtorch

$(DEPS)/gloo/include/gloo/config.h:
	bash scripts/fetch-gloo-headers.sh $(DEPS)/gloo

$(MNIST):
	bash scripts/fetch-mnist.sh $@

$(LEE):
	bash scripts/fetch-lee.sh $@

$(ELNINO):
	bash scripts/fetch-statsmodels-data.sh elnino/elnino.csv $@

$(FAIR):
	bash scripts/fetch-statsmodels-data.sh fair/fair.csv $@

# After libtorch, so the torch wheel it downloaded is reused. Rerun when the
# script changes: it installs what its pinned lists add, else returns at once.
$(VENV_STAMP): scripts/setup-venv.sh | $(LIBTORCH_STAMP)
	bash scripts/setup-venv.sh $(VENV)

$(MLFLOW_STAMP): scripts/setup-mlflow-venv.sh scripts/mlflow-requirements.txt
	bash scripts/setup-mlflow-venv.sh $(MLFLOW_VENV)

lib: $(LIBTORCH_STAMP) $(GLOO_STAMP)
	$(CARGO) build $(CARGO_FLAGS) --lib
	@mkdir -p $(BUILD)
	@sed -e 's|@PREFIX@|$(ROOT)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(ROOT)/include|' fulmen.pc.in > $(BUILD)/fulmen.pc

# Regenerates what comes from the sources: the trainer-option code (C
# header comment, C++ and Go setters and their tests), the tensor ops (C
# functions, C++ and Go wrappers), the option structs (C structs, defaults,
# conversions, Go structs), then the C headers (include/fulmen.h and
# include/fulmen/*.h, split by tools/headers/split.rs).
header: $(LIBTORCH_STAMP) $(GLOO_STAMP)
	FULMEN_WRITE_HEADER=1 $(CARGO) test $(CARGO_FLAGS) --test options_drift
	FULMEN_WRITE_HEADER=1 $(CARGO) test $(CARGO_FLAGS) --test ops_drift
	FULMEN_WRITE_HEADER=1 $(CARGO) test $(CARGO_FLAGS) --test option_structs_drift
	FULMEN_WRITE_HEADER=1 $(CARGO) test $(CARGO_FLAGS) --test header_drift

# The phases of `make test`, run in this order, each timed
# (scripts/run-phases.sh prints the time each took and how busy it kept
# the processors; each phase builds TEST_JOBS targets at a time).
TEST_PHASES := deps libs lint test-rust test-c test-conformance example example-exported test-valgrind test-fuzz \
  test-soak test-cpp test-go test-interop test-torch-2.11 test-dist test-coverage
# `make test`'s build phase: fulmen's library, the Python venvs and the
# libtorch 2.11 build of test-torch-2.11, TEST_JOBS at a time (a venv
# waits on the network and a C++ file of torch-sys holds one processor
# for minutes, while the others use the rest).
libs: lib $(VENV_STAMP) lib-torch-2.11 $(MLFLOW_STAMP)

test:
	@bash scripts/run-phases.sh "$(MAKE)" $(TEST_JOBS) $(TEST_PHASES)
	@echo "all suites passed"

test-coverage:
	bash scripts/check-binding-coverage.sh
	python3 scripts/check_enum_mirrors.py

test-rust: $(LIBTORCH_STAMP) $(GLOO_STAMP) $(MNIST) $(VENV_STAMP)
	FULMEN_MNIST=$(MNIST) FULMEN_PYTHON=$(VENV)/bin/python $(CARGO) test $(CARGO_FLAGS)

$(BUILD)/tests/%: tests/c/%.c $(wildcard tests/c/*.h) examples/c/store_collectives.h $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_STRICT) $(SAN) $(C_INC) $< -o $@ $(C_LINK)

# The C tests run TEST_JOBS at a time (each keeps its own temporary
# paths and picks free ports), the longest first so the others fill the
# remaining slots; each one's output is printed together when it ends.
C_TESTS_LONG := $(addprefix $(BUILD)/tests/,test_device_ddp test_crash test_ddp)
test-c: $(C_TESTS) $(MNIST)
	@cd $(ROOT) && printf '%s\n' $(C_TESTS_LONG) $(filter-out $(C_TESTS_LONG),$(C_TESTS)) \
	  | $(ASAN_ENV) FULMEN_MNIST=$(MNIST) FULMEN_FIXTURES=$(ROOT)/tests/fixtures bash scripts/run-parallel.sh $(TEST_JOBS)
	@echo "C tests: $(words $(C_TESTS)) passed, 0 failed"
	$(MAKE) --no-print-directory test-pkgconfig

test-pkgconfig: lib
	@rm -rf $(BUILD)/outside && mkdir -p $(BUILD)/outside && cp tests/c/outside/train_xor.c $(BUILD)/outside/
	cd $(BUILD)/outside && export PKG_CONFIG_PATH=$(BUILD) && $(CC) $(CFLAGS_STRICT) train_xor.c -o train_xor $$(pkg-config --cflags --libs fulmen) && ./train_xor

test-cpp: lib
	FULMEN_LIBDIR=$(LIBDIR) FULMEN_INCLUDE=$(ROOT)/include bash bindings/cpp/run-tests.sh $(BUILD)/cpp

test-go: lib $(MNIST) $(LEE) $(ELNINO) $(VENV_STAMP)
	FULMEN_MNIST=$(MNIST) FULMEN_LEE=$(LEE) FULMEN_ELNINO=$(ELNINO) FULMEN_PYTHON=$(VENV)/bin/python bash bindings/go/run-tests.sh

# Interop with the real PyTorch: DDP jobs mixing fulmen and Python ranks;
# per-step parity and resumes against Lightning's own Trainer. The checks
# are independent (each its own work folder, DDP ports picked free), so
# they run two at a time, the longest first, each one's output kept
# together (--output-sync); `make interop-<name>` runs one after
# `make test-interop` built what it needs.
INTEROP_BINARIES := ddp_rank fsdp_rank hook_order_parity lightning_parity datamodule_parity logger_parity hook_log_parity swa_parity \
  pruning_parity checkpoint_names_parity batch_size_finder script_parity export_parity torch_save_interop mlflow_logger flops_parity wandb_logger \
  comet_logger attention_parity trace_parity tp_rank
INTEROP_CHECKS := lightning-parity export-parity compiled-step charlm-twin gan-twin mnist-lightning ddp-mixed \
  fsdp2-parity fsdp2-mixed fsdp-sharded-checkpoint forecast-twin finetune script-parity swa-parity logger-parity hook-log-parity pruning-parity hook-order-parity \
  datamodule-parity checkpoint-names batch-size torch-save mlflow-logger bench-workloads flops-parity wandb-logger \
  comet-logger attention-parity trace-parity tensor-parallel-mixed tp-distributed-checkpoint
.PHONY: $(INTEROP_CHECKS:%=interop-%)

test-interop: $(INTEROP_BINARIES:%=$(BUILD)/interop/%) $(BUILD)/bench/workload_bench $(BUILD)/examples/mnist $(BUILD)/examples/charlm $(BUILD)/examples/forecast $(BUILD)/examples/finetune $(BUILD)/examples/gan $(LEE) $(ELNINO) $(FAIR) $(MNIST) $(VENV_STAMP) $(MLFLOW_STAMP)
	$(MAKE) --no-print-directory $(if $(findstring jobserver,$(MAKEFLAGS)),,-j$(TEST_JOBS)) --output-sync=target $(INTEROP_CHECKS:%=interop-%)
	@echo "interop: $(words $(INTEROP_CHECKS)) checks passed"

PY := $(VENV)/bin/python
W := $(BUILD)/interop
interop-lightning-parity:
	@rm -rf $(W)/lightning-parity
	$(PY) tests/interop/lightning_parity.py --binary $(W)/lightning_parity --work $(W)/lightning-parity
interop-export-parity:
	@rm -rf $(W)/export-parity
	$(PY) tests/interop/export_parity.py --compiled --binary $(W)/export_parity --work $(W)/export-parity
interop-compiled-step:
	$(PY) tests/interop/compiled_step_check.py --threads 1 --steps 10 --models edge
# bench/workloads.py end to end at its tiny size on the CPU (every
# contender that runs here, and fulmen-c-graphs on the fake device), so the
# GPU kit's benchmark of real workloads cannot rot unseen.
interop-bench-workloads:
	@rm -rf $(W)/bench-workloads && mkdir -p $(W)/bench-workloads
	$(PY) bench/workloads.py --size tiny --repeats 1 --batches 2 --epochs 1 --check-graphs \
	  --binary $(BUILD)/bench/workload_bench --out $(W)/bench-workloads/results.md
	@grep -q "| lightning |" $(W)/bench-workloads/results.md
interop-charlm-twin:
	@rm -rf $(W)/charlm-twin
	$(PY) tests/interop/charlm_twin.py --binary $(BUILD)/examples/charlm --data $(LEE) --work $(W)/charlm-twin
interop-gan-twin:
	@rm -rf $(W)/gan-twin
	$(PY) tests/interop/gan_twin.py --binary $(BUILD)/examples/gan --data $(MNIST) --work $(W)/gan-twin
interop-mnist-lightning:
	@rm -rf $(W)/mnist-lightning
	$(PY) tests/interop/mnist_lightning_check.py --binary $(BUILD)/examples/mnist --data $(MNIST) --work $(W)/mnist-lightning
interop-ddp-mixed:
	@rm -rf $(W)/ddp-mixed
	$(PY) tests/interop/ddp_mixed.py --rank-binary $(W)/ddp_rank --work $(W)/ddp-mixed
interop-fsdp2-parity:
	@rm -rf $(W)/fsdp2-parity
	$(PY) tests/interop/fsdp2_parity.py --binary $(W)/fsdp_rank --work $(W)/fsdp2-parity
interop-fsdp2-mixed:
	@rm -rf $(W)/fsdp2-mixed
	$(PY) tests/interop/fsdp2_mixed.py --binary $(W)/fsdp_rank --work $(W)/fsdp2-mixed
interop-fsdp-sharded-checkpoint:
	@rm -rf $(W)/fsdp-sharded-checkpoint
	$(PY) tests/interop/fsdp_sharded_checkpoint.py --binary $(W)/fsdp_rank --work $(W)/fsdp-sharded-checkpoint
interop-forecast-twin:
	@rm -rf $(W)/forecast-twin
	$(PY) tests/interop/forecast_twin.py --binary $(BUILD)/examples/forecast --data $(ELNINO) --work $(W)/forecast-twin
interop-finetune:
	@rm -rf $(W)/finetune
	$(PY) tests/interop/finetune_check.py --binary $(BUILD)/examples/finetune --data $(FAIR) --work $(W)/finetune
interop-flops-parity:
	@rm -rf $(W)/flops-parity
	$(PY) tests/interop/flops_parity.py --binary $(W)/flops_parity --work $(W)/flops-parity

interop-script-parity:
	@rm -rf $(W)/script-parity
	$(PY) tests/interop/script_parity.py --binary $(W)/script_parity --work $(W)/script-parity
interop-trace-parity:
	@rm -rf $(W)/trace-parity
	$(PY) tests/interop/trace_parity.py --binary $(W)/trace_parity --work $(W)/trace-parity
interop-tensor-parallel-mixed:
	@rm -rf $(W)/tensor-parallel-mixed
	$(PY) tests/interop/tensor_parallel_mixed.py --binary $(W)/tp_rank --work $(W)/tensor-parallel-mixed
interop-tp-distributed-checkpoint:
	@rm -rf $(W)/tp-distributed-checkpoint
	$(PY) tests/interop/tp_distributed_checkpoint.py --binary $(W)/fsdp_rank --work $(W)/tp-distributed-checkpoint
interop-swa-parity:
	@rm -rf $(W)/swa-parity
	$(PY) tests/interop/swa_parity.py --binary $(W)/swa_parity --work $(W)/swa-parity
interop-logger-parity:
	@rm -rf $(W)/logger-parity
	$(PY) tests/interop/logger_parity.py --binary $(W)/logger_parity --work $(W)/logger-parity
interop-hook-log-parity:
	@rm -rf $(W)/hook-log-parity
	$(PY) tests/interop/hook_log_parity.py --binary $(W)/hook_log_parity --work $(W)/hook-log-parity
interop-pruning-parity:
	@rm -rf $(W)/pruning-parity
	$(PY) tests/interop/pruning_parity.py --binary $(W)/pruning_parity --work $(W)/pruning-parity
interop-hook-order-parity:
	@rm -rf $(W)/hook-order-parity
	$(PY) tests/interop/hook_order_parity.py --binary $(W)/hook_order_parity --work $(W)/hook-order-parity
interop-datamodule-parity:
	@rm -rf $(W)/datamodule-parity
	$(PY) tests/interop/datamodule_parity.py --binary $(W)/datamodule_parity --work $(W)/datamodule-parity
interop-checkpoint-names:
	@rm -rf $(W)/checkpoint-names
	$(PY) tests/interop/checkpoint_names_parity.py --binary $(W)/checkpoint_names_parity --work $(W)/checkpoint-names
interop-batch-size:
	$(PY) tests/interop/batch_size_parity.py --binary $(W)/batch_size_finder
interop-torch-save:
	@rm -rf $(W)/torch-save
	$(PY) tests/interop/torch_save_check.py --binary $(W)/torch_save_interop --work $(W)/torch-save
interop-wandb-logger:
	@rm -rf $(W)/wandb-logger
	$(PY) tests/interop/wandb_logger.py --binary $(W)/wandb_logger --work $(W)/wandb-logger
interop-attention-parity:
	$(PY) tests/interop/attention_parity.py --binary $(W)/attention_parity
interop-comet-logger:
	@rm -rf $(W)/comet-logger
	$(PY) tests/interop/comet_logger.py --binary $(W)/comet_logger --work $(W)/comet-logger
interop-mlflow-logger:
	@rm -rf $(W)/mlflow-logger
	$(MLFLOW_VENV)/bin/python tests/interop/mlflow_logger.py --binary $(W)/mlflow_logger --mlflow-venv $(MLFLOW_VENV) \
	  --work $(W)/mlflow-logger

$(BUILD)/interop/%: tests/interop/%.c tests/interop/blob_fit.h $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_STRICT) -O2 $(C_INC) $< -o $@ $(C_LINK)

example: $(BUILD)/examples/mnist $(BUILD)/examples/snippet $(BUILD)/examples/charlm $(BUILD)/examples/forecast $(BUILD)/examples/gan $(BUILD)/examples/custom_device $(MNIST) $(LEE) $(ELNINO)
	$(ASAN_ENV) $(BUILD)/examples/snippet
	$(BUILD)/examples/custom_device --data $(MNIST) --epochs 2 | tee $(BUILD)/custom-device.log
	@grep -q "trained on npu:0" $(BUILD)/custom-device.log
	$(BUILD)/examples/custom_device --data $(MNIST) --epochs 3 --devices 2 > $(BUILD)/custom-device-ddp.log 2>&1 \
	  || { cat $(BUILD)/custom-device-ddp.log; exit 1; }
	@cat $(BUILD)/custom-device-ddp.log
	@grep -q "rank 0: trained on 2 npu devices" $(BUILD)/custom-device-ddp.log && grep -q "rank 1: trained on 2 npu devices" $(BUILD)/custom-device-ddp.log
	@rm -rf $(BUILD)/gan-run
	$(BUILD)/examples/gan --data $(MNIST) --epochs 2 --out $(BUILD)/gan-run | tee $(BUILD)/gan-run.log
	@grep -q "optimizer steps" $(BUILD)/gan-run.log && test -s $(BUILD)/gan-run/samples.pgm
	@rm -rf $(BUILD)/charlm-run
	$(BUILD)/examples/charlm --data $(LEE) --epochs 1 --limit-batches 60 --sample 120 --out $(BUILD)/charlm-run | tee $(BUILD)/charlm-run.log
	@grep -q "bits per character" $(BUILD)/charlm-run.log && test -f $(BUILD)/charlm-run/model.safetensors
	@rm -rf $(BUILD)/forecast-run
	$(BUILD)/examples/forecast --data $(ELNINO) --out $(BUILD)/forecast-run | tee $(BUILD)/forecast-run.log
	@grep -q "the LSTM is better" $(BUILD)/forecast-run.log
	@rm -rf $(BUILD)/ddp-run
	$(BUILD)/examples/mnist --data $(MNIST) --epochs 1 --strategy ddp --devices 2 --out $(BUILD)/ddp-run | tee $(BUILD)/ddp-run.log
	@grep -q "trained on 2 ranks" $(BUILD)/ddp-run.log && test -f $(BUILD)/ddp-run/checkpoints/last.ckpt

# The C++ and Go examples that train a torch.export archive (.pt2):
# examples/python/export_mnist.py writes it with python/fulmen_export.py
# (in the venv), each example trains it on MNIST-5k for 2 epochs, and
# tests/interop/train_exported_check.py checks what it printed against
# PyTorch running the weights it saved.
CXXFLAGS_EXAMPLE := -std=c++17 -Wall -Wextra -Werror -pedantic -O2
GO_ENV := GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=1 PKG_CONFIG_PATH=$(BUILD)

$(BUILD)/examples/train_exported_cpp: examples/cpp/train_exported.cpp $(wildcard bindings/cpp/include/fulmen/*) $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_EXAMPLE) $(C_INC) -I$(ROOT)/bindings/cpp/include $< -o $@ $(C_LINK)

$(BUILD)/examples/train_exported_go: examples/go/train_exported/main.go $(wildcard bindings/go/*.go) $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	cd $(ROOT)/examples/go && $(GO_ENV) go build -o $@ ./train_exported

example-exported: $(BUILD)/examples/train_exported_cpp $(BUILD)/examples/train_exported_go $(MNIST) $(VENV_STAMP)
	@rm -rf $(BUILD)/exported-cpp $(BUILD)/exported-go
	$(VENV)/bin/python tests/interop/train_exported_check.py --binary $(BUILD)/examples/train_exported_cpp --data $(MNIST) --work $(BUILD)/exported-cpp
	$(VENV)/bin/python tests/interop/train_exported_check.py --binary $(BUILD)/examples/train_exported_go --data $(MNIST) --work $(BUILD)/exported-go

# valgrind: every C test but test_ddp, test_tensor_parallel, test_device_ddp, test_crash, test_files and
# test_signals (they re-execute the program, which under valgrind is the
# runner; ASan covers them), test_hostile_files (it bounds its own peak
# memory, which valgrind's shadow memory would swell) and the
# examples. The tests are linked into one program per half, so libtorch's
# start-up (about 35 s under valgrind) is paid twice, and the halves run
# side by side with the MNIST example (one epoch of the real data set; the
# tests' own MNIST runs, FULMEN_MNIST, are left to the ASan suite). A
# definite leak or an invalid access fails the suite.
# test_custom_device and test_graphed_steps run in a process of their own: the fake device they
# register must come before any backward pass, and stays registered.
VG_TESTS := $(filter-out test_ddp test_tensor_parallel test_device_ddp test_crash test_files test_hostile_files test_signals test_custom_device test_graphed_steps,$(patsubst tests/c/%.c,%,$(wildcard tests/c/test_*.c))) snippet
VG_ALONE := test_custom_device test_graphed_steps
# oneDNN's AVX JIT kernels (its RNN ones above all) exhaust valgrind's
# translation storage, so under valgrind oneDNN runs its SSE4.1 kernels.
VALGRIND := ONEDNN_MAX_CPU_ISA=SSE41 valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite
CFLAGS_VG := -std=c11 -Wall -Wextra -Werror -pedantic -g -O1

$(BUILD)/valgrind/%.o: tests/c/%.c $(wildcard tests/c/*.h) $(C_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_VG) $(C_INC) -Dmain=$*_main -c $< -o $@

$(BUILD)/valgrind/snippet.o: examples/c/snippet.c $(C_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_VG) $(C_INC) -Dmain=snippet_main -c $< -o $@

$(BUILD)/valgrind/all_tests: scripts/valgrind-runner.sh $(VG_TESTS:%=$(BUILD)/valgrind/%.o) $(VG_ALONE:%=$(BUILD)/valgrind/%.o) lib
	bash scripts/valgrind-runner.sh $(VG_TESTS) $(VG_ALONE) > $(BUILD)/valgrind/runner.c
	$(CC) $(CFLAGS_VG) $(BUILD)/valgrind/runner.c $(VG_TESTS:%=$(BUILD)/valgrind/%.o) $(VG_ALONE:%=$(BUILD)/valgrind/%.o) -o $@ $(C_LINK)

test-valgrind: $(BUILD)/valgrind/all_tests $(BUILD)/examples/mnist $(MNIST)
	@command -v valgrind >/dev/null || { echo "valgrind is needed (Debian package valgrind)"; exit 1; }
	@set -u; cd $(ROOT); export FULMEN_FIXTURES=$(ROOT)/tests/fixtures; rm -rf $(BUILD)/valgrind/mnist-run; \
	  odd=""; even=""; i=0; for t in $(VG_TESTS); do if [ $$((i % 2)) = 0 ]; then even="$$even $$t"; else odd="$$odd $$t"; fi; i=$$((i + 1)); done; \
	  $(VALGRIND) $(BUILD)/valgrind/all_tests $$even > $(BUILD)/valgrind/even.log 2>&1 & p1=$$!; \
	  $(VALGRIND) $(BUILD)/valgrind/all_tests $$odd > $(BUILD)/valgrind/odd.log 2>&1 & p2=$$!; \
	  $(VALGRIND) $(BUILD)/examples/mnist --data $(MNIST) --epochs 1 --threads 1 --out $(BUILD)/valgrind/mnist-run > $(BUILD)/valgrind/mnist.log 2>&1 & p3=$$!; \
	  $(VALGRIND) $(BUILD)/valgrind/all_tests $(VG_ALONE) > $(BUILD)/valgrind/alone.log 2>&1 & p4=$$!; \
	  r1=0; r2=0; r3=0; r4=0; wait $$p1 || r1=$$?; wait $$p2 || r2=$$?; wait $$p3 || r3=$$?; wait $$p4 || r4=$$?; \
	  grep -h -E "^(== |FAILED|test_[a-z_]*: [0-9]+ passed|snippet|final validation accuracy)" $(BUILD)/valgrind/even.log $(BUILD)/valgrind/odd.log $(BUILD)/valgrind/alone.log $(BUILD)/valgrind/mnist.log; \
	  if [ $$r1 != 0 ] || [ $$r2 != 0 ] || [ $$r3 != 0 ] || [ $$r4 != 0 ]; then echo "valgrind: failures (exit $$r1 / $$r2 / $$r3 / $$r4), see $(BUILD)/valgrind/*.log"; exit 1; fi
	@echo "valgrind: $(words $(VG_TESTS) $(VG_ALONE)) C programs and the MNIST example clean (no invalid access, no definite leak)"

# Soak: 20,000 steps with flat resident memory, built without sanitizers
# (their quarantine would hold freed memory). SOAK_STEPS changes the length.
SOAK_STEPS ?= 20000
$(BUILD)/tests/soak_memory: tests/c/soak_memory.c tests/c/check.h tests/c/fixture.h $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_STRICT) -O2 $(C_INC) $< -o $@ $(C_LINK)

test-soak: $(BUILD)/tests/soak_memory
	$(BUILD)/tests/soak_memory $(SOAK_STEPS)

# Fuzzing (tests/fuzz): random C API call sequences, mutated checkpoints,
# pickles, CSV files and torch.export archives, a hostile host (frees,
# re-entrant and cross-thread calls from inside callbacks) and hostile sizes
# (counts and lengths in files and vtables), under ASan; the API target also
# per family. `make test` runs each target for FUZZ_SECONDS after
# replaying its regressions, TEST_JOBS targets at a time; `make fuzz
# FUZZ_SECONDS=600` runs longer.
# With clang, `make fuzz-libfuzzer` builds coverage-guided libFuzzer targets.
FUZZ_FAMILIES := tensor model data optim options trainer
FUZZ_TARGETS := api $(FUZZ_FAMILIES) csv checkpoint pickle hostile sizes exported
FUZZ_SECONDS ?= 10
FUZZ_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  FULMEN_FIXTURES=$(ROOT)/tests/fixtures

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/driver.h tests/c/ckpt_edit.h tests/c/torch_zip.h $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_STRICT) $(SAN) $(C_INC) $< -o $@ $(C_LINK)

# One target per API family, from the same source (tests/fuzz/fuzz_api.c).
$(FUZZ_FAMILIES:%=$(BUILD)/fuzz/fuzz_%): $(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_api.c tests/fuzz/driver.h $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_STRICT) $(SAN) $(C_INC) -DFUZZ_FAMILY=$* $< -o $@ $(C_LINK)

test-fuzz fuzz: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
	@cd $(ROOT) && for t in $(FUZZ_TARGETS); do \
	  echo "set -o pipefail; $(BUILD)/fuzz/fuzz_$$t tests/fuzz/regressions/$$t 2>&1 | { grep -v -e 'failed to allocate' -e '^\[W.*Warning' || true; }"; \
	  done | $(FUZZ_ENV) FULMEN_FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/run-parallel.sh $(TEST_JOBS)

fuzz-libfuzzer: lib
	@mkdir -p $(BUILD)/libfuzzer
	@for t in api csv checkpoint; do \
	  clang -g -O1 -fsanitize=fuzzer,address -DFULMEN_LIBFUZZER $(C_INC) tests/fuzz/fuzz_$$t.c -o $(BUILD)/libfuzzer/fuzz_$$t $(C_LINK) || exit 1; done
	@echo "run: ASAN_OPTIONS=allocator_may_return_null=1 $(BUILD)/libfuzzer/fuzz_api -max_total_time=600 tests/fuzz/regressions/api"

$(BUILD)/examples/snippet: examples/c/snippet.c $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_STRICT) $(SAN) $(C_INC) $< -o $@ $(C_LINK)

$(BUILD)/examples/mnist: examples/c/mnist.c $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_STRICT) -O2 $(C_INC) $< -o $@ $(C_LINK)

$(BUILD)/examples/charlm: examples/c/charlm.c $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_STRICT) -O2 $(C_INC) $< -o $@ $(C_LINK) -lm

$(BUILD)/examples/forecast: examples/c/forecast.c $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_STRICT) -O2 $(C_INC) $< -o $@ $(C_LINK) -lm

$(BUILD)/examples/finetune: examples/c/finetune.c $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_STRICT) -O2 $(C_INC) $< -o $@ $(C_LINK)

$(BUILD)/examples/gan: examples/c/gan.c $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_STRICT) -O2 $(C_INC) $< -o $@ $(C_LINK)

# The custom-accelerator conformance program (tests/conformance): on the CPU
# (a baseline), and on the fake device directly and through a plugin as a
# vendor's is loaded.
$(BUILD)/conformance/fulmen_conformance: tests/conformance/conformance.c tests/c/check.h tests/c/fixture.h tests/c/npu.h $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_STRICT) $(SAN) $(C_INC) $< -o $@ $(C_LINK) -ldl

$(BUILD)/conformance/libfake_plugin.so: tests/conformance/fake_plugin.c examples/c/store_collectives.h $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_STRICT) -fPIC -shared $(C_INC) -I$(ROOT)/examples/c $< -o $@ $(C_LINK)

test-conformance: $(BUILD)/conformance/fulmen_conformance $(BUILD)/conformance/libfake_plugin.so
	$(ASAN_ENV) $(BUILD)/conformance/fulmen_conformance --accelerator cpu
	$(ASAN_ENV) $(BUILD)/conformance/fulmen_conformance --fake-device npu
	$(ASAN_ENV) $(BUILD)/conformance/fulmen_conformance --plugin $(BUILD)/conformance/libfake_plugin.so --accelerator vendor_npu
	@# An accelerator whose devices have no backend here must fail.
	@if $(ASAN_ENV) $(BUILD)/conformance/fulmen_conformance --plugin $(BUILD)/conformance/libfake_plugin.so \
	  --accelerator broken_xpu > $(BUILD)/conformance/broken.log 2>&1; then echo "broken_xpu passed"; exit 1; fi
	@grep -q "^FAIL  tensors" $(BUILD)/conformance/broken.log && grep -q "^conformance: .* [1-9][0-9]* failed" $(BUILD)/conformance/broken.log
	@echo "conformance: broken_xpu fails as it must ($$(tail -n 1 $(BUILD)/conformance/broken.log))"

$(BUILD)/examples/custom_device: examples/c/custom_device.c examples/c/store_collectives.h $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_STRICT) -O2 $(C_INC) $< -o $@ $(C_LINK)

# fulmen against libtorch 2.11 (tch 0.24), for hosts whose PyTorch is 2.11.
# Cargo cannot hold both torch-sys versions in one manifest, so this build
# has its own (scripts/torch-variant.sh: same sources, other tch) and
# target folder. `lib-torch-2.11` builds it; `test-torch-2.11` (in `make
# test`) runs the DDP C test (c10d's Reducer differs between the versions)
# and the outside program on it; `test-c-torch-2.11` runs every C test.
# It is built unoptimised (Cargo profile variant-check) unless
# TORCH_2_11_PROFILE=release asks for the library to ship.
TORCH_2_11 := $(BUILD)/torch-2.11
LIBTORCH_2_11 ?= $(DEPS)/libtorch-2.11
TORCH_2_11_PROFILE ?= variant-check
LIBDIR_2_11 := $(TORCH_2_11)/target/$(TORCH_2_11_PROFILE)

$(LIBTORCH_2_11)/build-version:
	bash scripts/fetch-libtorch.sh $(LIBTORCH_2_11) 2.11.0

lib-torch-2.11: $(LIBTORCH_2_11)/build-version $(GLOO_STAMP)
	bash scripts/torch-variant.sh 2.11 $(TORCH_2_11)
	LIBTORCH=$(LIBTORCH_2_11) FULMEN_GLOO_INCLUDE=$(or $(FULMEN_GLOO_INCLUDE),$(DEPS)/gloo/include) \
	  CARGO_TARGET_DIR=$(TORCH_2_11)/target $(CARGO) build --profile $(TORCH_2_11_PROFILE) --lib --manifest-path $(TORCH_2_11)/Cargo.toml
	@grep -q '^2\.11\.' $(LIBTORCH_2_11)/build-version

test-torch-2.11: lib-torch-2.11
	$(MAKE) --no-print-directory LIBDIR=$(LIBDIR_2_11) BUILD=$(TORCH_2_11)/c $(TORCH_2_11)/c/tests/test_ddp \
	  $(TORCH_2_11)/c/tests/test_errors
	ldd $(TORCH_2_11)/c/tests/test_ddp | grep -q '$(LIBTORCH_2_11)/lib/libtorch_cpu.so'
	cd $(ROOT) && $(ASAN_ENV) $(TORCH_2_11)/c/tests/test_ddp
	cd $(ROOT) && $(ASAN_ENV) FULMEN_EXPECT_LIBTORCH=2.11.0 $(TORCH_2_11)/c/tests/test_errors
	@mkdir -p $(TORCH_2_11)/outside
	$(CC) $(CFLAGS_STRICT) $(C_INC) tests/c/outside/train_xor.c -o $(TORCH_2_11)/outside/train_xor \
	  -L$(LIBDIR_2_11) -Wl,-rpath,$(LIBDIR_2_11) -lfulmen -lm
	$(TORCH_2_11)/outside/train_xor

test-c-torch-2.11: lib-torch-2.11
	FULMEN_EXPECT_LIBTORCH=2.11.0 $(MAKE) --no-print-directory LIBDIR=$(LIBDIR_2_11) BUILD=$(TORCH_2_11)/c test-c

# XLA on PJRT's CPU device (not in `make test`: it downloads about 1 GB of
# wheels and builds fulmen once more). torch_xla 2.9's `_XLAC` needs torch
# 2.9's libraries, so fulmen is built against the libtorch 2.9 that
# scripts/fetch-xla.sh assembles with `_XLAC` beside it (tch 0.22,
# scripts/torch-variant.sh), and starts the backend itself when PJRT_DEVICE
# is set (src/accelerators/xla_runtime.rs). `test-xla` runs
# tests/xla/test_xla.c (xla:0 against the CPU step by step, checkpoints
# across the two, dp over two XLA devices, the xla strategy over two
# processes) and the MNIST examples of C, C++ and Go on `accelerator=xla`.
TORCH_XLA := $(BUILD)/torch-2.9
LIBTORCH_XLA ?= $(DEPS)/libtorch-2.9-xla
XLA_PROFILE ?= variant-check
LIBDIR_XLA := $(TORCH_XLA)/target/$(XLA_PROFILE)
# Outside $(TORCH_XLA), whose tests/ and examples/ link to the sources.
XLA_OUT := $(BUILD)/xla
XLA_ENV := PJRT_DEVICE=CPU CPU_NUM_DEVICES=2
XLA_LINK := -L$(LIBDIR_XLA) -Wl,-rpath,$(LIBDIR_XLA) -lfulmen -lm

$(LIBTORCH_XLA)/build-version:
	bash scripts/fetch-xla.sh $(LIBTORCH_XLA)

lib-xla: $(LIBTORCH_XLA)/build-version $(GLOO_STAMP)
	bash scripts/torch-variant.sh 2.9 $(TORCH_XLA)
	LIBTORCH=$(LIBTORCH_XLA) FULMEN_GLOO_INCLUDE=$(or $(FULMEN_GLOO_INCLUDE),$(DEPS)/gloo/include) \
	  CARGO_TARGET_DIR=$(TORCH_XLA)/target $(CARGO) build --profile $(XLA_PROFILE) --lib --manifest-path $(TORCH_XLA)/Cargo.toml
	@sed -e 's|@PREFIX@|$(ROOT)|; s|@LIBDIR@|$(LIBDIR_XLA)|; s|@INCLUDEDIR@|$(ROOT)/include|' fulmen.pc.in > $(TORCH_XLA)/fulmen.pc

test-xla: lib-xla $(MNIST)
	@mkdir -p $(XLA_OUT)/tests $(XLA_OUT)/examples
	$(CC) $(CFLAGS_STRICT) $(C_INC) tests/xla/test_xla.c -o $(XLA_OUT)/tests/test_xla $(XLA_LINK)
	cd $(ROOT) && $(XLA_ENV) FULMEN_MNIST=$(MNIST) $(XLA_OUT)/tests/test_xla
	$(CC) $(CFLAGS_STRICT) -O2 $(C_INC) examples/c/mnist.c -o $(XLA_OUT)/examples/mnist $(XLA_LINK)
	$(CXX) $(CXXFLAGS_EXAMPLE) $(C_INC) -I$(ROOT)/bindings/cpp/include examples/cpp/mnist.cpp \
	  -o $(XLA_OUT)/examples/mnist_cpp $(XLA_LINK)
	@# A Go cache of its own: go's cache does not tell builds of one package
	@# apart by what pkg-config says, so a shared one would hand later builds
	@# of the binding the libtorch 2.9 library.
	cd $(ROOT)/examples/go && $(GO_ENV) PKG_CONFIG_PATH=$(TORCH_XLA) GOCACHE=$(XLA_OUT)/go-cache \
	  go build -o $(XLA_OUT)/examples/mnist_go ./mnist
	@rm -rf $(XLA_OUT)/runs && mkdir -p $(XLA_OUT)/runs
	@set -e; run() { log=$$1; shift; "$$@" > $$log 2>&1 || { cat $$log; echo "failed: $$*"; exit 1; }; cat $$log; }; \
	  for ex in mnist mnist_cpp; do \
	    run $(XLA_OUT)/runs/$$ex.log env $(XLA_ENV) $(XLA_OUT)/examples/$$ex --data $(MNIST) --epochs 3 \
	      --accelerator xla --devices 1 --out $(XLA_OUT)/runs/$$ex; done; \
	  run $(XLA_OUT)/runs/mnist_go.log env $(XLA_ENV) $(XLA_OUT)/examples/mnist_go -data $(MNIST) -epochs 3 \
	    -accelerator xla -devices 1 -out $(XLA_OUT)/runs/mnist_go; \
	  run $(XLA_OUT)/runs/cpu.log $(XLA_OUT)/examples/mnist --data $(MNIST) --epochs 3 --accelerator cpu \
	    --out $(XLA_OUT)/runs/cpu
	@cpu=$$(grep "final validation accuracy" $(XLA_OUT)/runs/cpu.log); \
	  for ex in mnist mnist_cpp mnist_go; do \
	    got=$$(grep "final validation accuracy" $(XLA_OUT)/runs/$$ex.log); \
	    [ -n "$$got" ] && [ "$$got" = "$$cpu" ] || { echo "$$ex on xla: '$$got', the CPU: '$$cpu'"; exit 1; }; \
	  done; echo "the C, C++ and Go MNIST examples on xla reach the CPU's $$cpu"

# The GPU kit (not in `make test`: it downloads about 1.5 GB), for a GPU
# machine whose PyTorch is 2.11 with CUDA 13: see docs/GPU.md.
# `test-gpu-kit` runs the kit's programs here, on the 2.11 CPU build.
gpu-kit: $(MNIST)
	bash scripts/gpu-kit.sh $(BUILD)/gpu-kit

test-gpu-kit: gpu-kit lib-torch-2.11
	FULMEN_KIT_LIBDIR=$(LIBDIR_2_11) FULMEN_KIT_TORCH_LIB=$(LIBTORCH_2_11)/lib \
	  bash $(BUILD)/gpu-kit/bundle/run.sh $(BUILD)/gpu-kit/cpu-results

demo: deps lib example
	$(BUILD)/examples/mnist --data $(MNIST) --epochs 10 --out $(ROOT)/runs/mnist

# Benchmarks (not part of test): fulmen from C and Go, a hand-written tch
# loop, plain PyTorch and Lightning in one run; writes bench/RESULTS.md.
# --callgrind adds instructions per step (mlp64) under valgrind, skipped
# with a message where valgrind is not installed. A contender that fails
# fails the target, with its stderr. bench/exported.py times one training
# step of exported models (fulmen interpreting the program, fulmen with the
# compiled step, PyTorch eager, torch.compile): bench/RESULTS-exported.md.
BENCH_ARGS ?= --repeats 3 --micro --callgrind
bench: deps lib $(BUILD)/bench/fulmen_bench $(BUILD)/bench/fulmen_micro $(BUILD)/bench/workers_bench $(BUILD)/bench/save_bench $(BUILD)/bench/optim_bench $(BUILD)/bench/exported_step $(BUILD)/examples/charlm $(LEE) $(VENV_STAMP)
	$(CARGO) build $(CARGO_FLAGS) --example tch_loop
	bash bench/go/build.sh
	$(VENV)/bin/python bench/run.py --data $(MNIST) $(BENCH_ARGS)
	$(VENV)/bin/python bench/charlm.py --data $(LEE) --python $(VENV)/bin/python
	@echo "loader workers (bench/RESULTS-workers.md), libtorch threads 1 then 2:"
	$(BUILD)/bench/workers_bench --data $(MNIST) --epochs 9 --threads 1
	$(BUILD)/bench/workers_bench --data $(MNIST) --epochs 9 --threads 2
	$(VENV)/bin/python bench/save.py --binary $(BUILD)/bench/save_bench
	$(VENV)/bin/python bench/optim_step.py --binary $(BUILD)/bench/optim_bench --write
	$(VENV)/bin/python bench/exported.py --binary $(BUILD)/bench/exported_step --python $(VENV)/bin/python

# FSDP against DDP (not part of test or bench): 4 CPU ranks of fulmen's
# launcher train a ~100M-parameter transformer under ddp, fsdp FULL_SHARD
# and fsdp SHARD_GRAD_OP, one job after another; per-rank peak RSS,
# analytic state and step time go to bench/RESULTS-fsdp.md. Under ddp each
# rank holds the model, its gradients and AdamW's state (1.5 GiB) and more.
bench-fsdp: deps lib $(BUILD)/bench/fsdp_memory $(VENV_STAMP)
	$(VENV)/bin/python bench/fsdp_memory.py --binary $(BUILD)/bench/fsdp_memory --steps 4 --mmap-threshold 1048576

$(BUILD)/bench/%: bench/c/%.c $(C_HEADERS) lib
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_STRICT) -O2 $(C_INC) $< -o $@ $(C_LINK)

# The benchmarks' C programs compile under the strict flags (most are built
# only by their bench-* targets, which `make test` does not run).
lint-bench:
	@for f in bench/c/*.c; do $(CC) $(CFLAGS_STRICT) -O2 -fsyntax-only $(C_INC) $$f || exit 1; done

# check-temp-paths: no test source names a temporary path another test
# could also use (scripts/check-temp-paths.sh).
lint: $(LIBTORCH_STAMP) $(GLOO_STAMP) lint-bench
	bash scripts/check-temp-paths.sh
	$(CARGO) fmt --check
	$(CARGO) clippy $(CARGO_FLAGS) --all-targets -- -D warnings

fmt:
	$(CARGO) fmt

# A relocatable release (scripts/make-dist.sh): build/dist/fulmen-VERSION-
# linux-ARCH.tar.gz holds the library (SONAME libfulmen.so.0.1), the libtorch
# libraries it needs, the C and C++ headers, fulmen.pc, the CMake package
# and the Go package, every rpath $ORIGIN-relative. test-dist (in `make
# test`) unpacks it outside the repository and builds and runs a C, a C++
# and a Go program against it, checked with ldd; then checks that `make
# install` lays out the same files.
DIST := $(BUILD)/dist
dist: lib
	bash scripts/make-dist.sh $(LIBDIR) $(DIST)

DIST_NAME = fulmen-$(shell sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | head -n1)-linux-$(shell uname -m)
test-dist: dist
	bash scripts/test-dist.sh $(DIST)/$(DIST_NAME).tar.gz
	@rm -rf $(BUILD)/install-check
	$(MAKE) --no-print-directory install PREFIX=$(BUILD)/install-check
	diff <(cd $(DIST)/$(DIST_NAME) && find . | sort) <(cd $(BUILD)/install-check && find . | sort)
	@echo "make install lays out the release's files"

# Installs the release's layout (see dist) into PREFIX: lib/libfulmen.so*,
# lib/fulmen/ (libtorch), include/, lib/pkgconfig/fulmen.pc,
# lib/cmake/fulmen/, share/fulmen/go/, share/fulmen/python/, share/doc/fulmen/.
# Files already there are replaced, not rewritten in place (a running
# program keeps the old ones). The static library is not installed: a
# static link needs libtorch's own link line.
install: lib
	bash scripts/make-dist.sh $(LIBDIR) $(BUILD)/install-stage --no-tarball
	install -d "$(DESTDIR)$(PREFIX)"
	cp -a --remove-destination $(BUILD)/install-stage/$(DIST_NAME)/. "$(DESTDIR)$(PREFIX)/"

clean:
	$(CARGO) clean
	rm -rf $(BUILD)
