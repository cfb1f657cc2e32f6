// chat.h — a model's chat template: conversations rendered and tokenized as
// Hugging Face transformers' apply_chat_template renders them, and the
// assistant turns of a conversation located for an assistant-only loss.
//
// A conversation is a msgpack array of messages, each a map with a string
// "role" and any other keys ("content", usually a string); the template
// decides what it reads. The template's variables are those transformers
// passes: messages, add_generation_prompt, tools and documents (none), the
// special tokens of tokenizer_config.json (bos_token, eos_token, ...), and
// the user's own (chat_set_arg: enable_thinking=false for Qwen3, or tools),
// which replace the others but messages and add_generation_prompt, and the
// conversation's own tools.
//
// A conversation may come with a record (a prompt's line, an example: conv,
// NULL for none) whose "tools", a list of the tools' descriptions as
// transformers' apply_chat_template(tools=...) takes them (null: none), are
// the template's tools for that conversation alone, in place of
// chat_set_arg's; "tools" that is neither fails the rendering.
#ifndef RLPIPE_CHAT_H
#define RLPIPE_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "records/record.h"
#include "template/jinja.h"
#include "template/toolcall.h"
#include "tokenizer/tokenizer.h"

typedef struct chat chat_t;

// The template of the model directory dir: "chat_template" in
// tokenizer_config.json (a string, or the one named "default" in a list of
// {name, template}), or the file chat_template.jinja, which takes precedence
// as in newer transformers. tok tokenizes what it renders (kept, not owned).
// NULL with err->msg "" when the model has no template; NULL with err when a
// file or the template is malformed or uses what jinja.h does not implement.
chat_t *chat_load(const char *dir, const tokenizer *tok, rl_err *err);
void chat_free(chat_t *c);

// Sets a template variable from "NAME=VALUE", VALUE as JSON (a bare word
// that is not JSON is taken as a string): enable_thinking=false; or from
// "NAME=@FILE", the JSON value that FILE holds: tools=@tools.json (an error
// naming FILE when it cannot be read or is not JSON). 0 or -1.
int chat_set_arg(chat_t *c, const char *arg, rl_err *err);

// The format the template renders an assistant's tool calls in (toolcall.h),
// read from its source: the format to parse the model's calls in.
tc_format chat_tool_format(const chat_t *c);

// The conversation msgs[0..n) (msgpack), with the tools of conv, rendered and tokenized; with
// add_generation_prompt, the start of the assistant's turn follows. The
// tokens, as apply_chat_template(tokenize=True) gives them (the text encoded
// without added bos or eos: the template writes its own). With mask not
// NULL, mask gets one value per id: 1 for the tokens of the assistant's turns
// (the loss of supervised fine-tuning), 0 for the rest:
//   - a template with {% generation %} blocks marks them itself, and the mask
//     is transformers' return_assistant_tokens_mask (the tokens that overlap
//     the text the blocks produced), which TRL's assistant_only_loss uses;
//   - otherwise an assistant turn is the text that rendering messages[0..i]
//     adds to rendering messages[0..i) with the generation prompt: its
//     content and the end-of-turn token, what the model generates when it
//     answers; text the template puts after that token (a newline) is not
//     the model's. A template that renders earlier turns differently once
//     later ones follow (Qwen3 drops the reasoning of earlier turns) cannot
//     be split so: an error then, which names {% generation %} as the remedy.
// Locating the turns renders the conversation once per assistant turn, each
// time as long as the text up to it: a conversation of more than max_ids
// tokens (0: no bound) is refused before that, once it is rendered whole.
// rep (when not NULL) says what tokenizing dropped (tok_encode_ex). 0, or -1 with err.
// text (when not NULL) gets the rendered text appended, NUL-terminated (len not counting it).
int chat_encode(const chat_t *c, const uint8_t *msgs, size_t n, const rec_t *conv, int add_generation_prompt,
                size_t max_ids, sbuf *text, u32_vec *ids, u8_vec *mask, tok_report *rep, rl_err *err);

// The token that ends an assistant turn in this template (<|im_end|>,
// <|eot_id|>, </s>): the special token that follows an assistant message's
// content when a conversation is rendered; -1 when none does.
int64_t chat_end_of_turn(const chat_t *c);
// The id of tokenizer_config.json's eos_token, or -1.
int64_t chat_eos(const chat_t *c);

// Multi-turn rollouts: the text that follows an assistant's turn as the
// model generated it when new messages (a tool's result, a user's reply)
// join the conversation, up to the start of the next assistant turn.
// msgs[0..n) is the conversation (msgpack array): its first n_conv messages
// so far, the last of them the assistant's turn, then the new ones; conv its
// record, whose tools rendered its prompt (NULL: none). Appended
// to text:
//   - the rest of the turn as the template ends it (what it renders after an
//     assistant's content: "<|im_end|>\n"), less its first token when that is
//     a special token and the model ended its turn with a stop token
//     (ended_by_token), which stands for it;
//   - render(msgs, generation prompt) less render(msgs[0..n_conv)), when the
//     latter is a prefix of the former (*rewrote = 0);
//   - else, the template rendering earlier turns differently once the new
//     messages follow (Qwen3 drops the reasoning of the turns before a user's
//     message), the same difference over the template's short probe
//     conversation (a user's message and an assistant's reply) followed by
//     the new messages (*rewrote = 1).
// 0, or -1 with err (a message the template refuses; text is then as it was).
int chat_continue(const chat_t *c, const uint8_t *msgs, size_t n, const rec_t *conv, size_t n_conv, int ended_by_token,
                  sbuf *text, int *rewrote, rl_err *err);

#endif
