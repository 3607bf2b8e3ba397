// SPDX-License-Identifier: MIT
/*
 * memd/server_dispatch.c - frame dispatch (memd/server.c's DESIGN
 * comment): a connection's reads and writes, decoding its frames and
 * handing each to its handler in server_lease.c, server_cluster.c,
 * server_kv.c or server_shm.c (handle), and its epoll interest.
 */
#include "memd/server_int.h"

static int epoll_mod(struct memd_server *s, struct conn *c)
{
	struct epoll_event ev = {
		.events = (c->reading ? EPOLLIN : 0u) |
			  (c->writing ? EPOLLOUT : 0u) | EPOLLRDHUP,
		.data.ptr = c,
	};

	return epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &ev) ? -errno : 0;
}

static void reply(struct conn *c, const struct wire_msg *rep)
{
	if (srv_conn_send(c, rep))
		c->closing = true;
}

static void do_status(struct memd_server *s, struct conn *c,
		      const struct wire_msg *req, struct wire_msg *rep)
{
	memset(rep, 0, sizeof(*rep));
	rep->type = WIRE_STATUS_OK;
	rep->seq = req->seq;
	srv_fill_status(s, &rep->u.status_ok);
	reply(c, rep);
}

static void do_bye(struct memd_server *s, struct conn *c,
		   const struct wire_msg *req, struct wire_msg *rep)
{
	memd_session_close(s->lt, c->session, srv_now_ms(), srv_revoke_mr, s);
	c->session = NULL;
	if (c->shm_bound)
		srv_shm_session_closed(s, c->session_id);
	srv_reclaim_kick(s);
	if (s->donor)
		memd_donor_kick(s->donor);
	memset(rep, 0, sizeof(*rep));
	rep->type = WIRE_BYE_OK;
	rep->seq = req->seq;
	c->closing = true;
	reply(c, rep);
}

/*
 * What memd does with each type it may receive: the handler of a request,
 * and the protocol version that brought the type (0: protocol 1's, which
 * a connection may send before HELLO has negotiated any). A type without
 * a handler is not a request: a reply sent to us, decodable but refused.
 * The _AT replies keep their version, so that a session of an older
 * protocol that sends one hears that it is not in its protocol.
 */
static const struct srv_op {
	void (*handle)(struct memd_server *s, struct conn *c,
		       const struct wire_msg *req, struct wire_msg *rep);
	uint8_t proto;
} srv_ops[256] = {
	[WIRE_HELLO] = { srv_do_hello, 0 },
	[WIRE_LEASE] = { srv_do_lease, 0 },
	[WIRE_RELEASE] = { srv_do_release, 0 },
	[WIRE_HEARTBEAT] = { srv_do_heartbeat, 0 },
	[WIRE_STATUS] = { do_status, 0 },
	[WIRE_BYE] = { do_bye, 0 },
	[WIRE_AUTH] = { srv_do_auth, 2 },
	[WIRE_AUTH_PROOF] = { srv_do_auth_proof, 2 },
	[WIRE_PLACE] = { srv_do_place, 2 },
	[WIRE_LEASE_GRANT] = { srv_do_lease_grant, 2 },
	[WIRE_HEARTBEAT2] = { srv_do_heartbeat, 2 },
	[WIRE_DONOR_JOIN] = { srv_do_donor, 2 },
	[WIRE_DONOR_REPORT] = { srv_do_donor, 2 },
	[WIRE_ADMIN] = { srv_do_admin, 2 },
	[WIRE_KV_RESERVE] = { srv_do_kv, 2 },
	[WIRE_KV_COMMIT] = { srv_do_kv, 2 },
	[WIRE_KV_LOOKUP] = { srv_do_kv, 2 },
	[WIRE_KV_DONE] = { srv_do_kv, 2 },
	[WIRE_KV_EXISTS] = { srv_do_kv, 2 },
	[WIRE_KV_DELETE] = { srv_do_kv, 2 },
	[WIRE_KV_PIN] = { srv_do_kv, 2 },
	[WIRE_DONORS] = { srv_do_donors, 2 },
	[WIRE_SHM] = { srv_do_shm, 2 },
	[WIRE_KV_MODEL] = { srv_do_kv_model, 3 },
	[WIRE_FABRIC] = { srv_do_fabric, 3 },
	[WIRE_KV_CLEAR] = { srv_do_kv_clear, 4 },
	[WIRE_MEMBERS] = { srv_do_donors, 5 },
	[WIRE_KV_RESERVE_AT] = { srv_do_kv, 5 },
	[WIRE_KV_COMMIT_AT] = { srv_do_kv, 5 },
	[WIRE_KV_LOOKUP_AT] = { srv_do_kv, 5 },
	[WIRE_KV_EXISTS_AT] = { srv_do_kv, 5 },
	[WIRE_KV_DELETE_AT] = { srv_do_kv, 5 },
	[WIRE_KV_PIN_AT] = { srv_do_kv, 5 },
	[WIRE_KV_RESERVE_AT_OK] = { NULL, 5 },
	[WIRE_KV_COMMIT_AT_OK] = { NULL, 5 },
	[WIRE_KV_LOOKUP_AT_OK] = { NULL, 5 },
	[WIRE_KV_EXISTS_AT_OK] = { NULL, 5 },
	[WIRE_KV_DELETE_AT_OK] = { NULL, 5 },
	[WIRE_KV_PIN_AT_OK] = { NULL, 5 },
};

