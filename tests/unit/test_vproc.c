// Unit tests of lib/sample/vproc.c on real verifier commands: sh one-liners and
// python3 scripts that read JSON lines. SIGPIPE keeps its default action here,
// so a write to a dead verifier that raised it would kill this program. This
// file is also built with AddressSanitizer + UBSan.
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "sample/vproc.h"

// 1 if the stripped completion equals the answer, else 0.
#define PY_EQUAL                                                                      \
    "/usr/bin/python3 -u -c 'import sys, json\n"                                     \
    "for line in sys.stdin.buffer:\n"                                                \
    "    r = json.loads(line)\n"                                                     \
    "    print(1 if r[\"completion\"].strip() == r.get(\"answer\") else 0)'"

// The completion's UTF-8 length * 100000 + the sum of its bytes; + 0.5 if the
// prompt or the answer (when present) differs from it; + 0.25 if an answer is present.
#define PY_ECHO                                                                                        \
    "/usr/bin/python3 -u -c 'import sys, json\n"                                                      \
    "for line in sys.stdin.buffer:\n"                                                                 \
    "    r = json.loads(line)\n"                                                                      \
    "    c = r[\"completion\"]\n"                                                                     \
    "    b = c.encode()\n"                                                                            \
    "    same = r[\"prompt\"] == c and r.get(\"answer\", c) == c\n"                                   \
    "    print(len(b) * 100000 + sum(b) + (0 if same else 0.5) + (0.25 if \"answer\" in r else 0))'"

// ---- helpers ---------------------------------------------------------------

// Without a timeout unless a case sets one (start_with).
static vproc *start_with(const char *cmd, double timeout) {
    rl_err e;
    vproc *v = vp_start(cmd, "verifier command", timeout, &e);
    if (!v) {
        printf("cannot start %s: %s\n", cmd, e.msg);
        exit(2);
    }
    return v;
}

static vproc *start(const char *cmd) { return start_with(cmd, 0); }

// A request as rl-sample sends it for a prompt {"prompt": prompt, "answer": answer}.
static void send_bytes(vproc *v, const char *prompt, const char *completion, size_t nc, const char *answer) {
    rec_t *p = rec_new();
    sbuf keys = {0}, line = {0};
    rl_err e;
    rec_set_cstr(p, "prompt", prompt);
    if (answer) rec_set_cstr(p, "answer", answer);
    if (vp_prompt_keys(p, &keys, &e)) {
        printf("vp_prompt_keys: %s\n", e.msg);
        exit(2);
    }
    vp_request(&line, prompt, strlen(prompt), completion, nc, (const char *)keys.data, keys.len);
    vp_send(v, line.data, line.len);
    sbuf_free(&keys);
    sbuf_free(&line);
    rec_free(p);
}

static void send_str(vproc *v, const char *prompt, const char *completion, const char *answer) {
    send_bytes(v, prompt, completion, strlen(completion), answer);
}

// Pumps with block until an error or every request is answered: 0 or -1.
static int pump_all(vproc *v, rl_err *e) {
    while (vp_answered(v) < vp_sent(v))
        if (vp_pump(v, 1, e)) return -1;
    return 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Whether this process has no child left, running or zombie.
static int no_children(void) { return waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD; }

static double echo_value(const char *s, int with_answer) {
    double sum = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) sum += *p;
    return (double)strlen(s) * 100000 + sum + (with_answer ? 0.25 : 0);
}

// ---- replies in order --------------------------------------------------------

