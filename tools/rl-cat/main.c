// rl-cat — inspect, check, convert, concatenate and summarise record streams.
// Reads every input (records or JSON lines) and sends each record to one
// sink: a record stream (one member), JSON lines, a summary, or nothing.
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "clock.h"
#include "records/fields.h"
#include "records/json.h"
#include "records/source.h"
#include "records/stats.h"
#include "records/writer.h"

static const char USAGE[] =
    "Usage: rl-cat [OPTION]... [FILE]...\n"
    "Validate, concatenate, convert and summarise rlpipe record streams.\n"
    "With no FILE, or when FILE is -, read standard input.\n"
    "\n"
    "Modes (default: concatenate every input into one member on standard output):\n"
    "      --pack             inputs are JSON lines: turn them into records\n"
    "      --json             write JSON lines instead of records\n"
    "      --header           with --json: also write the header and trailer lines\n"
    "      --check            read everything, write nothing; exit 0 if valid\n"
    "      --stats            print a summary table (with --json: one JSON object)\n"
    "      --head N           stop after N records\n"
    "\n"
    "Output:\n"
    "  -o, --output FILE      write to FILE instead of standard output\n"
    "  -u, --uncompressed     write raw msgpack instead of zstd frames\n"
    "  -k, --kind KIND        with --pack: header kind rollouts|examples|prompts\n"
    "                         (default rollouts)\n"
    "  -l, --level N          zstd level 1..19 (default 3)\n"
    "      --frame N          end a zstd frame every N records (default 1024)\n"
    "      --no-provenance    omit argv and time from the header written\n"
    "  -f, --force            write binary records even to a terminal\n"
    "\n"
    "Input limits (exceeding one is an error that names it):\n"
    "      --max-record BYTES one object (default 256M)\n"
    "      --max-array N      elements of one array or map (default 16M)\n"
    "      --max-string BYTES one string (default 64M)\n"
    "\n"
    "  -q, --quiet            no summary line on standard error\n"
    "      --progress         progress on standard error even when not a terminal\n"
    "  -h, --help             show this help and exit\n"
    "  -V, --version          show versions and exit\n"
    "\n"
    "Exit status: 0 ok, 1 invalid or truncated input (the records before the\n"
    "damage are still written), 2 usage error.\n"
    "\n"
    "Examples:\n"
    "  rl-cat --stats rollouts.rlr\n"
    "  rl-cat --pack --kind prompts train.jsonl -o train.rlr\n"
    "  rl-cat --json --head 3 rollouts.rlr\n"
    "  rl-cat --check day1.rlr day2.rlr && rl-cat day1.rlr day2.rlr -o all.rlr\n"
    "  rl-cat --pack theirs.jsonl | rl-ratio --model m/ | rl-cat --stats\n";

enum { SINK_RECORDS, SINK_JSON, SINK_STATS, SINK_CHECK };

typedef struct {
    int sink, pack, json, header, level;
    uint64_t head, frame;          // head = UINT64_MAX: no limit
    const char *kind;
    cli_out_opts out;
    rec_limits lim;
} options;

static options parse_options(int argc, char **argv) {
    enum { O_PACK = 256, O_JSON, O_HEADER, O_CHECK, O_STATS, O_HEAD, O_FRAME, O_MAXREC, O_MAXARR, O_MAXSTR };
    static const struct option longopts[] = {
        {"pack", no_argument, 0, O_PACK},       {"json", no_argument, 0, O_JSON},
        {"header", no_argument, 0, O_HEADER},   {"check", no_argument, 0, O_CHECK},
        {"stats", no_argument, 0, O_STATS},     {"head", required_argument, 0, O_HEAD},
        {"kind", required_argument, 0, 'k'},    {"level", required_argument, 0, 'l'},
        {"frame", required_argument, 0, O_FRAME}, {"max-record", required_argument, 0, O_MAXREC},
        {"max-array", required_argument, 0, O_MAXARR}, {"max-string", required_argument, 0, O_MAXSTR},
        CLI_OUT_LONGOPTS,                       {0, 0, 0, 0}};
    options o = {.sink = SINK_RECORDS, .level = 3, .head = UINT64_MAX,
                 .frame = recw_default_opts.frame_records, .kind = NULL, .lim = rec_default_limits};
    int check = 0, stats = 0, c;
    while ((c = getopt_long(argc, argv, CLI_OUT_SHORTOPTS "k:l:", longopts, NULL)) != -1) {
        if (cli_out_option(c, optarg, &o.out, USAGE)) continue;
        switch (c) {
        case O_PACK: o.pack = 1; break;
        case O_JSON: o.json = 1; break;
        case O_HEADER: o.header = 1; break;
        case O_CHECK: check = 1; break;
        case O_STATS: stats = 1; break;
        case O_HEAD: o.head = cli_parse_uint("--head", optarg, UINT64_MAX - 1, 0); break;
        case 'k': o.kind = optarg; break;
        case 'l': o.level = (int)cli_parse_uint("--level", optarg, 19, 0); break;
        case O_FRAME: o.frame = cli_parse_uint("--frame", optarg, UINT32_MAX, 0); break;
        case O_MAXREC: o.lim.max_record = cli_parse_uint("--max-record", optarg, UINT32_MAX, 1); break;
        case O_MAXARR: o.lim.max_array = cli_parse_uint("--max-array", optarg, UINT32_MAX, 1); break;
        case O_MAXSTR: o.lim.max_string = cli_parse_uint("--max-string", optarg, UINT32_MAX, 1); break;
        }
    }
    if (check + stats > 1) cli_usage_error("--check and --stats are different modes; choose one");
    if (check && o.json) cli_usage_error("--check writes nothing; --json does not apply");
    if (o.header && (!o.json || stats)) cli_usage_error("--header applies to --json output of records");
    if (o.level < 1) cli_usage_error("--level: the zstd level must be 1..19");
    if (o.frame == 0) cli_usage_error("--frame: a frame holds at least one record");
    if (o.kind && !o.pack) cli_usage_error("--kind applies to --pack (records carry their header's kind)");
    if (o.kind && strcmp(o.kind, "rollouts") && strcmp(o.kind, "examples") && strcmp(o.kind, "prompts"))
        cli_usage_error("--kind: expected rollouts, examples or prompts, got '%s'", o.kind);
    o.sink = check ? SINK_CHECK : stats ? SINK_STATS : o.json ? SINK_JSON : SINK_RECORDS;
    return o;
}

