// tok_map.c — string -> id maps (see tok_map.h).
#include "tokenizer/tok_map.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then a final mix for the low bits
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

const char *tok_map_key(const tok_map *m, size_t i) { return (const char *)m->pool.data + m->ent[i].off; }

// The slot where s is, or where it would go.
static size_t find_slot(const tok_map *m, const void *s, size_t n) {
    size_t h = hash_bytes(s, n) & m->mask;
    for (;;) {
        uint32_t e = m->slot[h];
        if (!e) return h;
        const tok_map_entry *x = &m->ent[e - 1];
        if (x->len == n && !memcmp(m->pool.data + x->off, s, n)) return h;
        h = (h + 1) & m->mask;
    }
}

static void grow(tok_map *m) {
    size_t slots = m->mask ? (m->mask + 1) * 2 : 1024;
    free(m->slot);
    m->slot = xmalloc(slots * sizeof *m->slot);
    memset(m->slot, 0, slots * sizeof *m->slot);
    m->mask = slots - 1;
    for (size_t i = 0; i < m->n; i++)
        m->slot[find_slot(m, m->pool.data + m->ent[i].off, m->ent[i].len)] = (uint32_t)i + 1;
}

uint32_t tok_map_get(const tok_map *m, const void *s, size_t n) {
    if (!m->mask) return TOK_NO_ID;
    uint32_t e = m->slot[find_slot(m, s, n)];
    return e ? m->ent[e - 1].id : TOK_NO_ID;
}

uint32_t tok_map_put(tok_map *m, const void *s, size_t n, uint32_t id) {
    if ((m->n + 1) * 2 > m->mask + 1) grow(m);
    size_t h = find_slot(m, s, n);
    if (m->slot[h]) return m->ent[m->slot[h] - 1].id;
    GROW(m->ent, m->cap, m->n + 1, 1024);
    uint32_t off = (uint32_t)m->pool.len;
    sbuf_put(&m->pool, s, n);
    sbuf_putc(&m->pool, 0);  // keys read as C strings in messages
    m->ent[m->n] = (tok_map_entry){off, (uint32_t)n, id};
    m->slot[h] = (uint32_t)++m->n;
    return TOK_NO_ID;
}

uint32_t tok_map_index(tok_map *m, size_t n_ids) {
    free(m->by_id);
    m->by_id = xmalloc((n_ids ? n_ids : 1) * sizeof *m->by_id);
    m->n_by_id = n_ids;
    for (size_t i = 0; i < n_ids; i++) m->by_id[i] = TOK_NO_ID;
    for (size_t i = 0; i < m->n; i++) {
        uint32_t id = m->ent[i].id;
        if (m->by_id[id] != TOK_NO_ID) return (uint32_t)i;
        m->by_id[id] = (uint32_t)i;
    }
    return TOK_NO_ID;
}

const char *tok_map_key_of(const tok_map *m, uint32_t id, size_t *len) {
    if (id >= m->n_by_id || m->by_id[id] == TOK_NO_ID) return NULL;
    *len = m->ent[m->by_id[id]].len;
    return tok_map_key(m, m->by_id[id]);
}

void tok_map_free(tok_map *m) {
    sbuf_free(&m->pool);
    free(m->ent);
    free(m->slot);
    free(m->by_id);
    memset(m, 0, sizeof *m);
}
