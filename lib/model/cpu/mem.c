// cpu/mem.c — the CPU backend's buffers (mem.h): large ones mapped apart,
// 2 MiB aligned and advised into huge pages, kept in a table so that
// cpu_mem_free knows their mapping; small ones from posix_memalign.
#include "model/cpu/mem.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util.h"

#define HUGE_PAGE ((size_t)2 << 20)
// Buffers from this size on are mapped apart; none under AddressSanitizer,
// which sees the bounds of malloc's blocks only.
#if defined(__has_feature)   // clang's way to tell
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(UNDER_ASAN)   // gcc's, and clang's
const size_t cpu_mem_mapped_min = 0;
#else
const size_t cpu_mem_mapped_min = (size_t)4 << 20;
#endif

typedef struct {
    void *p;      // the buffer: the start of its mapping
    size_t len;   // the mapping's length
} mapping;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static mapping *maps;
static size_t nmaps, capmaps;

static void out_of_memory(size_t bytes, const char *why) {
    fprintf(stderr, "rlpipe: out of memory (%zu bytes for the CPU backend%s%s)\n", bytes, why ? ": " : "",
            why ? why : "");
    abort();
}

// A mapping of bytes rounded up to huge pages, 2 MiB aligned: one huge page
// more is mapped, and what lies before and after the aligned part given back.
static void *map_huge(size_t bytes) {
    size_t len = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    char *raw = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) out_of_memory(bytes, strerror(errno));
    char *p = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    size_t head = (size_t)(p - raw), tail = HUGE_PAGE - head;
    if (head) munmap(raw, head);
    if (tail) munmap(p + len, tail);
    // Only advice: where the kernel has no huge pages for it, small ones serve.
    (void)madvise(p, len, MADV_HUGEPAGE);
    pthread_mutex_lock(&mu);
    GROW(maps, capmaps, nmaps + 1, 16);
    maps[nmaps++] = (mapping){p, len};
    pthread_mutex_unlock(&mu);
    return p;   // anonymous mappings are zero-filled
}

void *cpu_mem_alloc(size_t bytes) {
    if (cpu_mem_mapped_min && bytes >= cpu_mem_mapped_min) return map_huge(bytes);
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) out_of_memory(bytes, NULL);
    memset(p, 0, bytes);
    return p;
}

void cpu_mem_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nmaps; i++)
        if (maps[i].p == p) {
            mapping m = maps[i];
            maps[i] = maps[--nmaps];
            pthread_mutex_unlock(&mu);
            if (munmap(m.p, m.len) != 0) {
                fprintf(stderr, "rlpipe: munmap of a CPU backend buffer: %s\n", strerror(errno));
                abort();
            }
            return;
        }
    pthread_mutex_unlock(&mu);
    free(p);
}

size_t cpu_mem_size(const void *p) {
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nmaps; i++)
        if (maps[i].p == p) {
            size_t len = maps[i].len;
            pthread_mutex_unlock(&mu);
            return len;
        }
    pthread_mutex_unlock(&mu);
    return malloc_usable_size((void *)p);
}
