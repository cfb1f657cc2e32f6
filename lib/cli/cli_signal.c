// cli_signal.c — SIGINT and SIGTERM: a flag, a pipe to wake a poll, an exit once idle (cli_signal.h).
#include "cli/cli_signal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

volatile sig_atomic_t cli_stop_requested;
static volatile sig_atomic_t busy[CLI_BUSY_PARTS];
static int stop_flags;
static int wake_pipe[2] = {-1, -1};
// Ending a part and looking at the others is one step, so that two parts
// ending at once on two threads do not each leave the exit to the other.
static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static char stop_message[4200];

static int load(volatile sig_atomic_t *flag) { return __atomic_load_n(flag, __ATOMIC_SEQ_CST); }
static void store(volatile sig_atomic_t *flag, int v) { __atomic_store_n(flag, v, __ATOMIC_SEQ_CST); }

static int any_busy(void) {
    for (int i = 0; i < CLI_BUSY_PARTS; i++)
        if (load(&busy[i])) return 1;
    return 0;
}

void cli_stop_now(void) {
    ssize_t w = write(2, stop_message, strlen(stop_message));
    (void)w;
    _exit(0);
}

static void on_signal(int sig) {
    (void)sig;
    int e = errno;
    store(&cli_stop_requested, 1);
    if (wake_pipe[1] >= 0) {
        char c = 1;
        ssize_t w = write(wake_pipe[1], &c, 1);
        (void)w;
    }
    if ((stop_flags & CLI_STOP_WHEN_IDLE) && !any_busy()) cli_stop_now();
    errno = e;
}

void cli_catch_signals(int flags) {
    stop_flags = flags;
    if ((flags & CLI_STOP_WAKE) && pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK)) cli_die("pipe: %s", strerror(errno));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int cli_stop_fd(void) { return wake_pipe[0]; }

void cli_busy(int part) { store(&busy[part], 1); }

void cli_idle(int part) {
    pthread_mutex_lock(&idle_lock);
    store(&busy[part], 0);
    if (load(&cli_stop_requested) && !any_busy()) cli_stop_now();
    pthread_mutex_unlock(&idle_lock);
}

void cli_set_stop_message(const char *fmt, ...) {
    // (signals are held meanwhile: the handler never writes half a message)
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(stop_message, sizeof stop_message, fmt, ap);
    va_end(ap);
    sigprocmask(SIG_SETMASK, &old, NULL);
}
