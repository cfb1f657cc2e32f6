// rl-cat — inspect, check, convert, concatenate, merge and summarise record
// streams. Reads every input (records or JSON lines) one after the other, or
// with --merge all at once, whole groups at a time (records/merge.h), and
// sends each record to one sink: a record stream (one member, on standard
// output, a file, or with --to a socket: sync/recnet.h), JSON lines, a
// summary, or nothing.
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "clock.h"
#include "records/fields.h"
#include "records/json.h"
#include "records/merge.h"
#include "records/source.h"
#include "records/stats.h"
#include "records/writer.h"
#include "sync/push.h"
#include "sync/net.h"
#include "sync/merger.h"
#include "sync/recnet.h"
#include "sync/recsink.h"

static const char USAGE[] =
    "Usage: rl-cat [OPTION]... [FILE]...\n"
    "  or:  rl-cat --merge [--round N] [OPTION]... SOURCE...\n"
    "Validate, concatenate, merge, convert and summarise rlpipe record streams.\n"
    "With no FILE, or when FILE is -, read standard input.\n"
    "\n"
    "Modes (default: concatenate every input into one member on standard output):\n"
    "      --pack             inputs are JSON lines: turn them into records\n"
    "      --json             write JSON lines instead of records\n"
    "      --header           with --json: also write the header and trailer lines\n"
    "      --check            read everything, write nothing; exit 0 if valid\n"
    "      --stats            print a summary table (with --json: one JSON object)\n"
    "      --pass-at K,...    with --stats: pass@k (unbiased, Chen et al. 2021) over\n"
    "                         the groups, and maj@k (majority \"pred\" of a group's\n"
    "                         first k samples); correct: reward > 0\n"
    "      --head N           stop after N records\n"
    "\n"
    "Merging live streams (several samplers, one learner):\n"
    "      --merge            read every SOURCE at once and write whole groups as\n"
    "                         they complete; a SOURCE is a file, a named pipe, -,\n"
    "                         or tcp:HOST:PORT or unix:PATH to listen at\n"
    "      --round N          N groups of each live source in turn: with K samplers\n"
    "                         of rl-sample --batch B/K, rl-learn --batch B trains\n"
    "                         round b as batch b, and --max-lag is exact\n"
    "      --senders N        connections each listening SOURCE takes (default 1)\n"
    "      --start-timeout S  a SOURCE that has sent nothing S seconds after the start\n"
    "                         (a named pipe no writer wrote to, a connection that\n"
    "                         did not come) fails, and the merge goes on without it\n"
    "                         (default: wait; after 5 s, stderr says for what)\n"
    "      --token-file FILE  the shared secret of tcp: (and unix:) connections\n"
    "      --to ADDR          send the output to rl-cat --merge listening at\n"
    "                         tcp:HOST:PORT or unix:PATH instead of standard output\n"
    "      --retry S          with --to: try for S seconds while nobody listens\n"
    "                         there (default 60; 0: once)\n"
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
    CLI_PARTIAL_HELP
    "  -q, --quiet            no summary line on standard error\n"
    "      --progress         progress on standard error even when not a terminal\n"
    "  -h, --help             show this help and exit\n"
    "  -V, --version          show versions and exit\n"
    "\n"
    "Exit status: 0 ok, 1 invalid or truncated input (the records before the\n"
    "damage are still written; with --merge, every other source's groups, and the\n"
    "output's trailer says it is partial) or a partial one (read whole, and the\n"
    "output marked partial too), 2 usage error.\n"
    "\n"
    "Examples:\n"
    "  rl-cat --stats rollouts.rlr\n"
    "  rl-cat --pack --kind prompts train.jsonl -o train.rlr\n"
    "  rl-cat --json --head 3 rollouts.rlr\n"
    "  rl-sample -n 16 --model m/ test.jsonl | rl-cat --stats --pass-at 1,8,16\n"
    "  rl-cat --check day1.rlr day2.rlr && rl-cat day1.rlr day2.rlr -o all.rlr\n"
    "  rl-cat --pack theirs.jsonl | rl-ratio --model m/ | rl-cat --stats\n"
    "  rl-cat --merge --round 8 --senders 2 --token-file tok tcp:0.0.0.0:7000 | rl-learn ...\n"
    "  rl-sample ... | rl-cat --to tcp:learnhost:7000 --token-file tok\n";

