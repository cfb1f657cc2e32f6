// tok_post.c — post-processors (see tok_post.h). Each processor is kept as
// its single-sequence template: a list of parts, each the sequence ($A) or a
// special token's ids. Roberta and Bert are "cls $A sep"; ByteLevel only
// trims offsets, which rlpipe does not report: no parts, nothing changes. A
// Sequence applies its processors in order, each around the result of the
// one before, as tokenizers does.
#include "tokenizer/tok_post.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_bpe.h"
#include "tokenizer/tok_json.h"

typedef struct {
    int is_seq;     // 1: the sequence; 0: ids
    uint32_t *ids;
    size_t n;
} part;

typedef struct {
    part *part;
    size_t n;
} template;

struct tok_post {
    template *tpl;
    size_t n;
};

void tok_post_free(tok_post *pp) {
    if (!pp) return;
    for (size_t i = 0; i < pp->n; i++) {
        for (size_t k = 0; k < pp->tpl[i].n; k++) free(pp->tpl[i].part[k].ids);
        free(pp->tpl[i].part);
    }
    free(pp->tpl);
    free(pp);
}

static void add_part(template *t, int is_seq, const uint32_t *ids, size_t n) {
    t->part = xrealloc(t->part, (t->n + 1) * sizeof *t->part);
    part *p = &t->part[t->n++];
    p->is_seq = is_seq;
    p->n = n;
    p->ids = n ? xmalloc(n * sizeof *ids) : NULL;
    if (n) memcpy(p->ids, ids, n * sizeof *ids);
}

static template *add_template(tok_post *pp) {
    pp->tpl = xrealloc(pp->tpl, (pp->n + 1) * sizeof *pp->tpl);
    memset(&pp->tpl[pp->n], 0, sizeof *pp->tpl);
    return &pp->tpl[pp->n++];
}

// Roberta's and Bert's "cls": ["<s>", 0]: the id.
static int token_pair_id(const char *path, const cJSON *x, const char *where, const char *key, uint32_t *id,
                         rl_err *err) {
    const cJSON *pair = cJSON_GetObjectItemCaseSensitive(x, key);
    if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2 || !cJSON_IsString(cJSON_GetArrayItem(pair, 0)) ||
        tok_json_id(cJSON_GetArrayItem(pair, 1), TOK_MAX_ID, id))
        return err_set(err, "%s: %s.%s must be [token, id]", path, where, key);
    return 0;
}

static int load_template(tok_post *pp, const cJSON *x, const char *path, const char *where, rl_err *err) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(x, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(x, "special_tokens");
    if (!cJSON_IsArray(single)) return err_set(err, "%s: %s.single must be an array of pieces", path, where);
    if (!tok_json_absent(specials) && !cJSON_IsObject(specials))
        return err_set(err, "%s: %s.special_tokens must be an object", path, where);
    template *t = add_template(pp);
    const cJSON *piece;
    int i = 0;
    cJSON_ArrayForEach(piece, single) {
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(piece, "Sequence");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(piece, "SpecialToken");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(seq ? seq : sp, "id");
        if (!cJSON_IsObject(piece) || (!seq == !sp) || !cJSON_IsString(id))
            return err_set(err, "%s: %s.single[%d] must be {\"Sequence\": {\"id\": ...}} or {\"SpecialToken\": "
                                "{\"id\": ...}}", path, where, i);
        if (seq) {
            if (strcmp(id->valuestring, "A"))
                return err_set(err, "%s: %s.single[%d] is sequence %s: a single template has only A", path, where,
                               i, id->valuestring);
            add_part(t, 1, NULL, 0);
        } else {
            const cJSON *tok = cJSON_GetObjectItemCaseSensitive(specials, id->valuestring);
            const cJSON *ids = cJSON_GetObjectItemCaseSensitive(tok, "ids"), *v;
            if (!cJSON_IsObject(tok) || !cJSON_IsArray(ids))
                return err_set(err, "%s: %s.single[%d]: special token \"%.200s\" has no entry with ids in "
                                    "special_tokens", path, where, i, id->valuestring);
            uint32_t buf[64];
            size_t n = 0;
            cJSON_ArrayForEach(v, ids) {
                if (n == sizeof buf / sizeof *buf || tok_json_id(v, TOK_MAX_ID, &buf[n]))
                    return err_set(err, "%s: %s.special_tokens[\"%.200s\"].ids must be at most 64 ids", path,
                                   where, id->valuestring);
                n++;
            }
            add_part(t, 0, buf, n);
        }
        i++;
    }
    return 0;
}

static int load_one(void *ctx, const cJSON *x, const char *ty, const char *path, const char *where, rl_err *err) {
    tok_post *pp = ctx;
    if (!strcmp(ty, "ByteLevel")) return 0;
    if (!strcmp(ty, "TemplateProcessing")) return load_template(pp, x, path, where, err);
    if (!strcmp(ty, "RobertaProcessing") || !strcmp(ty, "BertProcessing")) {
        uint32_t cls, sep;
        if (token_pair_id(path, x, where, "cls", &cls, err) || token_pair_id(path, x, where, "sep", &sep, err))
            return -1;
        template *t = add_template(pp);
        add_part(t, 0, &cls, 1);
        add_part(t, 1, NULL, 0);
        add_part(t, 0, &sep, 1);
        return 0;
    }
    return err_set(err, "%s: %s: post_processor %s is not supported (supported: TemplateProcessing, ByteLevel, "
                        "RobertaProcessing, BertProcessing, Sequence)", path, where, ty);
}

int tok_post_load(const cJSON *x, const char *path, tok_post **out, rl_err *err) {
    *out = NULL;
    if (tok_json_absent(x)) return 0;
    tok_post *pp = xmalloc(sizeof *pp);
    memset(pp, 0, sizeof *pp);
    if (tok_json_component(path, x, "post_processor", "processors", load_one, pp, err)) {
        tok_post_free(pp);
        return -1;
    }
    *out = pp;
    return 0;
}

void tok_post_apply(const tok_post *pp, uint32_t **ids, size_t start, size_t *n_ids, size_t *cap) {
    if (!pp) return;
    for (size_t i = 0; i < pp->n; i++) {
        const template *t = &pp->tpl[i];
        size_t seq_n = *n_ids - start;
        uint32_t *seq = seq_n ? xmalloc(seq_n * sizeof *seq) : NULL;
        if (seq_n) memcpy(seq, *ids + start, seq_n * sizeof *seq);
        *n_ids = start;
        for (size_t k = 0; k < t->n; k++) {
            const uint32_t *src = t->part[k].is_seq ? seq : t->part[k].ids;
            size_t n = t->part[k].is_seq ? seq_n : t->part[k].n;
            for (size_t j = 0; j < n; j++) tok_ids_push(ids, n_ids, cap, src[j]);
        }
        free(seq);
    }
}
