// test_toolcall.c — specification of toolcall.h: the tool calls of an
// assistant's text in the Hermes, Llama 3 and Mistral formats, parsed into
// [{"type": "function", "function": {"name", "arguments"}}] (msgpack, shown
// here as the JSON json_from_rec writes), or none when a call does not parse.
#include <string.h>

#include "check.h"
#include "records/json.h"
#include "template/toolcall.h"

static char got[4096];

// The calls tc_parse finds in text, as compact JSON into got ("[]" for none);
// their count.
static int parse(tc_format f, const char *text) {
    sbuf out = {0}, json = {0};
    sbuf_put(&out, "\xc0", 1);   // what out held before is kept
    int n = tc_parse(f, text, strlen(text), &out);
    rec_t *r = rec_new();
    rl_err e;
    if (n) rec_set_raw(r, "c", 1, out.data + 1, out.len - 1);
    else rec_set_raw(r, "c", 1, (const uint8_t *)"\x90", 1);
    if (out.data[0] != 0xc0 || (!n && out.len != 1) || json_from_rec(r, &json, &e)) snprintf(got, sizeof got, "(broken)");
    else snprintf(got, sizeof got, "%.*s", (int)json.len - 6, (const char *)json.data + 5);   // {"c":...}
    rec_free(r);
    sbuf_free(&out);
    sbuf_free(&json);
    return n;
}

#define CALLS(f, text, count, want)                                                          \
    do {                                                                                     \
        int n_ = parse(f, text);                                                             \
        CHECK(n_ == (count) && !strcmp(got, want), "%s:\n  got %d %s\n  want %d %s", text, n_, \
              got, count, want);                                                             \
    } while (0)
#define NONE(f, text) CALLS(f, text, 0, "[]")

#define CALC "{\"type\":\"function\",\"function\":{\"name\":\"calc\",\"arguments\":{\"expression\":\"37 * 42\"}}}"
#define TIME "{\"type\":\"function\",\"function\":{\"name\":\"time\",\"arguments\":{}}}"
#define WEATHER                                                                                              \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\",\"days\":2," \
    "\"unit\":1.0,\"at\":[null,true]}}}"

// ---- hermes: <tool_call>{...}</tool_call> ----------------------------------

static void test_hermes_one_call(void) {
    CALLS(TC_HERMES, "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"37 * 42\"}}\n</tool_call>",
          1, "[" CALC "]");
    CALLS(TC_HERMES,
          "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2, \"unit\": 1.0, "
          "\"at\": [null, true]}}</tool_call>",
          1, "[" WEATHER "]");
}

static void test_hermes_two_calls_in_order(void) {
    CALLS(TC_HERMES,
          "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"37 * 42\"}}\n</tool_call>\n"
          "<tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>",
          2, "[" CALC "," TIME "]");
}

static void test_hermes_white_space_around_the_object(void) {
    CALLS(TC_HERMES, "<tool_call> \t\n {\"name\" : \"time\" ,\n \"arguments\" : { } } \n\n</tool_call>\n", 1,
          "[" TIME "]");
}

static void test_hermes_text_around_the_calls(void) {
    CALLS(TC_HERMES,
          "<think>\nI need the product.\n</think>\n\nLet me compute it.\n<tool_call>\n{\"name\": \"calc\", "
          "\"arguments\": {\"expression\": \"37 * 42\"}}\n</tool_call>\nOne moment.",
          1, "[" CALC "]");
}

static void test_hermes_a_call_without_arguments_has_empty_ones(void) {
    CALLS(TC_HERMES, "<tool_call>{\"name\": \"time\"}</tool_call>", 1, "[" TIME "]");
}

static void test_hermes_text_without_calls_has_none(void) {
    NONE(TC_HERMES, "The answer is 1554.");
    NONE(TC_HERMES, "");
}