typedef struct {
    recsink_kind sink;
    int pack, json, header, level;
    uint64_t head, frame;          // head = UINT64_MAX: no limit
    const char *kind;
    cli_out_opts out;
    rec_limits lim;
    int merge, senders, senders_set, round_set;
    uint64_t round;
    const char *token_file, *to;
    double retry, start_timeout;
    net_addr to_addr;
    int allow_partial;
    uint32_t pass_at[PK_MAX_K];    // --pass-at's k values (npass_at of them)
    int npass_at;
} options;

// A SOURCE of --merge that is an address to listen at, not a file.
static int is_address(const char *s) { return !strncmp(s, "tcp:", 4) || !strncmp(s, "unix:", 5); }

static options parse_options(int argc, char **argv) {
    enum { O_PACK = 256, O_JSON, O_HEADER, O_CHECK, O_STATS, O_HEAD, O_FRAME, O_MAXREC, O_MAXARR, O_MAXSTR,
           O_MERGE, O_ROUND, O_SENDERS, O_TOKEN, O_TO, O_RETRY, O_PARTIAL, O_START, O_PASSAT };
    static const struct option longopts[] = {
        {"pack", no_argument, 0, O_PACK},       {"json", no_argument, 0, O_JSON},
        {"header", no_argument, 0, O_HEADER},   {"check", no_argument, 0, O_CHECK},
        {"stats", no_argument, 0, O_STATS},     {"head", required_argument, 0, O_HEAD},
        {"kind", required_argument, 0, 'k'},    {"level", required_argument, 0, 'l'},
        {"frame", required_argument, 0, O_FRAME}, {"max-record", required_argument, 0, O_MAXREC},
        {"max-array", required_argument, 0, O_MAXARR}, {"max-string", required_argument, 0, O_MAXSTR},
        {"merge", no_argument, 0, O_MERGE},     {"round", required_argument, 0, O_ROUND},
        {"senders", required_argument, 0, O_SENDERS}, {"token-file", required_argument, 0, O_TOKEN},
        {"to", required_argument, 0, O_TO},     {"retry", required_argument, 0, O_RETRY},
        {"allow-partial", no_argument, 0, O_PARTIAL}, {"start-timeout", required_argument, 0, O_START},
        {"pass-at", required_argument, 0, O_PASSAT},
        CLI_OUT_LONGOPTS,                       {0, 0, 0, 0}};
    options o = {.sink = RECSINK_RECORDS, .level = 3, .head = UINT64_MAX, .frame = recw_default_opts.frame_records,
                 .kind = NULL, .lim = rec_default_limits, .senders = 1, .retry = -1};
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
        case O_MERGE: o.merge = 1; break;
        case O_ROUND:
            o.round = cli_parse_uint("--round", optarg, UINT32_MAX, 0);
            o.round_set = 1;
            break;
        case O_SENDERS:
            o.senders = (int)cli_parse_uint("--senders", optarg, 65536, 0);
            o.senders_set = 1;
            break;
        case O_TOKEN: o.token_file = optarg; break;
        case O_TO: o.to = optarg; break;
        case O_RETRY: o.retry = cli_parse_f64("--retry", optarg, 0, 86400, 0); break;
        case O_PARTIAL: o.allow_partial = 1; break;
        case O_PASSAT: {
            rl_err e;
            if (pk_parse(optarg, o.pass_at, &o.npass_at, &e)) cli_usage_error("--pass-at: %s", e.msg);
            break;
        }
        case O_START: o.start_timeout = cli_parse_f64("--start-timeout", optarg, 0.001, 1e9, 0); break;
        }
    }
    if (check + stats > 1) cli_usage_error("--check and --stats are different modes; choose one");
    if (check && o.json) cli_usage_error("--check writes nothing; --json does not apply");
    if (o.npass_at && !stats) cli_usage_error("--pass-at applies to --stats");
    if (o.header && (!o.json || stats)) cli_usage_error("--header applies to --json output of records");
    if (o.level < 1) cli_usage_error("--level: the zstd level must be 1..19");
    if (o.frame == 0) cli_usage_error("--frame: a frame holds at least one record");
    if (o.kind && !o.pack) cli_usage_error("--kind applies to --pack (records carry their header's kind)");
    if (o.kind && strcmp(o.kind, "rollouts") && strcmp(o.kind, "examples") && strcmp(o.kind, "prompts"))
        cli_usage_error("--kind: expected rollouts, examples or prompts, got '%s'", o.kind);
    o.sink = check ? RECSINK_CHECK : stats ? RECSINK_STATS : o.json ? RECSINK_JSON : RECSINK_RECORDS;
    if (!o.merge && (o.round_set || o.senders_set || o.start_timeout > 0))
        cli_usage_error("--round, --senders and --start-timeout apply to --merge");
    if (o.round_set && o.round == 0) cli_usage_error("--round: a round holds at least one group of each source");
    if (o.senders_set && o.senders == 0) cli_usage_error("--senders: a SOURCE to listen at takes one connection at least");
    if (o.merge && o.pack) cli_usage_error("--merge reads record streams; --pack them first");
    if (o.merge && o.head != UINT64_MAX) cli_usage_error("--merge writes whole groups; --head does not apply");
    if (o.retry >= 0 && !o.to) cli_usage_error("--retry applies to --to");
    if (o.to) {
        rl_err e;
        if (o.out.output) cli_usage_error("--to and --output both name where the records go; choose one");
        if (o.sink != RECSINK_RECORDS) cli_usage_error("--to sends records: --json, --stats and --check do not apply");
        if (net_parse(o.to, &o.to_addr, &e)) cli_usage_error("--to: %s", e.msg);
        if (o.to_addr.tcp && !o.token_file)
            cli_usage_error("--to %s: tcp needs --token-file (a shared secret authenticates the sender)", o.to);
        if (o.retry < 0) o.retry = 60;
    }
    return o;
}

