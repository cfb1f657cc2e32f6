// rl-sync — pushes a checkpoint's weights into running receivers
// (rl-sample --listen, rl-ratio --listen; doc/design.md §5): once, or, with --watch,
// every new version a checkpoint root gets. The pushes are syncer.h's (one
// thread per receiver), the root is followed by watch.h.
#include <errno.h>
#include <getopt.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hfweights.h"
#include "cli/cli.h"
#include "cli/cli_signal.h"
#include "clock.h"
#include "sync/push.h"
#include "sync/push_lora.h"
#include "sync/syncer.h"
#include "sync/watch.h"

static const char USAGE[] =
    "Usage: rl-sync [OPTION]... SRC --to ADDR [--to ADDR]...\n"
    "Push the weights of SRC into running samplers and scorers (rl-sample and\n"
    "rl-ratio with --listen), which take them without stopping. SRC is a checkpoint\n"
    "root (the version its 'latest' names is pushed) or a model directory.\n"
    "A version holding a LoRA adapter (adapter_config.json and\n"
    "adapter_model.safetensors, no model.safetensors: rl-learn --lora-rank) is\n"
    "pushed as the adapter's tensors alone, which each receiver merges into the\n"
    "base it loaded (its --model), in f32, rounded once to its precision.\n"
    "\n"
    "Receivers:\n"
    "      --to ADDR          a receiver: unix:PATH, PATH, or tcp:HOST:PORT\n"
    "                         (repeatable; at least one is required)\n"
    "      --token-file FILE  the shared secret receivers ask for (required with tcp)\n"
    "      --timeout S        give up a push that makes no progress for S seconds\n"
    "                         (default 30)\n"
    "      --retry S          without --watch: try a receiver nobody listens at again\n"
    "                         for S seconds (default 10; 0: once)\n"
    "\n"
    "Versions:\n"
    "      --watch            keep running: push every new version of the checkpoint\n"
    "                         root SRC once its weights are written (SRC/published),\n"
    "                         to each receiver the newest one it lacks\n"
    "      --poll S           with --watch: re-read SRC/published and SRC/latest, try\n"
    "                         receivers nobody listens at and probe the others\n"
    "                         every S seconds\n"
    "                         (default 1); without it: the interval of --retry\n"
    "      --max-version N    with --watch: exit once every receiver holds version N\n"
    "                         or a newer one\n"
    "      --as-version N     announce SRC as version N (without --watch; a model\n"
    "                         directory without state.json is version 0)\n"
    "\n"
    "Output:\n"
    "  -q, --quiet            no line per push and no summary on standard error\n"
    "      --progress         a status line on standard error even when not a terminal\n"
    "  -h, --help             show this help and exit\n"
    "  -V, --version          show versions and exit\n"
    "\n"
    "With --watch it ends, with status 0, on SIGINT or SIGTERM, at --max-version, or\n"
    "once every receiver it has reached has gone away.\n"
    "\n"
    "Exit status: 0 ok (without --watch: every receiver holds the version), 1 a push\n"
    "failed or SRC cannot be read, 2 usage error.\n"
    "\n"
    "Examples:\n"
    "  rl-sync ckpt/ --to unix:/run/sampler.sock\n"
    "  rl-sync --watch ckpt/ --to unix:/run/s.sock --to unix:/run/r.sock\n"
    "  rl-sync --watch --token-file key ckpt/ --to tcp:gpu2:7070\n";

typedef struct {
    const char *src, *token_file;
    net_addr *to;
    size_t nto;
    double timeout, retry, poll;
    int watch, quiet, progress, has_as_version, has_max_version;
    uint64_t as_version, max_version;
} options;

static void add_receiver(options *o, const char *arg) {
    rl_err e;
    net_addr a;
    if (net_parse(arg, &a, &e)) cli_usage_error("--to: %s", e.msg);
    char name[400], other[400];
    net_format(&a, name, sizeof name);
    for (size_t i = 0; i < o->nto; i++) {
        net_format(&o->to[i], other, sizeof other);
        if (!strcmp(name, other)) cli_usage_error("--to %s: given twice", name);
    }
    o->to = xrealloc(o->to, (o->nto + 1) * sizeof *o->to);
    o->to[o->nto++] = a;
}

