// SPDX-License-Identifier: MIT
/*
 * memd/server_conn.c - connections (memd/server.c's DESIGN comment,
 * "Admission"): the clock, admission's checks at HELLO and AUTH, making a
 * connection established, closing it, and queueing its replies
 * (srv_conn_send, srv_send_error). What every request handler calls back;
 * it calls no handler (only srv_shm_session_closed at close).
 */
#include "memd/server_int.h"

#include "fabric/dlist.h"

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
	TP_DLIST_REMOVE(s->conns, c, prev, next);
	s->nconns--;
	free(c->rx);
	free(c->tx);
	free(c);
}

/* Sends rep, its body already filled in, as the reply of type to request
 * seq; a client that is not reading is closed (c->closing). */
void srv_reply(struct conn *c, struct wire_msg *rep, uint8_t type, uint32_t seq)
{
	rep->type = type;
	rep->seq = seq;
	if (srv_conn_send(c, rep))
		c->closing = true;
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
