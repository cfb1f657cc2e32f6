// cpu/mem.h — the CPU backend's buffers (ops.h alloc/free). Large ones
// (weights, optimizer moments, a batch's activations) are mapped apart, in
// 2 MiB pages where the kernel gives them (madvise MADV_HUGEPAGE): a
// process's first touch of a fresh 4 KiB page costs a fault and a cleared
// page, which on the development VM made first writes run at ~1.9 GB/s
// against ~8 GB/s in 2 MiB pages (and 25 GB/s to pages already touched), and
// reading 0.5 GB of weights a token walks 131072 small pages' translations.
// Small ones come from malloc. Both are zero-filled.
#ifndef RLPIPE_CPU_MEM_H
#define RLPIPE_CPU_MEM_H

#include <stddef.h>

// The size from which buffers are mapped apart: 4 MiB, or 0 (none) in a
// build with AddressSanitizer, which checks the bounds of malloc's blocks.
extern const size_t cpu_mem_mapped_min;

// Zero-filled, 64-byte aligned (2 MiB for those mapped apart); aborts,
// saying so, when out of memory.
void *cpu_mem_alloc(size_t bytes);
// Frees what cpu_mem_alloc returned (NULL: nothing).
void cpu_mem_free(void *p);
// The bytes usable at p, a buffer cpu_mem_alloc returned: at least those asked.
size_t cpu_mem_size(const void *p);

#endif