static options parse_options(int argc, char **argv) {
    enum { O_TO = 256, O_TOKEN, O_TIMEOUT, O_RETRY, O_WATCH, O_POLL, O_MAX_VERSION, O_AS_VERSION, O_PROGRESS };
    static const struct option longopts[] = {
        {"to", required_argument, 0, O_TO},           {"token-file", required_argument, 0, O_TOKEN},
        {"timeout", required_argument, 0, O_TIMEOUT}, {"retry", required_argument, 0, O_RETRY},
        {"watch", no_argument, 0, O_WATCH},           {"poll", required_argument, 0, O_POLL},
        {"max-version", required_argument, 0, O_MAX_VERSION},
        {"as-version", required_argument, 0, O_AS_VERSION},
        {"quiet", no_argument, 0, 'q'},               {"progress", no_argument, 0, O_PROGRESS},
        {"help", no_argument, 0, 'h'},                {"version", no_argument, 0, 'V'},
        {0, 0, 0, 0}};
    options o = {.timeout = PUSH_TIMEOUT, .retry = 10, .poll = 1};
    int c;
    while ((c = getopt_long(argc, argv, "qhV", longopts, NULL)) != -1) {
        switch (c) {
        case O_TO: add_receiver(&o, optarg); break;
        case O_TOKEN: o.token_file = optarg; break;
        case O_TIMEOUT: o.timeout = cli_parse_f64("--timeout", optarg, 0.001, 1e6, 0); break;
        case O_RETRY: o.retry = cli_parse_f64("--retry", optarg, 0, 1e6, 0); break;
        case O_WATCH: o.watch = 1; break;
        case O_POLL: o.poll = cli_parse_f64("--poll", optarg, 0.01, 3600, 0); break;
        case O_MAX_VERSION:
            o.has_max_version = 1;
            o.max_version = cli_parse_uint("--max-version", optarg, UINT64_MAX, 0);
            break;
        case O_AS_VERSION:
            o.has_as_version = 1;
            o.as_version = cli_parse_uint("--as-version", optarg, UINT64_MAX, 0);
            break;
        case 'q': o.quiet = 1; break;
        case O_PROGRESS: o.progress = 1; break;
        case 'h': fputs(USAGE, stdout); exit(0);
        case 'V':
            cli_print_version();
            printf("libxxhash %u.%u.%u, %s\n", XXH_versionNumber() / 10000, XXH_versionNumber() / 100 % 100,
                   XXH_versionNumber() % 100, OpenSSL_version(OPENSSL_VERSION));
            exit(0);
        default: fprintf(stderr, "Try 'rl-sync --help' for more information.\n"); exit(2);
        }
    }
    if (optind == argc) cli_usage_error("give SRC: a checkpoint root or a model directory");
    if (argc - optind > 1) cli_usage_error("one SRC only, got '%s' and '%s'", argv[optind], argv[optind + 1]);
    o.src = argv[optind];
    if (!o.nto) cli_usage_error("--to ADDR: at least one receiver is required");
    for (size_t i = 0; i < o.nto && !o.token_file; i++)
        if (o.to[i].tcp) cli_usage_error("--to tcp:...: a tcp receiver needs --token-file FILE (the shared secret)");
    if (o.has_max_version && !o.watch) cli_usage_error("--max-version goes with --watch");
    if (o.has_as_version && o.watch) cli_usage_error("--as-version names the one version of a push without --watch");
    return o;
}

// ---- Output: a line per push from the receivers' threads, the progress line from the main one.
typedef struct {
    const options *o;
    pthread_mutex_t mu;
    cli_progress prog;
    int v0_hint;             // SRC has no version of its own (0) and no --as-version
} output;

static const char *vname(uint64_t v, char *buf, size_t size) {
    snprintf(buf, size, "v%06llu", (unsigned long long)v);
    return buf;
}

static const char *rate(uint64_t bytes, double seconds, char *buf, size_t size) {
    char b[32];
    snprintf(buf, size, "%s/s", fmt_bytes(seconds > 0 ? (uint64_t)((double)bytes / seconds) : 0, b, sizeof b));
    return buf;
}

