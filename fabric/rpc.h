/* SPDX-License-Identifier: MIT */
/*
 * fabric/rpc.h - the client end of the control connection: one TCP
 * connection to a memd, request/reply calls serialized by a mutex, every
 * call bounded by a timeout. Thread-safe. Once the connection breaks
 * every later call fails with -ENOTCONN.
 */
#ifndef TP_FABRIC_RPC_H
#define TP_FABRIC_RPC_H

#include <stdbool.h>
#include <stddef.h>

#include "fabric/wire.h"

struct rpc;

/*
 * Connects to "host:port" within timeout_ms. local_host receives the
 * numeric address of our end (what the fabric should bind to reach the
 * same memd). Returns 0, -EINVAL (bad address), -ECONNREFUSED,
 * -ETIMEDOUT, -EHOSTUNREACH, or another -errno.
 */
int rpc_connect(const char *addr, int timeout_ms, struct rpc **out,
		char *local_host, size_t hostlen);
void rpc_close(struct rpc *c);

/* Where the connection reports refusals and drops (syslog levels); by
 * default it reports nothing. fn must not call back into c. */
typedef void (*rpc_log_fn)(void *arg, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void rpc_set_log(struct rpc *c, rpc_log_fn fn, void *arg);

/*
 * Sends req (its seq is assigned here) and waits up to timeout_ms for the
 * reply with the same seq, decoded into *rep. Views into the reply
 * (ADMIN_OK json) point into c's buffer: valid until the next call on c. Returns 0 when the reply has
 * type expect, -(ERROR.err) when memd answered ERROR (its text is copied
 * to errtext when given), -ETIMEDOUT, -ENOTCONN (connection lost: memd
 * gone), -EPROTO (an unexpected reply; the connection is dropped).
 */
int rpc_call(struct rpc *c, struct wire_msg *req, struct wire_msg *rep,
	     int expect, int timeout_ms, char *errtext, size_t errlen);

/*
 * HELLO: offers protocols proto_min .. WIRE_PROTO_MAX, names the client
 * (may be NULL) and fills *out with HELLO_OK. 0 or the errors of
 * rpc_call (memd's text in err).
 */
int rpc_hello(struct rpc *c, const char *client, uint16_t proto_min,
	      int timeout_ms, struct wire_hello_ok *out, char *err,
	      size_t errlen);

/*
 * The client side of the handshake (docs/cluster.md): AUTH as principal
 * (with a donor pass when pass_len > 0, whose key is key), AUTH_PROOF,
 * and a check of memd's proof. hello is the session's HELLO_OK. Fills
 * *ok and the session key. Returns 0, -EACCES (refused, or memd could not
 * prove it knows key), -EOPNOTSUPP (a standalone memd), or the errors of
 * rpc_call, with memd's text in err.
 */
int rpc_auth(struct rpc *c, const struct wire_hello_ok *hello,
	     const char *principal, const uint8_t key[32], const uint8_t *pass,
	     size_t pass_len, int timeout_ms, struct wire_auth_ok *ok,
	     uint8_t session_key[32], char *err, size_t errlen);

/* True once the connection has failed. */
bool rpc_is_broken(struct rpc *c);

#endif
