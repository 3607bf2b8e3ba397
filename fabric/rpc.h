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
#include <stdint.h>

#include "fabric/auth.h"
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
 * rpc_call in two halves, so that one thread can have requests out on
 * several connections at once: rpc_send sends req (its seq assigned
 * here) and, on 0, returns with the connection reserved for the calling
 * thread; that thread must then call rpc_recv, which waits for the reply
 * (until timeout_ms after the send), decodes it into *rep, releases the
 * connection and returns what rpc_call would have. Other calls on c wait
 * meanwhile. A thread with requests out on several connections must
 * have sent them in one global order of the connections (libpool sorts
 * by address), or two such threads can deadlock. rpc_send returns
 * -ENOTCONN, -ETIMEDOUT or an encoding error and then holds nothing.
 */
int rpc_send(struct rpc *c, struct wire_msg *req, int timeout_ms);
int rpc_recv(struct rpc *c, struct wire_msg *rep, int expect, char *errtext,
	     size_t errlen);

/*
 * Pushes (protocol 6): a registry sends DONOR_NEWS (seq 0) on a donor's
 * link, unasked, when its membership changes. rpc_recv skips such frames
 * while it waits for a reply; rpc_read_pushes reads those that arrived
 * between calls (call it when rpc_fd polls readable and no call is out:
 * 0, or -errno once the connection failed: closed by the peer, or a frame
 * other than DONOR_NEWS). rpc_pushes counts what either read.
 */
int rpc_fd(struct rpc *c);
uint64_t rpc_pushes(struct rpc *c);
int rpc_read_pushes(struct rpc *c);

/* True once the connection has failed. */
bool rpc_is_broken(struct rpc *c);

/*
 * HELLO offering protocols proto_min .. WIRE_PROTO_MAX with client (a
 * name for memd's logs, may be NULL; cut to WIRE_NAME_MAX - 1 bytes;
 * bytes outside printable ASCII become '?'). Returns 0 with HELLO_OK in
 * *out, -EINVAL (proto_min outside WIRE_PROTO_MIN .. WIRE_PROTO_MAX), the
 * errors of rpc_call (memd's text in err), or -EPROTONOSUPPORT when memd
 * chose a version outside the range we offered.
 */
int rpc_hello(struct rpc *c, const char *client, uint16_t proto_min,
	      int timeout_ms, struct wire_hello_ok *out, char *err,
	      size_t errlen);

/*
 * The protocol-2 handshake after HELLO_OK (docs/cluster.md, "Handshake"):
 * AUTH(principal, fresh client nonce, pass) -> AUTH_CHALLENGE ->
 * AUTH_PROOF -> AUTH_OK, proving we hold key and checking that memd holds
 * it too (its proof in AUTH_OK). hello_ok is this connection's HELLO_OK.
 * pass is the sealed donor pass (pass_len bytes, at most WIRE_PASS_MAX)
 * when authenticating to a donor with one, else NULL and 0. Returns 0
 * with AUTH_OK in *ok and the connection's session key in session_key
 * (both sides derive it; it seals keys sent over this connection), or
 *   -EACCES    memd refused (wrong key, unknown principal, bad or expired
 *              pass), or its proof was wrong (it does not hold key: it is
 *              not who it claims to be; the connection is then unusable,
 *              close it)
 *   -EOPNOTSUPP memd is standalone (no authentication there)
 *   -EPROTONOSUPPORT hello_ok chose protocol 1, which has no AUTH
 *   -EINVAL    principal empty or too long, pass too long
 *   -EPROTO    AUTH_OK made no sense (unknown role or flags)
 *   and the errors of rpc_call. errtext receives memd's text or ours.
 * Nothing secret is logged or copied to errtext.
 */
int rpc_auth(struct rpc *c, const struct wire_hello_ok *hello_ok,
	     const char *principal, const uint8_t key[AUTH_KEY_LEN],
	     const uint8_t *pass, size_t pass_len, int timeout_ms,
	     struct wire_auth_ok *ok, uint8_t session_key[AUTH_KEY_LEN],
	     char *errtext, size_t errlen);

/*
 * The whole handshake of a client opening a session as principal:
 * rpc_hello (client, proto_min as there), then rpc_auth with key, no
 * pass. When proto_min is 1 and memd chose protocol 1 (it has no AUTH:
 * a standalone memd of old), it stops there and returns 0 with
 * hello->proto 1, ok and session_key untouched. role, when not 0, is the
 * enum wire_role AUTH_OK must grant; another is -EPROTO (errtext says
 * which role memd gave). hello and ok may be NULL; hello, when given, is
 * written as soon as HELLO succeeds, so a caller that zeroed it can tell
 * a failed HELLO (hello->proto still 0) from a failed AUTH. Returns 0 or
 * the errors of rpc_hello and rpc_auth. Nothing secret is logged or
 * copied to errtext.
 */
int rpc_handshake(struct rpc *c, const char *client, uint16_t proto_min,
		  const char *principal, const uint8_t key[AUTH_KEY_LEN],
		  uint8_t role, int timeout_ms, struct wire_hello_ok *hello,
		  struct wire_auth_ok *ok, uint8_t session_key[AUTH_KEY_LEN],
		  char *errtext, size_t errlen);

#endif
