// rng.h — the one seeded generator of a tool (doc/design.md §7): xoshiro256**
// seeded through splitmix64, so the same seed gives the same stream on every machine.
#ifndef RLPIPE_RNG_H
#define RLPIPE_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} rl_rng;

void rng_seed(rl_rng *r, uint64_t seed);
// Stream number `stream` of a seed: streams of one seed, and of different
// seeds, start from unrelated states (stream is hashed before it meets seed).
void rng_seed_stream(rl_rng *r, uint64_t seed, uint64_t stream);
uint64_t rng_u64(rl_rng *r);
double rng_uniform(rl_rng *r);                 // [0, 1), 53 random bits
double rng_normal(rl_rng *r);                  // standard normal (Box-Muller, no cached pair)

#endif
