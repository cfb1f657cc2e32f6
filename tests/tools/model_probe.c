// model_probe — log-probabilities of given completions under a model, by the
// decoding path (KV cache, continuous batching) or the scoring path, for the
// Python tests to compare with the float64 reference (tests/py/llama_ref.py).
//
//   model_probe --model DIR [--dtype f32|bf16|f16|int8] [--group 32|64]
//               [--slots N] [--score] < jobs.tsv > logps.txt
//
// Each input line is one sequence: "TEMP<TAB>PROMPT IDS<TAB>COMPLETION IDS",
// ids separated by spaces. Each output line, in input order, holds the
// log-probability of each completion token (%.9g, space-separated).
//
// Decoding (default): up to --slots sequences share the cache at once. Every
// model_step call carries one token of each sequence being decoded and the
// whole prompt of each sequence admitted in that step, so prefills and decode
// steps of sequences at different positions share one batched forward, and a
// slot freed by a finished sequence is reused by the next. logp[t] is
// model_logprob_of the logits after prompt + ids[:t]. --score: one
// model_score call over all sequences instead.
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

static void die(const char *file, int line, const char *msg) {
    fprintf(stderr, "model_probe: error: %s (%s:%d)\n", msg, file, line);
    exit(1);
}
#define CHECK(call, err) do { if ((call) != 0) die(__FILE__, __LINE__, (err).msg); } while (0)
#define FAIL(...) do { char m_[512]; snprintf(m_, sizeof m_, __VA_ARGS__); die(__FILE__, __LINE__, m_); } while (0)

typedef struct {
    float temp;
    uint32_t *prompt, *ids;
    size_t np, ni;
    double *logp;   // ni values
    size_t t;       // log-probs computed so far
    int slot;
} job;

