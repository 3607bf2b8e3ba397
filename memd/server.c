// SPDX-License-Identifier: MIT
/*
 * memd/server.c - the control loop: connections, admission, frame
 * dispatch, timers, reload, /metrics, start and stop. The server's other
 * concerns live beside it (memd/server_int.h lists them): leases over the
 * fabric and reclaim (server_lease.c), the pool's requests
 * (server_cluster.c), the KV tier's server side (server_kv.c). This
 * comment is the design of all four.
 *
 * DESIGN
 * One epoll loop on memd-ctl owns every connection and is the only thread
 * that decodes frames, grants, releases, renews and expires. A connection
 * has bounded buffers: rx holds at most one frame (WIRE_MAX_FRAME); while
 * more than one frame of replies waits in tx the loop stops reading that
 * client (backpressure), so a client that never reads costs at most two
 * frames of memory. A malformed frame gets an ERROR reply and the
 * connection is closed; bad magic or version closes it at once. Nothing a
 * peer sends can crash memd or make it allocate without bound. A peer
 * that shuts down its sending side (RDHUP) is served what it sent as far
 * as its socket takes the replies at once, then closed, even when the
 * EOF still sits behind a full rx: level-triggered RDHUP would otherwise
 * fire on every pass for a peer that never reads.
 *
 * Admission (docs/reliability.md): no peer can hold connection slots it
 * does not use. A connection is in its handshake from accept until HELLO
 * (standalone) or AUTH (in a pool) succeeds; those connections sit on a
 * queue in accept order. handshake_timeout after accept one is closed;
 * while max_clients are taken, a new connection displaces the oldest in
 * its handshake (an idle attacker's, before any fresh client's), and is
 * refused only when all are established. One address may have at most
 * max_clients_per_host in its handshake (the same displacement within
 * the address) and as many established, operators not counted. In a
 * pool, tenants may hold at most max_clients - reserved_clients
 * (reserved_clients at most half of max_clients), so a new @admin or
 * @donor connection always gets in while operators hold fewer than the
 * reserve. Established connections that send no request for
 * idle_timeout are closed. At EMFILE/ENFILE accept gives up a reserve
 * descriptor to take, answer and close the pending connection (else the
 * listener would fire forever); failing that, the listener is paused for
 * a tick. The same-host socket uses the same (srv_accept_shed). Lines a peer can make repeat are rate-limited (memd/log.h).
 * What a client may hold is bounded too: max_sessions_per_tenant live
 * sessions of a tenant (checked at AUTH_PROOF), max_leases_per_session
 * leases of a session (grant_request), kv_max_reserved pending KV
 * reservations of a tenant (the store).
 *
 * A lease is a slab, a fresh memory registration with a random key, and a
 * generation. Revocation (release, BYE, session expiry) closes the
 * registration first (from then on no new RMA can reach the slab), then
 * the slab waits quiesce_ms for transfers the provider had already
 * accepted, then memd-reclaim zeroes it and only then is it free again.
 *
 * NUMA: the donation is one arena per configured node (one arena, node
 * -1, without numa_nodes). Arena a holds slabs [a * per, (a + 1) * per)
 * of the one lease table, which knows them as group a. Each arena has
 * progress_threads endpoints (P; endpoints a*P .. a*P+P-1), each with its
 * own fabric domain and endpoint (bound near the node's NIC) and its own
 * progress thread memd-fab<e>, pinned to the node's CPUs; slab i of the
 * arena belongs to its endpoint i % P (slab_aep), so consecutive slabs
 * spread over the threads. A slab is registered on its endpoint's
 * domain, so its key opens it only through that endpoint. A LEASE for
 * node n grants from n's arena; for -1 from the arena with the most free
 * slabs, spilling to the next fullest.
 *
 * memd-fab<e> progresses endpoint e (fab_ep_serve): with a manual-progress
 * provider (tcp) RMA from clients is served only while someone reads the
 * CQ. After a request wakes it, it polls for busy_poll_us before it
 * sleeps again (0 by default: on a host with fewer cores than busy
 * threads the polling takes the client's core).
 *
 * memd-metrics (memd/metrics.c, only with metrics_listen) answers GET
 * /metrics from write_metrics(): it reads the counters with relaxed
 * atomics (every increment is one), the lease table under its lock, and
 * fields fixed at creation. memd_server_destroy stops it first.
 *
 * KV tier (docs/kv.md): one store (memd/kvstore) holds every tenant's
 * KV index; memd-ctl is its only caller, except memd-metrics reading its
 * statistics. The store asks for memory through kv_slab_get: a free slab
 * leased to the tenant's internal KV session (one per tenant, opened on
 * first use, renewed every tick so it never expires, counted as the
 * tenant's usage in donor reports), registered with a random key like a
 * lease, within the tenant's kv_share of the donation and, in a cluster,
 * within the KV allowance the registry last gave this donor for the
 * tenant (docs/cluster.md, "KV memory and quotas"). kv_slab_put gives
 * it back through the normal path: close the registration, release the
 * lease, quiesce, zero. A KV location is built from the slab's own
 * registration and only ever for a session of the slab's tenant. A
 * client's cost model hint (KV_MODEL, protocol 3) is kept in the tenant's
 * kv_tenant entry (under kvlock) for the capacity reports.
 *
 * Invariants: srv->mr[i] != NULL iff slab i is LEASED (to a client
 * session or to a KV session); srv->mr_ro[i] != NULL iff slab i is a
 * KV slab (its read-only registration, whose key LOOKUP hands out);
 * kvs[i].used iff slab i is a KV slab; every
 * session pointer held by a connection is attached (detached on close);
 * a connection is on the handshake queue iff it is not established, and
 * ntenant counts the established ones that are not @admin or @donor;
 * the arenas are all per * slab_bytes long.
 */
#include "memd/server_int.h"

uint64_t srv_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Client sessions: every open session but the KV sessions. */
uint32_t srv_client_sessions(struct memd_server *s, uint32_t sessions)
{
	uint32_t k = __atomic_load_n(&s->nkvt, __ATOMIC_RELAXED);

	return sessions > k ? sessions - k : 0;
}

/* ------------------------------------------------------------------ */
/* connections                                                          */

static int epoll_mod(struct memd_server *s, struct conn *c)
{
	struct epoll_event ev = {
		.events = (c->reading ? EPOLLIN : 0u) |
			  (c->writing ? EPOLLOUT : 0u) | EPOLLRDHUP,
		.data.ptr = c,
	};

	return epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &ev) ? -errno : 0;
}

/* Takes c off the handshake queue (a no-op when it is not on it). */
static void hs_remove(struct memd_server *s, struct conn *c)
{
	if (c->hs_prev)
		c->hs_prev->hs_next = c->hs_next;
	else if (s->hs_head == c)
		s->hs_head = c->hs_next;
	if (c->hs_next)
		c->hs_next->hs_prev = c->hs_prev;
	else if (s->hs_tail == c)
		s->hs_tail = c->hs_prev;
	c->hs_next = c->hs_prev = NULL;
}

