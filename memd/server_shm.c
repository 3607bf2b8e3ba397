// SPDX-License-Identifier: MIT
/*
 * memd/server_shm.c - same-host sessions (docs/design.md, "Co-located
 * clients over shm"; docs/protocol.md, "Same-host sessions").
 *
 * With shm = auto each slab of the donation is its own memfd, mapped at
 * its place in the arena (memd_arena_slab_fds), so the fabric path is
 * unchanged. A client on this host (it sends its boot id in SHM and it
 * matches ours) gets SHM_OK: the name of memd's abstract Unix socket
 * (SOCK_SEQPACKET) and a one-time nonce. It connects, BINDs with
 * (session id, nonce), and then asks for the memfd of each slab it holds
 * (SLAB: slab, generation); memd checks, on memd-ctl, that the session
 * of the connection that got the nonce holds that live lease, and passes
 * the descriptor with SCM_RIGHTS. The client then reads and writes with
 * pread/pwrite: one kernel copy, no memd CPU.
 *
 * Invariants:
 *  - A slab's fd goes only to the session holding its live lease, over a
 *    socket bound with that session's nonce, which crossed only its own
 *    (authenticated) control connection.
 *  - A slab whose fd went out is never zeroed in place: at revocation
 *    memd-reclaim gives it a fresh memfd at the same address and empties
 *    and write-seals the old one (memd_arena_slab_renew), so a client
 *    that kept the old fd reads zeros and cannot write, and never sees
 *    the next tenant's bytes. shm_given[] says which slabs need that.
 *  - The memfds are sealed against resizing: a client cannot truncate
 *    a slab under memd's own mapping.
 *
 * Admission (docs/reliability.md, "Same-host sockets and descriptors").
 * The socket is abstract: any uid in memd's network namespace can
 * connect. shm[] has room for max_clients bound connections and as many
 * unbound ones. A session holds at most one bound connection at a time
 * (a second SHM is refused EBUSY; a closed one may be replaced), so the
 * bound ones never outnumber the control connections (max_clients), nor
 * a tenant's its sessions (max_sessions_per_tenant). Unbound connections
 * share the other half: one uid holds at most max_clients_per_host of
 * them (a new one displaces that uid's oldest), and past the half the
 * oldest unbound of all goes, as on the control port. So a newcomer
 * always gets a slot. Binding needs no uid check: the nonce crossed only
 * the session's own (authenticated) control connection, whose TCP peer
 * has no uid memd could compare; SO_PEERCRED's uid decides whose
 * allowance an unbound connection takes, and is logged.
 *
 * Threads: everything here runs on memd-ctl except srv_shm_zero
 * (memd-reclaim).
 */
#include "memd/server_int.h"

#include <sys/stat.h>
#include <sys/un.h>

#include "memd/arena.h"

#define SHM_BACKLOG 64

static struct memd_arena *slab_arena(struct memd_server *s, uint32_t slab,
				     uint32_t *index)
{
	*index = slab % s->arena_slabs;
	return srv_slab_aep(s, slab)->arena;
}

