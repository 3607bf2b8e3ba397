// SPDX-License-Identifier: MIT
/*
 * libpool/log.c - LIBPOOL_LOG. A library prints nothing by default: the
 * process that loaded it owns stderr.
 */
#include "libpool/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static int threshold = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void read_env(void)
{
	static const struct {
		const char *name;
		int level;
	} names[] = {
		{ "err", LOG_ERR },	    { "error", LOG_ERR },
		{ "warning", LOG_WARNING }, { "warn", LOG_WARNING },
		{ "notice", LOG_NOTICE },   { "info", LOG_INFO },
		{ "debug", LOG_DEBUG },
	};
	const char *v = getenv("LIBPOOL_LOG");

	threshold = -1;
	if (!v || !*v)
		return;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcasecmp(v, names[i].name))
			threshold = names[i].level;
	if (threshold < 0) {
		threshold = LOG_WARNING;
		pool_log_emit(LOG_WARNING,
			      "log: LIBPOOL_LOG='%s' is not err, warning, "
			      "notice, info or debug; using warning",
			      v);
	}
}

int pool_log_threshold(void)
{
	pthread_once(&once, read_env);
	return threshold;
}

void pool_log_emit(int level, const char *fmt, ...)
{
	static const char *const tag[] = {
		"emerg",   "alert",  "crit", "err",
		"warning", "notice", "info", "debug"
	};
	char line[1024];
	int n;
	va_list ap;

	if (level < 0 || level > LOG_DEBUG)
		level = LOG_ERR;
	n = snprintf(line, sizeof(line), "libpool[%d] %s ", (int)getpid(),
		     tag[level]);
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}
