// SPDX-License-Identifier: MIT
/*
 * memd/log.c - formats one log line and writes it with a single write(2)
 * so lines from different threads never interleave. Any thread.
 */
#include "memd/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int memd_log_level = LOG_INFO;

static const char *const level_tag[] = {
	"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
};

void memd_log_emit(int level, const char *fmt, ...)
{
	char line[1024];
	struct timespec ts;
	struct tm tm;
	size_t n;
	va_list ap;
	int r;

	if (level < LOG_EMERG || level > LOG_DEBUG)
		level = LOG_ERR;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
	r = snprintf(line + n, sizeof(line) - n, ".%03ldZ memd[%d] %s ",
		     ts.tv_nsec / 1000000, (int)getpid(), level_tag[level]);
	if (r > 0)
		n += (size_t)r;
	va_start(ap, fmt);
	r = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	if (r > 0)
		n += (size_t)r;
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2; /* truncated, still one line */
	/* A message must stay one line: fold embedded newlines. */
	for (size_t i = 0; i < n; i++)
		if (line[i] == '\n')
			line[i] = ' ';
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0)
		return; /* nowhere left to report it */
}

bool memd_log_limit_take(struct memd_log_limit *l, uint64_t *suppressed)
{
	struct timespec ts;
	uint64_t now;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	if (now < l->next_ms) {
		l->suppressed++;
		return false;
	}
	l->next_ms = now + MEMD_LOG_LIMIT_MS;
	*suppressed = l->suppressed;
	l->suppressed = 0;
	return true;
}