static void a_thousand_pipelined_requests_get_their_rewards_in_order(void) {
    vproc *v = start(PY_EQUAL);
    rl_err e;
    enum { N = 1000 };
    uint64_t checked = 0, most_outstanding = 0;
    for (int i = 0; i < N;) {
        // A burst of 1 to 37 requests, then a pump that never waits.
        for (int burst = i % 37 + 1; burst-- && i < N; i++) {
            char completion[32], answer[16];
            snprintf(completion, sizeof completion, " %d\n", i % 3 ? i : i + 1);  // every third one wrong
            snprintf(answer, sizeof answer, "%d", i);
            send_str(v, "What?", completion, answer);
        }
        if (vp_sent(v) - vp_answered(v) > most_outstanding) most_outstanding = vp_sent(v) - vp_answered(v);
        CHECK(vp_pump(v, 0, &e) == 0, "pump: %s", e.msg);
        for (; checked < vp_answered(v); checked++) {
            double want = checked % 3 ? 1.0 : 0.0;
            CHECK(vp_reply(v, checked)->reward == want, "request %llu: reward %g, not %g", (unsigned long long)checked,
                  vp_reply(v, checked)->reward, want);
        }
        vp_forget(v, checked > 5 ? checked - 5 : 0);  // keeps the last five
    }
    CHECK(vp_finish(v, &e) == 0, "finish: %s", e.msg);
    CHECK(vp_sent(v) == N && vp_answered(v) == N, "sent %llu answered %llu", (unsigned long long)vp_sent(v),
          (unsigned long long)vp_answered(v));
    for (; checked < N; checked++)
        CHECK(vp_reply(v, checked)->reward == (checked % 3 ? 1.0 : 0.0), "request %llu", (unsigned long long)checked);
    CHECK(most_outstanding > 1, "never more than one request outstanding: no pipelining tested");
    vp_free(v);
    CHECK(no_children(), "a child is left");
}

static void forget_keeps_the_rewards_from_i_on(void) {
    vproc *v = start("while read -r l; do echo $((n=n+1)); done");
    rl_err e;
    for (int i = 0; i < 200; i++) send_str(v, "p", "c", NULL);
    CHECK(vp_finish(v, &e) == 0, "finish: %s", e.msg);
    vp_forget(v, 150);
    vp_forget(v, 100);  // going back is nothing
    for (uint64_t i = 150; i < 200; i++) CHECK(vp_reply(v, i)->reward == (double)(i + 1), "request %llu", (unsigned long long)i);
    vp_forget(v, 1000);  // beyond vp_answered: all
    CHECK(vp_answered(v) == 200, "answered %llu", (unsigned long long)vp_answered(v));
    vp_free(v);
}

static void strings_needing_json_escapes_round_trip(void) {
    static const char *texts[] = {
        "",
        "plain",
        "say \"hi\"",
        "back\\slash \\n not a newline",
        "line\nbreak\r\ttab",
        "\x01\x1f control \x7f",
        "caf\xc3\xa9 \xe2\x88\x91 \xf0\x9f\x98\x80",
        "}\n{\"prompt\": \"injected\"}",
        "/* \\u0041 */",
    };
    enum { NT = sizeof texts / sizeof *texts };
    vproc *v = start(PY_ECHO);
    rl_err e;
    for (int i = 0; i < NT; i++) send_str(v, texts[i], texts[i], texts[i]);
    for (int i = 0; i < NT; i++) send_str(v, texts[i], texts[i], NULL);
    CHECK(vp_finish(v, &e) == 0, "finish: %s", e.msg);
    for (int i = 0; i < 2 * NT; i++) {
        double want = echo_value(texts[i % NT], i < NT);
        CHECK(vp_reply(v, (uint64_t)i)->reward == want, "request %d ('%s'%s): %.2f, not %.2f", i, texts[i % NT],
              i < NT ? "" : " without answer", vp_reply(v, (uint64_t)i)->reward, want);
    }
    vp_free(v);
}

static void large_requests_are_written_as_the_verifier_reads_them(void) {
    enum { N = 200, LEN = 64 * 1024 };
    char *big = malloc(LEN + 1);
    memset(big, 'a', LEN);
    big[LEN] = 0;
    vproc *v = start(PY_ECHO);
    rl_err e;
    for (int i = 0; i < N; i++) send_str(v, big, big, NULL);
    CHECK(vp_pump(v, 0, &e) == 0, "pump: %s", e.msg);
    CHECK(vp_finish(v, &e) == 0, "finish: %s", e.msg);
    double want = echo_value(big, 0);
    free(big);
    for (int i = 0; i < N; i++) CHECK(vp_reply(v, (uint64_t)i)->reward == want, "request %d: %.2f", i, vp_reply(v, (uint64_t)i)->reward);
    vp_free(v);
}