static void on_event(void *ctx, const sync_event *e) {
    output *out = ctx;
    char v[32], b[32], r[48];
    pthread_mutex_lock(&out->mu);
    cli_progress_done(&out->prog);
    switch (e->kind) {
    case SYNC_PUSHED: {
        char upd[300] = "";
        if (e->rep->has_update) {
            char d[240];
            surv_describe(&e->rep->update, e->rep->dtype, d, sizeof d);
            snprintf(upd, sizeof upd, "; the update from %s: %s", vname(e->rep->had, v, sizeof v), d);
        }
        char merged[64] = "";
        if (e->rep->adapter) snprintf(merged, sizeof merged, ", merged in %.0f us", e->rep->merge_us);
        if (!out->o->quiet)
            fprintf(stderr, "rl-sync: %s -> %s: %s%s in %.3f s (%s)%s, receiver stall %.0f us%s\n",
                    vname(e->version, v, sizeof v), e->to, fmt_bytes(e->rep->bytes, b, sizeof b),
                    e->rep->adapter ? " of adapter" : "", e->rep->seconds,
                    rate(e->rep->bytes, e->rep->seconds, r, sizeof r), merged, e->rep->stall_us, upd);
        if (e->rep->lost)   // once per receiver (surv_watch_add)
            cli_warn("%s keeps its weights at %s, whose versions carry on average %.2f of the learner's update (the "
                     "%d from %s to %s; the latest: %.1f%% of the weights changed, %.1f%% in f32): its sampler goes "
                     "on sampling the model it started from; sample at f16 or f32 (rl-sample(1), Precision)", e->to,
                     e->rep->dtype, e->rep->lost_along, SURV_WINDOW, vname(e->rep->lost_from, v, sizeof v),
                     vname(e->version, b, sizeof b), 100 * e->rep->update.changed, 100 * e->rep->update.moved);
        break;
    }
    case SYNC_HELD:
        if (!out->o->quiet)
            fprintf(stderr, "rl-sync: %s already holds %s%s\n", e->to, vname(e->version, v, sizeof v),
                    out->v0_hint && e->version == 0 ? " (SRC has no state.json, so it is version 0: give --as-version N)"
                                                    : "");
        break;
    case SYNC_FAILED: cli_warn("%s not pushed: %s", vname(e->version, v, sizeof v), e->error); break;
    case SYNC_WAITING:
        if (!out->o->quiet) {
            if (out->o->watch)
                fprintf(stderr, "rl-sync: nobody listens at %s yet; trying again every %g s\n", e->to, out->o->poll);
            else
                fprintf(stderr, "rl-sync: nobody listens at %s yet; trying again for %g s\n", e->to, out->o->retry);
        }
        break;
    case SYNC_GONE:
        if (!out->o->quiet) fprintf(stderr, "rl-sync: %s has gone away\n", e->to);
        break;
    }
    pthread_mutex_unlock(&out->mu);
}

static void show_progress(output *out, const sync_stats *st, uint64_t latest, int have_latest) {
    if (!cli_progress_due(&out->prog)) return;
    char v[32] = "none yet", b[32];
    if (have_latest) vname(latest, v, sizeof v);
    pthread_mutex_lock(&out->mu);
    cli_progress_print(&out->prog, "%s %s; %zu receivers: %zu pushing, %zu not listening yet, %zu gone; %llu pushes, %s",
                       out->o->watch ? "latest" : "pushing", v, out->o->nto, st->pushing, st->waiting, st->gone, (unsigned long long)st->pushes,
                       fmt_bytes(st->bytes, b, sizeof b));
    pthread_mutex_unlock(&out->mu);
}

// ---- The two modes ------------------------------------------------------------------

