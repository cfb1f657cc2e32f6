// toolcall.h — tool calls in an assistant's text, as the chat template's
// family writes them, parsed into the form chat templates take them:
//     [{"type": "function", "function": {"name": "...", "arguments": {...}}}]
// (OpenAI's, with the arguments an object rather than a JSON string, as in
// transformers' chat templates).
//
//   hermes   <tool_call>{"name": ..., "arguments": ...}</tool_call>, once or
//            more (Hermes, Qwen2.5, Qwen3; white space around the object);
//            also the format of templates that render no tools (SmolLM2's),
//            whose tools are described in the system message.
#ifndef RLPIPE_TOOLCALL_H
#define RLPIPE_TOOLCALL_H

#include <stddef.h>

#include "util.h"

typedef enum { TC_HERMES } tc_format;

// The calls in text[0..n) appended to out as a msgpack array. Returns how
// many (0: none, out untouched); a call that is not a JSON object with a
// string "name" makes the whole text a text without calls (0), so that the
// environment sees what the model wrote.
int tc_parse(tc_format f, const char *text, size_t n, sbuf *out);

#endif