static void true_false_and_numbers_with_white_space_are_rewards(void) {
    vproc *v = start("read -r l; echo true; read -r l; echo false; read -r l; echo '  0.25  '; "
                     "read -r l; printf '1e-3\\r\\n'; read -r l; echo -2; read -r l; printf 7");
    rl_err e;
    for (int i = 0; i < 6; i++) send_str(v, "p", "c", "a");
    CHECK(vp_finish(v, &e) == 0, "finish: %s", e.msg);
    static const double want[] = {1, 0, 0.25, 1e-3, -2, 7};
    for (int i = 0; i < 6; i++) CHECK(vp_reply(v, (uint64_t)i)->reward == want[i], "reply %d: %g", i, vp_reply(v, (uint64_t)i)->reward);
    vp_free(v);
}

static void block_returns_at_once_with_nothing_outstanding(void) {
    vproc *v = start("exec sleep 30");
    rl_err e;
    CHECK(vp_pump(v, 1, &e) == 0, "pump: %s", e.msg);
    CHECK(vp_pump(v, 0, &e) == 0, "pump: %s", e.msg);
    vp_free(v);
}

// ---- bad verifiers -----------------------------------------------------------

// Sends n requests to cmd, pumps to the first error; the message, or "" if none.
static const char *first_error(const char *cmd, int n, rl_err *e) {
    vproc *v = start(cmd);
    for (int i = 0; i < n; i++) send_str(v, "p", "c", "a");
    e->msg[0] = 0;
    if (!pump_all(v, e)) vp_finish(v, e);
    vp_free(v);
    return e->msg;
}

static void a_verifier_that_exits_after_3_answers_names_request_3(void) {
    rl_err e;
    const char *msg = first_error("for i in 1 2 3; do read -r l; echo 1; done; exit 5", 10, &e);
    CHECK(!strcmp(msg, "verifier command exited (status 5) without answering request 3"), "message: %s", msg);
}

static void a_verifier_killed_by_a_signal_says_so(void) {
    rl_err e;
    const char *msg = first_error("read -r l; echo 1; kill -9 $$", 4, &e);
    CHECK(strstr(msg, "killed by signal 9") && strstr(msg, "without answering request 1"), "message: %s", msg);
}

static void exit_0_at_once_with_requests_outstanding_is_an_error(void) {
    rl_err e;
    const char *msg = first_error("exit 0", 2, &e);
    CHECK(!strcmp(msg, "verifier command exited (status 0) without answering request 0"), "message: %s", msg);
}

static void a_command_not_found_exits_with_status_127(void) {
    rl_err e;
    const char *msg = first_error("rlpipe-no-such-verifier-command 2>/dev/null", 1, &e);
    CHECK(strstr(msg, "exited (status 127: command not found) without answering request 0"), "message: %s", msg);
}

static void a_reply_that_is_not_a_number_is_quoted_with_its_request(void) {
    rl_err e;
    const char *msg = first_error("read -r l; echo 1; read -r l; echo abc; cat >/dev/null", 3, &e);
    CHECK(!strcmp(msg, "verifier command: request 1: reply 'abc' is not a number, true, false or a JSON object"), "message: %s", msg);
    msg = first_error("read -r l; echo nan", 1, &e);
    CHECK(!strcmp(msg, "verifier command: request 0: reply 'nan' is not a finite number"), "message: %s", msg);
    msg = first_error("read -r l; echo 1e999", 1, &e);
    CHECK(strstr(msg, "request 0: reply '1e999' is not a finite number"), "message: %s", msg);
    msg = first_error("read -r l; echo", 1, &e);
    CHECK(!strcmp(msg, "verifier command: request 0: reply '' is not a number, true, false or a JSON object"), "message: %s", msg);
    msg = first_error("read -r l; printf '1\\0002\\n'", 1, &e);
    CHECK(!strcmp(msg, "verifier command: request 0: reply '1?2' is not a number, true, false or a JSON object"), "message: %s", msg);
    msg = first_error("read -r l; echo '1 2'", 1, &e);
    CHECK(strstr(msg, "request 0: reply '1 2' is not a number, true, false or a JSON object"), "message: %s", msg);
}