// The operands of --merge that are addresses: well formed, tcp ones with a token.
static void check_sources(const options *o, char **inputs, int n) {
    int listening = 0;
    for (int i = 0; o->merge && i < n; i++) {
        if (!is_address(inputs[i])) continue;
        net_addr a;
        rl_err e;
        if (net_parse(inputs[i], &a, &e)) cli_usage_error("SOURCE %s: %s", inputs[i], e.msg);
        if (a.tcp && !o->token_file)
            cli_usage_error("SOURCE %s: tcp needs --token-file (a shared secret authenticates every sender)", inputs[i]);
        listening++;
    }
    if (o->senders_set && !listening) cli_usage_error("--senders applies to a SOURCE to listen at (tcp: or unix:)");
    if (o->token_file && !listening && !o->to)
        cli_usage_error("--token-file applies to --to and to a SOURCE of --merge to listen at (tcp: or unix:)");
}

// Ends the run at sink (recsink.h) failure err.
static _Noreturn void sink_die(const rl_err *err) { cli_die("%s", err->msg); }

static void flush(recsink_t *k) {
    rl_err e;
    if (recsink_flush(k, &e)) sink_die(&e);
}

// A record the sink refused (rc -1: msg says which, and every record before
// it is delivered first), or an output that failed (rc -2: err says how).
static _Noreturn void refused(recsink_t *k, int rc, const rl_err *err, const char *msg, cli_progress *prog) {
    if (rc == -2) sink_die(err);
    cli_progress_done(prog);
    flush(k);   // deliver every record before the bad one
    rl_err e;
    snprintf(e.msg, sizeof e.msg, "%s", msg);
    recsink_fail(k, &e);
    sink_die(&e);
}

// ---- Concatenating (the default) -------------------------------------------------