static void test_hermes_malformed_json_is_no_call(void) {
    NONE(TC_HERMES, "<tool_call>{\"name\": \"calc\", \"arguments\": {\"expression\": </tool_call>");
    NONE(TC_HERMES, "<tool_call>{'name': 'calc'}</tool_call>");
    NONE(TC_HERMES, "<tool_call>{\"name\": \"calc\"} extra</tool_call>");
    NONE(TC_HERMES, "<tool_call>{\"name\": \"calc\"}, \"x\": {\"y\": 1</tool_call>");
    NONE(TC_HERMES, "<tool_call>{\"name\": \"calc\", \"arguments\": {}}");   // not closed
}

static void test_hermes_missing_name_is_no_call(void) {
    NONE(TC_HERMES, "<tool_call>{\"arguments\": {\"expression\": \"1\"}}</tool_call>");
    NONE(TC_HERMES, "<tool_call>{\"name\": 7, \"arguments\": {}}</tool_call>");
    NONE(TC_HERMES, "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>");
    NONE(TC_HERMES, "<tool_call>[{\"name\": \"time\"}]</tool_call>");
}

static void test_hermes_arguments_that_are_not_an_object_are_no_call(void) {
    NONE(TC_HERMES, "<tool_call>{\"name\": \"calc\", \"arguments\": \"{\\\"expression\\\": 1}\"}</tool_call>");
    NONE(TC_HERMES, "<tool_call>{\"name\": \"calc\", \"arguments\": [1]}</tool_call>");
}

static void test_hermes_one_bad_call_makes_the_text_callless(void) {
    NONE(TC_HERMES, "<tool_call>{\"name\": \"time\"}</tool_call><tool_call>{\"arguments\": {}}</tool_call>");
}

// ---- llama: the whole text a JSON object {"name", "parameters"} ----------

#define LLAMA_CALC "{\"name\": \"calc\", \"parameters\": {\"expression\": \"37 * 42\"}}"

static void test_llama_one_call_as_the_template_renders_it(void) {
    CALLS(TC_LLAMA, LLAMA_CALC, 1, "[" CALC "]");
    CALLS(TC_LLAMA,
          "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 2, \"unit\": 1.0, \"at\": "
          "[null, true]}}",
          1, "[" WEATHER "]");
}

static void test_llama_after_the_python_tag(void) {
    CALLS(TC_LLAMA, "<|python_tag|>" LLAMA_CALC, 1, "[" CALC "]");
}

static void test_llama_arguments_as_well_as_parameters(void) {
    CALLS(TC_LLAMA, "{\"name\": \"calc\", \"arguments\": {\"expression\": \"37 * 42\"}}", 1, "[" CALC "]");
}

static void test_llama_two_calls_separated_by_semicolons_or_white_space(void) {
    CALLS(TC_LLAMA, LLAMA_CALC "; {\"name\": \"time\", \"parameters\": {}}", 2, "[" CALC "," TIME "]");
    CALLS(TC_LLAMA, LLAMA_CALC "\n{\"name\": \"time\"}", 2, "[" CALC "," TIME "]");
}

static void test_llama_white_space_around_the_text(void) {
    CALLS(TC_LLAMA, " \n\t" LLAMA_CALC " \n", 1, "[" CALC "]");
    CALLS(TC_LLAMA, "\n<|python_tag|>\n" LLAMA_CALC ";\n", 1, "[" CALC "]");
}

static void test_llama_brackets_inside_strings(void) {
    CALLS(TC_LLAMA, "{\"name\": \"echo\", \"parameters\": {\"text\": \"a } b { \\\" ]\"}}", 1,
          "[{\"type\":\"function\",\"function\":{\"name\":\"echo\",\"arguments\":{\"text\":\"a } b { \\\" ]\"}}}]");
}

static void test_llama_text_before_or_after_the_call_is_no_call(void) {
    NONE(TC_LLAMA, "Sure: " LLAMA_CALC);
    NONE(TC_LLAMA, LLAMA_CALC " Done.");
    NONE(TC_LLAMA, "The answer is 1554.");
    NONE(TC_LLAMA, "");
}

static void test_llama_malformed_json_is_no_call(void) {
    NONE(TC_LLAMA, "{\"name\": \"calc\", \"parameters\": {\"expression\": ");
    NONE(TC_LLAMA, "{\"name\": \"calc\", \"parameters\": {\"expression\": 37 * 42}}");
    NONE(TC_LLAMA, "; " LLAMA_CALC);
}

