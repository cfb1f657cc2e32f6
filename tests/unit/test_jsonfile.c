// test_jsonfile.c — specification of jsonfile.h: a model directory's JSON
// files parsed as Python's json reads them, or refused with the line and
// column Python's json names (its messages, checked with Python 3.11, in
// the comments).
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "jsonfile.h"
#include "tmpdir.h"

static char dir[256];
static char path[300];
static char last_err[1024];

// Writes text (n bytes) to the test's file and loads it: the tree, or NULL
// with the message in last_err.
static cJSON *load(const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, n, f) != n || fclose(f)) return NULL;
    rl_err err;
    err.msg[0] = 0;
    cJSON *j = jsonfile_load(path, 1 << 20, &err);
    snprintf(last_err, sizeof last_err, "%s", err.msg);
    return j;
}

#define REFUSED(text, part)                                                                    \
    do {                                                                                       \
        cJSON *j_ = load(text, sizeof text - 1);                                               \
        int ok_ = !j_ && strstr(last_err, part) && !strncmp(last_err, path, strlen(path));     \
        cJSON_Delete(j_);                                                                      \
        CHECK(ok_, "%s: got [%s], want [%s]", text, last_err, part);                           \
    } while (0)

static void test_a_json_object_loads(void) {
    const char *text = "{\"a\": [1, {\"b\": \"\xc3\xa9\"}]}\n";
    cJSON *j = load(text, strlen(text));
    int ok = j && cJSON_IsArray(cJSON_GetObjectItem(j, "a"));
    cJSON_Delete(j);
    CHECK(ok, "%s", last_err);
}

static void test_an_absent_file_is_enoent(void) {
    rl_err err;
    char p[320];
    snprintf(p, sizeof p, "%s/none.json", dir);
    errno = 0;
    CHECK(!jsonfile_load(p, 1 << 20, &err) && errno == ENOENT, "errno %d", errno);
}

static void test_syntax_errors_name_python_s_line_and_column(void) {
    // Expecting value: line 2 column 13 (char 21)
    REFUSED("{\"a\": 1,\n \"b\": [1, 2,, 3]}", "not valid JSON (line 2, column 13)");
    // Expecting value: line 1 column 15 (char 14): columns count characters
    REFUSED("{\"\xc3\xa9\": 1, \"b\": ]}", "not valid JSON (line 1, column 15)");
    // Extra data: line 1 column 10 (char 9)
    REFUSED("{\"a\": 1} x", "not valid JSON (line 1, column 10)");
    REFUSED("", "not valid JSON (line 1, column 1)");
}

static void test_nan_and_infinity_are_refused_with_the_reason(void) {
    REFUSED("{\"a\": NaN}", "(line 1, column 7): NaN and Infinity are not JSON");
    REFUSED("{\"a\": [-Infinity]}", "(line 1, column 8): NaN and Infinity are not JSON");
}

static void test_nesting_beyond_the_limit_is_refused_with_the_reason(void) {
    static char deep[2 * 5000 + 1];
    memset(deep, '[', 5000);
    memset(deep + 5000, ']', 5000);
    cJSON *j = load(deep, sizeof deep - 1);
    CHECK(!j && strstr(last_err, "nested deeper than 1000 levels"), "%s", last_err);
    memset(deep, 0, sizeof deep);
    memset(deep, '[', 900);
    memset(deep + 900, ']', 900);
    j = load(deep, 1800);
    CHECK(j, "%s", last_err);
    cJSON_Delete(j);
}

static void test_bytes_that_are_not_utf8_are_refused_with_their_position(void) {
    REFUSED("{\"a\": \"x\"}\n{\"b\": \"\xff\"}", "not UTF-8 (line 2, column 8, byte 18: 0xff)");
    REFUSED("{\"a\": \"\xed\xa0\x80\"}", "not UTF-8 (line 1, column 8, byte 7: 0xed)");   // a surrogate
}

static void test_a_key_twice_in_one_object_is_refused_at_any_depth(void) {
    REFUSED("{\"a\": 1, \"b\": 2, \"a\": 3}", "key \"a\" appears twice (transformers would take the last value");
    REFUSED("{\"r\": {\"f\": 1, \"f\": 2}}", "r key \"f\" appears twice");
    REFUSED("{\"l\": [{\"k\": 1, \"k\": 1}]}", "key \"k\" appears twice");
    const char *two = "{\"a\": {\"k\": 1}, \"b\": {\"k\": 2}}";   // the same key in two objects
    cJSON *j = load(two, strlen(two));
    CHECK(j, "%s", last_err);
    cJSON_Delete(j);
}

int main(void) {
    if (!tmpdir_named(dir, sizeof dir, "rlpipe-jsonfile")) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(path, sizeof path, "%s/f.json", dir);
    RUN(test_a_json_object_loads);
    RUN(test_an_absent_file_is_enoent);
    RUN(test_syntax_errors_name_python_s_line_and_column);
    RUN(test_nan_and_infinity_are_refused_with_the_reason);
    RUN(test_nesting_beyond_the_limit_is_refused_with_the_reason);
    RUN(test_bytes_that_are_not_utf8_are_refused_with_their_position);
    RUN(test_a_key_twice_in_one_object_is_refused_at_any_depth);
    rm_rf(dir);
    CHECK_DONE();
}
