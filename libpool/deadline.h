/* SPDX-License-Identifier: MIT */
/*
 * libpool/deadline.h - absolute CLOCK_MONOTONIC deadlines for
 * pthread_cond_timedwait() on condition variables set to that clock
 * (pthread_condattr_setclock). A leaf: header-only, depends on nothing
 * in libpool.
 */
#ifndef TP_LIBPOOL_DEADLINE_H
#define TP_LIBPOOL_DEADLINE_H

#include <stdint.h>
#include <time.h>

/* Now plus n units of 1/per_sec second (per_sec divides 10^9), n >= 0. */
static inline struct timespec pool_deadline_after(int64_t n, int64_t per_sec)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += n / per_sec;
	ts.tv_nsec += (long)(n % per_sec) * (1000000000 / per_sec);
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return ts;
}

/* Now plus ms milliseconds (ms >= 0). */
static inline struct timespec pool_deadline_ms(int64_t ms)
{
	return pool_deadline_after(ms, 1000);
}

/* Now plus us microseconds (us >= 0). */
static inline struct timespec pool_deadline_us(int64_t us)
{
	return pool_deadline_after(us, 1000000);
}

#endif