int srv_shm_open(struct memd_server *s, struct memd_arena *arenas,
		 uint32_t narenas, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char why[256];
	socklen_t sl;
	int r;

	s->shm_lfd = -1;
	if (s->cfg.shm == MEMD_SHM_OFF)
		return 0;
	for (uint32_t a = 0; a < narenas; a++) {
		if (arenas[a].hugetlb) {
			memd_log(LOG_NOTICE,
				 "shm: off why=the donation is on hugetlbfs "
				 "pages, whose files take no write(2)");
			return 0;
		}
	}
	r = wire_boot_id_read(WIRE_BOOT_ID_PATH, s->boot_id);
	if (r) {
		memd_log(LOG_NOTICE,
			 "shm: off why=cannot read this host's boot id "
			 "(/proc/sys/kernel/random/boot_id): %s",
			 strerror(-r));
		return 0;
	}
	/* srv_open raised RLIMIT_NOFILE for the slabs' files too
	 * (check_nofile) */
	for (uint32_t a = 0; a < narenas; a++) {
		r = memd_arena_slab_fds(&arenas[a], s->cfg.slab_bytes,
					s->cfg.shm_dir, why, sizeof(why));
		if (r) {
			snprintf(err, errlen,
				 "shm = auto: arena %u: %s (or set shm = off)",
				 a, why);
			return r;
		}
	}
	s->shm_given = calloc(s->nslabs, sizeof(*s->shm_given));
	s->shm_cap = 2 * s->cfg.max_clients;
	s->shm_unbound = 0;
	s->shm = calloc(s->shm_cap, sizeof(*s->shm));
	if (!s->shm_given || !s->shm) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < s->shm_cap; i++)
		s->shm[i].fd = -1;
	/* Abstract: nothing to clean up after a crash, reachable from this
	 * network namespace only, named for this memd's epoch. */
	snprintf(s->shm_name, sizeof(s->shm_name), "tidepool-memd-%016" PRIx64,
		 s->epoch);
	memcpy(sa.sun_path + 1, s->shm_name, strlen(s->shm_name));
	sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
			 strlen(s->shm_name));
	s->shm_lfd = socket(AF_UNIX,
			    SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->shm_lfd < 0 || bind(s->shm_lfd, (struct sockaddr *)&sa, sl) ||
	    listen(s->shm_lfd, SHM_BACKLOG)) {
		r = -errno;
		snprintf(err, errlen, "shm: Unix socket @%s: %s", s->shm_name,
			 strerror(-r));
		return r;
	}
	/* srv_shm_zero's spare */
	s->shm_spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	s->shm_on = true;
	memd_log(LOG_NOTICE, "shm: on socket=@%s slabs=%u files=%s%s",
		 s->shm_name, s->nslabs, s->cfg.shm_dir[0] ? "tmpfs " : "memfd",
		 s->cfg.shm_dir[0] ? s->cfg.shm_dir : "");
	return 0;
}

/* The connection holding session id's session, or NULL. */
static struct conn *session_conn(struct memd_server *s, uint64_t id)
{
	for (struct conn *c = s->conns; c; c = c->next)
		if (c->session && c->session_id == id)
			return c;
	return NULL;
}

/*
 * The connection holding the session sc is bound to, or NULL with
 * rep->err set: EPROTO before BIND, ENOTCONN once that connection is
 * gone.
 */
static struct conn *bound_conn(struct memd_server *s, const struct shm_conn *sc,
			       struct wire_shm_rep *rep)
{
	struct conn *c;

	if (!sc->session_id) {
		rep->err = EPROTO;
		return NULL;
	}
	c = session_conn(s, sc->session_id);
	if (!c)
		rep->err = ENOTCONN;
	return c;
}

static void shm_conn_close(struct memd_server *s, struct shm_conn *sc,
			   const char *why)
{
	if (sc->fd < 0)
		return;
	memd_log(LOG_DEBUG,
		 "shm: close pid=%d uid=%u session=%" PRIx64 " why=%s",
		 (int)sc->pid, (unsigned)sc->uid, sc->session_id, why);
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, sc->fd, NULL);
	close(sc->fd);
	sc->fd = -1;
	if (sc->session_id) {
		/* its session may bind a new one (after BYE the connection
		 * no longer holds it: matched by id alone) */
		for (struct conn *c = s->conns; c; c = c->next)
			if (c->session_id == sc->session_id)
				c->shm_bound = false;
	} else {
		s->shm_unbound--;
	}
	sc->session_id = 0;
}

void srv_shm_close(struct memd_server *s)
{
	for (uint32_t i = 0; s->shm && i < s->shm_cap; i++)
		shm_conn_close(s, &s->shm[i], "memd stopping");
	if (s->shm_lfd >= 0)
		close(s->shm_lfd);
	s->shm_lfd = -1;
}

void srv_shm_free(struct memd_server *s)
{
	srv_shm_close(s);
	free(s->shm);
	s->shm = NULL;
	free(s->shm_given);
	s->shm_given = NULL;
	if (s->shm_spare_fd >= 0)
		close(s->shm_spare_fd);
	s->shm_spare_fd = -1;
}

