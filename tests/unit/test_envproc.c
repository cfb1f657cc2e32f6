// Unit tests of lib/sample/envproc.c (on coproc.c) with real environment
// commands: sh one-liners and python3 scripts that read JSON lines. SIGPIPE
// keeps its default action here, so a write to a dead environment that
// raised it would kill this program. Also built with AddressSanitizer + UBSan.
#include <string.h>
#include <time.h>

#include "check.h"
#include "sample/envproc.h"

static envproc *start(const char *cmd, double timeout) {
    rl_err e;
    envproc *v = env_start(cmd, timeout, &e);
    if (!v) {
        printf("cannot start %s: %s\n", cmd, e.msg);
        exit(2);
    }
    return v;
}

static void send_id(envproc *v, uint64_t id) {
    char line[64];
    int n = snprintf(line, sizeof line, "{\"id\": %llu}", (unsigned long long)id);
    env_send(v, id, line, (size_t)n);
}

// Pumps until n answers have been taken (their ids into ids[]), or an error.
static int take(envproc *v, int n, uint64_t *ids, int *late, rl_err *e) {
    for (int got = 0; got < n;) {
        if (env_pump(v, 5000, e)) return -1;
        const rec_t *r;
        while (got < n && env_next(v, &ids[got], &r, &late[got])) got++;
    }
    return 0;
}

// Takes every answer that has come.
static void drain(envproc *v) {
    uint64_t id;
    const rec_t *r;
    int late;
    while (env_next(v, &id, &r, &late)) {}
}

// Answers the requests in the reverse order of each pair, as {"id": N, "done": true}.
#define PY_SWAP                                                                                     \
    "/usr/bin/python3 -u -c 'import sys, json\n"                                                   \
    "held = []\n"                                                                                  \
    "for line in sys.stdin:\n"                                                                     \
    "    held.append(json.loads(line)[\"id\"])\n"                                                  \
    "    if len(held) == 2:\n"                                                                     \
    "        for i in reversed(held): print(json.dumps({\"id\": i, \"done\": True}), flush=True)\n" \
    "        held = []'"

static void answers_come_in_any_order_keyed_by_id_and_blank_lines_are_no_answers(void) {
    envproc *v = start("echo; echo '  '; " PY_SWAP, 0);
    rl_err e;
    uint64_t ids[4];
    int late[4];
    for (uint64_t i = 10; i < 14; i++) send_id(v, i);
    CHECK(env_waiting(v) == 4, "%zu", env_waiting(v));
    CHECK(take(v, 4, ids, late, &e) == 0, "%s", e.msg);
    CHECK(ids[0] == 11 && ids[1] == 10 && ids[2] == 13 && ids[3] == 12, "%llu %llu %llu %llu",
          (unsigned long long)ids[0], (unsigned long long)ids[1], (unsigned long long)ids[2], (unsigned long long)ids[3]);
    CHECK(!late[0] && !late[3] && env_waiting(v) == 0, "late %d", late[0]);
    CHECK(env_finish(v, &e) == 0, "%s", e.msg);
    env_free(v);
}

static void a_request_past_its_timeout_expires_and_its_late_answer_is_marked(void) {
    // answers id 1 at once, id 2 after 0.6 s
    envproc *v = start("read a; echo '{\"id\": 1}'; read b; sleep 0.6; echo '{\"id\": 2}'; cat >/dev/null", 0.3);
    rl_err e;
    send_id(v, 1);
    send_id(v, 2);
    uint64_t id;
    int late, expired = 0, answers = 0, late_answers = 0;
    const rec_t *r;
    while (answers < 2) {
        CHECK(env_pump(v, 2000, &e) == 0, "%s", e.msg);
        while (env_next(v, &id, &r, &late)) {
            answers++;
            late_answers += late;
            CHECK(late == (id == 2), "id %llu late %d", (unsigned long long)id, late);
        }
        while (env_expired(v, &id)) {
            CHECK(id == 2 && answers == 1, "expired %llu after %d answers", (unsigned long long)id, answers);
            expired++;
        }
    }
    CHECK(expired == 1 && late_answers == 1, "expired %d late %d", expired, late_answers);
    CHECK(env_finish(v, &e) == 0, "%s", e.msg);
    env_free(v);
}

static void an_environment_that_exits_with_requests_waiting_names_the_oldest(void) {
    envproc *v = start("read a; echo '{\"id\": 5}'; exit 4", 0);
    rl_err e;
    for (uint64_t i = 5; i < 8; i++) send_id(v, i);
    int rc = 0;
    for (int k = 0; k < 50 && !rc; k++) {
        rc = env_pump(v, 200, &e);
        drain(v);
    }
    CHECK(rc == -1, "no error");
    CHECK(!strcmp(e.msg, "environment exited (status 4) with 2 requests waiting for an answer"), "%s", e.msg);
    CHECK(env_error_id(v) == 6, "%llu", (unsigned long long)env_error_id(v));
    CHECK(env_pump(v, 0, &e) == -1 && strstr(e.msg, "status 4"), "the error is repeated: %s", e.msg);
    env_free(v);
}