// Without --watch: the version SRC holds, to every receiver. 1 when each holds it.
static int push_once(const options *o, sync_t *s, output *out) {
    rl_err e;
    char dir[4096];
    uint64_t version = 0, own;
    struct stat st;
    if (stat(o->src, &st)) cli_die("cannot open the checkpoint: %s: %s", o->src, strerror(errno));
    if (ckpt_resolve(o->src, dir, sizeof dir, &version, &e)) cli_die("%s", e.msg);
    if (push_lora_is_adapter(dir)) {   // read once here, so that a bad checkpoint is one clear error
        lora_config c;
        st_file *f;
        push_tensor *t;
        size_t n;
        int bad = push_lora_open(dir, &c, &f, &t, &n, &e);
        st_close(f);
        free(t);
        if (bad) cli_die("%s", e.msg);
    } else {
        hfw_set *f = hfw_open(dir, &e);
        if (!f) cli_die("%s", e.msg);
        hfw_close(f);
    }
    if (o->has_as_version) version = o->as_version;
    else out->v0_hint = version == 0 && ckpt_state_uint(dir, "version", &own, &e) == 0;
    sync_offer(s, dir, version);
    sync_stats ss = sync_get_stats(s);
    while (ss.ended < o->nto && !cli_stop_requested) {
        struct pollfd p[2] = {{.fd = sync_fd(s), .events = POLLIN}, {.fd = cli_stop_fd(), .events = POLLIN}};
        poll(p, 2, 200);
        ss = sync_get_stats(s);
        show_progress(out, &ss, version, 1);
    }
    return ss.pushes + ss.held == o->nto && !cli_stop_requested;
}

// --watch: every new version of the root, until a signal, --max-version or
// every receiver reached has gone.
static void follow(const options *o, sync_t *s, output *out) {
    rl_err e;
    watch_t *w = watch_open(o->src, &e);
    if (!w) cli_die("%s", e.msg);
    char dir[4096], warned[sizeof e.msg] = "";
    uint64_t latest = 0;
    int have = 0;
    while (!cli_stop_requested) {
        uint64_t v;
        int rc = watch_newest(w, dir, sizeof dir, &v, &e);
        if (rc < 0 && strcmp(warned, e.msg)) {   // said once, until it changes
            cli_warn("%s", e.msg);
            snprintf(warned, sizeof warned, "%s", e.msg);
        }
        if (rc > 0 && (!have || v > latest)) {
            latest = v, have = 1;
            sync_offer(s, dir, v);
        }
        sync_stats ss = sync_get_stats(s);
        if (o->has_max_version && sync_all_hold(s, o->max_version)) break;
        if (sync_all_gone(s)) {
            if (!o->quiet) {
                pthread_mutex_lock(&out->mu);
                cli_progress_done(&out->prog);
                fprintf(stderr, "rl-sync: every receiver it reached has gone away\n");
                pthread_mutex_unlock(&out->mu);
            }
            break;
        }
        show_progress(out, &ss, latest, have);
        int fds[2] = {cli_stop_fd(), sync_fd(s)};
        watch_wait(w, out->prog.on ? 0.2 : o->poll, fds, 2);
    }
    watch_close(w);
}

int main(int argc, char **argv) {
    cli_init("rl-sync");
    options o = parse_options(argc, argv);
    rl_err e;
    sbuf token = {0};
    if (o.token_file && push_read_token(o.token_file, &token, &e)) cli_die("%s", e.msg);
    cli_catch_signals(CLI_STOP_WAKE);   // the main loop is woken through a pipe
    output out = {.o = &o};
    pthread_mutex_init(&out.mu, NULL);
    cli_progress_init(&out.prog, o.progress);
    double t0 = clock_now();
    sync_opts so = {.to = o.to, .nto = o.nto, .token = o.token_file ? &token : NULL, .timeout = o.timeout,
                    .poll = o.poll, .watch = o.watch, .retry = o.retry, .event = on_event, .ctx = &out};
    sync_t *s = sync_start(&so);
    int ok = 1;
    if (o.watch) follow(&o, s, &out);
    else ok = push_once(&o, s, &out);
    sync_stats st = sync_stop(s);
    cli_progress_done(&out.prog);
    if (cli_stop_requested && !o.watch) cli_warn("stopped by a signal before every receiver held the version");
    if (!o.quiet) {
        char b[32], r[48];
        fprintf(stderr, "rl-sync: %llu push%s, %llu failed, %llu already held, %llu versions skipped for newer ones, %s",
                (unsigned long long)st.pushes, st.pushes == 1 ? "" : "es", (unsigned long long)st.failures,
                (unsigned long long)st.held,
                (unsigned long long)st.passed_over, fmt_bytes(st.bytes, b, sizeof b));
        if (st.pushes) fprintf(stderr, " at %s", rate(st.bytes, st.seconds, r, sizeof r));
        fprintf(stderr, ", %.2f s\n", clock_now() - t0);
    }
    sbuf_free(&token);
    free(o.to);
    return ok ? 0 : 1;
}