bool srv_shm_owns(struct memd_server *s, void *ptr)
{
	return s->shm && (struct shm_conn *)ptr >= s->shm &&
	       (struct shm_conn *)ptr < s->shm + s->shm_cap;
}

/*
 * Closes the oldest unbound connection, of uid when all_uids is false,
 * to admit a newer one. False when there is none.
 */
static bool shm_displace_oldest(struct memd_server *s, uid_t uid, bool all_uids)
{
	struct shm_conn *v = NULL;

	for (uint32_t i = 0; i < s->shm_cap; i++) {
		struct shm_conn *sc = &s->shm[i];

		if (sc->fd < 0 || sc->session_id ||
		    (!all_uids && sc->uid != uid))
			continue;
		if (!v || sc->accepted_ms < v->accepted_ms)
			v = sc;
	}
	if (!v)
		return false;
	CTR_ADD(s, shm_displaced, 1);
	memd_log_limited(
		&s->ll_evict, LOG_NOTICE,
		"shm: displaced pid=%d uid=%u age_ms=%" PRIu64 " why=%s",
		(int)v->pid, (unsigned)v->uid, srv_now_ms() - v->accepted_ms,
		all_uids ? "max_clients unbound"
			 : "max_clients_per_host unbound of its uid");
	shm_conn_close(s, v, "displaced before BIND");
	return true;
}

/* Unbound connections of uid. */
static uint32_t shm_uid_unbound(const struct memd_server *s, uid_t uid)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->shm_cap; i++)
		n += s->shm[i].fd >= 0 && !s->shm[i].session_id &&
		     s->shm[i].uid == uid;
	return n;
}

void srv_shm_accept(struct memd_server *s)
{
	for (;;) {
		struct epoll_event ev = { .events = EPOLLIN };
		struct shm_conn *sc = NULL;
		struct ucred cr = { .uid = (uid_t)-1 };
		socklen_t cl = sizeof(cr);
		int fd = accept4(s->shm_lfd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			int e = errno;

			if (e == EINTR || e == ECONNABORTED)
				continue;
			if (e == EAGAIN || e == EWOULDBLOCK)
				return;
			/* as the control port: shed at EMFILE, else
			 * pause; a readable listener must not spin */
			if ((e == EMFILE || e == ENFILE) &&
			    srv_accept_shed(s, &s->shm_lfd, e))
				continue;
			if (e != EMFILE && e != ENFILE)
				memd_log_limited(&s->ll_accept, LOG_WARNING,
						 "shm: accept err=%s",
						 strerror(e));
			srv_accept_pause(s, &s->shm_lfd);
			return;
		}
		(void)getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl);
		/* the unbound allowance: per uid, then in all */
		if (shm_uid_unbound(s, cr.uid) >= s->cfg.max_clients_per_host)
			shm_displace_oldest(s, cr.uid, false);
		if (s->shm_unbound >= s->shm_cap / 2)
			shm_displace_oldest(s, cr.uid, true);
		for (uint32_t i = 0; i < s->shm_cap && !sc; i++)
			if (s->shm[i].fd < 0)
				sc = &s->shm[i];
		if (!sc) {
			CTR_ADD(s, shm_refused, 1);
			memd_log_limited(&s->ll_refuse, LOG_WARNING,
					 "shm: refused why=%u same-host "
					 "connections (max_clients)",
					 s->shm_cap);
			close(fd);
			continue;
		}
		ev.data.ptr = sc;
		if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev)) {
			close(fd);
			continue;
		}
		sc->fd = fd;
		sc->session_id = 0;
		sc->pid = cr.pid;
		sc->uid = cr.uid;
		sc->accepted_ms = srv_now_ms();
		s->shm_unbound++;
	}
}

static int shm_reply(struct shm_conn *sc, const struct wire_shm_rep *rep,
		     int pass_fd)
{
	uint8_t buf[WIRE_SHM_REP_MAX];
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n = wire_shm_rep_encode(rep, buf);

	if (n < 0)
		return -EINVAL;
	iov.iov_len = (size_t)n;
	if (pass_fd >= 0) {
		struct cmsghdr *h;

		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.b;
		mh.msg_controllen = sizeof(cm.b);
		h = CMSG_FIRSTHDR(&mh);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(h), &pass_fd, sizeof(int));
	}
	/* A client that does not read its replies loses the socket. */
	if (sendmsg(sc->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) != n)
		return -EIO;
	return 0;
}

