// SPDX-License-Identifier: MIT
/*
 * memd/server_accept.c - accepting connections (memd/server.c's DESIGN
 * comment, "Admission"): the listeners and their pause at EMFILE,
 * shedding, displacing the oldest handshake, and the handshake and idle
 * deadlines (srv_conn_timers).
 */
#include "memd/server_int.h"

#include "fabric/dlist.h"

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

void srv_accept_resume(struct memd_server *s, int *lfdp)
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
void srv_accept_one(struct memd_server *s, int fd, const char *host,
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
	TP_DLIST_PUSH(s->conns, c, prev, next);
	s->nconns++;
	TP_DLIST_APPEND(s->hs_head, s->hs_tail, c, hs_prev, hs_next);
	CTR_ADD(s, conns_accepted, 1);
	memd_log(LOG_DEBUG, "ctl: accept peer=%s", c->peer);
}

void srv_accept_all(struct memd_server *s)
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
		srv_accept_one(s, fd, host, port);
	}
}

/*
 * Closes connections past their deadline: handshake_timeout after accept
 * for those still in their handshake (the queue is in accept order, so
 * only its head needs looking at), idle_timeout after their last request
 * for established ones (scanned once a second).
 */
void srv_conn_timers(struct memd_server *s)
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
