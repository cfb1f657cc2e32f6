# What experiments built on experiments/smollm2's add2 task share (included
# after common.mk): the model, the task and the base model's greedy accuracy
# from smollm2's own stages, made into OUT.
SMOL_MAKE = $(MAKE) --no-print-directory -C $(EXP)/smollm2 OUT=$(abspath $(OUT)) KIND=add2 MODEL_DTYPE=f32
$(OUT)/.base-eval:
	@$(SMOL_MAKE) $(abspath $(OUT))/.base-eval