// Where records go, and what has gone there.
typedef struct {
    const options *o;
    int fd;
    rec_t *header;          // the output member's header, from the first input
    int have_header;
    recw_t *w;              // SINK_RECORDS, once the header is known
    sbuf line;              // SINK_JSON output waiting for write()
    stats_t st;             // SINK_STATS
    uint64_t count, bytes_out;
} sink_t;

static void sink_write_text(sink_t *k, int force) {
    if (!force && k->line.len < ((size_t)1 << 16)) return;
    size_t off = 0;
    while (off < k->line.len) {
        ssize_t n = write(k->fd, k->line.data + off, k->line.len - off);
        if (n < 0) cli_die("write error: %s: %s", k->o->out.output ? k->o->out.output : "(stdout)", strerror(errno));
        off += (size_t)n;
    }
    k->bytes_out += k->line.len;
    k->line.len = 0;
}

static void sink_flush(sink_t *k) {
    rl_err e;
    if (k->w && recw_flush(k->w, &e)) cli_die("%s", e.msg);
    if (k->o->sink == SINK_JSON) sink_write_text(k, 1);
}

// The first header becomes the output's; later ones must be of the same kind.
static void sink_header(sink_t *k, const rec_t *h, const char *where) {
    const char *kind = "", *first = "";
    size_t kl = 0, fl = 0;
    rec_get_str(h, "kind", &kind, &kl);
    if (k->have_header) {
        rec_get_str(k->header, "kind", &first, &fl);
        if (kl != fl || memcmp(kind, first, kl))
            cli_die("member of kind \"%.*s\" cannot join the output of kind \"%.*s\": %s",
                    (int)kl, kind, (int)fl, first, where);
        return;
    }
    rec_copy(k->header, h);
    k->have_header = 1;
    if (k->o->out.no_provenance) {
        rec_del(k->header, "argv");
        rec_del(k->header, "time");
    }
    rl_err e;
    if (k->o->sink == SINK_RECORDS) {
        recw_opts wo = recw_default_opts;
        wo.raw = k->o->out.raw;
        wo.level = k->o->level;
        wo.frame_records = k->o->frame;
        if (!(k->w = recw_fdopen(k->fd, k->o->out.output ? k->o->out.output : "(stdout)", &wo, k->header, &e)))
            cli_die("%s", e.msg);
    } else if (k->o->sink == SINK_JSON && k->o->header) {
        if (json_from_rec(k->header, &k->line, &e)) cli_die("header: %s: %s", e.msg, where);
        sbuf_putc(&k->line, '\n');
    }
}

// The header of JSON lines that bring none: rl-cat is their producer.
static void sink_generated_header(sink_t *k, int argc, char **argv, const char *where) {
    rec_t *h = rec_new();
    rec_make_header(h, k->o->kind ? k->o->kind : "rollouts", "rl-cat", argc, argv, k->o->out.no_provenance);
    sink_header(k, h, where);
    rec_free(h);
}

// Returns 0, or -1 with err when the record cannot go to this sink.
static int sink_record(sink_t *k, const rec_t *r, rl_err *e) {
    int rc = 0;
    switch (k->o->sink) {
    case SINK_RECORDS:
        rc = recw_write(k->w, r, e);
        break;
    case SINK_JSON: {
        size_t before = k->line.len;
        if ((rc = json_from_rec(r, &k->line, e))) k->line.len = before;
        else {
            sbuf_putc(&k->line, '\n');
            sink_write_text(k, 0);
        }
        break;
    }
    case SINK_STATS:
        rc = stats_add(&k->st, r, e);
        break;
    case SINK_CHECK:
        rc = fld_check(r, e);
        break;
    }
    if (!rc) k->count++;
    return rc;
}

