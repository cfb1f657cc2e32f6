// agent.h — multi-turn rollouts (rl-sample --env, rlpipe-env(5)): each
// sample is a conversation with an environment. When a sample's turn ends
// (generate.h, multi-turn), its conversation so far goes to the environment
// (envproc.h); the environment answers with messages, which the chat
// template turns into tokens appended after the ones generated (token in,
// token out: the turns are never rendered again, chat_continue), or ends
// the rollout with a reward.
//
// A rollout fails, alone, when the environment's answer to it is not one
// rlpipe-env(5) allows (messages that are not a list of maps with a string
// role other than "assistant", or that the template cannot render; "done"
// without a finite "reward"; messages in answer to a final request), carries
// "error", or does not come within the timeout: it ends with reward 0 and
// its record says why ("env_error"). More than max_failures failures end the
// run. What breaks the protocol itself (envproc.h) ends the run at once.
#ifndef RLPIPE_AGENT_H
#define RLPIPE_AGENT_H

#include <stdint.h>

#include "sample/envproc.h"
#include "sample/generate.h"
#include "sample/prompts.h"
#include "template/chat.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const prompt_set *prompts;    // every prompt a conversation ("messages")
    const chat_t *chat;
    const tokenizer *tok;
    envproc *env;
    int max_turns;                // a rollout's turn max_turns is sent final (>= 1)
    uint64_t max_failures;        // failed rollouts the run survives
    void (*warn)(const char *fmt, ...);   // a late answer, dropped
} ag_opts;

typedef struct {
    uint64_t rollouts, turns;     // ended; model turns in them
    uint64_t failed, rewrote;     // rollouts failed; continuations through the template's probe
    uint64_t late;                // answers after their request's timeout, dropped
} ag_totals;

typedef struct ag ag_t;

ag_t *ag_new(const ag_opts *o);
void ag_free(ag_t *a);

// Sends a request for every turn that ended in g, then reads the
// environment's answers and continues or ends their rollouts; wait_ms (0:
// none, -1: without end) is how long to wait for an answer when none has
// come. 0, or -1 with err naming the rollout and its prompt.
int ag_pump(ag_t *a, gen_t *g, int wait_ms, rl_err *err);

// What an environment's answer r says (final: it answers a final request),
// checked as rlpipe-env(5) says: AG_DONE with the reward and info (into r),
// AG_CONTINUE with the messages to append (a msgpack array into r, each a
// map with a string role other than assistant), or AG_FAILED with why.
typedef enum { AG_CONTINUE, AG_DONE, AG_FAILED } ag_kind;
typedef struct {
    ag_kind kind;
    double reward;
    const uint8_t *info, *msgs;   // msgpack values, or NULL
    size_t info_len, msgs_len;
    char why[400];
} ag_answer;
ag_kind ag_read_answer(const rec_t *r, int final, ag_answer *out);

// The fields that a finished rollout (sample number) adds to its record:
// "messages" (the whole conversation), "reward", "info" and "env_error" when
// the environment gave them. The caller frees it.
rec_t *ag_take(ag_t *a, uint64_t number);
const ag_totals *ag_total(const ag_t *a);

#endif
