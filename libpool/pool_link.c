// SPDX-License-Identifier: MIT
/*
 * libpool/pool_link.c - links: one memd each. Opening (HELLO, AUTH,
 * handshake retries), the fabric (at open or in the background), the
 * heartbeat thread, failing, closing and reaping; the links other
 * modules of libpool use (pool_link_*: libpool/internal.h).
 */
#include "libpool/pool_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <stdarg.h>
#include <unistd.h>

#include "libpool/deadline.h"

/* Closes stream s (>= 1) of lk; caller holds ep_rw exclusively. Its
 * transfers in flight complete with -ECANCELED (fab_ep_close). */
static void stream_close(struct plink *lk, unsigned s)
{
	struct fab_ep *ep = lk->xep[s - 1];

	lk->xep[s - 1] = NULL;
	if (ep) {
		struct fab_ep_stats st = { 0 };

		fab_ep_get_stats(ep, &st);
		lk->xgone.read_bytes += st.read_bytes;
		lk->xgone.write_bytes += st.write_bytes;
		lk->xgone.reads += st.reads;
		lk->xgone.writes += st.writes;
	}
	if (ep && fab_ep_close(ep))
		pool_log(LOG_WARNING,
			 "session: stream=%u of session=%" PRIx64
			 " memd=%s kept open until exit: a read was in flight "
			 "and libfabric <1.18's tcp provider crashes closing "
			 "it then",
			 s, lk->session_id, lk->addr);
}

/* Closes every extra stream; caller holds ep_rw exclusively (or owns
 * lk alone). */
static void link_streams_close(struct plink *lk)
{
	for (unsigned s = 1; s <= lk->nxep; s++)
		stream_close(lk, s);
}