static void test_llama_missing_name_is_no_call(void) {
    NONE(TC_LLAMA, "{\"parameters\": {\"expression\": \"37 * 42\"}}");
    NONE(TC_LLAMA, LLAMA_CALC "; {\"parameters\": {}}");
}

// ---- mistral: [TOOL_CALLS][...] or [TOOL_CALLS]NAME[ARGS]{...} --------------

#define CALC_ID \
    "{\"id\":\"a1b2c3d4e\",\"type\":\"function\",\"function\":{\"name\":\"calc\",\"arguments\":{\"expression\":\"37 * 42\"}}}"
#define NEMO_CALC "{\"name\": \"calc\", \"arguments\": {\"expression\": \"37 * 42\"}, \"id\": \"a1b2c3d4e\"}"

static void test_mistral_one_call_as_a_list_after_the_marker(void) {
    CALLS(TC_MISTRAL, "[TOOL_CALLS][" NEMO_CALC "]", 1, "[" CALC_ID "]");
}

static void test_mistral_the_list_alone_without_its_special_token(void) {
    CALLS(TC_MISTRAL, "[" NEMO_CALC "]", 1, "[" CALC_ID "]");
    CALLS(TC_MISTRAL, "[{\"name\": \"calc\", \"arguments\": {\"expression\": \"37 * 42\"}}]", 1, "[" CALC "]");
}

static void test_mistral_two_calls_in_the_list(void) {
    CALLS(TC_MISTRAL, "[TOOL_CALLS][" NEMO_CALC ", {\"name\": \"time\", \"arguments\": {}}]", 2,
          "[" CALC_ID "," TIME "]");
    CALLS(TC_MISTRAL, "[" NEMO_CALC ", {\"name\": \"time\"}]", 2, "[" CALC_ID "," TIME "]");
}

static void test_mistral_white_space_around_the_list(void) {
    CALLS(TC_MISTRAL, " \n[TOOL_CALLS] \n[ " NEMO_CALC " ]\n ", 1, "[" CALC_ID "]");
    CALLS(TC_MISTRAL, "\n [" NEMO_CALC "] \n", 1, "[" CALC_ID "]");
}

static void test_mistral_name_args_markers_one_per_call(void) {
    CALLS(TC_MISTRAL, "[TOOL_CALLS]calc[ARGS]{\"expression\": \"37 * 42\"}", 1, "[" CALC "]");
    CALLS(TC_MISTRAL, "[TOOL_CALLS]calc[ARGS]{\"expression\": \"37 * 42\"}[TOOL_CALLS]time[ARGS]{}", 2,
          "[" CALC "," TIME "]");
    CALLS(TC_MISTRAL, "[TOOL_CALLS]calc[CALL_ID]a1b2c3d4e[ARGS]{\"expression\": \"37 * 42\"}", 1, "[" CALC_ID "]");
}

static void test_mistral_content_before_the_calls(void) {
    CALLS(TC_MISTRAL, "Let me compute it.[TOOL_CALLS]calc[ARGS]{\"expression\": \"37 * 42\"}", 1, "[" CALC "]");
    CALLS(TC_MISTRAL, "Let me compute it.[TOOL_CALLS][" NEMO_CALC "]", 1, "[" CALC_ID "]");
}

static void test_mistral_text_without_calls_has_none(void) {
    NONE(TC_MISTRAL, "The answer is 1554.");
    NONE(TC_MISTRAL, "[1, 2]");
    NONE(TC_MISTRAL, "[]");
    NONE(TC_MISTRAL, "calc{\"expression\": \"37 * 42\"}");   // the markers decoded away: not read
}

