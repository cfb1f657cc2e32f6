"""The assistant mask that lib/template/chat.h defines for a chat template without
{% generation %} blocks, computed from transformers' renderings and the
tokenizers' offsets (nothing of rlpipe's code): shared by test_chat.py and
test_chat_tools.py.

For each assistant message i, the text that rendering messages[:i+1] adds to
rendering messages[:i] with the generation prompt, cut after its last
end-of-turn token; the tokens that overlap it (char_to_token of its first and
last characters, and every token between, as transformers'
return_assistant_tokens_mask places a {% generation %} span)."""


def reference_mask(tok, msgs, end_of_turn, **args):
    """(ids, mask) of the conversation msgs rendered whole, or None when the
    template renders an earlier part differently once later turns follow."""
    full = tok.apply_chat_template(msgs, tokenize=False, **args)
    enc = tok(full, add_special_tokens=False)
    mask = [0] * len(enc["input_ids"])
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        before = tok.apply_chat_template(msgs[:i], tokenize=False, add_generation_prompt=True, **args)
        upto = tok.apply_chat_template(msgs[:i + 1], tokenize=False, **args)
        if not upto.startswith(before) or not full.startswith(upto):
            return None
        start, end = len(before), len(upto)
        cut = upto.rfind(end_of_turn, start)
        if cut >= 0:
            end = cut + len(end_of_turn)
        first, last = enc.char_to_token(start), enc.char_to_token(end - 1)
        for t in range(first, last + 1):
            mask[t] = 1
    return list(enc["input_ids"]), mask