static void cat_inputs(const options *o, recsink_t *k, char **inputs, int ninputs, int argc, char **argv,
                       cli_progress *prog, double t0, cli_partial *partial) {
    rec_t *rec = rec_new();
    uint64_t bytes_in = 0, members = 0;
    // --head N stops after N records, but the output still takes its header from the input.
#define HEAD_DONE() (k->have_header && k->count >= o->head)
    for (int i = 0; i < ninputs && !HEAD_DONE(); i++) {
        rl_err e;
        src_t *s = src_open(inputs[i], o->pack, &o->lim, &e);
        if (!s) cli_die("%s", e.msg);
        const char *name = strcmp(inputs[i], "-") ? inputs[i] : "(stdin)";
        recr_event ev = RECR_HEADER;
        while (!HEAD_DONE()) {
            if (src_would_block(s)) flush(k);   // pass on what we have before waiting
            ev = src_next(s, rec);
            if (ev == RECR_END || ev == RECR_ERROR) break;
            if (ev == RECR_HEADER) {
                members++;
                if (recsink_header(k, rec, name, &e)) sink_die(&e);
            } else if (ev == RECR_TRAILER) {   // a partial input: the output is partial too
                char why[1024];
                cli_progress_done(prog);
                if (cli_partial_check(partial, rec, name, why, sizeof why)) recsink_set_partial(k, why);
            } else if (ev == RECR_RECORD) {
                if (!k->have_header) {  // JSON lines without a header line
                    if (recsink_generated_header(k, argc, argv, name, &e)) sink_die(&e);
                    members++;
                }
                int rc = recsink_record(k, rec, &e);
                if (rc) {
                    char where[1200], msg[sizeof e.msg + sizeof where];
                    snprintf(msg, sizeof msg, "%s: %s", e.msg, src_where(s, where, sizeof where));
                    refused(k, rc, &e, msg, prog);
                }
            }
            if (cli_progress_due(prog)) {
                char b[32];
                cli_progress_print(prog, "%llu records, %s read", (unsigned long long)k->count,
                                   fmt_bytes(bytes_in + src_bytes_in(s), b, sizeof b));
            }
        }
        bytes_in += src_bytes_in(s);
        if (ev == RECR_ERROR) {
            cli_progress_done(prog);
            flush(k);   // deliver every complete record before the damage
            cli_die("%s", src_error(s));
        }
        src_close(s);
    }
#undef HEAD_DONE
    rec_free(rec);
    rl_err e;
    // (empty JSON lines)
    if (!k->have_header && recsink_generated_header(k, argc, argv, inputs[0], &e)) sink_die(&e);
    cli_progress_done(prog);
    k->st.members = members;
    if (recsink_close(k, &e)) sink_die(&e);
    char bin[32], bout[32];
    if (!o->out.quiet && o->sink == RECSINK_CHECK)
        fprintf(stderr, "rl-cat: %s: %llu records in %llu member%s, %d file%s\n", partial->seen ? "partial" : "ok",
                (unsigned long long)k->count, (unsigned long long)members, members == 1 ? "" : "s", ninputs,
                ninputs == 1 ? "" : "s");
    else if (!o->out.quiet)
        fprintf(stderr, "rl-cat: %llu records, %llu member%s, %d file%s, %s in, %s out%s%s, %.2f s\n",
                (unsigned long long)k->count, (unsigned long long)members, members == 1 ? "" : "s", ninputs,
                ninputs == 1 ? "" : "s", fmt_bytes(bytes_in, bin, sizeof bin),
                fmt_bytes(k->bytes_out, bout, sizeof bout), o->to ? " to " : "", o->to ? o->to : "",
                clock_now() - t0);
}

// ---- Merging (--merge) -------------------------------------------------------------

// The merger's hooks (merger.h), on the listeners' threads.
static void on_refused(void *ctx, const char *msg) {
    (void)ctx;
    cli_warn("%s", msg);
}

static void on_listen_failed(void *ctx, int missing, const char *msg) {
    (void)ctx;
    cli_error("%s: %d connection%s expected will not come", msg, missing, missing == 1 ? "" : "s");
}