/* Ends the link: from now on every use of it fails with -ENOTCONN. */
void pl_link_fail(struct plink *lk, int err, const char *why)
{
	int expected = 0;

	if (__atomic_compare_exchange_n(&lk->lost, &expected, err, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		pool_log(LOG_ERR,
			 "session: lost session=%" PRIx64 " memd=%s donor=%u "
			 "err=%s why=%s",
			 lk->session_id, lk->addr, lk->donor_id, strerror(-err),
			 why);
	pthread_rwlock_wrlock(&lk->ep_rw);
	link_streams_close(lk);
	if (lk->ep) {
		/* fabric/fab.c, "Closing mid-read" */
		bool kept = fab_ep_close(lk->ep);

		lk->ep = NULL;
		if (kept)
			pool_log(LOG_WARNING,
				 "session: endpoint of session=%" PRIx64
				 " memd=%s kept open until exit: a read was "
				 "in flight and libfabric <1.18's tcp "
				 "provider crashes closing it then",
				 lk->session_id, lk->addr);
	}
	pthread_rwlock_unlock(&lk->ep_rw);
	/* Its heartbeat thread has nothing left to do: let it end now, so
	 * that pl_links_reap_locked can join it. A fabric not set up yet never
	 * will be: its waiters go on (and find the link lost). */
	pthread_mutex_lock(&lk->hb_lock);
	pthread_cond_broadcast(&lk->hb_cond);
	if (!lk->fab_go) {
		__atomic_store_n(&lk->fab_pending, false, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&lk->fab_cond);
	}
	pthread_mutex_unlock(&lk->hb_lock);
}

/* The control connection's reports, into the library's log. */
void pl_rpc_log(void *arg, int level, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	(void)arg;
	if (level > pool_log_threshold())
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	pool_log_emit(level, "%s", line);
}

/* ------------------------------------------------------------------ */
/* heartbeat                                                            */

static int link_fabric(struct plink *lk, const char *local);

/*
 * A link opened with a deferred fabric (p->fabric_background) is usable
 * for control messages (leases) at once. Its fabric (fi_getinfo, domain,
 * endpoint: 0.3-0.6 s with Debian's libfabric 1.17, nearly all of it
 * libfabric's own start-up) is set up by its heartbeat thread once
 * somebody asks for it: the first transfer (pl_link_fabric_wait(), which
 * then waits) or pool_fabric_prepare() (no wait; the paging engine's
 * warm-up, before evictions need it). A program that never moves a byte
 * never pays for it. A fabric that cannot be set up ends the link like a
 * lost memd (-ENOTCONN).
 */
static void link_fabric_background(struct plink *lk)
{
	int r;

	/* libfabric's load first (0.2 s with Debian's 1.17): an exit that
	 * comes meanwhile with nobody waiting for the fabric
	 * (pool_fabric_exit()) stops the set-up there, before any
	 * libfabric call that exit's destructors could undo under us. */
	fab_load();
	pthread_mutex_lock(&lk->hb_lock);
	if (lk->fab_cancel && !lk->fab_waiters) {
		lk->fab_go = false;
		lk->fab_busy = false;
		pthread_cond_broadcast(&lk->fab_cond);
		pthread_mutex_unlock(&lk->hb_lock);
		return;
	}
	pthread_mutex_unlock(&lk->hb_lock);
	r = link_fabric(lk, lk->local);
	pthread_mutex_lock(&lk->hb_lock);
	lk->fab_busy = false;
	__atomic_store_n(&lk->fab_pending, false, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&lk->fab_cond);
	pthread_mutex_unlock(&lk->hb_lock);
	/* refused by link_fabric_check() (fab_err): the link lives on
	 * without a fabric, as in pl_link_open */
	if (r && !lk->fab_err)
		pl_link_fail(lk, -ENOTCONN, "fabric set-up failed");
}

/* Asks lk's heartbeat thread for the fabric; caller holds hb_lock. */
static void link_fabric_go_locked(struct plink *lk)
{
	if (!lk->fab_go) {
		lk->fab_go = true;
		pthread_cond_broadcast(&lk->hb_cond);
	}
}

/* Sleeps until lk's fabric is set up (or failed): see above. */
void __attribute__((noinline)) pl_link_fabric_wait(struct plink *lk)
{
	pthread_mutex_lock(&lk->hb_lock);
	lk->fab_waiters++;
	lk->fab_cancel = false; /* needed after all, exit or not */
	link_fabric_go_locked(lk);
	while (__atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE))
		pthread_cond_wait(&lk->fab_cond, &lk->hb_lock);
	lk->fab_waiters--;
	pthread_mutex_unlock(&lk->hb_lock);
}

static void *hb_main(void *arg)
{
	struct plink *lk = arg;
	uint32_t period = lk->ttl_ms / 3;

	pthread_setname_np(pthread_self(), "pool-hb");
	pool_thread_mark_internal();
	for (;;) {
		struct wire_msg req = { .type = WIRE_HEARTBEAT };
		struct wire_msg rep;
		struct timespec ts;
		uint64_t sent;
		int r, tmo;

		ts = pool_deadline_ms(period);
		pthread_mutex_lock(&lk->hb_lock);
		while (!lk->hb_stop && !link_is_lost(lk) &&
		       !(lk->fab_go && lk->fab_pending) &&
		       pthread_cond_timedwait(&lk->hb_cond, &lk->hb_lock,
					      &ts) != ETIMEDOUT)
			;
		if (lk->hb_stop) {
			pthread_mutex_unlock(&lk->hb_lock);
			break;
		}
		if (lk->fab_go && lk->fab_pending) {
			lk->fab_busy = true;
			pthread_mutex_unlock(&lk->hb_lock);
			link_fabric_background(lk);
			continue; /* the heartbeat's turn comes next */
		}
		pthread_mutex_unlock(&lk->hb_lock);
		if (link_is_lost(lk))
			break;

		if (lk->hb2) {
			/* HEARTBEAT2 tells memd what RMA we did (its
			 * /metrics): the endpoint's own counters. */
			struct fab_ep_stats es = { 0 };

			pthread_rwlock_rdlock(&lk->ep_rw);
			if (lk->ep)
				fab_ep_get_stats(lk->ep, &es);
			es.read_bytes += lk->xgone.read_bytes;
			es.write_bytes += lk->xgone.write_bytes;
			es.reads += lk->xgone.reads;
			es.writes += lk->xgone.writes;
			for (unsigned s = 0; s < lk->nxep; s++) {
				struct fab_ep_stats xs = { 0 };

				if (!lk->xep[s])
					continue;
				fab_ep_get_stats(lk->xep[s], &xs);
				es.read_bytes += xs.read_bytes;
				es.write_bytes += xs.write_bytes;
				es.reads += xs.reads;
				es.writes += xs.writes;
			}
			pthread_rwlock_unlock(&lk->ep_rw);
			req.type = WIRE_HEARTBEAT2;
			req.u.heartbeat2.bytes_read = es.read_bytes;
			req.u.heartbeat2.bytes_written = es.write_bytes;
			req.u.heartbeat2.ops = es.reads + es.writes;
		}
		sent = mono_ms();
		/* A reply is useful until the leases it renews would lapse
		 * anyway; a slow memd is not a dead one. */
		tmo = (int)(lk->ttl_ms - lk->margin_ms);
		r = rpc_call(lk->ctl, &req, &rep,
			     lk->hb2 ? WIRE_HEARTBEAT2_OK : WIRE_HEARTBEAT_OK,
			     tmo, NULL, 0);
		if (r == 0 && rep.u.heartbeat_ok.epoch != lk->epoch)
			r = -ESTALE; /* a restarted memd: old leases are gone */
		if (r) {
			pl_link_fail(lk,
				     r == -ETIMEDOUT ? -ETIMEDOUT : -ENOTCONN,
				     r == -ESTALE ? "memd expired or restarted"
						  : "heartbeat failed");
			break;
		}
		extend_validity(lk, sent);
		__atomic_add_fetch(&lk->st_heartbeats, 1, __ATOMIC_RELAXED);
	}
	/* Nobody will set the fabric up now: release its waiters (they
	 * find the link lost or closing). */
	pthread_mutex_lock(&lk->hb_lock);
	if (lk->fab_pending) {
		__atomic_store_n(&lk->fab_pending, false, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&lk->fab_cond);
	}
	pthread_mutex_unlock(&lk->hb_lock);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* links                                                                */

/* Stops lk's heartbeat thread (idempotent). */
void pl_link_stop_hb(struct plink *lk)
{
	if (!lk->hb_started)
		return;
	pthread_mutex_lock(&lk->hb_lock);
	lk->hb_stop = true;
	pthread_cond_signal(&lk->hb_cond);
	pthread_mutex_unlock(&lk->hb_lock);
	pthread_join(lk->hb, NULL);
	lk->hb_started = false;
}

/*
 * Closes lk and frees it. The endpoint goes first: no RMA of ours may
 * still be running when BYE releases the leases (protocol.md); a lost
 * memd reclaims them by itself when their TTL runs out. NULL is a no-op.
 */
void pl_link_close(struct plink *lk)
{
	if (!lk)
		return;
	pl_link_stop_hb(lk);
	link_streams_close(lk);
	if (lk->ep) {
		fab_ep_close(lk->ep);
		lk->ep = NULL;
	}
	if (lk->ctl && lk->session_id && !link_is_lost(lk)) {
		struct wire_msg req = { .type = WIRE_BYE }, rep;

		rpc_call(lk->ctl, &req, &rep, WIRE_BYE_OK, lk->p->timeout_ms,
			 NULL, 0);
	}
	fab_domain_close(lk->fd);
	rpc_close(lk->ctl);
	if (lk->shm_sock >= 0)
		close(lk->shm_sock);
	for (uint32_t i = 0; i < KVSHM_MAX; i++)
		pl_kvshm_drop(lk, &lk->kvshm[i]);
	pthread_rwlock_destroy(&lk->kvshm_rw);
	pthread_mutex_destroy(&lk->shm_mu);
	pthread_rwlock_destroy(&lk->ep_rw);
	pthread_cond_destroy(&lk->fab_cond);
	pthread_cond_destroy(&lk->hb_cond);
	pthread_mutex_destroy(&lk->hb_lock);
	free(lk);
}

static struct plink *link_new(struct pool *p, const char *addr)
{
	struct plink *lk = calloc(1, sizeof(*lk));
	pthread_condattr_t ca;
	pthread_rwlockattr_t ra;

	if (!lk)
		return NULL;
	lk->p = p;
	/* Callers pass at most WIRE_HOSTPORT_MAX - 1 bytes. */
	memcpy(lk->addr, addr, strnlen(addr, sizeof(lk->addr) - 1));
	pthread_mutex_init(&lk->hb_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&lk->hb_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&lk->fab_cond, NULL);
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(
		&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&lk->ep_rw, &ra);
	pthread_rwlock_init(&lk->kvshm_rw, &ra);
	pthread_rwlockattr_destroy(&ra);
	pthread_mutex_init(&lk->shm_mu, NULL);
	lk->shm_sock = -1;
	return lk;
}

/* Takes the session fields of lk from its HELLO_OK. */
static int link_take_hello(struct plink *lk, const struct wire_hello_ok *ok)
{
	struct pool *p = lk->p;

	lk->proto = ok->proto;
	lk->session_id = ok->session_id;
	lk->epoch = ok->epoch;
	lk->ttl_ms = ok->ttl_ms;
	if (lk->ttl_ms < 30 || ok->slab_bytes < CHUNK_BYTES ||
	    ok->slab_bytes % CHUNK_BYTES || ok->nendpoints < 1 ||
	    ok->nendpoints > WIRE_MAX_ENDPOINTS)
		return -EPROTO;
	if (!p->slab_bytes)
		p->slab_bytes = ok->slab_bytes;
	if (ok->slab_bytes != p->slab_bytes) {
		pool_log(LOG_ERR,
			 "session: memd=%s slab=%" PRIu64 " but the pool's "
			 "is %" PRIu64,
			 lk->addr, ok->slab_bytes, p->slab_bytes);
		return -EPROTO;
	}
	/* Stop using leases a tenth of the TTL (at most 1 s) early. */
	lk->margin_ms = lk->ttl_ms / 10 < 1000 ? lk->ttl_ms / 10 : 1000;
	memcpy(lk->provider, ok->provider, sizeof(lk->provider));
	lk->nendpoints = ok->nendpoints;
	memcpy(lk->mep, ok->ep, lk->nendpoints * sizeof(lk->mep[0]));
	return 0;
}

/*
 * A memd in cluster mode refuses every request before AUTH (EACCES). A
 * session without a tenant finds out here, at connect, with one STATUS,
 * rather than at its first allocation.
 */
static int link_probe_open(struct plink *lk)
{
	struct wire_msg *req = calloc(1, sizeof(*req));
	struct wire_msg *rep = malloc(sizeof(*rep));
	int r = -ENOMEM;

	if (req && rep) {
		req->type = WIRE_STATUS;
		r = rpc_call(lk->ctl, req, rep, WIRE_STATUS_OK,
			     lk->p->timeout_ms, NULL, 0);
	}
	free(req);
	free(rep);
	if (r == -EACCES)
		pool_log(LOG_ERR,
			 "session: memd=%s requires authentication: set "
			 "LIBPOOL_TENANT and LIBPOOL_SECRET_FILE (or "
			 "pool_opts.tenant and secret_file)",
			 lk->addr);
	return r;
}

/*
 * Protocol 3: asks memd (FABRIC) for the FI_OFI_RXM_BUFFER_SIZE its
 * provider uses, telling it ours (for its log). tcp;ofi_rxm refuses a
 * connection between ends that differ without a word to either (the
 * RMA just times out), so link_fabric() compares first. A memd that
 * does not answer leaves the check off (logged); only a broken
 * control connection is an error.
 */
static int link_fabric_ask(struct plink *lk)
{
	struct wire_msg *req = calloc(1, sizeof(*req));
	struct wire_msg *rep = malloc(sizeof(*rep));
	char text[WIRE_MSG_MAX] = "";
	int r = -ENOMEM;

	if (req && rep) {
		req->type = WIRE_FABRIC;
		req->u.fabric.rxm_buffer_size =
			fab_provider_is_rxm(lk->provider)
				? fab_rxm_buffer_size()
				: 0;
		r = rpc_call(lk->ctl, req, rep, WIRE_FABRIC_OK,
			     lk->p->timeout_ms, text, sizeof(text));
	}
	if (!r)
		lk->memd_rxm = rep->u.fabric.rxm_buffer_size;
	free(req);
	free(rep);
	/* -EPROTO is also rpc_call's "unexpected reply, connection
	 * dropped": fatal, as the others it keeps */
	if (r && r != -ENOMEM && r != -ETIMEDOUT && r != -EPROTO &&
	    !is_transport_error(r)) {
		pool_log(LOG_NOTICE,
			 "session: memd=%s refused FABRIC (%s %s): "
			 "FI_OFI_RXM_BUFFER_SIZE not compared",
			 lk->addr, strerror(-r), text);
		r = 0;
	}
	return r;
}

/*
 * -EPROTO (with one line at error) when lk's memd uses another
 * FI_OFI_RXM_BUFFER_SIZE than this process: its provider would refuse
 * our connection, and every transfer would time out. Else 0.
 */
static int link_fabric_check(struct plink *lk)
{
	uint32_t mine;

	if (!lk->memd_rxm || !fab_provider_is_rxm(lk->provider))
		return 0;
	mine = fab_rxm_buffer_size();
	if (!mine || mine == lk->memd_rxm)
		return 0;
	/* notice only: a same-host session may never need the fabric;
	 * the first transfer that does says it at err (pl_link_no_ep_err) */
	pool_log(LOG_NOTICE,
		 "session: no fabric to memd=%s: its "
		 "FI_OFI_RXM_BUFFER_SIZE=%" PRIu32 ", this process %" PRIu32
		 " (transfers over the fabric fail with EPROTO)",
		 lk->addr, lk->memd_rxm, mine);
	lk->fab_err = -EPROTO;
	return -EPROTO;
}

/* Why lk has no endpoint: its fabric refused (fab_err, -EPROTO; the
 * first time, one line at err names both values and the fix), else the
 * link failed (-ENOTCONN). */
int pl_link_no_ep_err(struct plink *lk)
{
	if (!lk->fab_err)
		return -ENOTCONN;
	if (!__atomic_exchange_n(&lk->fab_err_said, true, __ATOMIC_RELAXED))
		pool_log(LOG_ERR,
			 "session: memd at %s uses "
			 "FI_OFI_RXM_BUFFER_SIZE=%" PRIu32
			 ", this process %" PRIu32
			 ": set FI_OFI_RXM_BUFFER_SIZE=%" PRIu32
			 " here, or the same value for memd",
			 lk->addr, lk->memd_rxm, fab_rxm_buffer_size(),
			 lk->memd_rxm);
	return lk->fab_err;
}

/* The fabric side of lk (domain bound where local is, endpoint, AV). */
static int link_fabric(struct plink *lk, const char *local)
{
	struct pool *p = lk->p;
	struct fab_opts fo = { 0 };
	size_t max, cur;
	int r;

	r = link_fabric_check(lk);
	if (r)
		return r;
	/* Bind the fabric where the control connection goes out; providers
	 * without IP addressing (shm) take no node. */
	fo.provider = lk->provider;
	/* shm names endpoints by the node string: memd's name would clash. */
	fo.node = strncmp(lk->provider, "shm", 3) ? local : NULL;
	r = fab_domain_open(&fo, &lk->fd);
	if (r == -ENODATA) {
		fo.node = NULL;
		r = fab_domain_open(&fo, &lk->fd);
	}
	if (r) {
		pool_log(LOG_WARNING, "session: fabric provider=%s err=%s",
			 lk->provider, strerror(-r));
		return r;
	}
	lk->mr_mode = fab_domain_mr_mode(lk->fd);
	/* Pieces are cut to p->xfer_bytes before the link is chosen: it is
	 * the smallest maximum of all links, lowered before a link with a
	 * smaller one gets slabs. */
	max = fab_domain_max_msg(lk->fd);
	cur = __atomic_load_n(&p->xfer_bytes, __ATOMIC_RELAXED);
	while (max < cur &&
	       !__atomic_compare_exchange_n(&p->xfer_bytes, &cur, max, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	r = fab_ep_open(lk->fd, p->max_inflight, &lk->ep);
	for (uint16_t i = 0; !r && i < lk->nendpoints; i++) {
		r = fab_ep_av_insert(lk->ep, lk->mep[i].addr,
				     lk->mep[i].addr_len, &lk->peer[i]);
		if (!r)
			pool_log(LOG_DEBUG,
				 "session: memd=%s endpoint=%u node=%d",
				 lk->addr, i, lk->mep[i].node);
	}
	if (r)
		pool_log(LOG_WARNING, "session: fabric endpoint err=%s",
			 strerror(-r));
	return r;
}

/*
 * Handshake retries. memd may close a connection still in its handshake
 * (HELLO, AUTH) for reasons that say nothing about the client: displaced
 * by newer connections while its table or an address's handshake
 * allowance is full (a churn of half-open connections does that), its
 * handshake_timeout on a loaded host, a restart. The client sees
 * -ENOTCONN (or a reset) from HELLO or AUTH; a fresh connection usually
 * gets in. So a handshake whose connection was lost is retried on a new
 * connection, after 10, 20, 40 ... 320 ms, while the call's timeout
 * lasts; a refusal memd answers (an ERROR: EACCES, EAGAIN, a full
 * table's "too many clients") and every other error are final.
 */
bool pl_handshake_lost(int r)
{
	return r == -ENOTCONN || r == -ECONNRESET || r == -EPIPE;
}

/* Milliseconds left until deadline, at least 1 (the rpc_* calls take 0
 * as no time at all). */
int pl_ms_left(uint64_t deadline)
{
	uint64_t now = mono_ms();

	return now + 1 >= deadline	  ? 1
	       : deadline - now > INT_MAX ? INT_MAX
					  : (int)(deadline - now);
}

/* Waits before retry attempt (1, 2, ...) of a lost handshake with what
 * at addr; false, without waiting, when the wait would pass deadline. */
bool pl_handshake_retry_wait(uint64_t deadline, unsigned attempt,
			     const char *what, const char *addr, int r)
{
	uint64_t wait_ms = 10u << (attempt - 1 < 5 ? attempt - 1 : 5);
	struct timespec ts;

	if (mono_ms() + wait_ms >= deadline)
		return false;
	pool_log(LOG_NOTICE,
		 "session: %s=%s closed the connection during the handshake "
		 "err=%s; retrying attempt=%u in_ms=%" PRIu64,
		 what, addr, strerror(-r), attempt, wait_ms);
	ts.tv_sec = (time_t)(wait_ms / 1000);
	ts.tv_nsec = (long)(wait_ms % 1000) * 1000000;
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
	return true;
}

/*
 * Opens a link to the memd at addr: control connection, HELLO, AUTH when
 * au is given (else a check that memd does not want it), fabric,
 * heartbeat. Does not publish it. A connection lost during HELLO or AUTH
 * is retried within p->timeout_ms (pl_handshake_lost above). Returns 0 and
 * *out, or -errno.
 */
int pl_link_open(struct pool *p, const char *addr, const struct link_auth *au,
		 struct plink **out)
{
	struct wire_hello_ok *hok = NULL;
	char local[64], text[WIRE_MSG_MAX];
	uint64_t deadline = mono_ms() + (uint64_t)p->timeout_ms;
	struct plink *lk;
	int r;

	*out = NULL;
	lk = link_new(p, addr);
	hok = malloc(sizeof(*hok));
	if (!lk || !hok) {
		r = -ENOMEM;
		goto fail;
	}
	for (unsigned attempt = 1;; attempt++) {
		bool authing = false;

		r = rpc_connect(addr, pl_ms_left(deadline), &lk->ctl, local,
				sizeof(local));
		if (r) {
			pool_log(LOG_WARNING, "session: connect memd=%s err=%s",
				 addr, strerror(-r));
			goto fail;
		}
		rpc_set_log(lk->ctl, pl_rpc_log, NULL);
		text[0] = '\0';
		r = rpc_hello(lk->ctl, p->client, WIRE_PROTO_MIN,
			      pl_ms_left(deadline), hok, text, sizeof(text));
		if (!r)
			r = link_take_hello(lk, hok);
		if (!r && au) {
			struct wire_auth_ok *aok = malloc(sizeof(*aok));
			uint8_t sk[AUTH_KEY_LEN];

			authing = true;
			r = aok ? rpc_auth(lk->ctl, hok, au->principal, au->key,
					   au->pass, au->pass_len,
					   pl_ms_left(deadline), aok, sk, text,
					   sizeof(text))
				: -ENOMEM;
			explicit_bzero(sk, sizeof(sk));
			if (!r)
				lk->tenant_id = aok->tenant_id;
			free(aok);
		}
		if (!r)
			break;
		if (!pl_handshake_lost(r) ||
		    !pl_handshake_retry_wait(deadline, attempt, "memd", addr,
					     r)) {
			if (authing)
				pool_log(LOG_ERR,
					 "session: authentication at donor=%u "
					 "memd=%s err=%s %s",
					 au->donor_id, addr, strerror(-r),
					 text);
			else
				pool_log(LOG_WARNING,
					 "session: hello memd=%s err=%s %s",
					 addr, strerror(-r), text);
			goto fail;
		}
		rpc_close(lk->ctl);
		lk->ctl = NULL;
	}
	lk->hb2 = lk->proto >= 2;
	if (au) {
		lk->donor_id = au->donor_id;
		lk->donor_epoch = au->donor_epoch;
	} else if (lk->proto >= 2) {
		r = link_probe_open(lk);
		if (r)
			goto fail;
	}
	if (lk->proto >= 3) {
		r = link_fabric_ask(lk);
		if (r)
			goto fail;
	}
	extend_validity(lk, mono_ms());
	if (p->fabric_background) {
		memcpy(lk->local, local, sizeof(lk->local));
		__atomic_store_n(&lk->fab_pending, true, __ATOMIC_RELEASE);
	} else {
		/* fab_err: memd's fabric would refuse ours; the link stays
		 * for what needs no fabric (leases, the same-host path) and
		 * its transfers over the fabric fail with it. Any other
		 * error (an -EPROTO from the provider included) fails it. */
		r = link_fabric(lk, local);
		if (r && !lk->fab_err)
			goto fail;
	}
	/* the same-host path needs no fabric (docs/design.md) */
	pl_link_shm_open(lk);
	r = pthread_create(&lk->hb, NULL, hb_main, lk);
	if (r) {
		lk->fab_pending = false;
		r = -r;
		goto fail;
	}
	lk->hb_started = true;
	pool_log(LOG_INFO,
		 "session: open session=%" PRIx64 " memd=%s donor=%u "
		 "provider=%s slab=%" PRIu64 " ttl_ms=%u endpoints=%u "
		 "proto=%u shm=%d",
		 lk->session_id, lk->addr, lk->donor_id, lk->provider,
		 p->slab_bytes, lk->ttl_ms, lk->nendpoints, lk->proto,
		 lk->shm_sock >= 0);
	free(hok);
	*out = lk;
	return 0;
fail:
	free(hok);
	pl_link_close(lk);
	return r;
}

/* Appends lk to p->links. Caller holds lock (or owns p alone). */
void pl_link_publish_locked(struct pool *p, struct plink *lk)
{
	struct plink **at = &p->links;

	while (*at)
		at = &(*at)->next;
	*at = lk;
}

/*
 * Joins the heartbeat threads of failed links that have ended, and
 * closes and frees failed links nothing refers to (DESIGN: reaping).
 * Never blocks on a thread: one still in its last RPC is joined at a
 * later call. Caller holds lock.
 */
void pl_links_reap_locked(struct pool *p)
{
	struct plink **at = &p->links;

	if (!p->cluster)
		return;
	while (*at) {
		struct plink *lk = *at;

		if (!link_is_lost(lk)) {
			at = &lk->next;
			continue;
		}
		if (lk->hb_started) {
			pthread_mutex_lock(&lk->hb_lock);
			lk->hb_stop = true;
			pthread_cond_broadcast(&lk->hb_cond);
			pthread_mutex_unlock(&lk->hb_lock);
			if (pthread_tryjoin_np(lk->hb, NULL)) {
				at = &lk->next;
				continue;
			}
			lk->hb_started = false;
		}
		if (lk->nslabs || lk->refs) {
			at = &lk->next;
			continue;
		}
		*at = lk->next;
		p->links_reaped++;
		p->hb_reaped +=
			__atomic_load_n(&lk->st_heartbeats, __ATOMIC_RELAXED);
		pool_log(LOG_DEBUG,
			 "session: reaped session=%" PRIx64 " memd=%s donor=%u",
			 lk->session_id, lk->addr, lk->donor_id);
		pl_link_close(lk);
	}
}

/* ------------------------------------------------------------------ */
/* the fabric set up in the background (libpool/internal.h)             */

bool pool_fabric_is_pending(struct pool *p)
{
	bool pending = false;

	pthread_mutex_lock(&p->lock);
	for (struct plink *lk = p->links; lk && !pending; lk = lk->next)
		pending = __atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE);
	pthread_mutex_unlock(&p->lock);
	return pending;
}

bool pool_fabric_prepare(struct pool *p)
{
	if (pthread_mutex_trylock(&p->lock))
		return false;
	for (struct plink *lk = p->links; lk; lk = lk->next) {
		if (!__atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE))
			continue;
		/* A same-host link moves bytes through slab memfds: its
		 * transfers need no fabric (a slab without a memfd asks
		 * for it when it is used: link_usable()). */
		if (lk->shm_sock >= 0 && !lk->shm_broken)
			continue;
		pthread_mutex_lock(&lk->hb_lock);
		if (!lk->fab_cancel) /* not after pool_fabric_exit() */
			link_fabric_go_locked(lk);
		pthread_mutex_unlock(&lk->hb_lock);
	}
	pthread_mutex_unlock(&p->lock);
	return true;
}

/* Waits for lk's fabric set-up, cancelling it first where nobody waits
 * for it (cancel); p->lock held. */
static void link_fabric_settle(struct plink *lk, bool cancel)
{
	pthread_mutex_lock(&lk->hb_lock);
	/* Asked for ahead of need (pool_fabric_prepare()) and nobody waits
	 * for it: not begun, it never will be; begun, it stops once
	 * libfabric is loaded. */
	if (cancel && !lk->fab_waiters) {
		lk->fab_cancel = true;
		if (!lk->fab_busy)
			lk->fab_go = false;
	}
	while (lk->fab_go && lk->hb_started &&
	       __atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE))
		pthread_cond_wait(&lk->fab_cond, &lk->hb_lock);
	pthread_mutex_unlock(&lk->hb_lock);
}

void pool_fabric_settle(struct pool *p)
{
	pthread_mutex_lock(&p->lock);
	for (struct plink *lk = p->links; lk; lk = lk->next)
		link_fabric_settle(lk, false);
	pthread_mutex_unlock(&p->lock);
}

void pool_fabric_exit(struct pool *p)
{
	pthread_mutex_lock(&p->lock);
	for (struct plink *lk = p->links; lk; lk = lk->next)
		link_fabric_settle(lk, true);
	pthread_mutex_unlock(&p->lock);
}

/* ------------------------------------------------------------------ */
/* links for other modules of libpool (the KV tier)                     */

int pool_link_get(struct pool *p, uint32_t donor_id, uint64_t epoch,
		  const char *addr, struct plink **out)
{
	int r;

	*out = NULL;
	pthread_mutex_lock(&p->lock);
	if (!p->cluster) {
		r = link_is_lost(p->links) ? -ENOTCONN : 0;
		if (!r)
			*out = p->links;
	} else {
		r = pl_donor_link_open_locked(p, donor_id, epoch, addr, out);
	}
	if (!r)
		(*out)->refs++; /* the caller's, until pool_link_put */
	pthread_mutex_unlock(&p->lock);
	return r;
}

void pool_link_hold(struct plink *lk)
{
	struct pool *p = lk->p;

	pthread_mutex_lock(&p->lock);
	lk->refs++;
	pthread_mutex_unlock(&p->lock);
}

void pool_link_put(struct plink *lk)
{
	struct pool *p;

	if (!lk)
		return;
	p = lk->p;
	pthread_mutex_lock(&p->lock);
	if (lk->refs == 0)
		pool_log(LOG_ERR, "session: link memd=%s put with no reference",
			 lk->addr);
	else if (--lk->refs == 0 && link_is_lost(lk))
		pl_links_reap_locked(p); /* may free lk */
	pthread_mutex_unlock(&p->lock);
}

bool pool_link_is_lost(struct plink *lk)
{
	return link_is_lost(lk);
}

void pool_link_fail(struct plink *lk, int err, const char *why)
{
	pl_link_fail(lk, err, why);
}

uint32_t pool_link_tenant_id(const struct plink *lk)
{
	return lk->tenant_id;
}

uint16_t pool_link_nendpoints(const struct plink *lk)
{
	return lk->nendpoints;
}

bool pool_link_is_same_host(const struct plink *lk)
{
	return lk->shm_sock >= 0;
}

uint16_t pool_link_proto(const struct plink *lk)
{
	return lk->proto;
}

const char *pool_link_addr(const struct plink *lk)
{
	return lk->addr;
}

int pool_link_call(struct plink *lk, struct wire_msg *req, struct wire_msg *rep,
		   int expect, char *text, size_t textlen)
{
	int r;

	if (link_is_lost(lk))
		return -ENOTCONN;
	r = rpc_call(lk->ctl, req, rep, expect, lk->p->timeout_ms, text,
		     textlen);
	if (r == -ENOTCONN || r == -EPROTO)
		pl_link_fail(lk, -ENOTCONN, "control connection lost");
	else if (r == -ETIMEDOUT)
		pl_link_fail(lk, -ETIMEDOUT, "request timed out");
	return r;
}

/* What a failed call does to its link. */
static int link_call_failed(struct plink *lk, int r)
{
	if (r == -ENOTCONN || r == -EPROTO)
		pl_link_fail(lk, -ENOTCONN, "control connection lost");
	else if (r == -ETIMEDOUT)
		pl_link_fail(lk, -ETIMEDOUT, "request timed out");
	return r;
}

int pool_link_send(struct plink *lk, struct wire_msg *req)
{
	if (link_is_lost(lk))
		return -ENOTCONN;
	return link_call_failed(lk, rpc_send(lk->ctl, req, lk->p->timeout_ms));
}

int pool_link_recv(struct plink *lk, struct wire_msg *rep, int expect,
		   char *text, size_t textlen)
{
	return link_call_failed(lk,
				rpc_recv(lk->ctl, rep, expect, text, textlen));
}

int pool_link_mr(struct plink *lk, void *buf, size_t len, struct fab_mr **mr)
{
	int r = -ENOTCONN;

	*mr = NULL;
	if (__atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE))
		pl_link_fabric_wait(lk);
	if (!(lk->mr_mode & FAB_MR_LOCAL))
		return 0;
	pthread_rwlock_rdlock(&lk->ep_rw);
	if (lk->ep)
		r = fab_mr_reg(lk->fd, lk->ep, buf, len, FAB_ACCESS_LOCAL, 0,
			       mr);
	else
		r = pl_link_no_ep_err(lk);
	pthread_rwlock_unlock(&lk->ep_rw);
	return r;
}

