// fuzz_env.c — an environment's answer line (rlpipe-env(5)) as rl-sample
// reads it: parsed (env_parse_answer), judged (ag_read_answer), and, when it
// continues the rollout, its messages rendered after a conversation by a
// chat template (chat_continue) and tokenized. The input is the line; the
// parity of its length says whether it answers a final request, its second
// bit whether the model's turn ended with a stop token. Whatever the bytes:
// no crash, leak or undefined behaviour; a refusal says why; what continues
// renders or fails with a message, and its tokens are in the vocabulary.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "records/json.h"
#include "records/mparray.h"
#include "sample/agent.h"
#include "sample/envproc.h"
#include "template/chat.h"

// A ChatML-like template over the tiny tokenizer's special tokens, which
// renders roles and tool calls as the templates of real models do.
static const char CONFIG[] =
    "{\"bos_token\": \"<|bos|>\", \"eos_token\": \"<|eos|>\", \"chat_template\": "
    "\"{{ bos_token }}{% for m in messages %}{{ m['role'] + ':\\n' }}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{{ m['content'] | tojson }}{% endif %}"
    "{% for c in m.get('tool_calls') or [] %}{{ '<call>' + c['function']['name'] + '</call>' }}{% endfor %}"
    "{{ '<|eos|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ 'assistant:\\n' }}{% endif %}\"}";
// The conversation so far: the prompt's messages and the model's turn.
static const char CONVERSATION[] =
    "{\"m\": [{\"role\": \"system\", \"content\": \"Tools: calculator.\"}, {\"role\": \"user\", \"content\": "
    "\"What is 347 * 29?\"}, {\"role\": \"assistant\", \"content\": \"<tool_call>{}</tool_call>\"}]}";

static tokenizer *tok;
static chat_t *chat;
static sbuf conv;            // the conversation's messages, without their array header
static uint32_t n_conv;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char path[4096];
    rl_err err;
    snprintf(path, sizeof path, "%s/models/tiny/tokenizer.json", fz_root());
    if (!(tok = tok_load(path, &err))) {
        fprintf(stderr, "fuzz_env: %s\n", err.msg);
        exit(1);
    }
    fz_write(fz_dir(), "tokenizer_config.json", CONFIG, sizeof CONFIG - 1);
    if (!(chat = chat_load(fz_dir(), tok, &err))) {
        fprintf(stderr, "fuzz_env: the template: %s\n", err.msg);
        exit(1);
    }
    rec_t *r = rec_new();
    size_t n;
    if (json_to_rec(CONVERSATION, sizeof CONVERSATION - 1, r, &err)) abort();
    const uint8_t *m = rec_value(r, 0, &n);
    size_t h;
    if (mpa_header(m, n, &n_conv, &h)) abort();
    sbuf_put(&conv, m + h, n - h);
    rec_free(r);
    return 0;
}

// The messages of a continuing answer after the conversation, rendered and tokenized.
static void render(const ag_answer *a, int ended_by_token) {
    uint32_t count;
    size_t h;
    // ag_read_answer checked a non-empty list
    if (mpa_header(a->msgs, a->msgs_len, &count, &h) || !count) __builtin_trap();
    sbuf all = {0}, text = {0};
    mpa_put_header(&all, n_conv + count);
    sbuf_put(&all, conv.data, conv.len);
    sbuf_put(&all, a->msgs + h, a->msgs_len - h);
    rl_err err;
    int rewrote;
    err.msg[0] = 0;
    if (chat_continue(chat, all.data, all.len, NULL, n_conv, ended_by_token, &text, &rewrote, &err)) {
        if (!err.msg[0] || text.len) __builtin_trap();   // a refusal says why, and appends nothing
    } else {
        uint32_t *ids = NULL;
        size_t nids = 0, cap = 0;
        if (tok_encode_ex(tok, (const char *)text.data, text.len, 0, &ids, &nids, &cap, NULL, &err) == 0)
            for (size_t i = 0; i < nids; i++)
                if (ids[i] >= tok_vocab_size(tok)) __builtin_trap();
        free(ids);
    }
    sbuf_free(&all);
    sbuf_free(&text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rec_t *r = rec_new();
    uint64_t id;
    rl_err err;
    err.msg[0] = 0;
    int rc = env_parse_answer((const char *)data, size, r, &id, &err);
    if (rc < 0 && !err.msg[0]) __builtin_trap();
    if (rc == 0) {
        ag_answer a;
        ag_kind k = ag_read_answer(r, (int)(size & 1), &a);
        if (k != a.kind) __builtin_trap();
        if (k == AG_FAILED && !a.why[0]) __builtin_trap();
        if (k == AG_DONE && !isfinite(a.reward)) __builtin_trap();
        if (k == AG_CONTINUE) render(&a, (int)(size >> 1 & 1));
    }
    rec_free(r);
    return 0;
}
