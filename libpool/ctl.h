/* SPDX-License-Identifier: MIT */
/*
 * libpool/ctl.h - the client end of the control connection: one TCP
 * connection to a memd, request/reply calls serialized by a mutex, every
 * call bounded by a timeout. Thread-safe. Once the connection breaks
 * every later call fails with -ENOTCONN.
 */
#ifndef TP_LIBPOOL_CTL_H
#define TP_LIBPOOL_CTL_H

#include <stdbool.h>
#include <stddef.h>

#include "fabric/wire.h"

struct pool_ctl;

/*
 * Connects to "host:port" within timeout_ms. local_host receives the
 * numeric address of our end (what the fabric should bind to reach the
 * same memd). Returns 0, -EINVAL (bad address), -ECONNREFUSED,
 * -ETIMEDOUT, -EHOSTUNREACH, or another -errno.
 */
int pool_ctl_connect(const char *addr, int timeout_ms, struct pool_ctl **out,
		     char *local_host, size_t hostlen);
void pool_ctl_close(struct pool_ctl *c);

/*
 * Sends req (its seq is assigned here) and waits up to timeout_ms for the
 * reply with the same seq, decoded into *rep. Returns 0 when the reply has
 * type expect, -(ERROR.err) when memd answered ERROR (its text is copied
 * to errtext when given), -ETIMEDOUT, -ENOTCONN (connection lost: memd
 * gone), -EPROTO (an unexpected reply; the connection is dropped).
 */
int pool_ctl_call(struct pool_ctl *c, struct wire_msg *req,
		  struct wire_msg *rep, int expect, int timeout_ms,
		  char *errtext, size_t errlen);

/* True once the connection has failed. */
bool pool_ctl_is_broken(struct pool_ctl *c);

#endif
