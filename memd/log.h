/* SPDX-License-Identifier: MIT */
/*
 * memd/log.h - memd's log: syslog levels, stderr, one line per event,
 * "component: what key=value". The level is tested before the arguments
 * are evaluated. Never log secrets (keys, tokens, memory contents).
 */
#ifndef TP_MEMD_LOG_H
#define TP_MEMD_LOG_H

#include <syslog.h>

/* The process's threshold (LOG_ERR .. LOG_DEBUG); set once at start-up
 * and on reload; read racily by design (a level change is not ordered
 * with messages). */
extern int memd_log_level;

void memd_log_emit(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define memd_log(level, ...)                                                   \
	do {                                                                   \
		if ((level) <=                                                 \
		    __atomic_load_n(&memd_log_level, __ATOMIC_RELAXED))        \
			memd_log_emit((level), __VA_ARGS__);                   \
	} while (0)

#endif