static void a_long_bad_reply_is_quoted_in_80_bytes(void) {
    rl_err e;
    const char *msg = first_error("read -r l; head -c 300 /dev/zero | tr '\\0' x; echo", 1, &e);
    CHECK(strstr(msg, "request 0: reply 'xxxx") && strstr(msg, "xxx...' is not a number, true, false or a JSON object") && strlen(msg) < 200,
          "message: %s", msg);
}

static void a_reply_line_over_65536_bytes_is_an_error(void) {
    rl_err e;
    const char *msg = first_error("read -r l; head -c 70000 /dev/zero | tr '\\0' 7; echo", 1, &e);
    CHECK(strstr(msg, "verifier command: request 0: reply line longer than 65536 bytes ('7777"), "message: %s", msg);
    // Without a newline at all: refused before the command ends.
    msg = first_error("read -r l; head -c 70000 /dev/zero | tr '\\0' 7; exec sleep 30", 1, &e);
    CHECK(strstr(msg, "request 0: reply line longer than 65536 bytes"), "message: %s", msg);
}

static void more_reply_lines_than_requests_is_an_error(void) {
    rl_err e;
    const char *msg = first_error("read -r l; echo 1; echo 1", 1, &e);
    CHECK(!strcmp(msg, "verifier command: reply '1' to request 1, which was never sent (more reply lines than "
                       "requests)"),
          "message: %s", msg);
}

static void a_non_zero_exit_after_every_answer_fails_finish(void) {
    vproc *v = start("while read -r l; do echo 1; done; exit 3");
    rl_err e;
    send_str(v, "p", "c", "a");
    send_str(v, "p", "c", "a");
    CHECK(pump_all(v, &e) == 0, "pump: %s", e.msg);
    CHECK(vp_finish(v, &e) == -1, "finish passed");
    CHECK(!strcmp(e.msg, "verifier command exited (status 3) after answering all 2 requests"), "message: %s", e.msg);
    CHECK(vp_reply(v, 1)->reward == 1.0, "the rewards went with the error");
    vp_free(v);
}

static void errors_repeat_on_later_calls(void) {
    vproc *v = start("read -r l; echo abc");
    rl_err e, again;
    send_str(v, "p", "c", NULL);
    CHECK(pump_all(v, &e) == -1, "no error");
    CHECK(vp_pump(v, 0, &again) == -1 && !strcmp(again.msg, e.msg), "pump again: %s", again.msg);
    CHECK(vp_finish(v, &again) == -1 && !strcmp(again.msg, e.msg), "finish: %s", again.msg);
    vp_free(v);
}

static void a_verifier_that_closes_its_output_but_runs_says_so(void) {
    rl_err e;
    const char *msg = first_error("exec >&- <&-; exec sleep 30", 1, &e);
    CHECK(!strcmp(msg, "verifier command closed its output without answering request 0 (it is still running)"),
          "message: %s", msg);
    CHECK(no_children(), "the sleep is left");
}

static void writing_to_a_dead_verifier_raises_no_sigpipe(void) {
    vproc *v = start("exit 0");
    rl_err e;
    // Enough to pass any socket buffer, after the command has surely exited.
    static char big[256 * 1024];
    memset(big, 'b', sizeof big);
    struct timespec ts = {0, 200 * 1000000L};
    nanosleep(&ts, NULL);
    for (int i = 0; i < 16; i++) send_bytes(v, "p", big, sizeof big, NULL);
    CHECK(vp_pump(v, 0, &e) == -1, "no error");
    CHECK(strstr(e.msg, "exited (status 0) without answering request 0"), "message: %s", e.msg);
    vp_free(v);
}

// ---- processes ---------------------------------------------------------------

