// tok_map.h — string -> id hash maps for tokenizer vocabularies: the keys
// live in the map's own pool, looked up by bytes (open addressing, at most
// half full).
#ifndef RLPIPE_TOK_MAP_H
#define RLPIPE_TOK_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define TOK_NO_ID UINT32_MAX

typedef struct {
    uint32_t off, len, id;  // key pool[off..off+len)
} tok_map_entry;

typedef struct {
    sbuf pool;
    tok_map_entry *ent;  // in insertion order
    size_t n, cap;
    uint32_t *slot;      // entry index + 1; 0 = empty
    size_t mask;         // slots - 1 (a power of two)
    uint32_t *by_id;     // after tok_map_index: id -> entry index, or TOK_NO_ID
    size_t n_by_id;
} tok_map;

// The id of s[0..n), or TOK_NO_ID.
uint32_t tok_map_get(const tok_map *m, const void *s, size_t n);
// Adds s -> id; returns the id s already had (and changes nothing), or TOK_NO_ID.
uint32_t tok_map_put(tok_map *m, const void *s, size_t n, uint32_t id);
// Entry i's key.
const char *tok_map_key(const tok_map *m, size_t i);
// Builds the id -> entry table (for ids below n_ids, which must exceed every
// id). Returns the entry whose id an earlier entry has, or TOK_NO_ID.
uint32_t tok_map_index(tok_map *m, size_t n_ids);
// The key of id (after tok_map_index), or NULL.
const char *tok_map_key_of(const tok_map *m, uint32_t id, size_t *len);
void tok_map_free(tok_map *m);

#endif