/* Connections of max_clients that tenants may not hold: in a pool only,
 * and never more than half. */
static uint32_t reserved_slots(const struct memd_server *s)
{
	if (s->mode == MODE_STANDALONE)
		return 0;
	return s->cfg.reserved_clients < s->cfg.max_clients / 2
		       ? s->cfg.reserved_clients
		       : s->cfg.max_clients / 2;
}

/* Established connections from host that are not operators'. */
static uint32_t host_tenant_conns(const struct memd_server *s, const char *host)
{
	uint32_t n = 0;

	for (const struct conn *c = s->conns; c; c = c->next)
		n += c->established && !c->cluster && !strcmp(c->host, host);
	return n;
}

/*
 * May c, in its handshake, become established (as an operator when
 * cluster)? Operators always may; others within max_clients -
 * reserved_clients and max_clients_per_host. On no, err gets the reason
 * for the client and the refusal is counted and logged (rate-limited).
 */
bool srv_conn_may_establish(struct memd_server *s, struct conn *c, bool cluster,
			    char *err, size_t errlen)
{
	uint32_t room = s->cfg.max_clients - reserved_slots(s);

	if (cluster)
		return true;
	if (s->ntenant >= room) {
		CTR_ADD(s, conns_refused_reserved, 1);
		memd_log_limited(&s->ll_refuse, LOG_WARNING,
				 "ctl: refused peer=%s why=reserved "
				 "tenants=%u max=%u reserved=%u",
				 c->peer, s->ntenant, s->cfg.max_clients,
				 reserved_slots(s));
		snprintf(err, errlen,
			 "too many clients: the last %u connections are "
			 "kept for the pool's operators and donors",
			 reserved_slots(s));
		return false;
	}
	if (host_tenant_conns(s, c->host) >= s->cfg.max_clients_per_host) {
		CTR_ADD(s, conns_refused_host, 1);
		memd_log_limited(&s->ll_refuse, LOG_WARNING,
				 "ctl: refused peer=%s why=per-host max=%u",
				 c->peer, s->cfg.max_clients_per_host);
		snprintf(err, errlen,
			 "too many connections from %s (max_clients_per_host "
			 "= %u)",
			 c->host, s->cfg.max_clients_per_host);
		return false;
	}
	return true;
}

/* c's handshake is done: it leaves the handshake queue. */
void srv_conn_establish(struct memd_server *s, struct conn *c, bool cluster)
{
	hs_remove(s, c);
	c->established = true;
	c->cluster = cluster;
	if (!cluster)
		s->ntenant++;
}

/* Close lines of connections that spoke the protocol: at most this many
 * a second (ll_close), the next one counting those left out. */
#define CLOSE_LOG_BURST 20

/*
 * Did c's peer speak the protocol: established, past HELLO, or at least
 * one whole frame header sent (in rx, or still in the socket: a client
 * displaced before memd read its HELLO)? A churn of half-sent headers
 * never does.
 */
static bool conn_spoke(const struct conn *c)
{
	uint8_t hdr[WIRE_HDR_LEN];
	ssize_t n;

	if (c->established || c->proto || c->rx_len >= WIRE_HDR_LEN)
		return true;
	n = recv(c->fd, hdr, WIRE_HDR_LEN - c->rx_len, MSG_PEEK | MSG_DONTWAIT);
	return n > 0 && c->rx_len + (size_t)n >= WIRE_HDR_LEN;
}

void srv_conn_close(struct memd_server *s, struct conn *c, const char *why)
{
	/* Why memd closed a client's connection, one line. A connection
	 * that never sent a whole frame header is noise an attacker
	 * controls (a churn of half-sent headers): a debug line, the
	 * reason, where it matters, logged rate-limited where it happened.
	 * One that did (conn_spoke) is a client's: info once established, notice while still in its
	 * handshake (a client dropped before it got in: displaced by a
	 * churn, timed out). Those lines have a limiter of their own, so a
	 * churn of real handshakes cannot flood the log and a churn of
	 * half-sent headers cannot crowd them out. */
	if (conn_spoke(c))
		memd_log_limited_n(&s->ll_close, CLOSE_LOG_BURST,
				   c->established ? LOG_INFO : LOG_NOTICE,
				   "ctl: close peer=%s session=%" PRIx64
				   " state=%s why=%s",
				   c->peer, c->session_id,
				   c->established ? "established" : "handshake",
				   why);
	else
		memd_log(LOG_DEBUG,
			 "ctl: close peer=%s session=%" PRIx64
			 " state=handshake why=%s",
			 c->peer, c->session_id, why);
	hs_remove(s, c);
	if (c->established && !c->cluster)
		s->ntenant--;
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	/* A registry that stops does not count its donors down: the list
	 * it saved is the one its restart waits for (docs/kv.md). */
	if (c->donor_id && s->reg && !s->draining && !s->stop)
		memd_registry_donor_lost(s->reg, c->donor_id, c->donor_epoch,
					 srv_now_ms(),
					 "its link to the registry "
					 "closed");
	sodium_memzero(c->key, sizeof(c->key));
	sodium_memzero(c->skey, sizeof(c->skey));
	if (c->session)
		memd_session_detach(s->lt, c->session);
	if (c->shm_bound)
		srv_shm_session_closed(s, c->session_id);
	sodium_memzero(c->shm_nonce, sizeof(c->shm_nonce));
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nconns--;
	free(c->rx);
	free(c->tx);
	free(c);
}

/* Queues one reply frame. -ENOBUFS when the client is not reading. */
int srv_conn_send(struct conn *c, const struct wire_msg *m)
{
	ssize_t n;

	if (c->tx_off && c->tx_off == c->tx_len)
		c->tx_off = c->tx_len = 0;
	if (c->tx_off > 0 && TX_CAP - c->tx_len < WIRE_MAX_FRAME) {
		memmove(c->tx, c->tx + c->tx_off, c->tx_len - c->tx_off);
		c->tx_len -= c->tx_off;
		c->tx_off = 0;
	}
	n = wire_encode(m, c->tx + c->tx_len, TX_CAP - c->tx_len);
	if (n == -ENOSPC)
		return -ENOBUFS;
	if (n < 0)
		return (int)n; /* a bug of ours: logged by the caller */
	c->tx_len += (size_t)n;
	return 0;
}