static void free_kills_a_verifier_that_ignores_eof_and_sigterm_within_seconds(void) {
    vproc *v = start("trap '' TERM; exec sleep 30");
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);  // let sh set the trap and exec
    double t0 = now();
    vp_free(v);
    double took = now() - t0;
    CHECK(took > 0.5 && took < 5, "vp_free took %.2f s, not about 1 s (SIGTERM, then SIGKILL)", took);
    CHECK(no_children(), "not reaped");
}

static void free_stops_a_verifier_that_ignores_eof_at_once(void) {
    vproc *v = start("exec sleep 30");
    double t0 = now();
    vp_free(v);
    double took = now() - t0;
    CHECK(took < 0.5, "vp_free took %.2f s", took);
    CHECK(no_children(), "not reaped");
}

static void a_verifier_inherits_no_other_verifiers_socket(void) {
    vproc *first = start("exec sleep 30");
    // Counts the sockets among the shell's open descriptors: 0 and 1 only.
    vproc *v = start("read -r l; n=0; for f in /proc/$$/fd/*; do case $(readlink $f) in socket:*) n=$((n+1));; "
                     "esac; done; echo $n");
    rl_err e;
    send_str(v, "p", "c", NULL);
    CHECK(vp_finish(v, &e) == 0, "finish: %s", e.msg);
    CHECK(vp_reply(v, 0)->reward == 2, "the verifier has %g sockets open, not 2", vp_reply(v, 0)->reward);
    vp_free(v);
    vp_free(first);
    CHECK(no_children(), "not reaped");
}

// ---- timeouts -------------------------------------------------------------

static void a_verifier_that_hangs_is_an_error_after_the_timeout_naming_the_request(void) {
    vproc *v = start_with("read -r l; echo 1; read -r l; exec sleep 60", 0.3);
    send_str(v, "p", "c", NULL);
    send_str(v, "p", "c", NULL);
    rl_err e;
    double t0 = now();
    int rc = pump_all(v, &e);
    double waited = now() - t0;
    CHECK(rc == -1 && !strcmp(e.msg, "verifier command: request 1: no reply in 0.3 s "
                                     "(it hangs, or is slower than the timeout)"), "rc %d: %s", rc, e.msg);
    CHECK(vp_answered(v) == 1 && vp_reply(v, 0)->reward == 1.0, "the answer before the hang is kept");
    CHECK(waited >= 0.3 && waited < 5, "gave up after %.2f s (timeout 0.3 s)", waited);
    // the non-blocking pump says the same, and so does finish
    rl_err again;
    CHECK(vp_pump(v, 0, &again) == -1 && !strcmp(again.msg, e.msg), "pump after: %s", again.msg);
    CHECK(vp_finish(v, &again) == -1 && !strcmp(again.msg, e.msg), "finish after: %s", again.msg);
    t0 = now();
    vp_free(v);   // the sleeping command is killed (SIGTERM)
    CHECK(now() - t0 < 2 && no_children(), "free took %.2f s or left a child", now() - t0);
}

static void a_non_blocking_pump_reports_the_hang_too(void) {
    vproc *v = start_with("exec sleep 60", 0.2);
    send_str(v, "p", "c", NULL);
    rl_err e;
    CHECK(vp_pump(v, 0, &e) == 0, "at once: %s", e.msg);
    double t0 = now();
    int rc = 0;
    while (!rc && now() - t0 < 5) {
        rc = vp_pump(v, 0, &e);
        usleep(10000);
    }
    CHECK(rc == -1 && strstr(e.msg, "request 0: no reply in 0.2 s"), "rc %d: %s", rc, e.msg);
    CHECK(now() - t0 >= 0.15, "reported after %.2f s", now() - t0);
    vp_free(v);
}

static void a_slow_verifier_answering_in_turn_is_not_a_timeout(void) {
    // 8 requests, each answered 0.1 s after the one before: 0.8 s in all,
    // four times the timeout, but never 0.2 s without an answer.
    vproc *v = start_with("while read -r l; do sleep 0.1; echo 1; done", 0.25);
    for (int i = 0; i < 8; i++) send_str(v, "p", "c", NULL);
    rl_err e;
    double t0 = now();
    CHECK(pump_all(v, &e) == 0, "%s", e.msg);
    CHECK(vp_answered(v) == 8 && now() - t0 > 0.5, "%llu answers in %.2f s", (unsigned long long)vp_answered(v),
          now() - t0);
    CHECK(vp_finish(v, &e) == 0, "%s", e.msg);
    vp_free(v);
}

