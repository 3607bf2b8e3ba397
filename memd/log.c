// SPDX-License-Identifier: MIT
/*
 * memd/log.c - formats one log line and writes it with a single write(2)
 * so lines from different threads never interleave, and quotes the
 * values peers choose (memd_log_quote) so every line stays key=value
 * pairs. Any thread.
 */
#include "memd/log.h"

#include <inttypes.h>
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

static bool memd_log_needs_quotes(const char *s)
{
	if (!*s)
		return true;
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch <= ' ' || ch == 0x7f || ch == '"' || ch == '\\' ||
		    ch == '=')
			return true;
	}
	return false;
}

const char *memd_log_quote(const char *s, char *buf, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0, k;
	char esc[4];

	if (len < 3) {
		if (len)
			buf[0] = '\0';
		return buf;
	}
	if (!memd_log_needs_quotes(s)) {
		snprintf(buf, len, "%s", s);
		return buf;
	}
	buf[n++] = '"';
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		k = 0;
		if (ch == '"' || ch == '\\') {
			esc[k++] = '\\';
			esc[k++] = (char)ch;
		} else if (ch < ' ' || ch == 0x7f) {
			esc[k++] = '\\';
			esc[k++] = 'x';
			esc[k++] = hex[ch >> 4];
			esc[k++] = hex[ch & 15];
		} else {
			esc[k++] = (char)ch;
		}
		/* room for it, the closing '"' and the NUL */
		if (n + k + 2 > len)
			break;
		memcpy(buf + n, esc, k);
		n += k;
	}
	buf[n++] = '"';
	buf[n] = '\0';
	return buf;
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

bool memd_log_limit_take_n(struct memd_log_limit *l, uint32_t n,
			   uint64_t *suppressed)
{
	struct timespec ts;
	uint64_t now;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	if (now >= l->next_ms) {
		l->next_ms = now + MEMD_LOG_LIMIT_MS;
		l->taken = 0;
	}
	if (l->taken >= n) {
		l->suppressed++;
		return false;
	}
	l->taken++;
	*suppressed = l->suppressed;
	l->suppressed = 0;
	return true;
}

const char *memd_log_bytes(uint64_t b, char *out, size_t n)
{
	static const char *const unit[] = { "B",   "KiB", "MiB", "GiB",
					    "TiB", "PiB", "EiB" };
	double v = (double)b;
	int u = 0;

	if (b < 1024) {
		snprintf(out, n, "%" PRIu64 " B", b);
		return out;
	}
	while (v >= 1024 && u < 6) {
		v /= 1024;
		u++;
	}
	snprintf(out, n, v < 10 ? "%.1f %s" : "%.0f %s", v, unit[u]);
	return out;
}

void memd_errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}