void srv_send_error(struct memd_server *s, struct conn *c, uint32_t seq,
		    int err, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

void srv_send_error(struct memd_server *s, struct conn *c, uint32_t seq,
		    int err, const char *fmt, ...)
{
	static struct wire_msg m; /* memd-ctl only */
	char text[WIRE_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	wire_make_error(&m, seq, err, text);
	if (srv_conn_send(c, &m))
		c->closing = true;
	(void)s;
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
static void reg_awake(struct memd_server *s)
{
	uint64_t now = srv_now_ms();

	if (!s->reg)
		return;
	if (!s->reg_awake_ms) /* first pass (the fuzzing seam's too) */
		s->reg_awake_ms = now;
	memd_registry_loop_gap(s->reg, now - s->reg_awake_ms);
	s->reg_awake_ms = now;
}

static void conn_process(struct memd_server *s, struct conn *c)
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
		reg_awake(s);
		handle(s, c, &req);
		off += (size_t)n;
	}
	if (off) {
		memmove(c->rx, c->rx + off, c->rx_len - off);
		c->rx_len -= off;
	}
}

static int conn_flush(struct conn *c)
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
static int conn_read(struct conn *c)
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
static void conn_service(struct memd_server *s, struct conn *c)
{
	bool reading, writing;
	int r;

	conn_process(s, c);
	r = conn_flush(c);
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

/* Tells a connection we will not serve why (best effort: one error frame
 * if the socket takes it now), and closes it. */
static void refuse_fd(int fd, const char *why)
{
	struct wire_msg m;
	uint8_t buf[WIRE_HDR_LEN + WIRE_MSG_MAX + 16];
	ssize_t n;

	wire_make_error(&m, 0, EBUSY, why);
	n = wire_encode(&m, buf, sizeof(buf));
	if (n > 0)
		(void)!send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
	close(fd);
}

/* The pause state of listener *lfdp (the control port's or the
 * same-host socket's). */
static void listener_state(struct memd_server *s, int *lfdp, bool **off,
			   uint64_t **on_ms)
{
	if (lfdp == &s->shm_lfd) {
		*off = &s->shm_accept_off;
		*on_ms = &s->shm_accept_on_ms;
	} else {
		*off = &s->accept_off;
		*on_ms = &s->accept_on_ms;
	}
}

void srv_accept_pause(struct memd_server *s, int *lfdp)
{
	struct epoll_event ev = { .events = 0, .data.ptr = lfdp };
	uint64_t *on_ms;
	bool *off;

	listener_state(s, lfdp, &off, &on_ms);
	if (*off)
		return;
	epoll_ctl(s->epfd, EPOLL_CTL_MOD, *lfdp, &ev);
	*off = true;
	*on_ms = srv_now_ms() + TICK_MS;
}

static void accept_resume(struct memd_server *s, int *lfdp)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = lfdp };
	uint64_t *on_ms;
	bool *off;

	listener_state(s, lfdp, &off, &on_ms);
	if (!*off || srv_now_ms() < *on_ms)
		return;
	if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, *lfdp, &ev) == 0)
		*off = false;
	else
		*on_ms = srv_now_ms() + TICK_MS;
}

bool srv_accept_shed(struct memd_server *s, int *lfdp, int err)
{
	const char *who = lfdp == &s->shm_lfd ? "shm" : "ctl";
	int fd;

	if (s->reserve_fd < 0)
		s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (s->reserve_fd < 0) {
		memd_log_limited(&s->ll_shed, LOG_ERR,
				 "%s: out of file descriptors (%s), no reserve "
				 "left: pausing accept clients=%u",
				 who, strerror(err), s->nconns);
		return false;
	}
	close(s->reserve_fd);
	fd = accept4(*lfdp, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	/* a same-host client reads the close and stays on the fabric */
	if (lfdp == &s->lfd)
		refuse_fd(fd, "memd is out of file descriptors");
	else
		close(fd);
	CTR_ADD(s, conns_shed, 1);
	memd_log_limited(&s->ll_shed, LOG_ERR,
			 "%s: out of file descriptors (%s): shedding new "
			 "connections clients=%u max_clients=%u; raise "
			 "RLIMIT_NOFILE (LimitNOFILE=)",
			 who, strerror(err), s->nconns, s->cfg.max_clients);
	return true;
}

/*
 * Closes the oldest connection still in its handshake, from host when
 * host is not NULL, to admit a newer one. False when there is none.
 */
static bool displace_oldest(struct memd_server *s, const char *host)
{
	struct conn *v = s->hs_head;

	while (v && host && strcmp(v->host, host))
		v = v->hs_next;
	if (!v)
		return false;
	CTR_ADD(s, conns_displaced, 1);
	memd_log_limited(&s->ll_evict, LOG_NOTICE,
			 "ctl: displaced peer=%s age_ms=%" PRIu64 " why=%s",
			 v->peer, srv_now_ms() - v->accepted_ms,
			 host ? "max_clients_per_host" : "max_clients");
	srv_conn_close(s, v, "displaced in its handshake");
	return true;
}

/* Connections in their handshake from host. */
static uint32_t host_hs_conns(const struct memd_server *s, const char *host)
{
	uint32_t n = 0;

	for (const struct conn *c = s->hs_head; c; c = c->hs_next)
		n += !strcmp(c->host, host);
	return n;
}

/*
 * Admits one accepted connection fd from host:port (numeric): displaces
 * or refuses as admission says (docs/reliability.md), else adds it to the
 * loop in its handshake. Takes fd in every case.
 */
static void accept_one(struct memd_server *s, int fd, const char *host,
		       const char *port)
{
	struct epoll_event ev;
	struct conn *c;
	int one = 1;

	/* One address never holds more than max_clients_per_host
	 * connections in their handshake; the table is never so
	 * full of handshakes that a new client cannot get in. */
	if (!s->draining &&
	    host_hs_conns(s, host) >= s->cfg.max_clients_per_host)
		displace_oldest(s, host);
	if (s->nconns >= s->cfg.max_clients && !s->draining)
		displace_oldest(s, NULL);
	if (s->nconns >= s->cfg.max_clients || s->draining) {
		refuse_fd(fd, s->draining ? "memd is draining"
					  : "too many clients");
		CTR_ADD(s, conns_refused, 1);
		memd_log_limited(&s->ll_refuse, LOG_WARNING,
				 "ctl: refused peer=%s:%s clients=%u "
				 "max=%u",
				 host, port, s->nconns, s->cfg.max_clients);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (c)
		c->rx = malloc(RX_INITIAL);
	if (c)
		c->tx = malloc(TX_CAP);
	if (!c || !c->rx || !c->tx) {
		if (c) {
			free(c->rx);
			free(c->tx);
		}
		free(c);
		close(fd);
		memd_log_limited(&s->ll_accept, LOG_ERR,
				 "ctl: out of memory for a client");
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->fd = fd;
	c->rx_cap = RX_INITIAL;
	c->reading = true;
	c->accepted_ms = c->last_rx_ms = srv_now_ms();
	snprintf(c->host, sizeof(c->host), "%s", host);
	snprintf(c->peer, sizeof(c->peer), "%s:%s", host, port);
	ev.events = EPOLLIN | EPOLLRDHUP;
	ev.data.ptr = c;
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev)) {
		memd_log_limited(&s->ll_accept, LOG_ERR,
				 "ctl: epoll add err=%s", strerror(errno));
		close(fd);
		free(c->rx);
		free(c->tx);
		free(c);
		return;
	}
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->nconns++;
	c->hs_prev = s->hs_tail;
	if (s->hs_tail)
		s->hs_tail->hs_next = c;
	else
		s->hs_head = c;
	s->hs_tail = c;
	CTR_ADD(s, conns_accepted, 1);
	memd_log(LOG_DEBUG, "ctl: accept peer=%s", c->peer);
}

static void accept_all(struct memd_server *s)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		char host[INET6_ADDRSTRLEN] = "?", port[8] = "?";
		int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			int e = errno;

			if (e == EAGAIN || e == EWOULDBLOCK)
				return;
			if (e == EINTR || e == ECONNABORTED)
				continue;
			if ((e == EMFILE || e == ENFILE) &&
			    srv_accept_shed(s, &s->lfd, e))
				continue;
			if (e != EMFILE && e != ENFILE)
				memd_log_limited(&s->ll_accept, LOG_WARNING,
						 "ctl: accept err=%s",
						 strerror(e));
			srv_accept_pause(s, &s->lfd);
			return;
		}
		getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host),
			    port, sizeof(port),
			    NI_NUMERICHOST | NI_NUMERICSERV);
		accept_one(s, fd, host, port);
	}
}

