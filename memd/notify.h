/* SPDX-License-Identifier: MIT */
/*
 * memd/notify.h - readiness and state notifications to the service
 * manager (sd_notify(3): READY=1, RELOADING=1, STOPPING=1, STATUS=...),
 * for memd.service's Type=notify. Only this module includes
 * <systemd/sd-daemon.h>. Without NOTIFY_SOCKET in the environment every
 * call does nothing.
 */
#ifndef TP_MEMD_NOTIFY_H
#define TP_MEMD_NOTIFY_H

#include <stdint.h>

/*
 * Sends the newline-separated "NAME=value" assignments fmt formats, in one
 * datagram. Returns 1 when sent, 0 when no service manager listens
 * (NOTIFY_SOCKET unset), or -errno (logged at level debug: a service
 * manager that cannot be told is not memd's failure). Thread-safe.
 */
int memd_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* CLOCK_MONOTONIC in microseconds, for RELOADING=1's MONOTONIC_USEC. */
uint64_t memd_notify_monotonic_usec(void);

#endif