static void shm_bind(struct memd_server *s, struct shm_conn *sc,
		     const struct wire_shm_req *q, struct wire_shm_rep *rep)
{
	struct conn *c = session_conn(s, q->session_id);

	if (sc->session_id) {
		rep->err = EPROTO;
		return;
	}
	if (!c || !c->shm_offered ||
	    sodium_memcmp(c->shm_nonce, q->nonce, WIRE_NONCE_LEN) != 0) {
		rep->err = EACCES;
		memd_log_limited(
			&s->ll_auth, LOG_WARNING,
			"shm: bind refused pid=%d uid=%u session=%" PRIx64
			" why=%s",
			(int)sc->pid, (unsigned)sc->uid, q->session_id,
			c ? "wrong or used nonce" : "no such session");
		return;
	}
	/* one connection per nonce */
	c->shm_offered = false;
	sodium_memzero(c->shm_nonce, sizeof(c->shm_nonce));
	c->shm_bound = true;
	sc->session_id = q->session_id;
	s->shm_unbound--;
	CTR_ADD(s, shm_binds, 1);
	memd_log(LOG_INFO, "shm: bound peer=%s pid=%d uid=%u session=%" PRIx64,
		 c->peer, (int)sc->pid, (unsigned)sc->uid, sc->session_id);
}

/*
 * A read-only descriptor of fd's file (reopened through /proc/self/fd),
 * which the caller closes once passed: what a client of a shm_dir slab
 * gets, since that file takes no seals (memd_arena_slab_fds). -1 with
 * *err set on failure.
 */
static int shm_ro_fd(int fd, int32_t *err)
{
	char path[64];
	int ro;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	if (ro < 0)
		*err = EIO;
	return ro;
}

/* Returns the fd to pass, or -1 with rep->err set; *owned: the caller
 * closes it after passing it. */
static int shm_slab(struct memd_server *s, struct shm_conn *sc,
		    const struct wire_shm_req *q, struct wire_shm_rep *rep,
		    bool *owned)
{
	struct conn *c;
	struct memd_arena *a;
	uint32_t i;
	int r;

	c = bound_conn(s, sc, rep);
	if (!c)
		return -1;
	r = memd_lease_check(s->lt, c->session, q->slab, q->generation);
	if (r) {
		rep->err = -r;
		memd_log_limited(&s->ll_refuse, LOG_NOTICE,
				 "shm: slab refused session=%" PRIx64
				 " slab=%u gen=%u why=%s",
				 sc->session_id, q->slab, q->generation,
				 r == -EPERM ? "another session's lease"
					     : "no such live lease");
		return -1;
	}
	a = slab_arena(s, q->slab, &i);
	if (!a->slab_fd || i >= a->nslab_fd || a->slab_fd[i] < 0) {
		rep->err = EIO;
		return -1;
	}
	/* Before the descriptor leaves: the reclaimer must renew it. */
	__atomic_store_n(&s->shm_given[q->slab], true, __ATOMIC_RELAXED);
	if (a->slab_dir[0]) {
		*owned = true;
		return shm_ro_fd(a->slab_fd[i], &rep->err);
	}
	return a->slab_fd[i];
}

/*
 * KV: the file of the KV slab behind a location (endpoint, rkey) that
 * KV_LOOKUP (read-only key) or KV_RESERVE (write key) gave the bound
 * session. The slab must be a KV slab of that session's tenant, as for
 * the keys themselves (kv_fill_loc): a tenant can only get files of its
 * own store's slabs, never another tenant's. A read-only key gets a
 * read-only descriptor; a write key a writable one (the write key
 * already reaches the whole slab over RMA), except for shm_dir slabs
 * (no seals: EROFS, the writes stay on the fabric). The slab is marked
 * given, so when the store gives it back memd-reclaim renews its file
 * (a kept descriptor then reads zeros, never the next owner's bytes).
 * Returns the fd to pass, or -1 with rep->err set.
 */