/*
 * Test-only fault injection: TP_TEST_FAIL_STREAM=N makes the process's
 * N+1th post to a stream >= 1 find its connection broken, as a
 * transport error would: the stream is closed (its transfers in flight
 * complete with an error) and the post returns -ENOLINK.
 */
static long fail_stream_after(void)
{
	static long n = -2; /* -2: not read yet; -1: off */
	long v = __atomic_load_n(&n, __ATOMIC_RELAXED);

	if (v == -2) {
		const char *e = getenv("TP_TEST_FAIL_STREAM");

		v = e && *e ? strtol(e, NULL, 10) : -1;
		__atomic_store_n(&n, v < 0 ? -1 : v, __ATOMIC_RELAXED);
	}
	return v;
}

static bool stream_fault(void)
{
	static long posts;
	long after = fail_stream_after();

	return after >= 0 &&
	       __atomic_fetch_add(&posts, 1, __ATOMIC_RELAXED) == after;
}

/* Closes stream s (>= 1) of lk after a transport error there. */
static void stream_fail(struct plink *lk, unsigned s, int err, const char *why)
{
	pthread_rwlock_wrlock(&lk->ep_rw);
	if (lk->xep[s - 1]) {
		pool_log(LOG_WARNING,
			 "session: stream=%u of session=%" PRIx64
			 " memd=%s closed err=%s why=%s (its transfers fail; "
			 "the link goes on with its other streams)",
			 s, lk->session_id, lk->addr, strerror(-err), why);
		stream_close(lk, s);
	}
	pthread_rwlock_unlock(&lk->ep_rw);
}