static void handle(struct memd_server *s, struct conn *c,
		   const struct wire_msg *req)
{
	static struct wire_msg rep; /* memd-ctl only; PLACE_OK is ~5 KiB */
	const struct srv_op *op = &srv_ops[req->type];

	CTR_ADD(s, frames_in, 1);
	c->last_rx_ms = srv_now_ms();
	if (req->type != WIRE_HELLO && !c->session) {
		srv_send_error(s, c, req->seq, EPROTO, "%s before HELLO",
			       wire_type_name(req->type));
		c->closing = true;
		return;
	}
	if (c->session && memd_session_is_dead(s->lt, c->session)) {
		srv_send_error(s, c, req->seq, ESTALE,
			       "session expired: no heartbeat within the lease "
			       "TTL; its leases are gone");
		c->closing = true;
		return;
	}
	if (c->proto < op->proto) {
		srv_send_error(s, c, req->seq, EPROTO,
			       "%s is not in protocol %u (negotiated in HELLO)",
			       wire_type_name(req->type), c->proto);
		c->closing = true;
		return;
	}
	if (s->mode != MODE_STANDALONE && c->auth != AUTH_DONE &&
	    req->type != WIRE_HELLO && req->type != WIRE_AUTH &&
	    req->type != WIRE_AUTH_PROOF) {
		CTR_ADD(s, auth_failures, 1);
		memd_log_limited(&s->ll_auth, LOG_NOTICE,
				 "auth: %s before authentication peer=%s",
				 wire_type_name(req->type), c->peer);
		srv_send_error(
			s, c, req->seq, EACCES,
			"%s before authentication: this memd is part of a "
			"pool; authenticate first (tenant and secret)",
			wire_type_name(req->type));
		c->closing = true;
		return;
	}
	if (!op->handle) {
		/* A reply type sent to us: decodable, but not a request. */
		CTR_ADD(s, frames_rejected, 1);
		srv_send_error(s, c, req->seq, EBADMSG, "%s is not a request",
			       wire_type_name(req->type));
		c->closing = true;
		return;
	}
	op->handle(s, c, req, &rep);
}

/* Decodes and handles complete frames in rx while tx has room. */
/*
 * A registry that did not run (stopped, a paused VM, a pass that blocked)
 * must not take its own silence for its donors' before it reads what
 * they sent: memd-ctl checks how long it has been since it last looked
 * before every request it handles and before the liveness tick, wherever
 * in a pass the process was stopped (memd_registry_loop_gap).
 */