static int shm_kv(struct memd_server *s, struct shm_conn *sc,
		  const struct wire_shm_req *q, struct wire_shm_rep *rep,
		  bool *owned)
{
	struct memd_arena *a;
	struct conn *c;
	uint32_t slab, i;
	bool write = false;

	c = bound_conn(s, sc, rep);
	if (!c)
		return -1;
	if (!s->kvs || !s->cfg.kv_share ||
	    (s->mode != MODE_STANDALONE && c->role != WIRE_ROLE_TENANT)) {
		rep->err = EACCES;
		return -1;
	}
	for (slab = 0; slab < s->nslabs; slab++) {
		const struct kv_slab *k = &s->kvs[slab];

		if (!k->used || k->tenant_id != c->tenant_id ||
		    srv_slab_aep(s, slab)->index != q->endpoint)
			continue;
		if (s->mr_ro[slab] && s->key_ro[slab] == q->rkey)
			break;
		if (s->mr[slab] && s->key[slab] == q->rkey) {
			write = true;
			break;
		}
	}
	if (slab == s->nslabs) {
		rep->err = EPERM;
		memd_log_limited(&s->ll_refuse, LOG_NOTICE,
				 "shm: kv slab refused session=%" PRIx64
				 " tenant=%u why=no kv slab of the tenant "
				 "has that key",
				 sc->session_id, c->tenant_id);
		return -1;
	}
	a = slab_arena(s, slab, &i);
	if (!a->slab_fd || i >= a->nslab_fd || a->slab_fd[i] < 0) {
		rep->err = EIO;
		return -1;
	}
	if (write && a->slab_dir[0]) {
		rep->err = EROFS;
		return -1;
	}
	rep->slab = slab;
	rep->generation = s->kvs[slab].generation;
	rep->base = fab_mr_remote_base(write ? s->mr[slab] : s->mr_ro[slab]);
	__atomic_store_n(&s->shm_given[slab], true, __ATOMIC_RELAXED);
	if (!write) {
		*owned = true;
		return shm_ro_fd(a->slab_fd[i], &rep->err);
	}
	return a->slab_fd[i];
}

void srv_shm_serve(struct memd_server *s, void *ptr, uint32_t events)
{
	struct shm_conn *sc = ptr;
	uint8_t buf[WIRE_SHM_REQ_LEN + 1];
	struct wire_shm_req q;
	struct wire_shm_rep rep;
	bool owned = false;
	int pass = -1;
	ssize_t n;

	if (sc->fd < 0)
		return;
	n = recv(sc->fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
	if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
		if (events & (EPOLLHUP | EPOLLERR))
			shm_conn_close(s, sc, "hang-up");
		return;
	}
	if (n <= 0) {
		shm_conn_close(s, sc, n ? strerror(errno) : "peer closed");
		return;
	}
	if (wire_shm_req_decode(buf, (size_t)n, &q)) {
		CTR_ADD(s, shm_refused, 1);
		shm_conn_close(s, sc, "malformed request");
		return;
	}
	memset(&rep, 0, sizeof(rep));
	rep.op = q.op;
	rep.slab = q.slab;
	rep.generation = q.generation;
	if (q.op == WIRE_SHM_BIND)
		shm_bind(s, sc, &q, &rep);
	else if (q.op == WIRE_SHM_SLAB)
		pass = shm_slab(s, sc, &q, &rep, &owned);
	else
		pass = shm_kv(s, sc, &q, &rep, &owned);
	if (rep.err)
		CTR_ADD(s, shm_refused, 1);
	else if (q.op == WIRE_SHM_SLAB)
		CTR_ADD(s, shm_fds_passed, 1);
	else if (q.op == WIRE_SHM_KV)
		CTR_ADD(s, shm_kv_fds_passed, 1);
	if (shm_reply(sc, &rep, rep.err ? -1 : pass) || rep.err == EPROTO ||
	    (q.op == WIRE_SHM_BIND && rep.err))
		shm_conn_close(s, sc, rep.err ? strerror(rep.err) : "send");
	if (owned && pass >= 0)
		close(pass);
}

