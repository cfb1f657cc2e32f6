# What the experiments' Makefiles share. Every stage runs through
# lib/stage.sh: its output in $(OUT)/log/STAGE.log, a stamp file when done,
# so that make resumes at the first stage not done (make clean starts over).
.DEFAULT_GOAL := all
EXP := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
ROOT := $(abspath $(EXP)/..)
BIN ?= $(ROOT)/bin
export RLPIPE_BIN := $(BIN)
PYTHON ?= python3
OUT ?= out
STAGE := $(EXP)/lib/stage.sh $(OUT)
RLRUN := $(EXP)/lib/rl-run.sh
EVAL := $(EXP)/lib/eval.sh
REPORT := $(PYTHON) $(EXP)/lib/report.py
TINY := $(ROOT)/models/tiny

# The task and the SFT warm-up every experiment starts from
SEED ?= 1
SFT_STEPS ?= 600
SFT_LR ?= 3e-3
TEST ?= 500

$(OUT)/.data:
	@$(STAGE) 1-data $(PYTHON) $(EXP)/arith.py --out $(OUT)/data --seed $(SEED) --test $(TEST)
	@touch $@

# The tiny model from random weights, then SFT on worked examples; version 0
# (random) stays for the "before" of everything (--keep-every keeps multiples of N, 0 too).
$(OUT)/.sft: $(OUT)/.data
	@rm -rf $(OUT)/sft
	@$(STAGE) 2-sft $(BIN)/rl-learn --loss sft --config $(TINY)/config.json --seed $(SEED) --out $(OUT)/sft \
	    --batch 64 --lr $(SFT_LR) --warmup 20 --max-steps $(SFT_STEPS) --keep 1 --keep-every $(SFT_STEPS) \
	    --metrics $(OUT)/sft.jsonl $(OUT)/data/sft.jsonl
	@touch $@

$(OUT)/.sft-eval: $(OUT)/.sft
	@rm -f $(OUT)/sft.eval.jsonl
	@$(STAGE) 3-eval-sft $(EVAL) $(OUT)/data/test.jsonl $(OUT)/sft.eval.jsonl $(OUT)/sft/v000000 $(OUT)/sft
	@touch $@

# Evaluates every version kept by the RL run in directory $(1).
eval_run = $(EVAL) $(OUT)/data/test.jsonl $(1)/eval.jsonl $$(ls -d $(1)/ckpt/v*)

.PHONY: clean
clean:
	rm -rf $(OUT)

# $(eval $(call rl_run,NAME,RL-RUN OPTIONS)): the run OUT/runs/NAME from the
# SFT model (lib/rl-run.sh), then the held-out accuracy of its kept versions.
RUNS :=
define rl_run
RUNS += $(OUT)/runs/$(1)/.done
$(OUT)/runs/$(1)/.done: $(OUT)/.sft-eval
	@$$(STAGE) run-$(1) $$(RLRUN) --init $$(OUT)/sft --prompts $$(OUT)/data/train.jsonl --out $$(OUT)/runs/$(1) $(2)
	@$$(STAGE) eval-$(1) $$(call eval_run,$$(OUT)/runs/$(1))
	@touch $$@
endef