static void sink_close(sink_t *k) {
    rl_err e;
    switch (k->o->sink) {
    case SINK_RECORDS:
        if (recw_close(k->w, &e)) cli_die("%s", e.msg);
        k->bytes_out = recw_bytes_written(k->w);
        recw_free(k->w);
        break;
    case SINK_JSON:
        if (k->o->header) sbuf_printf(&k->line, "{\"rlpipe_end\":1,\"count\":%llu}\n", (unsigned long long)k->count);
        break;
    case SINK_STATS:
        if (k->o->json) stats_json(&k->st, &k->line);
        else stats_table(&k->st, &k->line);
        break;
    }
    if (k->o->sink != SINK_RECORDS && k->o->sink != SINK_CHECK) sink_write_text(k, 1);
}

int main(int argc, char **argv) {
    cli_init("rl-cat");
    options o = parse_options(argc, argv);
    int ninputs;
    char **inputs = cli_inputs(argc, argv, &ninputs);
    cli_refuse_overwrite(inputs, ninputs, o.out.output, "output");

    int binary = o.sink == SINK_RECORDS;
    sink_t k = {.o = &o, .header = rec_new()};
    k.fd = (o.sink == SINK_CHECK) ? -1 : cli_open_output(o.out.output, binary, o.out.force);
    stats_init(&k.st);
    rec_t *rec = rec_new();
    cli_progress prog;
    cli_progress_init(&prog, o.out.progress);
    double t0 = clock_now();
    uint64_t bytes_in = 0, members = 0;

    // --head N stops after N records, but the output still takes its header from the input.
#define HEAD_DONE() (k.have_header && k.count >= o.head)
    for (int i = 0; i < ninputs && !HEAD_DONE(); i++) {
        rl_err e;
        src_t *s = src_open(inputs[i], o.pack, &o.lim, &e);
        if (!s) cli_die("%s", e.msg);
        const char *name = strcmp(inputs[i], "-") ? inputs[i] : "(stdin)";
        recr_event ev = RECR_HEADER;
        while (!HEAD_DONE()) {
            if (src_would_block(s)) sink_flush(&k);   // pass on what we have before waiting
            ev = src_next(s, rec);
            if (ev == RECR_END || ev == RECR_ERROR) break;
            if (ev == RECR_HEADER) {
                members++;
                sink_header(&k, rec, name);
            } else if (ev == RECR_RECORD) {
                if (!k.have_header) {  // JSON lines without a header line
                    sink_generated_header(&k, argc, argv, name);
                    members++;
                }
                rl_err e2;
                if (sink_record(&k, rec, &e2)) {
                    char where[1200];
                    cli_progress_done(&prog);
                    sink_flush(&k);   // deliver every record before the bad one
                    cli_die("%s: %s", e2.msg, src_where(s, where, sizeof where));
                }
            }
            if (cli_progress_due(&prog)) {
                char b[32];
                cli_progress_print(&prog, "%llu records, %s read", (unsigned long long)k.count,
                                   fmt_bytes(bytes_in + src_bytes_in(s), b, sizeof b));
            }
        }
        bytes_in += src_bytes_in(s);
        if (ev == RECR_ERROR) {
            cli_progress_done(&prog);
            sink_flush(&k);   // deliver every complete record before the damage
            cli_die("%s", src_error(s));
        }
        src_close(s);
    }
    if (!k.have_header) sink_generated_header(&k, argc, argv, inputs[0]);  // empty JSON lines
    cli_progress_done(&prog);
    k.st.members = members;
    sink_close(&k);
    char bin[32], bout[32];
    if (!o.out.quiet && o.sink == SINK_CHECK)
        fprintf(stderr, "rl-cat: ok: %llu records in %llu member%s, %d file%s\n", (unsigned long long)k.count,
                (unsigned long long)members, members == 1 ? "" : "s", ninputs, ninputs == 1 ? "" : "s");
    else if (!o.out.quiet)
        fprintf(stderr, "rl-cat: %llu records, %llu member%s, %d file%s, %s in, %s out, %.2f s\n",
                (unsigned long long)k.count, (unsigned long long)members, members == 1 ? "" : "s", ninputs,
                ninputs == 1 ? "" : "s", fmt_bytes(bytes_in, bin, sizeof bin),
                fmt_bytes(k.bytes_out, bout, sizeof bout), clock_now() - t0);
    rec_free(rec);
    rec_free(k.header);
    stats_free(&k.st);
    sbuf_free(&k.line);
    if (k.fd > 1 && close(k.fd)) cli_die("write error: %s: %s", o.out.output, strerror(errno));
    return 0;
}