/*
 * Closes connections past their deadline: handshake_timeout after accept
 * for those still in their handshake (the queue is in accept order, so
 * only its head needs looking at), idle_timeout after their last request
 * for established ones (scanned once a second).
 */
static void conn_timers(struct memd_server *s)
{
	uint64_t now = srv_now_ms();

	while (s->hs_head &&
	       now - s->hs_head->accepted_ms >= s->cfg.handshake_timeout_ms) {
		struct conn *c = s->hs_head;

		CTR_ADD(s, handshake_timeouts, 1);
		memd_log_limited(&s->ll_timeout, LOG_NOTICE,
				 "ctl: handshake timeout peer=%s after_ms=%u",
				 c->peer, s->cfg.handshake_timeout_ms);
		srv_conn_close(s, c, "handshake timeout");
	}
	if (!s->cfg.idle_timeout_ms || now < s->idle_scan_ms)
		return;
	s->idle_scan_ms = now + 1000;
	for (struct conn *c = s->conns, *next; c; c = next) {
		next = c->next;
		if (!c->established ||
		    now - c->last_rx_ms < s->cfg.idle_timeout_ms)
			continue;
		CTR_ADD(s, idle_timeouts, 1);
		memd_log_limited(&s->ll_timeout, LOG_NOTICE,
				 "ctl: idle timeout peer=%s after_ms=%u",
				 c->peer, s->cfg.idle_timeout_ms);
		srv_conn_close(s, c, "idle timeout");
	}
}

/* Closes the connections of sessions that expired while attached. */
static void expire_sessions(struct memd_server *s)
{
	uint32_t n =
		memd_lease_expire(s->lt, srv_now_ms(), srv_count_expired, s);

	if (!n)
		return;
	memd_log(LOG_NOTICE, "lease: expired sessions=%u", n);
	srv_reclaim_kick(s);
	if (s->donor)
		memd_donor_kick(s->donor);
	for (struct conn *c = s->conns, *next; c; c = next) {
		next = c->next;
		if (c->session && memd_session_is_dead(s->lt, c->session)) {
			memd_log(LOG_NOTICE,
				 "lease: session=%" PRIx64 " peer=%s expired "
				 "without heartbeat",
				 memd_session_id(c->session), c->peer);
			srv_conn_close(s, c, "session expired");
		}
	}
}

/*
 * What memd may hold open: per client its control connection, one
 * fabric connection to each endpoint (with the tcp provider; the
 * provider accepts those itself, anyone's, up to the limit) and, with
 * shm, a same-host socket, plus as many unbound same-host sockets
 * (server_shm.c's allowance); with shm each slab's file and the
 * renewal's spare; and those memd keeps for itself. Raises the soft
 * RLIMIT_NOFILE toward the hard limit to fit, and says so clearly when
 * it cannot: past the limit connections are shed at accept
 * (srv_accept_shed), never spun on. Called before the slab files exist
 * (srv_shm_open needs the room): shm counts as wanted unless off.
 */
#define NOFILE_OWN 128
static void check_nofile(struct memd_server *s)
{
	bool shm = s->cfg.shm != MEMD_SHM_OFF;
	rlim_t want = (rlim_t)s->cfg.max_clients * (1 + s->nep + 2 * shm) +
		      NOFILE_OWN + (shm ? (rlim_t)s->nslabs + 1 : 0);
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
		struct rlimit up = rl;

		up.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want
				      ? want
				      : rl.rlim_max;
		if (up.rlim_cur > rl.rlim_cur && !setrlimit(RLIMIT_NOFILE, &up))
			rl = up;
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
		memd_log(LOG_WARNING,
			 "memd: max_clients=%u wants %llu file descriptors but "
			 "RLIMIT_NOFILE allows %llu (hard limit %llu): past "
			 "them new connections are shed; raise LimitNOFILE= "
			 "or ulimit -n, or lower max_clients",
			 s->cfg.max_clients, (unsigned long long)want,
			 (unsigned long long)rl.rlim_cur,
			 (unsigned long long)rl.rlim_max);
	else
		memd_log(LOG_DEBUG, "memd: nofile limit=%llu want=%llu",
			 (unsigned long long)rl.rlim_cur,
			 (unsigned long long)want);
}

static void reload_note(void *arg, const char *key, const char *old_value,
			const char *new_value, bool applied)
{
	(void)arg;
	if (applied)
		memd_log(LOG_NOTICE, "config: reload key=%s old=%s new=%s", key,
			 old_value, new_value);
	else
		memd_log(LOG_WARNING,
			 "config: key=%s changed (%s -> %s) but needs a "
			 "restart; keeping %s",
			 key, old_value, new_value, old_value);
}

/* SIGHUP: defaults + file + flags again; reloadable keys take effect. */
static void reload(struct memd_server *s)
{
	struct memd_config next;
	char err[1024];
	int n;

	if (!s->rebuild) {
		memd_log(LOG_NOTICE, "config: SIGHUP: nothing to reload");
		return;
	}
	/* the service manager waits for READY=1 after RELOADING=1 */
	memd_notify("RELOADING=1\nMONOTONIC_USEC=%" PRIu64
		    "\nSTATUS=Reloading the configuration",
		    memd_notify_monotonic_usec());
	if (s->rebuild(&next, err, sizeof(err), s->rebuild_arg)) {
		memd_log(LOG_ERR,
			 "config: reload failed, keeping the running "
			 "config: %s",
			 err);
		memd_notify("READY=1\nSTATUS=Reload failed, running config "
			    "kept: %s",
			    err);
		return;
	}
	n = memd_config_reload(&s->cfg, &next, reload_note, s);
	srv_kv_cost_publish(s);
	check_nofile(s);
	__atomic_store_n(&memd_log_level, s->cfg.log_level, __ATOMIC_RELAXED);
	memd_lease_set_quiesce(s->lt, s->cfg.quiesce_ms);
	__atomic_store_n(&s->busy_poll_us, s->cfg.busy_poll_us,
			 __ATOMIC_RELAXED);
	memd_log(LOG_NOTICE, "config: reloaded changed=%d", n);
	memd_notify("READY=1\nSTATUS=Serving on %s; reloaded, %d key(s) "
		    "applied",
		    s->bound, n);
}