static void test_mistral_malformed_json_is_no_call(void) {
    NONE(TC_MISTRAL, "[TOOL_CALLS][{\"name\": \"calc\", \"arguments\": {");
    NONE(TC_MISTRAL, "[" NEMO_CALC "], \"x\": 1");
    NONE(TC_MISTRAL, "[" NEMO_CALC "] and more");
    NONE(TC_MISTRAL, "[TOOL_CALLS]calc[ARGS]{\"expression\": ");
    NONE(TC_MISTRAL, "[TOOL_CALLS]calc[ARGS][1]");
    NONE(TC_MISTRAL, "[TOOL_CALLS]calc{\"expression\": \"37 * 42\"}");   // no [ARGS]
}

static void test_mistral_missing_name_is_no_call(void) {
    NONE(TC_MISTRAL, "[TOOL_CALLS][{\"arguments\": {}}]");
    NONE(TC_MISTRAL, "[" NEMO_CALC ", {\"arguments\": {}}]");
    NONE(TC_MISTRAL, "[TOOL_CALLS][ARGS]{}");
}

// ---- the format of a template ------------------------------------------------

static void test_the_format_is_read_from_the_template_source(void) {
    static const struct {
        const char *src;
        tc_format want;
    } CASES[] = {
        {"{{- '<tool_call>\\n{\"name\": \"' }}{{ tool_call.name }}", TC_HERMES},   // Qwen2.5, Qwen3
        {"{%- for message in messages %}{{ message.content }}{% endfor %}", TC_HERMES},   // renders no tools
        {"{{- \"<|python_tag|>\" + tool_call.name + \".call(\" }}", TC_LLAMA},   // Llama 3.1
        {"{{- '{\"name\": \"' + tool_call.name + '\", ' }}{{- '\"parameters\": ' }}", TC_LLAMA},   // Llama 3.2
        {"{{- \"[TOOL_CALLS][\" }}", TC_MISTRAL},   // Mistral Nemo
        {"{{- '[TOOL_CALLS]' + name + '[ARGS]' + arguments }}", TC_MISTRAL},   // Ministral 3
        // Hermes 3 on Llama 3.1 describes its tools' "parameters" and calls in <tool_call>
        {"\"parameters\": {{ tool.parameters|tojson }} <tool_call>", TC_HERMES},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        tc_format f = tc_format_of(CASES[i].src, strlen(CASES[i].src));
        CHECK(f == CASES[i].want, "%s: %s, want %s", CASES[i].src, tc_format_name(f), tc_format_name(CASES[i].want));
    }
}

int main(void) {
    RUN(test_hermes_one_call);
    RUN(test_hermes_two_calls_in_order);
    RUN(test_hermes_white_space_around_the_object);
    RUN(test_hermes_text_around_the_calls);
    RUN(test_hermes_a_call_without_arguments_has_empty_ones);
    RUN(test_hermes_text_without_calls_has_none);
    RUN(test_hermes_malformed_json_is_no_call);
    RUN(test_hermes_missing_name_is_no_call);
    RUN(test_hermes_arguments_that_are_not_an_object_are_no_call);
    RUN(test_hermes_one_bad_call_makes_the_text_callless);
    RUN(test_llama_one_call_as_the_template_renders_it);
    RUN(test_llama_after_the_python_tag);
    RUN(test_llama_arguments_as_well_as_parameters);
    RUN(test_llama_two_calls_separated_by_semicolons_or_white_space);
    RUN(test_llama_white_space_around_the_text);
    RUN(test_llama_brackets_inside_strings);
    RUN(test_llama_text_before_or_after_the_call_is_no_call);
    RUN(test_llama_malformed_json_is_no_call);
    RUN(test_llama_missing_name_is_no_call);
    RUN(test_mistral_one_call_as_a_list_after_the_marker);
    RUN(test_mistral_the_list_alone_without_its_special_token);
    RUN(test_mistral_two_calls_in_the_list);
    RUN(test_mistral_white_space_around_the_list);
    RUN(test_mistral_name_args_markers_one_per_call);
    RUN(test_mistral_content_before_the_calls);
    RUN(test_mistral_text_without_calls_has_none);
    RUN(test_mistral_malformed_json_is_no_call);
    RUN(test_mistral_missing_name_is_no_call);
    RUN(test_the_format_is_read_from_the_template_source);
    CHECK_DONE();
}
