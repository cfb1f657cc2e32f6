// cli_chat.h — the chat-template option of the tools that read conversations
// (rl-sample's prompts, rl-learn's examples): --chat-arg NAME=VALUE, and
// loading the model's template with those arguments. Apart from cli.c so
// that the tools that read no conversation link no template engine.
#ifndef RLPIPE_CLI_CHAT_H
#define RLPIPE_CLI_CHAT_H

#include "template/chat.h"
#include "tokenizer/tokenizer.h"

#define CLI_CHAT_MAX_ARGS 32
typedef struct {
    const char *arg[CLI_CHAT_MAX_ARGS];
    int n;
} cli_chat_args;

#define CLI_CHAT_HELP                                                                                  \
    "      --chat-arg NAME=VALUE\n"                                                                      \
    "                         a variable of the chat template (repeatable; VALUE as JSON,\n"           \
    "                         else a string; @FILE: the JSON in FILE): --chat-arg\n"                   \
    "                         enable_thinking=false, --chat-arg tools=@tools.json\n"
void cli_chat_arg(cli_chat_args *a, const char *arg);   // a usage error when malformed or too many

// The chat template of the model directory dir with the arguments set, or
// NULL when the model has none (--chat-arg then is a usage error); exits
// with the error of a malformed template.
chat_t *cli_chat_load(const char *dir, const tokenizer *tok, const cli_chat_args *a);

#endif
