// Unit tests of lib/sample/vreply.c (a verifier's reply line) and of
// lib/sample/vset.c (several verifiers: names, weights, the record's reward,
// rewards and pred), the latter on real sh commands. This file is also built
// with AddressSanitizer + UBSan.
#include <math.h>
#include <string.h>

#include "check.h"
#include "records/json.h"
#include "sample/vreply.h"
#include "sample/vset.h"

// ---- replies -----------------------------------------------------------------

typedef struct {
    const char *line;
    double reward;
    const char *parts;   // "name=value;..." in order, "" none
    const char *pred;    // NULL: none
} good_case;

// The parts of r as "name=value;..." (%g), into buf.
static const char *parts_str(const vr_reply *r, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < r->n && at < n; i++) at += (size_t)snprintf(buf + at, n - at, "%s=%g;", r->names[i], r->values[i]);
    return buf;
}

static void numbers_booleans_and_objects_are_replies(void) {
    static const good_case c[] = {
        {"1", 1, "", NULL},
        {"  -0.25\r", -0.25, "", NULL},
        {"1e-3", 1e-3, "", NULL},
        {"true", 1, "", NULL},
        {"\tfalse ", 0, "", NULL},
        {"{\"reward\": 0.5}", 0.5, "", NULL},
        {" {\"reward\": 2, \"rewards\": {\"acc\": 1, \"fmt\": 0.5}} ", 2, "acc=1;fmt=0.5;", NULL},
        {"{\"pred\": \"42\", \"reward\": -1}", -1, "", "42"},
        {"{\"reward\": 1, \"pred\": null, \"rewards\": {}}", 1, "", NULL},
        {"{\"reward\": 3, \"pred\": \"\\u00e9t\\u00e9\"}", 3, "", "\xc3\xa9t\xc3\xa9"},
        {"{\"reward\": 1e300, \"rewards\": {\"x.y\": -7}}", 1e300, "x.y=-7;", NULL},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        vr_reply r;
        rl_err e;
        char parts[256];
        CHECK(vr_parse(c[i].line, strlen(c[i].line), &r, &e) == 0, "'%s': %s", c[i].line, e.msg);
        CHECK(r.reward == c[i].reward, "'%s': reward %g, not %g", c[i].line, r.reward, c[i].reward);
        CHECK(!strcmp(parts_str(&r, parts, sizeof parts), c[i].parts), "'%s': parts %s, not %s", c[i].line, parts,
              c[i].parts);
        CHECK(c[i].pred ? r.pred && !strcmp(r.pred, c[i].pred) && r.pred_len == strlen(c[i].pred) : !r.pred,
              "'%s': pred %s", c[i].line, r.pred ? r.pred : "(none)");
        vr_free(&r);
    }
}

typedef struct {
    const char *line, *why;
} bad_case;

static void a_bad_reply_says_what_is_wrong_and_quotes_it(void) {
    static const bad_case c[] = {
        {"", "reply '' is not a number, true, false or a JSON object"},
        {"abc", "reply 'abc' is not a number, true, false or a JSON object"},
        {"1 2", "reply '1 2' is not a number, true, false or a JSON object"},
        {"nan", "reply 'nan' is not a finite number"},
        {"-inf", "reply '-inf' is not a finite number"},
        {"1e999", "reply '1e999' is not a finite number"},
        {"[1]", "reply '[1]' is not a number, true, false or a JSON object"},
        {"{}", "reply '{}' has no \"reward\" (a reply object must give it)"},
        {"{\"rewards\": {\"a\": 1}}", "has no \"reward\""},
        {"{\"reward\": 1", "reply '{\"reward\": 1': column 13: expected ',' or '}' in an object"},
        {"{\"reward\": \"1\"}", "field \"reward\": expected a number"},
        {"{\"reward\": true}", "field \"reward\": expected a number, found a boolean"},
        {"{\"reward\": NaN}", "\"reward\" is not a finite number"},
        {"{\"reward\": 1, \"score\": 1}", "has the key \"score\": a reply object holds \"reward\", \"rewards\" and \"pred\" only"},
        {"{\"reward\": 1, \"rewards\": [1]}", "field \"rewards\": expected a map of names to numbers, found an array"},
        {"{\"reward\": 1, \"rewards\": {\"a\": \"1\"}}", "field \"rewards\": expected a number, found a string"},
        {"{\"reward\": 1, \"rewards\": {\"a\": Infinity}}", "\"rewards\".\"a\" is not a finite number"},
        {"{\"reward\": 1, \"rewards\": {\"\": 1}}", "\"rewards\" has an empty name"},
        {"{\"reward\": 1, \"rewards\": {\"a\": 1, \"a\": 2}}", "\"rewards\": "},
        {"{\"reward\": 1, \"pred\": 7}", "\"pred\" is not a string (nor null)"},
        {"{\"reward\": 1, \"pred\": [\"7\"]}", "\"pred\" is not a string (nor null)"},
        {"{\"reward\": 1, \"reward\": 2}", "duplicate key \"reward\""},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        vr_reply r;
        rl_err e;
        e.msg[0] = 0;
        CHECK(vr_parse(c[i].line, strlen(c[i].line), &r, &e) == -1, "'%s' was taken (reward %g)", c[i].line, r.reward);
        CHECK(strstr(e.msg, c[i].why), "'%s': the message '%s' does not say '%s'", c[i].line, e.msg, c[i].why);
        CHECK(r.n == 0 && !r.names && !r.pred, "'%s': the reply holds something after an error", c[i].line);
    }
}