unsigned pool_link_streams(struct plink *lk)
{
	unsigned want = lk->p->kv_streams;

	if (want <= 1 || lk->shm_sock >= 0 || link_is_lost(lk))
		return 1;
	if (__atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE))
		pl_link_fabric_wait(lk);
	if (__atomic_load_n(&lk->xtried, __ATOMIC_ACQUIRE))
		return 1 + lk->nxep;
	pthread_rwlock_wrlock(&lk->ep_rw);
	for (unsigned s = 1; !lk->xtried && lk->ep && s < want; s++) {
		struct fab_ep *ep = NULL;
		int r = fab_ep_open(lk->fd, lk->p->max_inflight, &ep);

		for (uint16_t i = 0; !r && i < lk->nendpoints; i++)
			r = fab_ep_av_insert(ep, lk->mep[i].addr,
					     lk->mep[i].addr_len,
					     &lk->xpeer[s - 1][i]);
		if (r) {
			pool_log(LOG_WARNING,
				 "session: memd=%s stream=%u of %u not opened "
				 "err=%s (gets use %u)",
				 lk->addr, s, want, strerror(-r), s);
			fab_ep_close(ep);
			break;
		}
		lk->xep[s - 1] = ep;
		lk->nxep = s;
	}
	if (lk->ep)
		__atomic_store_n(&lk->xtried, true, __ATOMIC_RELEASE);
	pthread_rwlock_unlock(&lk->ep_rw);
	return 1 + lk->nxep;
}

