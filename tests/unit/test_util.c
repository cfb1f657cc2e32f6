// test_util.c — arrays that grow (util.h): grow_cap doubles the capacity from
// its first value until need fits, grow_array reallocates to it and keeps the
// elements, and a size that would overflow a size_t is refused with nothing
// changed.
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "util.h"

static void an_empty_array_starts_at_first_and_doubles_until_need_fits(void) {
    CHECK(grow_cap(0, 1, 8, 4) == 8, "got %zu", grow_cap(0, 1, 8, 4));
    CHECK(grow_cap(0, 9, 8, 4) == 16, "got %zu", grow_cap(0, 9, 8, 4));
    CHECK(grow_cap(8, 9, 64, 4) == 16, "a full array doubles: got %zu", grow_cap(8, 9, 64, 4));
    CHECK(grow_cap(8, 100, 64, 4) == 128, "got %zu", grow_cap(8, 100, 64, 4));
    CHECK(grow_cap(16, 10, 8, 4) == 16, "an array that holds need keeps its capacity: got %zu", grow_cap(16, 10, 8, 4));
}

static void grow_array_holds_at_least_need_and_keeps_the_contents(void) {
    uint32_t *a = NULL;
    size_t n = 0, cap = 0;
    for (uint32_t i = 0; i < 1000; i++) {
        CHECK(grow_array(&a, &cap, n + 1, 4, sizeof *a) == 0, "push %u", i);
        CHECK(cap >= n + 1, "cap %zu after push %u", cap, i);
        a[n++] = i * 7;
    }
    CHECK(cap == 1024, "4 doubled 8 times: got %zu", cap);
    for (uint32_t i = 0; i < 1000; i++) CHECK(a[i] == i * 7, "a[%u] = %u", i, a[i]);
    uint32_t *before = a;
    CHECK(grow_array(&a, &cap, 1000, 4, sizeof *a) == 0 && a == before && cap == 1024,
          "an array that holds need is left as it is");
    free(a);
}

static void the_grow_macro_grows_a_typed_array(void) {
    double *v = NULL;
    size_t cap = 0;
    GROW(v, cap, 3, 2);
    CHECK(cap == 4, "2 doubled once holds 3: got %zu", cap);
    v[0] = 0.5, v[3] = 2.5;
    GROW(v, cap, 5, 2);
    CHECK(cap == 8 && v[0] == 0.5 && v[3] == 2.5, "cap %zu, v[0] %g, v[3] %g", cap, v[0], v[3]);
    free(v);
}

static void a_size_that_would_overflow_is_refused_and_nothing_changes(void) {
    CHECK(grow_cap(0, SIZE_MAX / 8 + 1, 8, 8) == 0, "need * elem overflows");
    CHECK(grow_cap(0, SIZE_MAX, 256, 1) == 0, "doubling to SIZE_MAX overflows");
    CHECK(grow_cap((size_t)1 << 62, ((size_t)1 << 63) + 1, 8, 1) == 0, "doubling 2^62 twice overflows");
    uint64_t *a = NULL;
    size_t cap = 0;
    CHECK(grow_array(&a, &cap, 2, 4, sizeof *a) == 0 && cap == 4, "cap %zu", cap);
    a[1] = 42;
    uint64_t *before = a;
    CHECK(grow_array(&a, &cap, SIZE_MAX / 4, 4, sizeof *a) == -1, "refused");
    CHECK(a == before && cap == 4 && a[1] == 42, "the array is left as it was: cap %zu", cap);
    free(a);
}

static void an_sbuf_grows_through_the_same_rule(void) {
    sbuf b = {0};
    sbuf_put(&b, "x", 1);
    CHECK(b.cap == 256, "an sbuf starts at 256 bytes: got %zu", b.cap);
    char big[300];
    memset(big, 'y', sizeof big);
    sbuf_put(&b, big, sizeof big);
    CHECK(b.cap == 512 && b.len == 301 && b.data[0] == 'x' && b.data[300] == 'y', "cap %zu, len %zu", b.cap, b.len);
    sbuf_free(&b);
}

int main(void) {
    RUN(an_empty_array_starts_at_first_and_doubles_until_need_fits);
    RUN(grow_array_holds_at_least_need_and_keeps_the_contents);
    RUN(the_grow_macro_grows_a_typed_array);
    RUN(a_size_that_would_overflow_is_refused_and_nothing_changes);
    RUN(an_sbuf_grows_through_the_same_rule);
    CHECK_DONE();
}