// ---- several verifiers ---------------------------------------------------------

typedef struct {
    const char *arg, *why;   // why: NULL when taken
} arg_case;

static void verifier_arguments_name_or_not_as_documented(void) {
    static const struct {
        const char *args[3], *weights, *why;
    } c[] = {
        {{"python3 v.py --x=1"}, NULL, NULL},
        {{"a=python3 v.py", "b_2=sh -c 'echo 1'"}, "a=0.5,b_2=-2", NULL},
        {{"_x=cat"}, "_x=1e-3", NULL},
        {{"a=cat", "a=cat"}, NULL, "the name 'a' is given twice"},
        {{"a=cat", "cat"}, NULL, "several verifiers must each be named"},
        {{"cat", "a=cat"}, NULL, "several verifiers must each be named"},
        {{"a= "}, NULL, "the command is empty"},
        {{"cat"}, "cat=1", "weights are for named verifiers"},
        {{"a=cat"}, "b=1", "no verifier is named 'b'"},
        {{"a=cat"}, "a=1,a=2", "the weight of 'a' is given twice"},
        {{"a=cat"}, "a=x", "the weight is not a finite number"},
        {{"a=cat"}, "a=inf", "the weight is not a finite number"},
        {{"a=cat"}, "a=", "the weight is not a finite number"},
        {{"a=cat"}, "a", "'a' is not NAME=WEIGHT"},
        {{"a=cat"}, "a=1,", "'' is not NAME=WEIGHT"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        vset *s = vs_new();
        rl_err e;
        int rc = 0;
        e.msg[0] = 0;
        for (int k = 0; k < 3 && c[i].args[k] && !rc; k++) rc = vs_add(s, c[i].args[k], &e);
        if (!rc && c[i].weights) rc = vs_weights(s, c[i].weights, &e);
        int ok = c[i].why ? rc == -1 && strstr(e.msg, c[i].why) : rc == 0;
        vs_free(s);
        CHECK(ok, "case %zu ('%s'): rc %d, message '%s', expected %s", i, c[i].args[0], rc, e.msg,
              c[i].why ? c[i].why : "no error");
    }
}

// The record's reward is the weighted sum; rewards hold each verifier's reward
// and its parts as NAME.SUB; pred is the one verifier's that gives it.
static void the_record_gets_the_weighted_sum_the_named_parts_and_the_pred(void) {
    vset *s = vs_new();
    rl_err e;
    CHECK(vs_add(s, "acc=while read -r l; do echo '{\"reward\": 1, \"pred\": \"12\"}'; done", &e) == 0, "%s", e.msg);
    CHECK(vs_add(s, "fmt=while read -r l; do echo '{\"reward\": 0.25, \"rewards\": {\"tags\": 0.5}}'; done", &e) == 0,
          "%s", e.msg);
    CHECK(vs_add(s, "len=while read -r l; do echo -3; done", &e) == 0, "%s", e.msg);
    CHECK(vs_weights(s, "fmt=2,len=0.125", &e) == 0, "%s", e.msg);
    CHECK(vs_start(s, 10, &e) == 0, "%s", e.msg);
    for (int i = 0; i < 5; i++) vs_send(s, "{}\n", 3);
    while (vs_answered(s) < 5) CHECK(vs_pump(s, 1, &e) == 0, "%s", e.msg);
    rec_t *r = rec_new();
    sbuf js = {0};
    for (uint64_t i = 0; i < 5; i++) {
        rec_clear(r);
        CHECK(vs_apply(s, i, r, &e) == 0, "%s", e.msg);
        js.len = 0;
        CHECK(json_from_rec(r, &js, &e) == 0, "%s", e.msg);
        sbuf_putc(&js, 0);
        // 1 * 1 + 2 * 0.25 + 0.125 * -3 = 1.125, exact in binary
        CHECK(!strcmp((const char *)js.data, "{\"reward\":1.125,\"rewards\":{\"acc\":1.0,\"fmt\":0.25,\"fmt.tags\":0.5,"
                                             "\"len\":-3.0},\"pred\":\"12\"}"),
              "request %llu: %s", (unsigned long long)i, (const char *)js.data);
    }
    vs_forget(s, 5);
    CHECK(vs_finish(s, &e) == 0, "%s", e.msg);
    sbuf_free(&js);
    rec_free(r);
    vs_free(s);
}

static void a_bare_command_gives_the_reward_and_its_parts_unprefixed(void) {
    vset *s = vs_new();
    rl_err e;
    CHECK(vs_add(s, "read -r l; echo '{\"reward\": 0.75, \"rewards\": {\"a\": 1}}'; read -r l; echo 0.5", &e) == 0,
          "%s", e.msg);
    CHECK(vs_start(s, 10, &e) == 0, "%s", e.msg);
    vs_send(s, "{}\n", 3);
    vs_send(s, "{}\n", 3);
    while (vs_answered(s) < 2) CHECK(vs_pump(s, 1, &e) == 0, "%s", e.msg);
    rec_t *r = rec_new();
    sbuf js = {0};
    CHECK(vs_apply(s, 0, r, &e) == 0 && json_from_rec(r, &js, &e) == 0, "%s", e.msg);
    sbuf_putc(&js, 0);
    CHECK(!strcmp((const char *)js.data, "{\"reward\":0.75,\"rewards\":{\"a\":1.0}}"), "%s", (const char *)js.data);
    rec_clear(r);
    js.len = 0;
    CHECK(vs_apply(s, 1, r, &e) == 0 && json_from_rec(r, &js, &e) == 0, "%s", e.msg);
    sbuf_putc(&js, 0);
    CHECK(!strcmp((const char *)js.data, "{\"reward\":0.5}"), "a bare number gives no rewards: %s", (const char *)js.data);
    CHECK(vs_finish(s, &e) == 0, "%s", e.msg);
    sbuf_free(&js);
    rec_free(r);
    vs_free(s);
}

static void two_verifiers_giving_a_pred_is_an_error_naming_both(void) {
    vset *s = vs_new();
    rl_err e;
    CHECK(vs_add(s, "a=while read -r l; do echo '{\"reward\": 1, \"pred\": \"1\"}'; done", &e) == 0, "%s", e.msg);
    CHECK(vs_add(s, "b=while read -r l; do echo '{\"reward\": 1, \"pred\": \"1\"}'; done", &e) == 0, "%s", e.msg);
    CHECK(vs_start(s, 10, &e) == 0, "%s", e.msg);
    vs_send(s, "{}\n", 3);
    while (vs_answered(s) < 1) CHECK(vs_pump(s, 1, &e) == 0, "%s", e.msg);
    rec_t *r = rec_new();
    int rc = vs_apply(s, 0, r, &e);
    rec_free(r);
    vs_free(s);
    CHECK(rc == -1 && !strcmp(e.msg, "request 0: verifier 'a' and verifier 'b' both reply with a \"pred\" (one "
                                     "verifier may give it)"), "rc %d: %s", rc, e.msg);
}

static void a_bad_reply_of_the_second_verifier_names_it_and_its_request(void) {
    vset *s = vs_new();
    rl_err e;
    CHECK(vs_add(s, "ok=while read -r l; do echo 1; done", &e) == 0, "%s", e.msg);
    CHECK(vs_add(s, "bad=read -r l; echo 1; read -r l; echo '{\"reward\": 1, \"extra\": 2}'; cat >/dev/null", &e) == 0,
          "%s", e.msg);
    CHECK(vs_start(s, 10, &e) == 0, "%s", e.msg);
    for (int i = 0; i < 3; i++) vs_send(s, "{}\n", 3);
    int rc = 0;
    while (!rc && vs_answered(s) < 3) rc = vs_pump(s, 1, &e);
    uint64_t at = vs_error_request(s);
    vs_free(s);
    CHECK(rc == -1 && at == 1 && strstr(e.msg, "verifier 'bad': request 1: reply '{\"reward\": 1, \"extra\": 2}' has the "
                                               "key \"extra\""), "rc %d, request %llu: %s", rc, (unsigned long long)at, e.msg);
}

int main(void) {
    RUN(numbers_booleans_and_objects_are_replies);
    RUN(a_bad_reply_says_what_is_wrong_and_quotes_it);
    RUN(verifier_arguments_name_or_not_as_documented);
    RUN(the_record_gets_the_weighted_sum_the_named_parts_and_the_pred);
    RUN(a_bare_command_gives_the_reward_and_its_parts_unprefixed);
    RUN(two_verifiers_giving_a_pred_is_an_error_naming_both);
    RUN(a_bad_reply_of_the_second_verifier_names_it_and_its_request);
    CHECK_DONE();
}
