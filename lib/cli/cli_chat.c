// cli_chat.c — --chat-arg and the tools' chat template (cli_chat.h).
#include "cli/cli_chat.h"

#include <string.h>

#include "cli/cli.h"

void cli_chat_arg(cli_chat_args *a, const char *arg) {
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) cli_usage_error("--chat-arg '%s': write NAME=VALUE (enable_thinking=false)", arg);
    if (a->n == CLI_CHAT_MAX_ARGS) cli_usage_error("--chat-arg: at most %d", CLI_CHAT_MAX_ARGS);
    a->arg[a->n++] = arg;
}

chat_t *cli_chat_load(const char *dir, const tokenizer *tok, const cli_chat_args *a) {
    rl_err e;
    chat_t *c = chat_load(dir, tok, &e);
    if (!c && e.msg[0]) cli_die("the chat template: %s", e.msg);
    if (!c && a->n) cli_usage_error("--chat-arg: the model in %s has no chat template", dir);
    for (int i = 0; c && i < a->n; i++)
        if (chat_set_arg(c, a->arg[i], &e)) cli_usage_error("--chat-arg %s", e.msg);
    return c;
}