// Seconds of waiting, from the start, after which stderr says what for.
#define SAY_WAITING_S 5

// Once, when nothing has come from some sources SAY_WAITING_S seconds after
// the start: which ones (named pipes no writer has opened, or with
// --start-timeout written to; connections awaited).
static void say_waiting(const options *o, mrg_t *m) {
    sbuf line = {0};
    size_t n = mrg_nsources(m), waiting = 0;
    for (size_t i = 0; i < n; i++) {
        mrg_source_stats st;
        mrg_source(m, i, &st);
        if (st.opened || st.ended) continue;
        sbuf_printf(&line, "%s%s", waiting++ ? ", " : "", st.name);
    }
    int awaited = mrg_expected(m);
    if (awaited)
        sbuf_printf(&line, "%s%d connection%s", waiting ? " and " : "", awaited, awaited == 1 ? "" : "s");
    if (waiting || awaited)
        fprintf(stderr, "rl-cat: waiting for %.*s to start sending%s\n", (int)line.len, (char *)line.data,
                o->start_timeout > 0 ? " (--start-timeout gives up on them)" : "; --start-timeout S gives up on them");
    sbuf_free(&line);
}

// Every SOURCE at once, whole groups out; 1 when a source or a listener failed.
static int merge_sources(const options *o, recsink_t *k, char **inputs, int n, int argc, char **argv,
                         const sbuf *token, cli_progress *prog, double t0, cli_partial *partial) {
    merger_opts go = {.merge = {.round = o->round, .lim = o->lim, .start_timeout = o->start_timeout},
                      .token = token->len ? token : NULL,
                      .senders = o->senders, .tool = "rl-cat", .refused = on_refused, .failed = on_listen_failed};
    merger *g = merger_new(&go);
    mrg_t *m = merger_merge(g);
    // The listeners first: their socket files are in the at-exit list before any other thread runs.
    for (int i = 0; i < n; i++) {
        net_addr a;
        rl_err e;
        if (!is_address(inputs[i]) || net_parse(inputs[i], &a, &e)) continue;   // parsed by check_sources
        const char *at = merger_listen(g, &a, &e);
        if (!at) cli_die("%s", e.msg);
        if (!o->out.quiet) fprintf(stderr, "rl-cat: listening for records on %s\n", at);
    }
    for (int i = 0; i < n; i++)
        if (!is_address(inputs[i])) merger_add_path(g, inputs[i]);
    rec_t *rec = rec_new();
    rl_err e;
    int faults = 0, said = o->out.quiet;
    for (;;) {
        mrg_event ev = mrg_next(m, rec, 0);
        if (ev == MRG_NONE) flush(k);   // pass on what we have before waiting
        // While the sources are quiet, a reader of standard output that has
        // gone ends the merge as the next write would (SIGPIPE); then the
        // samplers writing into it see their reader gone too.
        while (ev == MRG_NONE && (ev = mrg_next(m, rec, 0.2)) == MRG_NONE) {
            if (!o->to && net_hung_up(STDOUT_FILENO)) {
                signal(SIGPIPE, SIG_DFL);
                raise(SIGPIPE);
            }
            if (!said && clock_now() - t0 >= SAY_WAITING_S) {
                said = 1;
                say_waiting(o, m);
            }
        }
        if (ev == MRG_END) break;
        if (ev == MRG_FAULT) {   // a source failed: what it lost, the output lost
            cli_progress_done(prog);
            cli_error("%s", mrg_fault(m));
            recsink_set_partial(k, mrg_fault(m));
            faults++;
        } else if (ev == MRG_PARTIAL) {
            cli_progress_done(prog);
            partial->seen++;
            if (partial->allow) cli_warn("%s: read with --allow-partial", mrg_fault(m));
            else cli_error("%s: its records are merged, and the run ends with exit status 1 (--allow-partial "
                           "accepts it)", mrg_fault(m));
            recsink_set_partial(k, mrg_fault(m));
        } else if (ev == MRG_HEADER) {
            if (recsink_header(k, rec, "(merge)", &e)) sink_die(&e);
        } else {
            int rc = recsink_record(k, rec, &e);
            if (rc) {
                mrg_source_stats st;
                merger_origin(g, rec, &st);
                char msg[sizeof e.msg + sizeof st.name + 100];
                snprintf(msg, sizeof msg, "%s: merged record %llu (from %s)", e.msg, (unsigned long long)k->count,
                         st.name);
                refused(k, rc, &e, msg, prog);
            }
            if (cli_progress_due(prog))
                cli_progress_print(prog, "%llu records out, %zu sources", (unsigned long long)k->count,
                                   mrg_nsources(m));
        }
    }
    rec_free(rec);
    // (no source gave a header)
    if (!k->have_header && recsink_generated_header(k, argc, argv, "(merge)", &e)) sink_die(&e);
    cli_progress_done(prog);
    k->st.members += merger_members(g);
    if (merger_failed(g)) recsink_set_partial(k, "a SOURCE to listen at failed: not every connection expected came");
    if (recsink_close(k, &e)) sink_die(&e);
    if (!o->out.quiet) {
        sbuf line = {0};
        char bout[32];
        int refused = merger_refused(g);
        mrg_summary(m, &line);
        sbuf_printf(&line, ", %s out%s%s", fmt_bytes(k->bytes_out, bout, sizeof bout), o->to ? " to " : "",
                    o->to ? o->to : "");
        if (refused) sbuf_printf(&line, ", %d peer%s refused", refused, refused == 1 ? "" : "s");
        fprintf(stderr, "rl-cat: %.*s, %.2f s\n", (int)line.len, (char *)line.data, clock_now() - t0);
        sbuf_free(&line);
    }
    int failed = merger_failed(g);
    merger_free(g);
    return faults || failed;
}