/* A connection that has not bound within handshake_timeout holds a slot
 * of max_clients for nothing: closed, as the TCP handshake is. */
void srv_shm_timers(struct memd_server *s)
{
	uint64_t now = srv_now_ms();

	for (uint32_t i = 0; s->shm && i < s->shm_cap; i++) {
		struct shm_conn *sc = &s->shm[i];

		if (sc->fd >= 0 && !sc->session_id &&
		    now - sc->accepted_ms >= s->cfg.handshake_timeout_ms) {
			CTR_ADD(s, shm_refused, 1);
			shm_conn_close(s, sc,
				       "no BIND within handshake_timeout");
		}
	}
}

void srv_shm_session_closed(struct memd_server *s, uint64_t session_id)
{
	for (uint32_t i = 0; s->shm && i < s->shm_cap; i++)
		if (s->shm[i].fd >= 0 && s->shm[i].session_id == session_id)
			shm_conn_close(s, &s->shm[i], "session closed");
}

void srv_do_shm(struct memd_server *s, struct conn *c,
		const struct wire_msg *req, struct wire_msg *rep)
{
	const char *why = NULL;
	int err = 0;

	if (!c->session) {
		err = EPROTO;
		why = "SHM before HELLO";
	} else if (!s->shm_on) {
		err = EOPNOTSUPP;
		why = s->cfg.shm == MEMD_SHM_OFF
			      ? "same-host sessions are off (shm = off)"
			      : "same-host sessions are off on this memd "
				"(hugetlbfs pages, or no boot id)";
	} else if (sodium_memcmp(req->u.shm.boot_id, s->boot_id,
				 WIRE_BOOT_ID_LEN) != 0) {
		err = EXDEV;
		why = "the client runs on another host (boot id differs)";
	} else if (c->shm_bound) {
		err = EBUSY;
		why = "a same-host socket is already bound to this session "
		      "(one per session)";
	}
	if (err) {
		CTR_ADD(s, shm_refused, 1);
		srv_send_error(s, c, req->seq, err, "shm: %s", why);
		return;
	}
	memset(rep, 0, sizeof(*rep));
	rep->type = WIRE_SHM_OK;
	rep->seq = req->seq;
	randombytes_buf(c->shm_nonce, sizeof(c->shm_nonce));
	c->shm_offered = true;
	memcpy(rep->u.shm_ok.nonce, c->shm_nonce, WIRE_NONCE_LEN);
	snprintf(rep->u.shm_ok.socket, sizeof(rep->u.shm_ok.socket), "%s",
		 s->shm_name);
	CTR_ADD(s, shm_offers, 1);
	if (srv_conn_send(c, rep))
		c->closing = true;
}

bool srv_shm_is_given(struct memd_server *s, uint32_t slab)
{
	return s->shm_given &&
	       __atomic_load_n(&s->shm_given[slab], __ATOMIC_RELAXED);
}

/*
 * A renewal needs one more descriptor for a moment (the fresh file, then
 * the old one is closed). memd-reclaim keeps a spare one for that, so a
 * memd whose connections took every other descriptor still renews; if
 * even that fails (memd-ctl took the spare's number meanwhile) the
 * caller retries later (memd_lease_reclaim_retry), never quarantines.
 */
int srv_shm_zero(struct memd_server *s, uint32_t slab)
{
	uint32_t i;
	struct memd_arena *a = slab_arena(s, slab, &i);
	int r = memd_arena_slab_renew(a, i);

	if ((r == -EMFILE || r == -ENFILE) && s->shm_spare_fd >= 0) {
		close(s->shm_spare_fd);
		r = memd_arena_slab_renew(a, i);
		s->shm_spare_fd = -1;
	}
	if (s->shm_spare_fd < 0)
		s->shm_spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	if (!r) {
		__atomic_store_n(&s->shm_given[slab], false, __ATOMIC_RELAXED);
		__atomic_add_fetch(&s->ctr.shm_slabs_renewed, 1,
				   __ATOMIC_RELAXED);
	}
	return r;
}
