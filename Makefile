# rlpipe — reinforcement learning for language models as composable Unix tools.
#   make               build every tool into bin/
#   make check         build and run every test; ends with "N passed, N failed[, N skipped]"
#   make install       PREFIX=/usr/local: binaries, scripts/rl-reward-fn and man pages
#   make clean
#   make CUDA=0        leave out the CUDA backend (built when nvcc is found)
# Missing Debian packages are installed by scripts/deps.sh (as root) or named.

PREFIX ?= /usr/local
CC ?= cc
OPT ?= -O2
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat=2 -Wno-format-nonliteral
BASE_CFLAGS := -std=gnu11 -g -D_GNU_SOURCE -Ilib $(WARN)
SAN_FLAGS := -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# The sanitizer build uses clang where there is one: its UBSan also catches
# arithmetic on a NULL pointer (NULL + 0), which gcc's does not.
SAN_CC ?= $(or $(shell command -v clang 2>/dev/null),$(CC))
# (At -O1 clang says which "omp simd" loops it did not vectorise: not a fault.)
SAN_FLAGS += $(if $(findstring clang,$(SAN_CC)),-Wno-pass-failed)

# BUILD and BIN may be moved so that two builds of one tree do not collide.
BUILD ?= build
BIN ?= bin

TOOLS := $(notdir $(wildcard tools/rl-*))
LIB_SRC := $(wildcard lib/*.c lib/*/*.c lib/model/cpu/*.c)

# The CUDA backend (lib/model/cuda/*.cu) is built when nvcc is found, for
# Ampere (sm_80) and Hopper (sm_90), with PTX for later GPUs; CUDA=0 leaves it
# out (lib/model/cuda/absent.c then says so at run time). The tools link the
# static CUDA runtime and open cuBLAS when the backend starts: they start
# without a GPU, a driver or cuBLAS (and compute on the CPU).
NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA ?= $(if $(NVCC),1,0)
ifeq ($(CUDA),1)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_SRC := $(wildcard lib/model/cuda/*.cu)
CUDA_OBJ := $(patsubst %.cu,$(BUILD)/obj/%.o,$(CUDA_SRC))
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
NVCC_FLAGS := -O3 -g -std=c++17 -Ilib $(CUDA_ARCH) -Xcompiler -Wall,-Wextra --expt-relaxed-constexpr
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
else
LIB_SRC += lib/model/cuda/absent.c
CUDA_OBJ :=
CUDA_LIBS :=
endif
TEST_SRC := $(wildcard tests/unit/test_*.c)
TESTS := $(patsubst tests/unit/%.c,%,$(TEST_SRC))
# Small programs the Python tests and the benchmarks drive (not tests themselves).
AUX_SRC := $(wildcard tests/tools/*.c bench/*.c)
AUX := $(patsubst %.c,$(BUILD)/%,$(AUX_SRC))

# $(BUILD)/deps.mk is made first: it installs what is missing and records which
# pkg-config names this system has (msgpack-c is "msgpack" on Debian 12).
ifeq ($(filter clean,$(MAKECMDGOALS)),)
-include $(BUILD)/deps.mk
endif
# MPI (optional: rl-learn's data-parallel ranks, lib/parallel/) where mpicc is;
# MPI=0 leaves it out. NCCL with the CUDA build (opened at run time).
MPI ?= $(if $(HAVE_MPI),1,0)
ifeq ($(MPI),1)
MPI_CFLAGS := -DRL_HAVE_MPI $(shell mpicc --showme:compile)
MPI_LIBS := $(shell mpicc --showme:link)
endif
$(BUILD)/obj/lib/parallel/dist.o $(BUILD)/asan/lib/parallel/dist.o: TGT_CFLAGS = $(MPI_CFLAGS)
ifeq ($(CUDA),1)
NCCL_H := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h /usr/local/include/nccl.h))
$(BUILD)/obj/lib/parallel/nccl_comm.o: TGT_CFLAGS = $(if $(NCCL_H),-DRL_HAVE_NCCL -isystem $(dir $(NCCL_H))) -isystem $(CUDA_HOME)/include
endif
PKG_CFLAGS := $(if $(PKGS),$(shell pkg-config --cflags $(PKGS)))
PKG_LIBS := $(if $(PKGS),$(shell pkg-config --libs $(PKGS)))
LIBS = -Wl,--as-needed $(PKG_LIBS) $(MPI_LIBS) $(CUDA_LIBS) -pthread -lm

CFLAGS ?=
LDFLAGS ?=
ALL_CFLAGS = $(BASE_CFLAGS) -fopenmp-simd -pthread $(PKG_CFLAGS) $(TGT_CFLAGS) $(CFLAGS)

.PHONY: all check install clean aux demo
all: $(addprefix $(BIN)/,$(TOOLS))
# aux: the test and benchmark drivers
aux: $(AUX)

$(BUILD)/deps.mk: scripts/deps.sh
	@sh scripts/deps.sh build
	@mkdir -p $(BUILD)
	@pc=msgpack; pkg-config --exists msgpack-c && pc=msgpack-c; \
	  echo "PKGS := libzstd $$pc libcjson openblas libxxhash libcrypto libpcre2-8 libutf8proc" > $@; \
	  if command -v mpicc >/dev/null 2>&1; then echo "HAVE_MPI := 1" >> $@; fi

# Normal build: optimised objects, a static library, the tools. The CPU
# kernels are written for the vectoriser, which -O3 turns fully on.
$(BUILD)/obj/lib/model/cpu/%.o: OPT = -O3
# The conversions of weights pushed or loaded (bf16, f16) are loops for the vectoriser too.
$(BUILD)/obj/lib/dtype.o: OPT = -O3
# The sampler's exponentials are matched bit for bit by the GPU's (cuda/sample.cu):
# no multiply-add may be fused here either (x86-64 has none without -mfma; others do).
$(BUILD)/obj/lib/model/sampling.o: OPT = -O2 -ffp-contract=off

$(BUILD)/obj/%.o: %.c $(BUILD)/deps.mk
	@mkdir -p $(dir $@)
	$(CC) $(OPT) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/lib/model/cuda/%.o: lib/model/cuda/%.cu $(BUILD)/deps.mk
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/librlpipe.a: $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRC)) $(CUDA_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN)/%: $(BUILD)/obj/tools/%/main.o $(BUILD)/librlpipe.a
	@mkdir -p $(BIN)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(BUILD)/librlpipe.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/tests/tools/%: $(BUILD)/obj/tests/tools/%.o $(BUILD)/librlpipe.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(BUILD)/librlpipe.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# Sanitizer build (AddressSanitizer + UndefinedBehaviorSanitizer) of the same
# sources: the record-layer unit tests and rl-cat, run by make check.
$(BUILD)/asan/%.o: %.c $(BUILD)/deps.mk
	@mkdir -p $(dir $@)
	$(SAN_CC) $(SAN_FLAGS) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

# The CUDA objects are the normal build's: the sanitizers do not see device code.
$(BUILD)/asan/librlpipe.a: $(patsubst %.c,$(BUILD)/asan/%.o,$(LIB_SRC)) $(CUDA_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/asan/bin/%: $(BUILD)/asan/tools/%/main.o $(BUILD)/asan/librlpipe.a
	@mkdir -p $(dir $@)
	$(SAN_CC) $(SAN_FLAGS) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/asan/tests/%: $(BUILD)/asan/tests/unit/%.o $(BUILD)/asan/librlpipe.a
	@mkdir -p $(dir $@)
	$(SAN_CC) $(SAN_FLAGS) $(LDFLAGS) -o $@ $^ $(LIBS)

TEST_BINS := $(AUX) $(addprefix $(BUILD)/tests/,$(TESTS)) $(addprefix $(BUILD)/asan/tests/,$(TESTS)) \
             $(addprefix $(BUILD)/asan/bin/,$(TOOLS))

# make check and make check-san compile JOBS files at once (default: one per
# CPU) unless make was given -j; tests/run.sh runs JOBS test programs at once.
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
PARALLEL = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(JOBS))

check:
	@$(MAKE) --no-print-directory $(PARALLEL) all $(TEST_BINS) $(FUZZ_CHECK)
	@sh scripts/deps.sh test
	@BUILD=$(BUILD) BIN=$(BIN) bash tests/run.sh

# make check-san: the whole suite once more, every program (tools, unit tests,
# test and benchmark drivers) built with the sanitizers into $(SAN_BUILD), by
# a second make of this file. The CUDA backend is left out: the sanitizers do
# not see device code. The optimisation levels stay the normal build's
# (SAN_OPT empty): under the sanitizers -O2/-O3 run the suite faster than -O1
# and still report what -O1 reports. The sanitizer passes of make check are not
# repeated (SAN_PASSES=0); RLPIPE_SANITIZED=1 tells timing tests to allow more.
SAN_BUILD := $(BUILD)/san
SAN_OPT ?=
SAN_CHECK_FLAGS = $(SAN_OPT) $(filter-out -O%,$(SAN_FLAGS))

.PHONY: check-san
check-san:
	@$(MAKE) --no-print-directory $(PARALLEL) CUDA=0 CC=$(SAN_CC) BUILD=$(SAN_BUILD) BIN=$(SAN_BUILD)/bin \
	  CFLAGS="$(SAN_CHECK_FLAGS) $(CFLAGS)" LDFLAGS="$(SAN_CHECK_FLAGS) $(LDFLAGS)" \
	  all aux $(addprefix $(SAN_BUILD)/tests/,$(TESTS))
	@sh scripts/deps.sh test
	@MAKEFLAGS= BUILD=$(SAN_BUILD) BIN=$(SAN_BUILD)/bin SAN_PASSES=0 RLPIPE_SANITIZED=1 \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 bash tests/run.sh

# The main job on the built-in tiny model (experiments/demo/Makefile): SFT,
# then RL in flight, held-out accuracy before and after; its last line says it.
demo: all
	@sh scripts/deps.sh demo
	@$(MAKE) --no-print-directory -C experiments/demo BIN=$(abspath $(BIN))

# Fuzzing (libFuzzer harnesses of every parser): make fuzz [FUZZ_TIME=seconds each].
include tests/fuzz/fuzz.mk

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(addprefix $(DESTDIR)$(PREFIX)/share/man/man,1 5 7)
	install -m 755 $(addprefix $(BIN)/,$(TOOLS)) $(DESTDIR)$(PREFIX)/bin/
	install -m 755 scripts/rl-reward-fn $(DESTDIR)$(PREFIX)/bin/
	install -m 644 man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 man/*.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	install -m 644 man/*.7 $(DESTDIR)$(PREFIX)/share/man/man7/

clean:
	rm -rf $(BUILD) $(BIN)

.SECONDARY:
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
