// SPDX-License-Identifier: MIT
/*
 * memd/server.c - the control loop's life: start, the epoll pass, session
 * expiry, reload, run and stop. The server's other concerns live beside
 * it (memd/server_int.h lists them and what calls what): connections
 * (server_conn.c), accepting them (server_accept.c), frame dispatch
 * (server_dispatch.c), /metrics (server_metrics.c, server_prom.c), leases
 * over the fabric and reclaim (server_lease.c), the pool's requests
 * (server_cluster.c), the KV tier's server side (server_kv.c), same-host
 * sessions (server_shm.c). This comment is the design of them all.
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
 * /metrics from srv_write_metrics(): it reads the counters with relaxed
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
		r = memd_metrics_start(cfg->metrics_listen, srv_write_metrics,
				       s, &s->metrics, err, errlen);
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
	srv_reg_awake(s);
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
				r = srv_conn_read(c);
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
				srv_conn_process(s, c);
				(void)srv_conn_flush(c);
				srv_conn_close(s, c, "peer closed");
				continue;
			}
			srv_conn_service(s, c);
		}
	}
	if (listener)
		srv_accept_all(s);
	srv_accept_resume(s, &s->lfd);
	srv_accept_resume(s, &s->shm_lfd);
	srv_conn_timers(s);
	srv_shm_timers(s);
	srv_kv_renew(s);
	expire_sessions(s);
	memd_kv_expire(s->kv, srv_now_ms());
	srv_kv_trim(s);
	srv_tenants_removed(s);
	srv_kv_drained(s);
	srv_kv_membership(s);
	s->kv_pass_busy = srv_kv_pass_step(s);
	if (s->reg) {
		srv_reg_awake(s);
		memd_registry_tick(s->reg, srv_now_ms());
		srv_reg_news(s);
	}
	return n < 0 ? 0 : n;
}

int memd_server_run(struct memd_server *s)
{
	pthread_setname_np(pthread_self(), "memd-ctl");
	s->reg_awake_ms = srv_now_ms();
	while (!s->draining) {
		/* a forget pass under way: its next step without waiting */
		int r = serve_once(s, s->kv_pass_busy ? 0 : TICK_MS);

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
	srv_accept_one(s, fd, "127.0.0.1", "fuzz");
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
	free(s->kv_pass_rank);
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
