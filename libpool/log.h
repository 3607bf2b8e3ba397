/* SPDX-License-Identifier: MIT */
/*
 * libpool/log.h - the library's log: silent unless LIBPOOL_LOG names a
 * level (err, warning, info, debug); then one line per event to stderr.
 * The level is read once, at the first call; any thread.
 */
#ifndef TP_LIBPOOL_LOG_H
#define TP_LIBPOOL_LOG_H

#include <syslog.h>

int pool_log_threshold(void);
void pool_log_emit(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define pool_log(level, ...)                                                   \
	do {                                                                   \
		if ((level) <= pool_log_threshold())                           \
			pool_log_emit((level), __VA_ARGS__);                   \
	} while (0)

#endif