/* ------------------------------------------------------------------ */
/* metrics                                                              */

/* A Prometheus label value: backslash, quote and newline escaped. */
void srv_put_label(struct memd_metrics_buf *b, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			memd_metrics_printf(b, "\\%c", *v);
		else if (*v == '\n')
			memd_metrics_printf(b, "\\n");
		else
			memd_metrics_printf(b, "%c", *v);
	}
}

void srv_put_head(struct memd_metrics_buf *b, const char *name,
		  const char *type, const char *help)
{
	memd_metrics_printf(b, "# HELP tidepool_memd_%s %s\n", name, help);
	memd_metrics_printf(b, "# TYPE tidepool_memd_%s %s\n", name, type);
}

void srv_put_gauge(struct memd_metrics_buf *b, const char *name,
		   const char *help, uint64_t v)
{
	srv_put_head(b, name, "gauge", help);
	memd_metrics_printf(b, "tidepool_memd_%s %" PRIu64 "\n", name, v);
}

/* Per-tenant usage of this memd's slabs (tenant 0: standalone sessions,
 * which authenticate as nobody). */
static void write_tenant_metrics(struct memd_metrics_buf *b,
				 struct memd_server *s)
{
	struct memd_tenant_usage *u = malloc(WIRE_MAX_TENANTS * sizeof(*u));
	size_t n = u ? memd_lease_tenant_usage(s->lt, u, WIRE_MAX_TENANTS) : 0;

	srv_put_head(b, "tenant_leased_bytes", "gauge",
		     "Memory of this memd leased to each tenant's sessions "
		     "(tenant_id 0: standalone sessions).");
	for (size_t i = 0; i < n; i++)
		memd_metrics_printf(b,
				    "tidepool_memd_tenant_leased_bytes{"
				    "tenant_id=\"%u\"} %" PRIu64 "\n",
				    u[i].tenant_id,
				    (uint64_t)u[i].slabs * s->cfg.slab_bytes);
	srv_put_head(b, "tenant_sessions", "gauge",
		     "Live client sessions of each tenant on this memd.");
	for (size_t i = 0; i < n; i++)
		memd_metrics_printf(
			b,
			"tidepool_memd_tenant_sessions{"
			"tenant_id=\"%u\"} %u\n",
			u[i].tenant_id,
			u[i].sessions - srv_kv_sessions_of(s, u[i].tenant_id));
	free(u);
}

/* CPU time of a's progress thread so far; 0 when it is not running. The
 * thread outlives memd-metrics (memd_server_destroy stops that first). */
