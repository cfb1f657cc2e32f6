// cli.h — what every tool does the same way (doc/design.md §7): messages prefixed
// with the tool's name, exit statuses (1 data/runtime, 2 usage), --version,
// output files, refusing binary output to a terminal, progress on stderr.
#ifndef RLPIPE_CLI_H
#define RLPIPE_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "records/record.h"

// Names the tool for messages and restores the default SIGPIPE action, so a
// closed pipe ends the tool quietly.
void cli_init(const char *tool);
const char *cli_tool(void);

void cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));        // exit 1
void cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn)); // exit 2
// An error that does not end the tool at once (it goes on, and exits 1 at the end).
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_print_version(void);
// --allow-partial, and the partial members a tool reads: members whose
// writer lost records on the way, which their trailer says (rlpipe-records(5)).
typedef struct {
    int allow;   // --allow-partial: a warning, and exit status 0
    int seen;    // partial members read
} cli_partial;
#define CLI_PARTIAL_HELP                                                                             \
    "      --allow-partial    read a stream whose writer lost records (its trailer says\n"           \
    "                         \"partial\") with a warning; without it, an error, and exit\n"        \
    "                         status 1 once the records are read\n"
// At a trailer of the input `where`: NULL when its member is whole; else
// says so on standard error (an error, or with allow a warning) and returns
// why it is partial, which a tool that writes records passes on to its own
// output's trailer (recw_set_partial), so that its readers know too.
const char *cli_partial_check(cli_partial *p, const rec_t *trailer, const char *where, char *why, size_t size);
// 1 when a partial member was read without --allow-partial: the run then
// exits with status 1 at its end.
int cli_partial_failed(const cli_partial *p);

// A usage error (exit 2) showing the first argument that is not valid UTF-8:
// a tool that writes a record stream copies its arguments (paths, --stop,
// --chat-arg) into the stream's strings, which its readers refuse unless
// they are UTF-8.
void cli_require_utf8_args(int argc, char **argv);

// The output options of every tool that writes records (doc/design.md §7):
// -o/--output, -u/--uncompressed, --no-provenance, -f/--force, -q/--quiet,
// --progress, -h/--help, -V/--version. A tool puts CLI_OUT_LONGOPTS in its
// option table and CLI_OUT_SHORTOPTS in its short options, and passes every
// option getopt_long returns to cli_out_option first.
typedef struct {
    const char *output;   // NULL: standard output
    int raw, no_provenance, force, quiet, progress;
} cli_out_opts;
enum { CLI_OPT_NOPROV = 1000, CLI_OPT_PROGRESS };
#define CLI_OUT_SHORTOPTS "o:ufqhV"
#define CLI_OUT_LONGOPTS                                                                               \
    {"output", required_argument, 0, 'o'}, {"uncompressed", no_argument, 0, 'u'},                     \
        {"no-provenance", no_argument, 0, CLI_OPT_NOPROV}, {"force", no_argument, 0, 'f'},            \
        {"quiet", no_argument, 0, 'q'}, {"progress", no_argument, 0, CLI_OPT_PROGRESS},               \
        {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'V'}
// Their lines of --help, for the tools that take all of them.
#define CLI_OUT_HELP                                                                                   \
    "  -o, --output FILE      write records to FILE instead of standard output\n"                       \
    "  -u, --uncompressed     write raw msgpack instead of zstd frames\n"                              \
    "      --no-provenance    omit argv and time from the header written\n"                            \
    "  -f, --force            write binary records even to a terminal\n"                               \
    "  -q, --quiet            no summary line on standard error\n"                                     \
    "      --progress         progress on standard error even when not a terminal\n"                   \
    "  -h, --help             show this help and exit\n"                                               \
    "  -V, --version          show versions and exit\n"
// 1 if c was one of those options (stored in o; --help prints usage and
// exits 0, --version exits 0), or an unknown option or missing value (exits
// 2 pointing to --help); 0 if it is the tool's own.
int cli_out_option(int c, const char *arg, cli_out_opts *o, const char *usage);

// Parses a non-negative integer option value (suffixes k, M, G = 2^10, 2^20, 2^30
// when allow_suffix); exits 2 naming the option if it is not one or exceeds max.
uint64_t cli_parse_uint(const char *opt, const char *s, uint64_t max, int allow_suffix);

// Parses a finite number in [lo, hi] (hi_open: below hi); exits 2 naming the option otherwise.
double cli_parse_f64(const char *opt, const char *s, double lo, double hi, int hi_open);

// Opens the output ("-" or NULL: standard output). Binary output to a
// terminal is refused (exit 2) unless force. Exits 1 if it cannot be opened.
int cli_open_output(const char *path, int binary, int force);
// The input operands argv[optind..argc), or "-" (standard input) when there are none.
char **cli_inputs(int argc, char **argv, int *n);
// Exits 2 if path (an output: what names it, e.g. "output") is one of the inputs.
void cli_refuse_overwrite(char **inputs, int n, const char *path, const char *what);
// True if paths a and b name the same existing file (neither is "-").
int cli_same_file(const char *a, const char *b);

// Progress on stderr, at most 6 updates a second, when stderr is a terminal
// or when forced; cli_progress_done erases the line.
typedef struct {
    int on;
    double last;
    int shown;
} cli_progress;
void cli_progress_init(cli_progress *p, int force);
int cli_progress_due(cli_progress *p);   // 1 when an update may be printed now
void cli_progress_print(cli_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_progress_done(cli_progress *p);

#endif