// Parses space-separated token ids from s into a new array; returns how many.
static size_t parse_ids(char *s, uint32_t **out, size_t lineno) {
    size_t n = 0, cap = 16;
    uint32_t *v = xmalloc(cap * sizeof *v);
    char *tok, *save = NULL;
    for (tok = strtok_r(s, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *end;
        errno = 0;
        unsigned long x = strtoul(tok, &end, 10);
        if (errno || *end || end == tok || x > UINT32_MAX) FAIL("line %zu: bad token id '%s'", lineno, tok);
        if (n == cap) v = xrealloc(v, (cap *= 2) * sizeof *v);
        v[n++] = (uint32_t)x;
    }
    *out = v;
    return n;
}

static job *read_jobs(FILE *in, size_t *njobs) {
    job *jobs = NULL;
    size_t n = 0, cap = 0, lineno = 0, len = 0;
    char *line = NULL;
    while (getline(&line, &len, in) > 0) {
        lineno++;
        line[strcspn(line, "\r\n")] = 0;
        if (!*line) continue;
        char *f1 = line, *f2 = strchr(f1, '\t'), *f3 = f2 ? strchr(f2 + 1, '\t') : NULL;
        if (!f3) FAIL("line %zu: expected TEMP<TAB>PROMPT<TAB>IDS", lineno);
        *f2++ = 0;
        *f3++ = 0;
        if (n == cap) jobs = xrealloc(jobs, (cap = cap ? 2 * cap : 64) * sizeof *jobs);
        job *j = &jobs[n++];
        memset(j, 0, sizeof *j);
        char *end;
        j->temp = strtof(f1, &end);
        if (*end || end == f1) FAIL("line %zu: bad temperature '%s'", lineno, f1);
        j->np = parse_ids(f2, &j->prompt, lineno);
        j->ni = parse_ids(f3, &j->ids, lineno);
        if (j->np == 0 || j->ni == 0) FAIL("line %zu: empty prompt or completion", lineno);
        j->logp = xmalloc(j->ni * sizeof *j->logp);
        j->slot = -1;
    }
    free(line);
    *njobs = n;
    return jobs;
}

static void run_score(model_t *m, job *jobs, size_t n) {
    rl_err err = {{0}};
    model_seq *seqs = xmalloc(n * sizeof *seqs);
    for (size_t i = 0; i < n; i++) {
        seqs[i] = (model_seq){jobs[i].prompt, jobs[i].np, jobs[i].ids, jobs[i].ni, jobs[i].temp,
                              xmalloc(jobs[i].ni * sizeof(float)), NULL};
    }
    CHECK(model_score(m, seqs, n, &err), err);
    for (size_t i = 0; i < n; i++) {
        for (size_t t = 0; t < jobs[i].ni; t++) jobs[i].logp[t] = seqs[i].logp[t];
        free(seqs[i].logp);
    }
    free(seqs);
}

static void run_decode(model_t *m, job *jobs, size_t n, int slots) {
    rl_err err = {{0}};
    int V = model_cfg(m)->vocab, max_len = 0;
    for (size_t i = 0; i < n; i++)
        if ((int)(jobs[i].np + jobs[i].ni) > max_len) max_len = (int)(jobs[i].np + jobs[i].ni);
    CHECK(model_cache_init(m, slots, max_len, &err), err);
    job **active = xmalloc((size_t)slots * sizeof *active);
    job **in_step = xmalloc((size_t)slots * sizeof *in_step);
    model_step_seq *steps = xmalloc((size_t)slots * sizeof *steps);
    float *logits = xmalloc((size_t)slots * V * sizeof *logits);
    size_t next = 0, done = 0;
    int nactive = 0;
    while (done < n) {
        int ns = 0;
        for (int a = 0; a < nactive; a++) {           // one decoded token each: ids[t-1]
            job *j = active[a];
            steps[ns] = (model_step_seq){.slot = j->slot, .ids = &j->ids[j->t - 1], .n = 1};
            in_step[ns++] = j;
        }
        while (nactive < slots && next < n) {         // admit: the whole prompt
            job *j = &jobs[next++];
            j->slot = model_slot_acquire(m);
            if (j->slot < 0) FAIL("no free slot with %d of %d in use", nactive, slots);
            if (model_slot_len(m, j->slot) != 0)
                FAIL("acquired slot %d holds %d tokens, expected 0", j->slot, model_slot_len(m, j->slot));
            active[nactive++] = j;
            steps[ns] = (model_step_seq){.slot = j->slot, .ids = j->prompt, .n = j->np};
            in_step[ns++] = j;
        }
        CHECK(model_step(m, steps, (size_t)ns, logits, &err), err);
        for (int k = 0; k < ns; k++) {
            job *j = in_step[k];
            j->logp[j->t] = model_logprob_of(logits + (size_t)k * V, V, j->temp, j->ids[j->t]);
            j->t++;
            int want = (int)(j->np + j->t - 1);        // prompt + ids[:t-1] fed so far
            if (model_slot_len(m, j->slot) != want)
                FAIL("slot %d holds %d tokens after a step, expected %d", j->slot,
                     model_slot_len(m, j->slot), want);
        }
        for (int a = 0; a < nactive;) {               // retire finished sequences
            job *j = active[a];
            if (j->t == j->ni) {
                model_slot_release(m, j->slot);
                active[a] = active[--nactive];
                done++;
            } else {
                a++;
            }
        }
    }
    free(active);
    free(in_step);
    free(steps);
    free(logits);
}

static void usage(FILE *f) {
    fprintf(f, "usage: model_probe --model DIR [--dtype PRECISION] [--group 32|64 (int8w)]\n"
               "                   [--slots N] [--score] < jobs.tsv\n"
               "  input lines: TEMP<TAB>PROMPT IDS<TAB>COMPLETION IDS; output: one line of log-probs each\n");
}

int main(int argc, char **argv) {
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'm'}, {"dtype", required_argument, 0, 'd'},
        {"group", required_argument, 0, 'g'}, {"slots", required_argument, 0, 's'},
        {"score", no_argument, 0, 'S'},       {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *dir = NULL;
    model_opts mo = {.dtype = DT_F32};
    int slots = 4, score = 0, c;
    while ((c = getopt_long(argc, argv, "m:d:g:s:Sh", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': dir = optarg; break;
        case 'd':
            if (model_precision_parse(optarg, &mo) != 0) { usage(stderr); return 2; }
            break;
        case 'g': mo.group = atoi(optarg); break;
        case 's': slots = atoi(optarg); break;
        case 'S': score = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!dir || optind != argc || slots < 1) { usage(stderr); return 2; }

    rl_err err = {{0}};
    model_t *m = model_load(dir, &mo, &err);
    if (!m) die(__FILE__, __LINE__, err.msg);
    size_t n;
    job *jobs = read_jobs(stdin, &n);
    if (score) run_score(m, jobs, n);
    else if (n) run_decode(m, jobs, n, slots);
    for (size_t i = 0; i < n; i++) {
        for (size_t t = 0; t < jobs[i].ni; t++) printf(t ? " %.9g" : "%.9g", jobs[i].logp[t]);
        putchar('\n');
        free(jobs[i].prompt);
        free(jobs[i].ids);
        free(jobs[i].logp);
    }
    free(jobs);
    model_free(m);
    if (fflush(stdout) != 0) die(__FILE__, __LINE__, "writing stdout failed");
    return 0;
}
