// prompts.h — the prompt set of rl-sample: JSON lines
// {"prompt": "...", "answer": "...", ...} or records of a "prompts" stream,
// read whole (the set is shuffled and cycled), each prompt tokenized once.
#ifndef RLPIPE_PROMPTS_H
#define RLPIPE_PROMPTS_H

#include <stddef.h>
#include <stdint.h>

#include "records/record.h"
#include "rng.h"
#include "template/chat.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    rec_t *rec;                // the object as read; keys other than prompt/answer/prompt_ids go into the rollouts
    const char *text;          // its "prompt" (points into rec), or its "messages" rendered by the
                               // chat template with the generation prompt (in rendered); text_len bytes
    char *rendered;
    size_t text_len;
    char *answer;              // its "answer" (NUL-terminated), or NULL
    size_t answer_len;
    uint32_t *ids;             // the prompt's tokens: "prompt_ids" as given, else the text tokenized with
                               // the special tokens its tokenizer adds (tok_encode_special: bos or none),
                               // or for "messages" the rendered text tokenized without them (the
                               // template writes its own), as apply_chat_template(tokenize=True)
    size_t n_ids;
    tok_report tok;            // what tokenizing the text dropped (characters with no token)
    char *where;               // "FILE line L" or "FILE record N", for messages
} prompt;

typedef struct {
    prompt *v;
    size_t n, cap;
    size_t max_ids;            // the longest prompt, in tokens
} prompt_set;

typedef struct {
    const tokenizer *tok;
    const chat_t *chat;        // the model's chat template, for "messages" (NULL: the model has none)
    size_t vocab;              // prompt_ids must be below it
    size_t max_ids;            // a prompt with more tokens is an error (the model's context less one)
    size_t max_text;           // a prompt text of more bytes is an error before it is tokenized
                               // (0: prm_read derives it from max_ids and the tokenizer)
} prm_opts;

// Appends the prompts of path ("-": standard input; JSON lines or a record
// stream, told apart by its first byte) to ps. A prompt is a text
// ("prompt"), token ids ("prompt_ids", with or without the text), or a
// conversation ("messages": [{"role": "system"|"user"|..., "content": ...}],
// rendered by the chat template with the generation prompt appended).
// Errors name the file and the line or record: invalid JSON, none of the three,
// "messages" with "prompt" or "prompt_ids", a conversation the template
// refuses, an "answer" that is not a
// string, a key rl-sample writes itself (id, ids, logp, ...), a
// prompt too long, a member whose kind is not "prompts". 0, or -1 with err.
int prm_read(prompt_set *ps, const char *path, const prm_opts *o, rl_err *err);
void prm_free(prompt_set *ps);

// The order prompts are started in: the set shuffled with seed, anew for each
// pass, for `epochs` passes (0: no end), at most max_started in all (0: no limit).
typedef struct {
    size_t n, *order, next;
    uint64_t epoch, epochs, started, max_started;
    rl_rng rng;
} prm_feed;

void prm_feed_init(prm_feed *f, size_t n, uint64_t seed, uint64_t epochs, uint64_t max_started);
long prm_feed_next(prm_feed *f);   // the next prompt's index, or -1 at the end
void prm_feed_free(prm_feed *f);

#endif