uint64_t pool_link_stream_reads(struct plink *lk, unsigned s)
{
	struct fab_ep_stats st = { 0 };
	struct fab_ep *ep;

	pthread_rwlock_rdlock(&lk->ep_rw);
	ep = s == 0 ? lk->ep : s <= lk->nxep ? lk->xep[s - 1] : NULL;
	if (ep)
		fab_ep_get_stats(ep, &st);
	pthread_rwlock_unlock(&lk->ep_rw);
	return st.reads;
}

int pool_link_post_on(struct plink *lk, unsigned s, bool write, void *buf,
		      size_t len, void *desc, uint16_t endpoint, uint64_t raddr,
		      uint64_t rkey, struct fab_op *f)
{
	struct fab_ep *ep;
	const uint64_t *peer;
	int r = -ENOTCONN;

	if (!s)
		return pool_link_post(lk, write, buf, len, desc, endpoint,
				      raddr, rkey, f);
	if (endpoint >= lk->nendpoints)
		return -EPROTO;
	if (s > lk->nxep)
		return -ENOLINK;
	if (link_is_lost(lk))
		return -ENOTCONN;
	if (stream_fault()) {
		stream_fail(lk, s, -ECONNRESET, "TP_TEST_FAIL_STREAM");
		return -ENOLINK;
	}
	f->arg = lk;
	pthread_rwlock_rdlock(&lk->ep_rw);
	ep = lk->xep[s - 1];
	peer = lk->xpeer[s - 1];
	if (!lk->ep)
		r = -ENOTCONN; /* the link failed: all its streams did */
	else if (!ep)
		r = -ENOLINK;
	else
		r = write ? fab_ep_write(ep, buf, len, desc, peer[endpoint],
					 raddr, rkey, f, lk->p->timeout_ms)
			  : fab_ep_read(ep, buf, len, desc, peer[endpoint],
					raddr, rkey, f, lk->p->timeout_ms);
	pthread_rwlock_unlock(&lk->ep_rw);
	if (is_transport_error(r) && !link_is_lost(lk)) {
		/* this stream's connection: the link goes on */
		stream_fail(lk, s, r, "posting a transfer failed");
		r = -ENOLINK;
	} else if (is_transport_error(r)) {
		r = -ENOTCONN;
	}
	return r;
}

