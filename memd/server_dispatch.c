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

static void handle(struct memd_server *s, struct conn *c,
		   const struct wire_msg *req)
{
	static struct wire_msg rep; /* memd-ctl only; PLACE_OK is ~5 KiB */
	bool v2 = (req->type >= WIRE_AUTH && req->type <= WIRE_ADMIN) ||
		  (req->type >= WIRE_KV_RESERVE && req->type <= WIRE_SHM);

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
	if ((v2 && c->proto < 2) ||
	    ((req->type == WIRE_KV_MODEL || req->type == WIRE_FABRIC) &&
	     c->proto < 3) ||
	    (req->type == WIRE_KV_CLEAR && c->proto < 4) ||
	    ((req->type == WIRE_MEMBERS ||
	      wire_kv_plain(req->type) != req->type) &&
	     c->proto < 5)) {
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
	switch (req->type) {
	case WIRE_HELLO:
		srv_do_hello(s, c, req, &rep);
		return;
	case WIRE_LEASE:
		srv_do_lease(s, c, req, &rep);
		return;
	case WIRE_RELEASE:
		srv_do_release(s, c, req, &rep);
		return;
	case WIRE_HEARTBEAT:
	case WIRE_HEARTBEAT2:
		srv_do_heartbeat(s, c, req, &rep);
		return;
	case WIRE_AUTH:
		srv_do_auth(s, c, req, &rep);
		return;
	case WIRE_AUTH_PROOF:
		srv_do_auth_proof(s, c, req, &rep);
		return;
	case WIRE_PLACE:
		srv_do_place(s, c, req, &rep);
		return;
	case WIRE_LEASE_GRANT:
		srv_do_lease_grant(s, c, req, &rep);
		return;
	case WIRE_DONOR_JOIN:
	case WIRE_DONOR_REPORT:
		srv_do_donor(s, c, req, &rep);
		return;
	case WIRE_ADMIN:
		srv_do_admin(s, c, req, &rep);
		return;
	case WIRE_KV_RESERVE:
	case WIRE_KV_COMMIT:
	case WIRE_KV_LOOKUP:
	case WIRE_KV_DONE:
	case WIRE_KV_EXISTS:
	case WIRE_KV_DELETE:
	case WIRE_KV_PIN:
	case WIRE_KV_RESERVE_AT:
	case WIRE_KV_COMMIT_AT:
	case WIRE_KV_LOOKUP_AT:
	case WIRE_KV_EXISTS_AT:
	case WIRE_KV_DELETE_AT:
	case WIRE_KV_PIN_AT:
		srv_do_kv(s, c, req, &rep);
		return;
	case WIRE_DONORS:
	case WIRE_MEMBERS:
		srv_do_donors(s, c, req, &rep);
		return;
	case WIRE_KV_MODEL:
		srv_do_kv_model(s, c, req, &rep);
		return;
	case WIRE_FABRIC:
		srv_do_fabric(s, c, req, &rep);
		return;
	case WIRE_KV_CLEAR:
		srv_do_kv_clear(s, c, req, &rep);
		return;
	case WIRE_SHM:
		srv_do_shm(s, c, req, &rep);
		return;
	case WIRE_STATUS:
		memset(&rep, 0, sizeof(rep));
		rep.type = WIRE_STATUS_OK;
		rep.seq = req->seq;
		srv_fill_status(s, &rep.u.status_ok);
		break;
	case WIRE_BYE:
		memd_session_close(s->lt, c->session, srv_now_ms(),
				   srv_revoke_mr, s);
		c->session = NULL;
		if (c->shm_bound)
			srv_shm_session_closed(s, c->session_id);
		srv_reclaim_kick(s);
		if (s->donor)
			memd_donor_kick(s->donor);
		memset(&rep, 0, sizeof(rep));
		rep.type = WIRE_BYE_OK;
		rep.seq = req->seq;
		c->closing = true;
		break;
	default:
		/* A reply type sent to us: decodable, but not a request. */
		CTR_ADD(s, frames_rejected, 1);
		srv_send_error(s, c, req->seq, EBADMSG, "%s is not a request",
			       wire_type_name(req->type));
		c->closing = true;
		return;
	}
	if (srv_conn_send(c, &rep))
		c->closing = true;
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

int srv_conn_flush(struct conn *c)
{
	while (c->tx_off < c->tx_len) {
		ssize_t n = send(c->fd, c->tx + c->tx_off,
				 c->tx_len - c->tx_off, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == EINTR)
				continue;
			return -errno;
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
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == EINTR)
				continue;
			return -errno;
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