void srv_reg_awake(struct memd_server *s)
{
	uint64_t now = srv_now_ms();

	if (!s->reg)
		return;
	if (!s->reg_awake_ms) /* first pass (the fuzzing seam's too) */
		s->reg_awake_ms = now;
	memd_registry_loop_gap(s->reg, now - s->reg_awake_ms);
	s->reg_awake_ms = now;
}

void srv_conn_process(struct memd_server *s, struct conn *c)
{
	static struct wire_msg req; /* memd-ctl only */
	size_t off = 0;

	while (!c->closing && c->tx_len - c->tx_off < TX_HIGH_WATER) {
		ssize_t n = wire_decode(c->rx + off, c->rx_len - off, &req);

		if (n == -EAGAIN)
			break;
		if (n < 0) {
			CTR_ADD(s, frames_rejected, 1);
			memd_log_limited(&s->ll_frame, LOG_NOTICE,
					 "ctl: bad frame peer=%s err=%s",
					 c->peer, strerror((int)-n));
			/* wire_decode left the header's seq in req */
			if (n == -EMSGSIZE)
				srv_send_error(s, c, req.seq, EMSGSIZE,
					       "frame longer than %u bytes",
					       WIRE_MAX_FRAME);
			else if (n == -EBADMSG)
				srv_send_error(s, c, req.seq, EBADMSG,
					       "malformed frame");
			/* Bad magic or version: not our protocol, no reply. */
			c->closing = true;
			if (n != -EMSGSIZE && n != -EBADMSG)
				c->tx_len = c->tx_off = 0;
			break;
		}
		srv_reg_awake(s);
		handle(s, c, &req);
		off += (size_t)n;
	}
	if (off) {
		memmove(c->rx, c->rx + off, c->rx_len - off);
		c->rx_len -= off;
	}
}

/*
 * What a send or recv that failed otherwise than by EINTR returns: 0 when
 * the socket would block (nothing more for now), else -errno.
 */
static int io_error(void)
{
	return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
}

int srv_conn_flush(struct conn *c)
{
	while (c->tx_off < c->tx_len) {
		ssize_t n = send(c->fd, c->tx + c->tx_off,
				 c->tx_len - c->tx_off, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return io_error();
		}
		c->tx_off += (size_t)n;
	}
	c->tx_off = c->tx_len = 0;
	return 0;
}

/*
 * Reads what the socket has, growing rx up to one full frame. Returns 0,
 * 1 when the peer has closed its side (what arrived before still counts),
 * or -errno.
 */
int srv_conn_read(struct conn *c)
{
	for (;;) {
		ssize_t n;

		if (c->rx_len == c->rx_cap) {
			size_t cap = c->rx_cap * 2;
			uint8_t *p;

			if (cap > WIRE_MAX_FRAME)
				cap = WIRE_MAX_FRAME;
			if (cap <= c->rx_cap)
				return 0; /* a whole frame is buffered */
			p = realloc(c->rx, cap);
			if (!p)
				return -ENOMEM;
			c->rx = p;
			c->rx_cap = cap;
		}
		n = recv(c->fd, c->rx + c->rx_len, c->rx_cap - c->rx_len, 0);
		if (n == 0)
			return 1;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return io_error();
		}
		c->rx_len += (size_t)n;
		if (c->rx_len < c->rx_cap)
			return 0;
	}
}

/* After any event: process, flush, re-arm or close. */
void srv_conn_service(struct memd_server *s, struct conn *c)
{
	bool reading, writing;
	int r;

	srv_conn_process(s, c);
	r = srv_conn_flush(c);
	if (r) {
		srv_conn_close(s, c, "send failed");
		return;
	}
	if (c->closing && c->tx_off == c->tx_len) {
		srv_conn_close(s, c, "done");
		return;
	}
	reading = !c->closing && c->tx_len - c->tx_off < TX_HIGH_WATER;
	writing = c->tx_off < c->tx_len;
	if (reading != c->reading || writing != c->writing) {
		c->reading = reading;
		c->writing = writing;
		if (epoll_mod(s, c))
			srv_conn_close(s, c, "epoll");
	}
}
