// test_cpu_mem.c — the CPU backend's buffers (model/cpu/mem.h): every size
// comes back zero-filled and aligned (64 bytes; 2 MiB from 4 MiB on, mapped
// apart, but under AddressSanitizer), writable to its last byte, freed
// without disturbing the others, and a freed large buffer's memory goes back
// to the system.
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "model/cpu/mem.h"

static int all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

static void buffers_of_every_size_are_zeroed_and_aligned(void) {
    static const size_t sizes[] = {0, 1, 63, 4096, (size_t)4 << 20, ((size_t)4 << 20) - 1, ((size_t)4 << 20) + 1,
                                   ((size_t)6 << 20) + 12345};
    enum { N = sizeof sizes / sizeof *sizes };
    unsigned char *p[N];
    for (int round = 0; round < 2; round++) {   // the second round reuses what the first gave back
        for (int i = 0; i < N; i++) {
            p[i] = cpu_mem_alloc(sizes[i]);
            CHECK(p[i] != NULL, "size %zu", sizes[i]);
            CHECK((uintptr_t)p[i] % 64 == 0, "size %zu: %p not 64-byte aligned", sizes[i], (void *)p[i]);
            if (cpu_mem_mapped_min && sizes[i] >= cpu_mem_mapped_min)
                CHECK((uintptr_t)p[i] % ((size_t)2 << 20) == 0, "size %zu: %p not 2 MiB aligned", sizes[i],
                      (void *)p[i]);
            CHECK(all_zero(p[i], sizes[i]), "round %d, size %zu: not zero-filled", round, sizes[i]);
            memset(p[i], 0xa0 + i, sizes[i]);   // every byte writable
        }
        for (int i = 0; i < N; i++) {   // each still holds its own bytes: none overlaps another
            for (size_t k = 0; k < sizes[i]; k += 4093)
                CHECK(p[i][k] == (unsigned char)(0xa0 + i), "size %zu, byte %zu overwritten", sizes[i], k);
            if (sizes[i]) CHECK(p[i][sizes[i] - 1] == (unsigned char)(0xa0 + i), "size %zu: last byte", sizes[i]);
        }
        for (int i = N - 1; i >= 0; i -= 2) cpu_mem_free(p[i]);   // out of order
        for (int i = N - 2; i >= 0; i -= 2) cpu_mem_free(p[i]);
    }
    cpu_mem_free(NULL);
}

// The process's resident memory, in KiB (VmRSS of /proc/self/status).
static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

static void a_freed_large_buffer_leaves_the_process(void) {
    long before = rss_kib();
    CHECK(before > 0, "VmRSS unreadable");
    size_t n = (size_t)256 << 20;
    unsigned char *p = cpu_mem_alloc(n);
    memset(p, 1, n);
    long touched = rss_kib();
    cpu_mem_free(p);
    long after = rss_kib();
    CHECK(touched - before >= 250 * 1024, "256 MiB written, VmRSS %ld -> %ld KiB", before, touched);
    CHECK(after - before < 16 * 1024, "after the free VmRSS %ld KiB, %ld before it", after, before);
}

int main(void) {
    RUN(buffers_of_every_size_are_zeroed_and_aligned);
    RUN(a_freed_large_buffer_leaves_the_process);
    CHECK_DONE();
}
