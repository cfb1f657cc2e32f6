// rng.c — xoshiro256** (Blackman and Vigna), seeded by splitmix64.
#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rng_seed(rl_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

void rng_seed_stream(rl_rng *r, uint64_t seed, uint64_t stream) {
    uint64_t x = stream;
    rng_seed(r, seed ^ splitmix64(&x));
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_u64(rl_rng *r) {
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double rng_uniform(rl_rng *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }

double rng_normal(rl_rng *r) {
    double u1 = 1.0 - rng_uniform(r), u2 = rng_uniform(r);   // u1 in (0, 1]
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