static uint64_t thread_cpu_ns(const struct arena_ep *a)
{
	struct timespec ts;
	clockid_t cid;

	if (!a->started || pthread_getcpuclockid(a->thread, &cid) ||
	    clock_gettime(cid, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One sample of a per-endpoint counter kept in nanoseconds. */
static void put_seconds_ep(struct memd_metrics_buf *b, const char *name,
			   uint32_t ep, uint64_t ns)
{
	memd_metrics_printf(
		b,
		"tidepool_memd_%s{endpoint=\"%u\"} %" PRIu64 ".%06" PRIu64 "\n",
		name, ep, ns / 1000000000u, ns % 1000000000u / 1000);
}

static void write_metrics(struct memd_metrics_buf *b, void *arg)
{
	struct memd_server *s = arg;
	struct memd_lease_counts cnt;
	uint64_t slab = s->cfg.slab_bytes, up_ms = srv_now_ms() - s->start_ms;

	memd_lease_get_counts(s->lt, &cnt);

	srv_put_head(b, "info", "gauge",
		     "memd's version, data-plane provider and cluster mode.");
	memd_metrics_printf(b, "tidepool_memd_info{version=\"");
	srv_put_label(b, TP_VERSION);
	memd_metrics_printf(b, "\",provider=\"");
	srv_put_label(b, fab_domain_provider(s->aep[0].fd));
	memd_metrics_printf(b, "\",mode=\"%s\"} 1\n",
			    memd_mode_name(memd_config_mode(&s->cfg)));
	srv_put_head(b, "uptime_seconds", "gauge",
		     "Seconds since memd started.");
	memd_metrics_printf(b,
			    "tidepool_memd_uptime_seconds %" PRIu64 ".%03u\n",
			    up_ms / 1000, (unsigned int)(up_ms % 1000));

	srv_put_gauge(b, "shm_enabled",
		      "1: same-host sessions may read slabs through their "
		      "memfds (shm = auto and available).",
		      s->shm_on);
	srv_put_gauge(b, "slab_bytes", "Size of one slab, the unit of lease.",
		      slab);
	srv_put_gauge(b, "capacity_bytes", "Memory donated to the pool.",
		      s->donated_bytes);
	srv_put_gauge(b, "leased_bytes", "Memory in slabs leased to sessions.",
		      (uint64_t)cnt.leased * slab);
	srv_put_gauge(b, "free_bytes", "Memory in free slabs, ready to lease.",
		      (uint64_t)cnt.free * slab);
	srv_put_gauge(b, "reclaiming_bytes",
		      "Memory in revoked slabs waiting to be zeroed.",
		      (uint64_t)cnt.reclaiming * slab);
	srv_put_gauge(b, "slabs_quarantined",
		      "Slabs kept out of use because their memory registration "
		      "could not be closed.",
		      cnt.quarantined);
	srv_put_gauge(b, "sessions", "Open client sessions.",
		      srv_client_sessions(s, cnt.sessions));

#define X(name, help)                                                          \
	srv_put_head(b, #name "_total", "counter", help ".");                  \
	memd_metrics_printf(b, "tidepool_memd_" #name "_total %" PRIu64 "\n",  \
			    __atomic_load_n(&s->ctr.name, __ATOMIC_RELAXED));
	MEMD_COUNTERS(X)
#undef X
	srv_put_head(b, "sessions_expired_total", "counter",
		     "Sessions that expired without a heartbeat.");
	memd_metrics_printf(
		b, "tidepool_memd_sessions_expired_total %" PRIu64 "\n",
		cnt.expired_sessions);

	srv_put_head(b, "arena_slabs", "gauge",
		     "Slabs of each arena (node -1: no NUMA placement).");
	for (uint32_t a = 0; a < s->narenas; a++) {
		struct memd_lease_group_counts gc;

		memd_lease_get_group_counts(s->lt, a, &gc);
		memd_metrics_printf(b,
				    "tidepool_memd_arena_slabs{arena=\"%u\","
				    "node=\"%d\"} %u\n",
				    a, srv_arena_aep(s, a)->node, gc.total);
	}
	srv_put_head(b, "arena_free_slabs", "gauge",
		     "Free slabs of each arena.");
	for (uint32_t a = 0; a < s->narenas; a++) {
		struct memd_lease_group_counts gc;

		memd_lease_get_group_counts(s->lt, a, &gc);
		memd_metrics_printf(
			b,
			"tidepool_memd_arena_free_slabs{arena=\"%u\","
			"node=\"%d\"} %u\n",
			a, srv_arena_aep(s, a)->node, gc.free);
	}

	srv_put_head(b, "fabric_wakeups_total", "counter",
		     "Times a fabric progress thread woke from sleep because a "
		     "client's request arrived (busy_poll_us avoids them).");
	for (uint32_t a = 0; a < s->nep; a++)
		memd_metrics_printf(
			b,
			"tidepool_memd_fabric_wakeups_total{endpoint=\"%u\"} "
			"%" PRIu64 "\n",
			a,
			__atomic_load_n(&s->aep[a].st.wakeups,
					__ATOMIC_RELAXED));
	srv_put_head(b, "fabric_starved_sleeps_total", "counter",
		     "Millisecond sleeps of a fabric progress thread instead "
		     "of polling, while memd had no file descriptor left.");
	for (uint32_t a = 0; a < s->nep; a++)
		memd_metrics_printf(
			b,
			"tidepool_memd_fabric_starved_sleeps_total{endpoint="
			"\"%u\"} %" PRIu64 "\n",
			a,
			__atomic_load_n(&s->aep[a].st.starved_sleeps,
					__ATOMIC_RELAXED));
	srv_put_head(
		b, "fabric_busy_poll_seconds_total", "counter",
		"Time fabric progress threads spent polling after a request "
		"instead of sleeping (busy_poll_us).");
	for (uint32_t a = 0; a < s->nep; a++)
		put_seconds_ep(b, "fabric_busy_poll_seconds_total", a,
			       __atomic_load_n(&s->aep[a].st.busy_ns,
					       __ATOMIC_RELAXED));
	srv_put_head(
		b, "fabric_cpu_seconds_total", "counter",
		"CPU time of each fabric progress thread (memd-fabN): what "
		"serving RMA costs memd.");
	for (uint32_t a = 0; a < s->nep; a++)
		put_seconds_ep(b, "fabric_cpu_seconds_total", a,
			       thread_cpu_ns(&s->aep[a]));

	srv_put_head(
		b, "rma_bytes_total", "counter",
		"Bytes clients moved by one-sided RMA, as they report them in "
		"their heartbeats (HEARTBEAT2).");
	memd_metrics_printf(
		b, "tidepool_memd_rma_bytes_total{dir=\"read\"} %" PRIu64 "\n",
		__atomic_load_n(&s->rma_read, __ATOMIC_RELAXED));
	memd_metrics_printf(
		b, "tidepool_memd_rma_bytes_total{dir=\"write\"} %" PRIu64 "\n",
		__atomic_load_n(&s->rma_written, __ATOMIC_RELAXED));
	write_tenant_metrics(b, s);
	srv_write_kv_metrics(b, s);
	if (s->redeemed)
		srv_write_redeem_metrics(b, s);
	if (s->reg)
		srv_write_registry_metrics(b, s);
}

/* ------------------------------------------------------------------ */
/* lifecycle                                                            */

static int listen_on(struct memd_server *s, char *bound, size_t boundlen,
		     char *err, size_t errlen)
{
	char host[MEMD_CONF_STR_MAX], hbuf[INET6_ADDRSTRLEN], pbuf[8];
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char port[8];
	uint16_t p;
	int fd = -1, one = 1, r;

	if (wire_split_hostport(s->cfg.listen, host, sizeof(host), &p)) {
		snprintf(err, errlen, "listen '%s' is not HOST:PORT",
			 s->cfg.listen);
		return -EINVAL;
	}
	snprintf(port, sizeof(port), "%u", p);
	r = getaddrinfo(host, port, &hints, &ai);
	if (r) {
		snprintf(err, errlen, "listen '%s': %s", s->cfg.listen,
			 gai_strerror(r));
		return -EINVAL;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 512) ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl)) {
		r = -errno;
		snprintf(err, errlen, "listen on %s: %s", s->cfg.listen,
			 strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return r;
	}
	freeaddrinfo(ai);
	getnameinfo((struct sockaddr *)&ss, sl, hbuf, sizeof(hbuf), pbuf,
		    sizeof(pbuf), NI_NUMERICHOST | NI_NUMERICSERV);
	snprintf(bound, boundlen,
		 ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", hbuf, pbuf);
	s->lfd = fd;
	return 0;
}

/* "HOST:PORT\n" of the control server, then "metrics HOST:PORT\n" when
 * /metrics is served (memd(8), --ready-file). */
static int write_ready_file(const char *path, const char *addr,
			    const char *metrics_addr)
{
	char tmp[4096];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "%s\n", addr);
	if (metrics_addr)
		fprintf(f, "metrics %s\n", metrics_addr);
	if (fflush(f) || fsync(fileno(f))) {
		int r = -errno;

		fclose(f);
		unlink(tmp);
		return r;
	}
	fclose(f);
	if (rename(tmp, path)) {
		int r = -errno;

		unlink(tmp);
		return r;
	}
	return 0;
}

/*
 * Endpoints per arena: progress_threads, or from the cores (one per 8 of
 * the first arena's node's CPUs, all online CPUs without NUMA placement,
 * 1 to 4, and no more than WIRE_MAX_ENDPOINTS allow). An explicit value
 * that does not fit is a start-up error.
 */
static int resolve_per_arena(const struct memd_config *cfg,
			     const struct memd_arena *arenas, uint32_t narenas,
			     const struct place_topo *topo, uint32_t *out,
			     char *err, size_t errlen)
{
	uint32_t fit = WIRE_MAX_ENDPOINTS / narenas, n;
	long cpus;

	if (cfg->progress_threads) {
		if (cfg->progress_threads > fit) {
			snprintf(err, errlen,
				 "progress_threads = %u with %u arenas is %u "
				 "endpoints; at most %d fit in HELLO_OK (use "
				 "%u or fewer)",
				 cfg->progress_threads, narenas,
				 cfg->progress_threads * narenas,
				 WIRE_MAX_ENDPOINTS, fit);
			return -EINVAL;
		}
		*out = cfg->progress_threads;
		return 0;
	}
	if (topo && arenas[0].node >= 0)
		cpus = (long)place_node_cpus(topo, arenas[0].node, NULL, 0);
	else
		cpus = sysconf(_SC_NPROCESSORS_ONLN);
	n = cpus >= 8 ? (uint32_t)(cpus / 8) : 1;
	if (n > 4)
		n = 4;
	*out = n < fit ? n : fit;
	return 0;
}

int memd_server_create(const struct memd_config *cfg, struct memd_arena *arenas,
		       uint32_t narenas, const struct place_topo *topo,
		       memd_config_builder rebuild, void *rebuild_arg,
		       const char *ready_file, struct memd_server **out,
		       char *err, size_t errlen)
{
	struct memd_server *s;
	char host[MEMD_CONF_STR_MAX], bound[300], nodes[64];
	struct epoll_event ev;
	sigset_t mask;
	uint16_t port;
	uint32_t per_arena;
	bool hugetlb = true;
	int r;

	*out = NULL;
	if (narenas < 1 || narenas > MEMD_NUMA_NODES_MAX) {
		snprintf(err, errlen, "%u arenas: memd serves 1 to %d", narenas,
			 MEMD_NUMA_NODES_MAX);
		return -EINVAL;
	}
	for (uint32_t a = 0; a < narenas; a++) {
		if (arenas[a].len_bytes != arenas[0].len_bytes ||
		    arenas[a].len_bytes % cfg->slab_bytes ||
		    arenas[a].len_bytes < cfg->slab_bytes) {
			snprintf(err, errlen,
				 "arenas must be equal multiples of "
				 "slab_size");
			return -EINVAL;
		}
	}
	r = resolve_per_arena(cfg, arenas, narenas, topo, &per_arena, err,
			      errlen);
	if (r)
		return r;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	s->busy_poll_us = cfg->busy_poll_us;
	s->rebuild = rebuild;
	s->rebuild_arg = rebuild_arg;
	s->topo = topo;
	s->lfd = s->epfd = s->sigfd = s->reserve_fd = s->shm_lfd = -1;
	s->shm_spare_fd = -1;
	s->start_ms = srv_now_ms();
	s->epoch = srv_random_key();
	s->narenas = narenas;
	s->per_arena = per_arena;
	s->nep = narenas * per_arena;
	s->arena_slabs = (uint32_t)(arenas[0].len_bytes / cfg->slab_bytes);
	s->nslabs = s->arena_slabs * narenas;
	s->donated_bytes = arenas[0].len_bytes * narenas;
	for (uint32_t e = 0; e < s->nep; e++) {
		struct memd_arena *ar = &arenas[e / per_arena];

		s->aep[e].srv = s;
		s->aep[e].index = e;
		s->aep[e].arena = ar;
		s->aep[e].node = ar->node;
	}
	for (uint32_t a = 0; a < narenas; a++)
		hugetlb = hugetlb && arenas[a].hugetlb;
	pthread_mutex_init(&s->rlock, NULL);
	pthread_mutex_init(&s->kvlock, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&s->rcond, &ca);
		pthread_cond_init(&s->fence_cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	s->mr = calloc(s->nslabs, sizeof(*s->mr));
	s->key = calloc(s->nslabs, sizeof(*s->key));
	s->mr_stuck = calloc(s->nslabs, sizeof(*s->mr_stuck));
	s->mr_ro = calloc(s->nslabs, sizeof(*s->mr_ro));
	s->key_ro = calloc(s->nslabs, sizeof(*s->key_ro));
	if (!s->mr || !s->key || !s->mr_stuck || !s->mr_ro || !s->key_ro) {
		r = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	r = memd_lease_table_create_groups(
		s->nslabs, narenas, cfg->lease_ttl_ms, cfg->lease_grace_ms,
		cfg->quiesce_ms, &s->lt);
	if (r) {
		snprintf(err, errlen, "lease table: %s", strerror(-r));
		goto fail;
	}

	if (wire_split_hostport(cfg->listen, host, sizeof(host), &port)) {
		r = -EINVAL;
		snprintf(err, errlen, "listen '%s' is not HOST:PORT",
			 cfg->listen);
		goto fail;
	}
	for (uint32_t a = 0; a < s->nep; a++) {
		r = srv_open_endpoint(s, &s->aep[a], host, err, errlen);
		if (r)
			goto fail;
	}

	r = listen_on(s, bound, sizeof(bound), err, errlen);
	if (r)
		goto fail;
	snprintf(s->bound, sizeof(s->bound), "%s", bound);
	r = srv_cluster_open(s, err, errlen);
	if (r)
		goto fail;
	{
		static const uint8_t none[AUTH_IDENT_LEN];

		srv_spill_binding(NULL, 0, "", none, s->solo_bind);
	}
	r = srv_kv_open(s, err, errlen);
	if (r)
		goto fail;
	check_nofile(s);
	r = srv_shm_open(s, arenas, narenas, err, errlen);
	if (r)
		goto fail;
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	s->sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (s->epfd < 0 || s->sigfd < 0) {
		r = -errno;
		snprintf(err, errlen, "epoll/signalfd: %s", strerror(errno));
		goto fail;
	}
	/* the descriptor srv_accept_shed gives up to refuse a client
	 * cleanly, on every listener */
	s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	ev.events = EPOLLIN;
	ev.data.ptr = &s->lfd;
	epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &ev);
	ev.data.ptr = &s->sigfd;
	epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->sigfd, &ev);
	if (s->shm_lfd >= 0) {
		ev.data.ptr = &s->shm_lfd;
		epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->shm_lfd, &ev);
	}

	for (uint32_t a = 0; a < s->nep; a++) {
		r = pthread_create(&s->aep[a].thread, NULL, srv_fab_main,
				   &s->aep[a]);
		if (r) {
			r = -r;
			snprintf(err, errlen, "fabric thread %u: %s", a,
				 strerror(-r));
			goto fail;
		}
		s->aep[a].started = true;
	}
	r = pthread_create(&s->reclaim_thread, NULL, srv_reclaim_main, s);
	if (r) {
		r = -r;
		snprintf(err, errlen, "reclaim thread: %s", strerror(-r));
		goto fail;
	}
	s->reclaim_started = true;
	if (s->reg && memd_config_registry_is_etcd(&s->cfg)) {
		r = pthread_create(&s->etcd_thread, NULL, srv_etcd_main, s);
		if (r) {
			r = -r;
			snprintf(err, errlen, "etcd thread: %s", strerror(-r));
			goto fail;
		}
		s->etcd_started = true;
	}
	r = srv_donor_start(s, err, errlen);
	if (r)
		goto fail;

	if (cfg->metrics_listen[0]) {
		r = memd_metrics_start(cfg->metrics_listen, write_metrics, s,
				       &s->metrics, err, errlen);
		if (r)
			goto fail;
		memd_log(LOG_NOTICE, "metrics: listen=%s path=/metrics",
			 memd_metrics_addr(s->metrics));
	}
	snprintf(s->bound, sizeof(s->bound), "%s", bound);
	if (ready_file) {
		r = write_ready_file(ready_file, bound,
				     s->metrics ? memd_metrics_addr(s->metrics)
						: NULL);
		if (r) {
			snprintf(err, errlen, "ready file %s: %s", ready_file,
				 strerror(-r));
			goto fail;
		}
	}
	srv_served_nodes(s, nodes, sizeof(nodes));
	memd_log(LOG_NOTICE,
		 "memd: ready listen=%s provider=%s mr_mode=%#x donate=%" PRIu64
		 " slab=%" PRIu64 " slabs=%u hugetlb=%d ttl_ms=%u nodes=%s "
		 "endpoints=%u progress_threads=%u epoch=%016" PRIx64,
		 bound, fab_domain_provider(s->aep[0].fd),
		 fab_domain_mr_mode(s->aep[0].fd), s->donated_bytes,
		 cfg->slab_bytes, s->nslabs, hugetlb, cfg->lease_ttl_ms, nodes,
		 s->nep, s->per_arena, s->epoch);
	/* Once, at start: every lease's key is then the provider's, not
	 * the random one memd asks for (docs/reliability.md says what
	 * protects a slab then). */
	if (fab_domain_mr_mode(s->aep[0].fd) & FAB_MR_PROV_KEY)
		memd_log(LOG_WARNING,
			 "fabric: provider=%s picks memory keys itself "
			 "(FI_MR_PROV_KEY): lease keys are the provider's, "
			 "possibly sequential, not memd's random ones; only "
			 "the fabric's own isolation and the registration's "
			 "close protect a slab (docs/reliability.md)",
			 fab_domain_provider(s->aep[0].fd));
	*out = s;
	return 0;
fail:
	memd_server_destroy(s);
	return r;
}

const char *memd_server_addr(const struct memd_server *s)
{
	return s->bound;
}

/*
 * One pass of the control loop: waits up to timeout_ms for events,
 * serves them, then the timers. Returns how many events it served, or
 * -errno when epoll_wait fails.
 */
static int serve_once(struct memd_server *s, int timeout_ms)
{
	struct epoll_event evs[64];
	int n = epoll_wait(s->epfd, evs, 64, timeout_ms);
	bool listener = false;

	if (n < 0 && errno != EINTR) {
		int e = errno;

		memd_log(LOG_ERR, "ctl: epoll_wait err=%s", strerror(e));
		return -e;
	}
	/* a registry stopped (SIGSTOP, a stalled VM) credits its donors
	 * with the time it did not run before it reads their reports */
	reg_awake(s);
	for (int i = 0; i < n; i++) {
		void *p = evs[i].data.ptr;

		if (p == &s->lfd) {
			/* after this batch: accepting may close
			 * connections that have events in it */
			listener = true;
		} else if (p == &s->shm_lfd) {
			srv_shm_accept(s);
		} else if (srv_shm_owns(s, p)) {
			srv_shm_serve(s, p, evs[i].events);
		} else if (p == &s->sigfd) {
			struct signalfd_siginfo si;

			while (read(s->sigfd, &si, sizeof(si)) == sizeof(si)) {
				if (si.ssi_signo == SIGHUP) {
					reload(s);
					continue;
				}
				memd_log(LOG_NOTICE, "memd: signal=%s draining",
					 strsignal((int)si.ssi_signo));
				memd_notify("STOPPING=1\nSTATUS="
					    "Draining (%s)",
					    strsignal((int)si.ssi_signo));
				__atomic_store_n(&s->draining, true,
						 __ATOMIC_RELAXED);
			}
		} else {
			struct conn *c = p;
			int r = 0;

			if (evs[i].events &
			    (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
				r = conn_read(c);
			if (r < 0) {
				srv_conn_close(s, c, strerror(-r));
				continue;
			}
			if (r == 1 || (evs[i].events &
				       (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
				/* The peer sends nothing more: serve
				 * what came before (a last BYE) as far
				 * as the socket takes the replies now,
				 * then let go. Even when rx is full
				 * and EOF is still unread behind it:
				 * waiting for a peer that may never
				 * read would keep the level-triggered
				 * RDHUP firing on every pass. */
				conn_process(s, c);
				(void)conn_flush(c);
				srv_conn_close(s, c, "peer closed");
				continue;
			}
			conn_service(s, c);
		}
	}
	if (listener)
		accept_all(s);
	accept_resume(s, &s->lfd);
	accept_resume(s, &s->shm_lfd);
	conn_timers(s);
	srv_shm_timers(s);
	srv_kv_renew(s);
	expire_sessions(s);
	memd_kv_expire(s->kv, srv_now_ms());
	srv_kv_trim(s);
	srv_tenants_removed(s);
	srv_kv_drained(s);
	srv_kv_membership(s);
	if (s->reg) {
		reg_awake(s);
		memd_registry_tick(s->reg, srv_now_ms());
	}
	return n < 0 ? 0 : n;
}

int memd_server_run(struct memd_server *s)
{
	pthread_setname_np(pthread_self(), "memd-ctl");
	s->reg_awake_ms = srv_now_ms();
	while (!s->draining) {
		int r = serve_once(s, TICK_MS);

		if (r < 0)
			return r;
	}
	/* Drain: every client is told by its socket closing; leases die with
	 * the process (memory is unmapped, registrations closed). */
	while (s->conns)
		srv_conn_close(s, s->conns, "memd stopping");
	srv_shm_close(s);
	memd_log(LOG_NOTICE, "memd: drained");
	return 0;
}

#ifdef TP_FUZZ
/* The fuzzing seam (server.h): the real admission and the real loop,
 * with the caller as the only client. */
void memd_server_fuzz_adopt(struct memd_server *s, int fd)
{
	accept_one(s, fd, "127.0.0.1", "fuzz");
}

int memd_server_fuzz_step(struct memd_server *s)
{
	return serve_once(s, 0);
}
#endif

void memd_server_destroy(struct memd_server *s)
{
	if (!s)
		return;
	/* first: it reads the lease table and the endpoints */
	memd_metrics_stop(s->metrics);
	__atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
	if (s->reclaim_started) {
		srv_reclaim_kick(s);
		pthread_join(s->reclaim_thread, NULL);
	}
	for (uint32_t a = 0; a < s->nep; a++)
		if (s->aep[a].started)
			pthread_join(s->aep[a].thread, NULL);
	if (s->etcd_started) /* resigns: a standby takes over at once */
		pthread_join(s->etcd_thread, NULL);
	/* After memd-reclaim (which kicks it), before the lease table goes
	 * (its reports read it). */
	memd_donor_stop(s->donor);
	s->donor = NULL;
	while (s->conns)
		srv_conn_close(s, s->conns, "memd stopping");
	srv_shm_free(s); /* memd-reclaim has stopped */
	/* Gives every KV slab back (closing its registration) while the
	 * lease table and the domains still exist. */
	memd_kv_destroy(s->kv);
	for (uint32_t i = 0; s->mr && i < s->nslabs; i++)
		fab_mr_close(s->mr[i]);
	for (uint32_t i = 0; s->mr_ro && i < s->nslabs; i++)
		fab_mr_close(s->mr_ro[i]);
	/* Reverse order of creation; the first arena's domain was first. */
	for (uint32_t a = s->nep; a-- > 0;) {
		fab_ep_close(s->aep[a].ep);
		fab_domain_close(s->aep[a].fd);
	}
	memd_lease_table_destroy(s->lt);
	memd_registry_close(s->reg);
	memd_redeem_destroy(s->redeemed);
	sodium_memzero(&s->keys, sizeof(s->keys));
	sodium_memzero(s->spill_pool, sizeof(s->spill_pool));
	if (s->sigfd >= 0)
		close(s->sigfd);
	if (s->epfd >= 0)
		close(s->epfd);
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->reserve_fd >= 0)
		close(s->reserve_fd);
	pthread_cond_destroy(&s->rcond);
	pthread_cond_destroy(&s->fence_cond);
	pthread_mutex_destroy(&s->rlock);
	pthread_mutex_destroy(&s->kvlock);
	free(s->kvs);
	free(s->kvt);
	free(s->mr);
	free(s->key);
	free(s->mr_stuck);
	free(s->mr_ro);
	free(s->key_ro);
	free(s);
}