static void a_verifier_that_does_not_exit_after_its_input_ends_is_an_error(void) {
    // It answers, then ignores the end of its input (its stdout stays open).
    vproc *v = start_with("read -r l; echo 1; exec sleep 60", 0.3);
    send_str(v, "p", "c", NULL);
    rl_err e;
    double t0 = now();
    CHECK(vp_finish(v, &e) == -1 && !strcmp(e.msg, "verifier command: still running 0.3 s after its input ended "
                                                   "(it answered all 1 requests)"), "%s", e.msg);
    CHECK(now() - t0 < 5, "finish took %.2f s", now() - t0);
    vp_free(v);
    CHECK(no_children(), "not reaped");
}

static void without_a_timeout_a_verifier_may_take_its_time(void) {
    vproc *v = start("read -r l; sleep 0.3; echo 1");
    send_str(v, "p", "c", NULL);
    rl_err e;
    CHECK(vp_finish(v, &e) == 0 && vp_reply(v, 0)->reward == 1.0, "%s", e.msg);
    vp_free(v);
}

static void a_verifier_starts_when_our_stdin_and_stdout_are_closed(void) {
    // The socketpair then takes descriptors 0 and 1 themselves.
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        close(0);
        close(1);
        rl_err e;
        vproc *v = vp_start("read -r l; echo 1", "verifier command", 0, &e);
        if (!v) _exit(2);
        send_str(v, "p", "c", NULL);
        int ok = vp_finish(v, &e) == 0 && vp_reply(v, 0)->reward == 1.0;
        if (!ok) fprintf(stderr, "%s\n", e.msg);
        vp_free(v);
        _exit(ok ? 0 : 1);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child reports wait status %d", status);
}

int main(void) {
    signal(SIGPIPE, SIG_DFL);
    RUN(a_thousand_pipelined_requests_get_their_rewards_in_order);
    RUN(forget_keeps_the_rewards_from_i_on);
    RUN(strings_needing_json_escapes_round_trip);
    RUN(large_requests_are_written_as_the_verifier_reads_them);
    RUN(true_false_and_numbers_with_white_space_are_rewards);
    RUN(block_returns_at_once_with_nothing_outstanding);
    RUN(a_verifier_that_exits_after_3_answers_names_request_3);
    RUN(a_verifier_killed_by_a_signal_says_so);
    RUN(exit_0_at_once_with_requests_outstanding_is_an_error);
    RUN(a_command_not_found_exits_with_status_127);
    RUN(a_reply_that_is_not_a_number_is_quoted_with_its_request);
    RUN(a_long_bad_reply_is_quoted_in_80_bytes);
    RUN(a_reply_line_over_65536_bytes_is_an_error);
    RUN(more_reply_lines_than_requests_is_an_error);
    RUN(a_non_zero_exit_after_every_answer_fails_finish);
    RUN(errors_repeat_on_later_calls);
    RUN(a_verifier_that_closes_its_output_but_runs_says_so);
    RUN(writing_to_a_dead_verifier_raises_no_sigpipe);
    RUN(free_kills_a_verifier_that_ignores_eof_and_sigterm_within_seconds);
    RUN(free_stops_a_verifier_that_ignores_eof_at_once);
    RUN(a_verifier_inherits_no_other_verifiers_socket);
    RUN(a_verifier_starts_when_our_stdin_and_stdout_are_closed);
    RUN(a_verifier_that_hangs_is_an_error_after_the_timeout_naming_the_request);
    RUN(a_non_blocking_pump_reports_the_hang_too);
    RUN(a_slow_verifier_answering_in_turn_is_not_a_timeout);
    RUN(a_verifier_that_does_not_exit_after_its_input_ends_is_an_error);
    RUN(without_a_timeout_a_verifier_may_take_its_time);
    CHECK_DONE();
}
