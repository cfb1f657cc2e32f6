// clock.c — monotonic seconds (clock.h).
#include "clock.h"

#include <math.h>

double clock_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct timespec clock_timespec(double when) {
    double sec = floor(when);
    struct timespec ts = {.tv_sec = (time_t)sec, .tv_nsec = (long)((when - sec) * 1e9)};
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    return ts;
}