int pool_link_post_local(struct plink *lk, bool write, void *buf, size_t len,
			 uint16_t endpoint, uint64_t raddr, uint64_t rkey,
			 struct fab_op *f)
{
	f->arg = lk;
	if (endpoint >= lk->nendpoints)
		return -EPROTO;
	if (lk->shm_sock < 0)
		return 1;
	if (link_is_lost(lk))
		return -ENOTCONN;
	return pl_kv_shm_xfer(lk, write, buf, len, endpoint, raddr, rkey, f);
}

int pool_link_post(struct plink *lk, bool write, void *buf, size_t len,
		   void *desc, uint16_t endpoint, uint64_t raddr, uint64_t rkey,
		   struct fab_op *f)
{
	int r = -ENOTCONN;

	f->arg = lk;
	if (endpoint >= lk->nendpoints)
		return -EPROTO;
	if (lk->shm_sock >= 0) {
		if (link_is_lost(lk))
			return -ENOTCONN;
		r = pl_kv_shm_xfer(lk, write, buf, len, endpoint, raddr, rkey,
				   f);
		if (r != 1)
			return r;
		r = -ENOTCONN;
	}
	if (__atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE))
		pl_link_fabric_wait(lk);
	if (link_is_lost(lk))
		return -ENOTCONN;
	pthread_rwlock_rdlock(&lk->ep_rw);
	if (lk->ep)
		r = write ? fab_ep_write(lk->ep, buf, len, desc,
					 lk->peer[endpoint], raddr, rkey, f,
					 lk->p->timeout_ms)
			  : fab_ep_read(lk->ep, buf, len, desc,
					lk->peer[endpoint], raddr, rkey, f,
					lk->p->timeout_ms);
	else
		r = pl_link_no_ep_err(lk);
	pthread_rwlock_unlock(&lk->ep_rw);
	if (is_transport_error(r)) {
		pl_link_fail(lk, -ENOTCONN, "posting a transfer failed");
		r = -ENOTCONN;
	}
	return r;
}

