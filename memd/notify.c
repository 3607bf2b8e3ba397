// SPDX-License-Identifier: MIT
/*
 * memd/notify.c - sd_notify(3) for memd (notify.h). No state of its own:
 * libsystemd reads NOTIFY_SOCKET at every call and opens a socket for it,
 * so any thread may call. NOTIFY_SOCKET stays set (unset_environment = 0)
 * because memd notifies more than once (reloads, stop).
 */
#include "memd/notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <systemd/sd-daemon.h>

#include "memd/log.h"

int memd_notify(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	int r;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r = sd_notify(0, msg);
	if (r < 0)
		memd_log(LOG_DEBUG, "notify: sd_notify err=%s", strerror(-r));
	return r > 0 ? 1 : r;
}

uint64_t memd_notify_monotonic_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}
