// check.h — the unit-test protocol: one "PASS name" or "FAIL name: file:line: why"
// line per test case, exit status 1 if any failed (see tests/run.sh).
#ifndef RLPIPE_CHECK_H
#define RLPIPE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int check_failed_cases;
static int check_case_failed;

// Fails the current case with a message and returns from it.
#define CHECK(cond, ...)                                                         \
    do {                                                                         \
        if (!(cond)) {                                                           \
            printf("FAIL %s: %s:%d: %s: ", check_case, __FILE__, __LINE__, #cond); \
            printf(__VA_ARGS__);                                                 \
            printf("\n");                                                        \
            check_case_failed = 1;                                               \
            return;                                                              \
        }                                                                        \
    } while (0)

static const char *check_case = "";

#define RUN(fn)                                                                  \
    do {                                                                         \
        check_case = #fn;                                                        \
        check_case_failed = 0;                                                   \
        fn();                                                                    \
        if (check_case_failed) check_failed_cases++;                             \
        else printf("PASS %s\n", #fn);                                           \
        fflush(stdout);                                                          \
    } while (0)

#define CHECK_DONE() return check_failed_cases ? 1 : 0

#endif
