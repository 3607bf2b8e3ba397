/* SPDX-License-Identifier: MIT */
/*
 * memd/log.h - memd's log: syslog levels, stderr, one line per event,
 * "component: what key=value". The level is tested before the arguments
 * are evaluated. Never log secrets (keys, tokens, memory contents).
 */
#ifndef TP_MEMD_LOG_H
#define TP_MEMD_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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

/*
 * s as one value of a key=value pair, written into buf (len bytes):
 * unchanged when it is not empty and holds no blank, '"', '\\', '=' or
 * control byte; otherwise in double quotes, with '"' and '\\' escaped by
 * a backslash and control bytes (and DEL) written as \xHH - so a name a
 * peer chose ("kvbench pid 13498") can neither break the key=value
 * parsing of a line, fake another key, nor split the line. A value that
 * does not fit is cut (a quoted one still ends with its '"'); buffers of
 * MEMD_LOG_QUOTE_MAX(n) bytes hold any string of n - 1 bytes whole.
 * Returns buf ("" when len < 3). Any thread; for the log only.
 */
#define MEMD_LOG_QUOTE_MAX(n) (4 * (n) + 3)
const char *memd_log_quote(const char *s, char *buf, size_t len);

/*
 * Writes a message into err (errlen bytes, cut to fit) for a caller that
 * reports it: the "what went wrong" of config, registry and etcd errors.
 * Nothing when err is NULL or errlen 0. Any thread.
 */
void memd_errf(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * b bytes as a size a reader takes in at a glance, for messages: "0 B",
 * "512 B", "512 MiB", "1.5 GiB", "22.3 GiB" (binary units, three
 * significant digits at most), into out (n bytes; 16 hold any value).
 * Returns out. Any thread.
 */
#define MEMD_LOG_BYTES_MAX 16
const char *memd_log_bytes(uint64_t b, char *out, size_t n);

/*
 * Rate limit for a line that a peer can make memd repeat (a refused
 * connection, a full descriptor table): at most one line per
 * MEMD_LOG_LIMIT_MS per limiter, the next one saying how many were left
 * out. A limiter is zeroed to start and used by one thread only.
 */
#define MEMD_LOG_LIMIT_MS 1000
struct memd_log_limit {
	uint64_t next_ms;    /* CLOCK_MONOTONIC: when the next line may go */
	uint64_t suppressed; /* lines left out since the last written one */
	uint32_t taken;	     /* memd_log_limit_take_n: lines this period */
};

/* Whether a line may be written now; when it may, *suppressed gets how
 * many were left out before it and the count restarts. */
bool memd_log_limit_take(struct memd_log_limit *l, uint64_t *suppressed);

/* As memd_log_limit_take, but up to n lines per MEMD_LOG_LIMIT_MS (for
 * lines that are routine one at a time and a flood only in a churn). A
 * limiter is used with one n only. */
bool memd_log_limit_take_n(struct memd_log_limit *l, uint32_t n,
			   uint64_t *suppressed);

/* memd_log() through limiter lim allowing n lines per period; appends
 * " suppressed=N" to the line. */
#define memd_log_limited_n(lim, n, level, fmt, ...)                            \
	do {                                                                   \
		uint64_t sup_;                                                 \
		if ((level) <= __atomic_load_n(&memd_log_level,                \
					       __ATOMIC_RELAXED) &&            \
		    memd_log_limit_take_n((lim), (n), &sup_))                  \
			memd_log_emit((level), fmt " suppressed=%llu",         \
				      ##__VA_ARGS__,                           \
				      (unsigned long long)sup_);               \
	} while (0)

/* memd_log() through limiter lim; appends " suppressed=N" to the line. */
#define memd_log_limited(lim, level, fmt, ...)                                 \
	do {                                                                   \
		uint64_t sup_;                                                 \
		if ((level) <= __atomic_load_n(&memd_log_level,                \
					       __ATOMIC_RELAXED) &&            \
		    memd_log_limit_take((lim), &sup_))                         \
			memd_log_emit((level), fmt " suppressed=%llu",         \
				      ##__VA_ARGS__,                           \
				      (unsigned long long)sup_);               \
	} while (0)

#endif