static void answers_that_come_with_the_environments_end_are_taken_before_its_error(void) {
    // It answers two of three requests and exits; both answers and the end
    // of its output are there when the next pump reads: the answers come out
    // first (the rollouts they finish are written), the error at the pump after.
    envproc *v = start("read a; read b; echo '{\"id\": 5}'; echo '{\"id\": 6}'; exec 1>&-; exit 4", 0);
    rl_err e;
    for (uint64_t i = 5; i < 8; i++) send_id(v, i);
    CHECK(env_pump(v, 0, &e) == 0, "%s", e.msg);   // the requests are written
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, NULL);                        // it has answered and ended
    CHECK(env_pump(v, 0, &e) == 0, "the answers first, got: %s", e.msg);
    uint64_t id;
    const rec_t *r;
    int late, n = 0;
    while (env_next(v, &id, &r, &late)) CHECK(id == (uint64_t)(5 + n++), "answer %d: id %llu", n, (unsigned long long)id);
    CHECK(n == 2, "%d answers", n);
    CHECK(env_pump(v, 0, &e) == -1, "no error after the answers");
    CHECK(!strcmp(e.msg, "environment exited (status 4) with 1 requests waiting for an answer"), "%s", e.msg);
    CHECK(env_error_id(v) == 7, "%llu", (unsigned long long)env_error_id(v));
    env_free(v);
}

static void lines_that_break_the_protocol_are_errors_that_say_what_is_wrong(void) {
    static const struct {
        const char *cmd, *msg;
    } cases[] = {
        {"read a; echo 'not json'; cat >/dev/null", "environment: answer line 1: not a JSON answer"},
        {"read a; echo '{\"done\": true}'; cat >/dev/null", "environment: answer line 1: no \"id\""},
        {"read a; echo '{\"id\": -1}'; cat >/dev/null", "field \"id\": expected an unsigned integer, found -1"},
        {"read a; echo; echo '{\"id\": 9}'; cat >/dev/null",
         "environment: answer line 2: id 9 is no request waiting for an answer"},
        {"read a; echo '{\"id\": 0}'; echo '{\"id\": 0}'; cat >/dev/null",
         "environment: answer line 2: id 0 is no request waiting for an answer (answered twice"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        envproc *v = start(cases[k].cmd, 5);
        rl_err e;
        send_id(v, 0);
        send_id(v, 1);
        int rc = 0;
        for (int i = 0; i < 50 && !rc; i++) {
            rc = env_pump(v, 200, &e);
            drain(v);
        }
        CHECK(rc == -1 && strstr(e.msg, cases[k].msg), "case %zu: %s", k, rc ? e.msg : "no error");
        env_free(v);
    }
}

static void at_the_end_a_non_zero_exit_status_or_a_hang_is_an_error(void) {
    rl_err e;
    envproc *v = start("cat >/dev/null; exit 3", 5);
    CHECK(env_finish(v, &e) == -1 && !strcmp(e.msg, "environment exited (status 3) after its input ended"), "%s",
          e.msg);
    env_free(v);
    v = start("cat >/dev/null; sleep 5", 0.3);
    CHECK(env_finish(v, &e) == -1 && !strcmp(e.msg, "environment: still running 0.3 s after its input ended"), "%s",
          e.msg);
    env_free(v);
}

static void parse_answer_takes_an_object_with_an_unsigned_id(void) {
    rec_t *r = rec_new();
    rl_err e;
    uint64_t id = 0;
    CHECK(env_parse_answer("{\"id\": 3, \"done\": true}", 23, r, &id, &e) == 0 && id == 3, "%s", e.msg);
    CHECK(env_parse_answer(" \t", 2, r, &id, &e) == 1, "blank");
    CHECK(env_parse_answer("[1]", 3, r, &id, &e) == -1 && strstr(e.msg, "not a JSON answer"), "%s", e.msg);
    CHECK(env_parse_answer("{\"id\": 1.5}", 11, r, &id, &e) == -1 && strstr(e.msg, "expected an unsigned integer, found 1.5"), "%s", e.msg);
    rec_free(r);
}

int main(void) {
    RUN(answers_come_in_any_order_keyed_by_id_and_blank_lines_are_no_answers);
    RUN(a_request_past_its_timeout_expires_and_its_late_answer_is_marked);
    RUN(an_environment_that_exits_with_requests_waiting_names_the_oldest);
    RUN(answers_that_come_with_the_environments_end_are_taken_before_its_error);
    RUN(lines_that_break_the_protocol_are_errors_that_say_what_is_wrong);
    RUN(at_the_end_a_non_zero_exit_status_or_a_hang_is_an_error);
    RUN(parse_answer_takes_an_object_with_an_unsigned_id);
    CHECK_DONE();
}