void pool_link_poke(struct plink *lk, unsigned s)
{
	struct fab_ep *ep;

	pthread_rwlock_rdlock(&lk->ep_rw);
	ep = s == 0 ? lk->ep : s <= lk->nxep ? lk->xep[s - 1] : NULL;
	if (ep)
		fab_ep_progress(ep, 0);
	pthread_rwlock_unlock(&lk->ep_rw);
}

int pool_link_wait_on(struct plink *lk, unsigned s, struct fab_op *f,
		      int timeout_ms)
{
	int r = 0, st;

	if (!s)
		return pool_link_wait(lk, f, timeout_ms);
	if (!__atomic_load_n(&f->complete, __ATOMIC_ACQUIRE)) {
		pthread_rwlock_rdlock(&lk->ep_rw);
		if (s <= lk->nxep && lk->xep[s - 1])
			r = fab_op_wait(lk->xep[s - 1], f, timeout_ms);
		pthread_rwlock_unlock(&lk->ep_rw);
		if (r == -ETIMEDOUT &&
		    !__atomic_load_n(&f->complete, __ATOMIC_ACQUIRE))
			/* closing the stream completes f */
			stream_fail(lk, s, -ETIMEDOUT, "transfer timed out");
	}
	if (!__atomic_load_n(&f->complete, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	st = f->status == -ECANCELED ? -ENOTCONN : f->status;
	if (is_transport_error(st)) {
		/* this stream's connection only (pl_piece_status would
		 * fail the whole link) */
		stream_fail(lk, s, st, "transfer failed");
		st = -ENOTCONN;
	}
	return st == -ETIMEDOUT ? -ETIME : st;
}

int pool_link_wait(struct plink *lk, struct fab_op *f, int timeout_ms)
{
	int r = 0;

	if (!__atomic_load_n(&f->complete, __ATOMIC_ACQUIRE)) {
		pthread_rwlock_rdlock(&lk->ep_rw);
		if (lk->ep)
			r = fab_op_wait(lk->ep, f, timeout_ms);
		pthread_rwlock_unlock(&lk->ep_rw);
		if (r == -ETIMEDOUT &&
		    !__atomic_load_n(&f->complete, __ATOMIC_ACQUIRE))
			/* Closing the endpoint completes f: the provider
			 * no longer touches its buffer. */
			pl_link_fail(lk, -ETIMEDOUT, "transfer timed out");
	}
	/* closed meanwhile: fab_ep_close completed it */
	if (!__atomic_load_n(&f->complete, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	return pl_piece_status(f);
}
