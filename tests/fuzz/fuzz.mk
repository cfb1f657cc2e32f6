# tests/fuzz/fuzz.mk — libFuzzer harnesses of every parser that reads untrusted
# bytes (tests/fuzz/fuzz_*.c), built with clang, ASan and UBSan.
#   make fuzz [FUZZ_TIME=60] [FUZZ_RUNS=N]  build, make the seeds, run each
#                             harness FUZZ_TIME seconds (or N inputs, if fewer)
#                             on one core; a table; exit 1 on a crash
#   make fuzz-build           only the binaries, $(BUILD)/fuzz/fuzz_<name>
# The corpus of each harness grows in $(BUILD)/fuzz/corpus/<name> across runs;
# crashes land in $(BUILD)/fuzz/crashes/. To reproduce one (the tokenizer's
# harness also wants FUZZ_TOKENIZERS, as tests/fuzz/run.sh prints it):
#   $(BUILD)/fuzz/fuzz_<name> $(BUILD)/fuzz/crashes/fuzz_<name>-crash-<sha1>
# To minimise it: add -minimize_crash=1 -runs=10000 -exact_artifact_path=min.bin
# To minimise a corpus: fuzz_<name> -merge=1 NEWDIR $(BUILD)/fuzz/corpus/<name>

FUZZ_CC ?= clang
FUZZ_TIME ?= 60
FUZZ_NAMES := records safetensors config tokenizer jsonl push chat env vreply lora
FUZZ_BINS := $(addprefix $(BUILD)/fuzz/fuzz_,$(FUZZ_NAMES))
FUZZ_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
              -Wno-pass-failed
# The CPU backend only: a harness parses, it computes nothing on a GPU.
FUZZ_LIB_SRC := $(filter-out lib/model/cuda/absent.c,$(LIB_SRC)) lib/model/cuda/absent.c
FUZZ_LIBS = $(PKG_LIBS) -pthread -lm

.PHONY: fuzz fuzz-build fuzz-seeds
fuzz-build: $(FUZZ_BINS)

# Every object carries the fuzzer's coverage instrumentation; only the link
# adds libFuzzer's main.
$(BUILD)/fuzz/obj/%.o: %.c $(BUILD)/deps.mk
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link $(ALL_CFLAGS) -MMD -MP -c $< -o $@

# Where the harnesses find the repository's files (models/tiny) by default.
$(BUILD)/fuzz/obj/tests/fuzz/%.o: CFLAGS += -DFUZZ_ROOT='"$(CURDIR)"'

$(BUILD)/fuzz/librlpipe.a: $(patsubst %.c,$(BUILD)/fuzz/obj/%.o,$(FUZZ_LIB_SRC))
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/fuzz/fuzz_%: $(BUILD)/fuzz/obj/tests/fuzz/fuzz_%.o $(BUILD)/fuzz/obj/tests/fuzz/fuzz_util.o \
                      $(BUILD)/fuzz/librlpipe.a
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer $(LDFLAGS) -o $@ $^ $(FUZZ_LIBS)

# The seed corpora come from the tools (records sampled from the tiny model)
# and from the venv's packages (real tokenizers): made once per build.
fuzz-seeds: $(BUILD)/fuzz/seeds/.done
$(BUILD)/fuzz/seeds/.done: tests/fuzz/seeds.sh tests/fuzz/seeds.py $(addprefix $(BIN)/,$(TOOLS))
	@sh scripts/deps.sh test
	@rm -rf $(BUILD)/fuzz/seeds
	@BIN=$(BIN) bash tests/fuzz/seeds.sh $(BUILD)/fuzz/seeds
	@touch $@

fuzz: fuzz-build fuzz-seeds
	@BUILD=$(BUILD) FUZZ_RUNS=$(FUZZ_RUNS) bash tests/fuzz/run.sh --table $(FUZZ_TIME) $(FUZZ_NAMES)

# make check builds them, and runs each harness briefly (tests/run.sh,
# "fuzz: fuzz_<name>"), where clang can build them.
FUZZ_CHECK := $(if $(shell command -v $(FUZZ_CC) 2>/dev/null),fuzz-build fuzz-seeds)