int main(int argc, char **argv) {
    cli_init("rl-cat");
    options o = parse_options(argc, argv);
    if (o.sink == RECSINK_RECORDS) cli_require_utf8_args(argc, argv);
    int ninputs;
    char **inputs = cli_inputs(argc, argv, &ninputs);
    check_sources(&o, inputs, ninputs);
    cli_refuse_overwrite(inputs, ninputs, o.out.output, "output");

    const char *name = o.to ? o.to : o.out.output ? o.out.output : "(stdout)";
    sbuf token = {0};
    rl_err e;
    int fd;
    if (o.token_file && push_read_token(o.token_file, &token, &e)) cli_die("%s", e.msg);
    if (o.to) {
        // A merge that stops reading: a write error, and its reason, rather than a silent SIGPIPE.
        signal(SIGPIPE, SIG_IGN);
        if ((fd = rnet_connect(&o.to_addr, token.len ? &token : NULL, o.retry, &e)) < 0) cli_die("%s", e.msg);
    } else {
        fd = o.sink == RECSINK_CHECK ? -1 : cli_open_output(o.out.output, o.sink == RECSINK_RECORDS, o.out.force);
    }
    recsink_opts so = {.kind = o.sink, .json = o.json, .header = o.header, .raw = o.out.raw, .level = o.level,
                    .frame = o.frame, .no_provenance = o.out.no_provenance, .member_kind = o.kind, .to = o.to};
    recsink_t k;
    recsink_init(&k, &so, fd, name);
    if (o.npass_at) stats_pass_at(&k.st, o.pass_at, o.npass_at);
    cli_progress prog;
    cli_progress_init(&prog, o.out.progress);
    double t0 = clock_now();
    int rc = 0;
    cli_partial partial = {.allow = o.allow_partial};
    if (o.merge) rc = merge_sources(&o, &k, inputs, ninputs, argc, argv, &token, &prog, t0, &partial);
    else cat_inputs(&o, &k, inputs, ninputs, argc, argv, &prog, t0, &partial);
    rc |= cli_partial_failed(&partial);
    recsink_free(&k);
    if (token.data) memset(token.data, 0, token.cap);
    sbuf_free(&token);
    if (k.fd > 1 && close(k.fd)) cli_die("write error: %s: %s", k.name, strerror(errno));
    return rc;
}
