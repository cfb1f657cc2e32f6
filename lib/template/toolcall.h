// toolcall.h — tool calls in an assistant's text, as the chat template's
// family writes them, parsed into the form chat templates take them:
//     [{"type": "function", "function": {"name": "...", "arguments": {...}}}]
// (OpenAI's, with the arguments an object rather than a JSON string, as in
// transformers' chat templates); a call's string "id", where the model
// writes one (Mistral's), comes first: {"id": "...", "type": ..., ...}.
//
// The text is the model's as decoded, special tokens left out, so that a
// format whose markers are special tokens is also read without them:
//
//   hermes   <tool_call>{"name": ..., "arguments": ...}</tool_call>, once or
//            more, with text around them (Hermes, Qwen2.5, Qwen3; white
//            space around the object); also the format of templates that
//            render no tools (SmolLM2's), whose tools are described in the
//            system message.
//   llama    the whole text one JSON object {"name": ..., "parameters": ...}
//            (Llama 3.1, 3.2, 3.3: what their templates render for a call and
//            their models write), after an optional <|python_tag|>; several
//            calls are objects one after another, separated by white space
//            or ';'. Text before or after them: no calls.
//   mistral  [TOOL_CALLS] then a JSON list of {"name", "arguments"[, "id"]}
//            (Mistral Nemo's template; Mistral 7B v0.3, Mixtral 8x22B), or the
//            whole text that list alone ([TOOL_CALLS] is a special token,
//            left out of the text decoded); or [TOOL_CALLS]NAME[ARGS]{...},
//            once per call, with [CALL_ID]ID before [ARGS] where the template
//            writes ids (Mistral Small 3.2, Ministral 3, Devstral, Magistral),
//            read only with its markers in the text: without them the name
//            runs into the id and the arguments. Text before the first
//            [TOOL_CALLS] is the assistant's content.
//
// In every format "arguments" (or Llama's "parameters") is an object, or
// absent for a call without arguments ({}).
#ifndef RLPIPE_TOOLCALL_H
#define RLPIPE_TOOLCALL_H

#include <stddef.h>

#include "util.h"

typedef enum { TC_HERMES, TC_LLAMA, TC_MISTRAL } tc_format;

// The format a chat template's source text renders tool calls in: mistral
// when it writes [TOOL_CALLS], hermes when <tool_call>, llama when
// <|python_tag|> or a "parameters" key, else hermes (the format to describe
// to a model whose template renders no tools).
tc_format tc_format_of(const char *tpl, size_t n);
const char *tc_format_name(tc_format f);   // "hermes", "llama", "mistral"

// The calls in text[0..n) appended to out as a msgpack array. Returns how
// many (0: none, out untouched); a call that is not a JSON object with a
// string "name" and an object of arguments (or none) makes the whole text a
// text without calls (0), so that the environment sees what the model wrote.
int tc_parse(tc_format f, const char *text, size_t n, sbuf *out);

#endif
