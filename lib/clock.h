// clock.h — the one clock of the library: monotonic seconds, for intervals,
// deadlines, rates and progress (never for dates).
#ifndef RLPIPE_CLOCK_H
#define RLPIPE_CLOCK_H

#include <time.h>

// Seconds on CLOCK_MONOTONIC (an arbitrary origin).
double clock_now(void);

// The CLOCK_MONOTONIC instant `when` (a clock_now() value) as a timespec: the
// deadline of pthread_cond_timedwait on a condition variable whose attribute
// chose CLOCK_MONOTONIC.
struct timespec clock_timespec(double when);

#endif
