#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <getopt.h>
#include <msgpack.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "clock.h"
#include "records/reader.h"
#include "util.h"

static const char *tool_name = "rlpipe";

void cli_init(const char *tool) {
    tool_name = tool;
    signal(SIGPIPE, SIG_DFL);
}

const char *cli_tool(void) { return tool_name; }

static void vmessage(const char *kind, const char *fmt, va_list ap) {
    fflush(stdout);
    flockfile(stderr);   // one line, even when threads report at once
    fprintf(stderr, "%s: %s", tool_name, kind);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    funlockfile(stderr);
}

const char *cli_partial_check(cli_partial *p, const rec_t *trailer, const char *where, char *why, size_t size) {
    size_t n;
    const char *s = rec_partial(trailer, &n);
    if (!s) return NULL;
    snprintf(why, size, "%.*s", (int)n, s);
    p->seen++;
    if (p->allow) cli_warn("%s: a partial member, its writer lost records (%s): read with --allow-partial", where, why);
    else
        cli_error("%s: a partial member, its writer lost records (%s): its records are read, and the run ends with "
                  "exit status 1 (--allow-partial accepts it)", where, why);
    return why;
}

int cli_partial_failed(const cli_partial *p) { return p->seen && !p->allow; }

void cli_require_utf8_args(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        size_t n = strlen(argv[i]);
        if (utf8_valid((const uint8_t *)argv[i], n)) continue;
        // The argument as Python's backslashreplace shows it: what is not
        // printable ASCII as \xNN (the terminal may not be UTF-8 either).
        char shown[200];
        size_t k = 0;
        for (size_t j = 0; j < n && k + 5 < sizeof shown; j++) {
            unsigned char ch = (unsigned char)argv[i][j];
            k += (size_t)snprintf(shown + k, sizeof shown - k, ch >= 0x20 && ch < 0x7f ? "%c" : "\\x%02x", ch);
        }
        cli_usage_error("the argument '%s%s' is not valid UTF-8: the stream's header and records carry the "
                        "arguments, paths and stop strings as UTF-8 text, which readers check",
                        shown, k + 5 >= sizeof shown ? "..." : "");
    }
}

void cli_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmessage("error: ", fmt, ap);
    va_end(ap);
    exit(1);
}

void cli_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmessage("error: ", fmt, ap);
    va_end(ap);
    fprintf(stderr, "Try '%s --help' for more information.\n", tool_name);
    exit(2);
}

void cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmessage("error: ", fmt, ap);
    va_end(ap);
}

void cli_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmessage("warning: ", fmt, ap);
    va_end(ap);
}

void cli_print_version(void) {
    printf("%s (rlpipe) %s\n", tool_name, RLPIPE_VERSION);
    printf("libzstd %s, msgpack-c %s\n", ZSTD_versionString(), msgpack_version());
}

uint64_t cli_parse_uint(const char *opt, const char *s, uint64_t max, int allow_suffix) {
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
        cli_usage_error("%s: expected a non-negative integer, got '%s'", opt, s ? s : "");
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    if (allow_suffix && *end) {
        if (*end == 'k' || *end == 'K') shift = 10;
        else if (*end == 'M') shift = 20;
        else if (*end == 'G') shift = 30;
        if (shift) end++;
    }
    if (errno || *end || end == s)
        cli_usage_error("%s: expected a non-negative integer%s, got '%s'", opt,
                        allow_suffix ? " (suffix k, M or G allowed)" : "", s);
    if (shift && v > (UINT64_MAX >> shift)) v = UINT64_MAX;
    else v <<= shift;
    if (v > max) cli_usage_error("%s: %s is larger than %llu", opt, s, (unsigned long long)max);
    return v;
}

int cli_out_option(int c, const char *arg, cli_out_opts *o, const char *usage) {
    switch (c) {
    case 'o': o->output = arg; return 1;
    case 'u': o->raw = 1; return 1;
    case CLI_OPT_NOPROV: o->no_provenance = 1; return 1;
    case 'f': o->force = 1; return 1;
    case 'q': o->quiet = 1; return 1;
    case CLI_OPT_PROGRESS: o->progress = 1; return 1;
    case 'h': fputs(usage, stdout); exit(0);
    case 'V': cli_print_version(); exit(0);
    case '?': fprintf(stderr, "Try '%s --help' for more information.\n", cli_tool()); exit(2);
    default: return 0;
    }
}

char **cli_inputs(int argc, char **argv, int *n) {
    static char *stdin_only[] = {"-"};
    *n = optind < argc ? argc - optind : 1;
    return optind < argc ? argv + optind : stdin_only;
}

void cli_refuse_overwrite(char **inputs, int n, const char *path, const char *what) {
    for (int i = 0; path && i < n; i++)
        if (cli_same_file(path, inputs[i]))
            cli_usage_error("the %s %s is also an input; it would be destroyed", what, path);
}

double cli_parse_f64(const char *opt, const char *s, double lo, double hi, int hi_open) {
    char *end;
    errno = 0;
    double v = s && *s && *s != ' ' ? strtod(s, &end) : NAN;
    if (!s || !*s || *s == ' ' || errno || *end || !isfinite(v))
        cli_usage_error("%s: expected a number, got '%s'", opt, s ? s : "");
    if (v < lo || (hi_open ? v >= hi : v > hi))
        cli_usage_error("%s: %s is outside [%g, %g%s", opt, s, lo, hi, hi_open ? ")" : "]");
    return v;
}

int cli_open_output(const char *path, int binary, int force) {
    int fd = 1;
    if (path && strcmp(path, "-")) {
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd < 0) cli_die("cannot create output: %s: %s", path, strerror(errno));
        return fd;
    }
    if (binary && !force && isatty(fd))
        cli_usage_error("refusing to write binary records to a terminal; "
                        "use -o FILE, a pipe, --json, or --force");
    return fd;
}

int cli_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!a || !b || !strcmp(a, "-") || !strcmp(b, "-")) return 0;
    if (stat(a, &sa) || stat(b, &sb)) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void cli_progress_init(cli_progress *p, int force) {
    p->on = force || isatty(2);
    p->last = clock_now();
    p->shown = 0;
}

int cli_progress_due(cli_progress *p) {
    if (!p->on) return 0;
    double now = clock_now();
    if (now - p->last < 1.0 / 6) return 0;
    p->last = now;
    return 1;
}

void cli_progress_print(cli_progress *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "\r%s: ", tool_name);
    vfprintf(stderr, fmt, ap);
    fputs("\033[K", stderr);
    va_end(ap);
    p->shown = 1;
}

void cli_progress_done(cli_progress *p) {
    if (p->shown) fputs("\r\033[K", stderr);
    p->shown = 0;
}
