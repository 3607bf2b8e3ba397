// SPDX-License-Identifier: MIT
/*
 * memd/server_lease.c - leases over the fabric (the DESIGN comment of
 * memd/server.c): HELLO, LEASE, RELEASE and STATUS; each lease's fresh
 * registration with a random key; the progress threads memd-fab<a> and
 * their fences; revocation and memd-reclaim (quiesce, zero, free).
 */
#include "memd/server_int.h"

/* ------------------------------------------------------------------ */
/* threads                                                              */

/* The first endpoint of arena a: what the arena's own fields are read
 * from (arena, node). */
struct arena_ep *srv_arena_aep(struct memd_server *s, uint32_t a)
{
	return &s->aep[a * s->per_arena];
}

/* The endpoint that serves a slab: its arena's slabs take turns over the
 * arena's endpoints, so consecutive slabs (a large region's, a tenant's
 * KV slabs) land on different progress threads. */
struct arena_ep *srv_slab_aep(struct memd_server *s, uint32_t slab)
{
	uint32_t a = slab / s->arena_slabs;

	return &s->aep[a * s->per_arena + slab % s->arena_slabs % s->per_arena];
}

/* Byte 0 of a slab in memd's address space. */
uint8_t *srv_slab_base(struct memd_server *s, uint32_t slab)
{
	struct arena_ep *a = srv_slab_aep(s, slab);

	return (uint8_t *)a->arena->base +
	       (uint64_t)(slab % s->arena_slabs) * s->cfg.slab_bytes;
}

void *srv_fab_main(void *arg)
{
	struct arena_ep *a = arg;
	struct memd_server *s = a->srv;
	char name[16];

	snprintf(name, sizeof(name), "memd-fab%u", a->index);
	pthread_setname_np(pthread_self(), name);
	if (s->topo && a->node >= 0) {
		/* RMA into the node's memory is served from its own CPUs. */
		int r = place_bind_thread_to_node(s->topo, a->node);

		if (r)
			memd_log(LOG_WARNING,
				 "fabric: cannot pin thread=%s node=%d err=%s",
				 name, a->node, strerror(-r));
		else
			memd_log(LOG_DEBUG, "fabric: pinned thread=%s node=%d",
				 name, a->node);
	}
	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		int r = fab_ep_serve(
			a->ep,
			__atomic_load_n(&s->busy_poll_us, __ATOMIC_RELAXED),
			TICK_MS, &a->st);

		if (r < 0 && r != -ETIMEDOUT && r != -EAGAIN) {
			memd_log(LOG_WARNING,
				 "fabric: progress endpoint=%u err=%s",
				 a->index, strerror(-r));
			usleep(10000);
		}
		pthread_mutex_lock(&s->rlock);
		a->fence++;
		pthread_cond_broadcast(&s->fence_cond);
		pthread_mutex_unlock(&s->rlock);
	}
	pthread_mutex_lock(&s->rlock);
	a->fence = UINT64_MAX; /* nobody waits on a stopped progress thread */
	pthread_cond_broadcast(&s->fence_cond);
	pthread_mutex_unlock(&s->rlock);
	return NULL;
}

/*
 * Waits until the progress thread of every endpoint in mask (bit a:
 * endpoint a)
 * has finished two progress calls that started after this call: whatever
 * the provider did with a slab's memory in a progress call under way when
 * its registration was closed is then over. Together with the quiesce
 * delay this orders the reclaimer's memset after the provider's last
 * access (design.md, "Known limits", says what remains).
 */
static void wait_progress_fence(struct memd_server *s, uint32_t mask)
{
	uint64_t target[WIRE_MAX_ENDPOINTS];
	uint32_t a;

	pthread_mutex_lock(&s->rlock);
	for (a = 0; a < s->nep; a++)
		target[a] = s->aep[a].fence >= UINT64_MAX - 2
				    ? UINT64_MAX
				    : s->aep[a].fence + 2;
	for (a = 0; a < s->nep; a++) {
		while ((mask >> a & 1) && s->aep[a].fence < target[a]) {
			struct timespec ts;

			/* An idle progress thread sleeps TICK_MS in the
			 * provider: wake it rather than wait that out, so a
			 * freed slab is free again in microseconds, not
			 * 2 * TICK_MS (docs/bench/registry.md). */
			pthread_mutex_unlock(&s->rlock);
			fab_ep_wake(s->aep[a].ep);
			pthread_mutex_lock(&s->rlock);
			if (s->aep[a].fence >= target[a])
				break;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_nsec += 2000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&s->fence_cond, &s->rlock, &ts);
		}
	}
	pthread_mutex_unlock(&s->rlock);
}

/* A renewal that met EMFILE is tried again this much later. */
#define RENEW_RETRY_MS TICK_MS

void *srv_reclaim_main(void *arg)
{
	struct memd_server *s = arg;
	uint32_t batch[64];

	pthread_setname_np(pthread_self(), "memd-reclaim");
	for (;;) {
		uint64_t t = srv_now_ms();
		size_t n = memd_lease_take_reclaim(s->lt, t, batch, 64);
		uint32_t mask = 0;

		for (size_t i = 0; i < n; i++)
			mask |= 1u << srv_slab_aep(s, batch[i])->index;
		if (n)
			wait_progress_fence(s, mask);
		for (size_t i = 0; i < n; i++) {
			uint8_t *p = srv_slab_base(s, batch[i]);
			const char *why = NULL;
			bool lost = false;

			if (srv_shm_is_given(s, batch[i])) {
				/* its memfd went out: a fresh one takes its
				 * place (zero), the old one is emptied */
				int r = srv_shm_zero(s, batch[i]);

				if (r == -EMFILE || r == -ENFILE ||
				    r == -ENOMEM) {
					/* passes: try again, keep the slab */
					memd_log_limited(
						&s->ll_renew, LOG_ERR,
						"reclaim: slab=%u memfd "
						"renewal "
						"err=%s: retrying; raise "
						"RLIMIT_NOFILE (LimitNOFILE=)",
						batch[i], strerror(-r));
					memd_lease_reclaim_retry(
						s->lt, batch[i],
						srv_now_ms() + RENEW_RETRY_MS);
					continue;
				}
				if (r) {
					memd_log(LOG_ERR,
						 "reclaim: slab=%u memfd "
						 "renewal err=%s",
						 batch[i], strerror(-r));
					lost = true;
				}
			} else {
				/* zeroed all the same: the old tenant's
				 * bytes go */
				memset(p, 0, s->cfg.slab_bytes);
			}
			if (lost)
				why = "its memfd could not be renewed";
			else if (__atomic_load_n(&s->mr_stuck[batch[i]],
						 __ATOMIC_RELAXED))
				why = "its registration did not close";
			if (why) {
				memd_lease_quarantine(s->lt, batch[i]);
				memd_log(LOG_WARNING,
					 "reclaim: slab=%u quarantined (%s)",
					 batch[i], why);
				continue;
			}
			memd_lease_reclaimed(s->lt, batch[i]);
			__atomic_add_fetch(&s->ctr.slabs_zeroed, 1,
					   __ATOMIC_RELAXED);
			memd_log(LOG_DEBUG, "reclaim: zeroed slab=%u",
				 batch[i]);
		}
		if (n) {
			/* Free again: tell the registry now, not at the next
			 * periodic report, or it refuses placements meanwhile. */
			struct memd_donor *d =
				__atomic_load_n(&s->donor, __ATOMIC_ACQUIRE);

			if (d)
				memd_donor_kick(d);
			continue;
		}
		pthread_mutex_lock(&s->rlock);
		if (__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
			pthread_mutex_unlock(&s->rlock);
			break;
		}
		int64_t wait = memd_lease_next_reclaim_ms(s->lt, srv_now_ms());
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		if (wait < 0 || wait > 1000)
			wait = 1000;
		ts.tv_sec += wait / 1000;
		ts.tv_nsec += (wait % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&s->rcond, &s->rlock, &ts);
		pthread_mutex_unlock(&s->rlock);
	}
	return NULL;
}

void srv_reclaim_kick(struct memd_server *s)
{
	pthread_mutex_lock(&s->rlock);
	pthread_cond_signal(&s->rcond);
	pthread_mutex_unlock(&s->rlock);
}

/* Runs under the lease table lock for each revoked lease: from here on the
 * key opens nothing. */
void srv_revoke_mr(uint32_t slab, void *arg)
{
	struct memd_server *s = arg;
	int r = fab_mr_close(s->mr[slab]);
	int r_ro = fab_mr_close(s->mr_ro[slab]);

	if (!r)
		r = r_ro;
	s->mr_ro[slab] = NULL;
	s->key_ro[slab] = 0;
	if (r) {
		/* The old key may still open the slab: it must never reach
		 * another session (memd-reclaim quarantines it). */
		memd_log(LOG_ERR,
			 "fabric: mr close slab=%u err=%s: slab quarantined",
			 slab, strerror(-r));
		__atomic_store_n(&s->mr_stuck[slab], true, __ATOMIC_RELAXED);
	}
	s->mr[slab] = NULL;
	s->key[slab] = 0;
}

void srv_count_expired(uint32_t slab, void *arg)
{
	struct memd_server *s = arg;

	CTR_ADD(s, leases_expired, 1);
	srv_revoke_mr(slab, arg);
}

/* ------------------------------------------------------------------ */
/* requests                                                             */

void srv_do_hello(struct memd_server *s, struct conn *c,
		  const struct wire_msg *req, struct wire_msg *rep)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	const struct wire_hello *h = &req->u.hello;
	struct wire_hello_ok *ok = &rep->u.hello_ok;
	int r;

	if (c->session) {
		srv_send_error(s, c, req->seq, EPROTO, "HELLO sent twice");
		c->closing = true;
		return;
	}
	if (h->proto_min > WIRE_PROTO_MAX || h->proto_max < WIRE_PROTO_MIN) {
		srv_send_error(s, c, req->seq, EPROTONOSUPPORT,
			       "memd speaks protocol %d..%d, client %u..%u",
			       WIRE_PROTO_MIN, WIRE_PROTO_MAX, h->proto_min,
			       h->proto_max);
		c->closing = true;
		return;
	}
	if (s->mode != MODE_STANDALONE && h->proto_max < 2) {
		srv_send_error(
			s, c, req->seq, EPROTONOSUPPORT,
			"this memd is part of a pool and needs protocol 2 "
			"(authentication); the client speaks %u..%u",
			h->proto_min, h->proto_max);
		c->closing = true;
		return;
	}
	if (s->draining) {
		srv_send_error(s, c, req->seq, EBUSY, "memd is draining");
		c->closing = true;
		return;
	}
	if (s->mode == MODE_STANDALONE) {
		char why[WIRE_MSG_MAX];

		/* Standalone, HELLO is the whole handshake. */
		if (!srv_conn_may_establish(s, c, false, why, sizeof(why))) {
			srv_send_error(s, c, req->seq, EBUSY, "%s", why);
			c->closing = true;
			return;
		}
		srv_conn_establish(s, c, false);
	}
	r = memd_session_open(s->lt, srv_now_ms(), &c->session);
	if (r) {
		srv_send_error(s, c, req->seq, -r, "cannot open a session");
		c->closing = true;
		return;
	}
	c->session_id = memd_session_id(c->session);
	CTR_ADD(s, sessions_opened, 1);
	memd_log(LOG_INFO, "ctl: hello peer=%s session=%" PRIx64 " client=%s",
		 c->peer, c->session_id,
		 memd_log_quote(h->client, logq, sizeof(logq)));
	memset(rep, 0, sizeof(*rep));
	rep->type = WIRE_HELLO_OK;
	rep->seq = req->seq;
	ok->proto =
		h->proto_max < WIRE_PROTO_MAX ? h->proto_max : WIRE_PROTO_MAX;
	c->proto = ok->proto;
	ok->session_id = memd_session_id(c->session);
	ok->epoch = s->epoch;
	ok->ttl_ms = s->cfg.lease_ttl_ms;
	ok->slab_bytes = s->cfg.slab_bytes;
	snprintf(ok->provider, sizeof(ok->provider), "%s",
		 fab_domain_provider(s->aep[0].fd));
	ok->nendpoints = (uint16_t)s->nep;
	for (uint32_t a = 0; a < s->nep; a++) {
		ok->ep[a].node = s->aep[a].node;
		ok->ep[a].addr_len = (uint16_t)s->aep[a].addr_len;
		memcpy(ok->ep[a].addr, s->aep[a].addr, s->aep[a].addr_len);
	}
	if (srv_conn_send(c, rep))
		c->closing = true;
}

/*
 * FABRIC (protocol 3): memd's effective FI_OFI_RXM_BUFFER_SIZE, 0 when
 * its provider is not rxm-based, so that a client can refuse at once a
 * fabric that tcp;ofi_rxm would refuse silently (docs/protocol.md). Any
 * session may ask: the gate in handle() has checked HELLO and, in a
 * pool, authentication. The client's own value only goes into the log
 * line of a mismatch; the client is the one that reports the error.
 */
void srv_do_fabric(struct memd_server *s, struct conn *c,
		   const struct wire_msg *req, struct wire_msg *rep)
{
	const char *prov = fab_domain_provider(s->aep[0].fd);
	uint32_t mine = fab_provider_is_rxm(prov) ? fab_rxm_buffer_size() : 0;
	uint32_t theirs = req->u.fabric.rxm_buffer_size;

	if (mine && theirs && mine != theirs)
		memd_log_limited(&s->ll_fabric, LOG_NOTICE,
				 "ctl: fabric mismatch peer=%s session=%" PRIx64
				 " client_rxm_buffer_size=%" PRIu32
				 " rxm_buffer_size=%" PRIu32
				 " why=FI_OFI_RXM_BUFFER_SIZE differs: "
				 "tcp;ofi_rxm refuses the client's connection",
				 c->peer, c->session_id, theirs, mine);
	memset(rep, 0, sizeof(*rep));
	rep->u.fabric.rxm_buffer_size = mine;
	srv_reply(c, rep, WIRE_FABRIC_OK, req->seq);
}

uint64_t srv_random_key(void)
{
	uint64_t k = 0;

	while (getrandom(&k, sizeof(k), 0) != sizeof(k))
		;
	return k;
}

/* A registration of the whole slab on its arena's domain with access
 * (FAB_ACCESS_REMOTE, or _REMOTE_READ), with a fresh random key (retried
 * while the provider says the key is taken). */
int srv_register_slab_access(struct memd_server *s, uint32_t slab,
			     unsigned access, struct fab_mr **mr)
{
	struct arena_ep *a = srv_slab_aep(s, slab);
	int r = -ENOKEY;

	for (int tries = 0; tries < 8 && r == -ENOKEY; tries++)
		r = fab_mr_reg(a->fd, a->ep, srv_slab_base(s, slab),
			       s->cfg.slab_bytes, access, srv_random_key(), mr);
	return r;
}

int srv_register_slab(struct memd_server *s, uint32_t slab, struct fab_mr **mr)
{
	return srv_register_slab_access(s, slab, FAB_ACCESS_REMOTE, mr);
}

/*
 * Grants one lease from arena group (MEMD_LEASE_ANY_GROUP: the fullest):
 * slab, then a registration on that arena's domain with a fresh random
 * key.
 */
static int grant_one(struct memd_server *s, struct memd_session *ses, int group,
		     struct wire_lease *out)
{
	uint32_t slab, gen;
	struct fab_mr *mr = NULL;
	struct arena_ep *a;
	int r;

	r = memd_lease_grant_in(s->lt, ses, srv_now_ms(), group, &slab, &gen);
	if (r)
		return r;
	a = srv_slab_aep(s, slab);
	r = srv_register_slab(s, slab, &mr);
	if (r) {
		memd_log(LOG_ERR, "fabric: register slab=%u err=%s", slab,
			 strerror(-r));
		memd_lease_release(s->lt, ses, slab, gen, srv_now_ms(), NULL,
				   NULL);
		return r;
	}
	s->mr[slab] = mr;
	s->key[slab] = fab_mr_key(mr);
	out->epoch = s->epoch;
	out->slab = slab;
	out->generation = gen;
	out->key = s->key[slab];
	out->base = fab_mr_remote_base(mr);
	out->len_bytes = s->cfg.slab_bytes;
	out->endpoint = (uint16_t)a->index;
	out->node = a->node;
	return 0;
}

/* The arena serving node, or -1. */
static int arena_of_node(const struct memd_server *s, int node)
{
	for (uint32_t a = 0; a < s->narenas; a++)
		if (s->aep[a * s->per_arena].node == node)
			return (int)a;
	return -1;
}

/* "0,2" for the error texts: the nodes this memd serves. */
void srv_served_nodes(const struct memd_server *s, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (uint32_t a = 0; a < s->narenas && used < len; a++)
		used += (size_t)snprintf(buf + used, len - used, "%s%d",
					 a ? "," : "",
					 s->aep[a * s->per_arena].node);
}

/*
 * Grants want slabs on node (all or nothing) to c's session and answers
 * seq with reply_type (LEASE_OK or LEASE_GRANT_OK) or ERROR. Returns 0
 * when granted.
 */
int srv_grant_request(struct memd_server *s, struct conn *c, uint32_t seq,
		      uint32_t want, int node, uint8_t reply_type,
		      struct wire_msg *rep)
{
	uint32_t i, avail, held;
	int group = MEMD_LEASE_ANY_GROUP;
	struct memd_lease_group_counts gc;
	struct memd_lease_counts cnt;
	int r = 0;

	if (node != WIRE_NODE_ANY) {
		char served[64];

		group = arena_of_node(s, node);
		if (group < 0 || srv_arena_aep(s, (uint32_t)group)->node < 0) {
			CTR_ADD(s, leases_refused, 1);
			srv_served_nodes(s, served, sizeof(served));
			memd_log(LOG_NOTICE,
				 "lease: refused peer=%s session=%" PRIx64
				 " node=%d why=node not served",
				 c->peer, memd_session_id(c->session), node);
			if (s->aep[0].node < 0)
				srv_send_error(
					s, c, seq, EINVAL,
					"lease: node %d: this memd does no "
					"NUMA placement (numa_nodes is not "
					"set); ask for node -1",
					node);
			else
				srv_send_error(
					s, c, seq, EINVAL,
					"lease: node %d is not served by "
					"this memd (numa_nodes: %s)",
					node, served);
			return -EINVAL;
		}
	}
	held = memd_session_nleases(s->lt, c->session);
	if (want > s->cfg.max_leases_per_session ||
	    held > s->cfg.max_leases_per_session - want) {
		CTR_ADD(s, leases_refused, 1);
		CTR_ADD(s, leases_refused_session, 1);
		memd_log_limited(&s->ll_refuse, LOG_NOTICE,
				 "lease: refused peer=%s session=%" PRIx64
				 " why=per-session held=%u want=%u max=%u",
				 c->peer, memd_session_id(c->session), held,
				 want, s->cfg.max_leases_per_session);
		srv_send_error(
			s, c, seq, EDQUOT,
			"lease: the session holds %u lease(s) and asks %u; "
			"max_leases_per_session is %u",
			held, want, s->cfg.max_leases_per_session);
		return -EDQUOT;
	}
	memd_lease_get_counts(s->lt, &cnt);
	avail = cnt.free;
	if (group >= 0) {
		memd_lease_get_group_counts(s->lt, (uint32_t)group, &gc);
		avail = gc.free;
	}
	if (s->draining || want > avail) {
		CTR_ADD(s, leases_refused, 1);
		if (group < 0)
			srv_send_error(
				s, c, seq, s->draining ? EBUSY : ENOSPC,
				"%s: %u slab(s) asked, %u free of %u (%u "
				"being zeroed)",
				s->draining ? "memd is draining"
					    : "no free slab",
				want, cnt.free, cnt.total, cnt.reclaiming);
		else
			srv_send_error(
				s, c, seq, s->draining ? EBUSY : ENOSPC,
				"%s: %u slab(s) asked on node %d, %u free "
				"there; %u free of %u in all (%u being "
				"zeroed)",
				s->draining ? "memd is draining"
					    : "no free slab",
				want, node, avail, cnt.free, cnt.total,
				cnt.reclaiming);
		return s->draining ? -EBUSY : -ENOSPC;
	}
	/* Any node: stay on the fullest arena while it has slabs, so a
	 * request lands on one node when it can. */
	if (group < 0)
		group = memd_lease_fullest_group(s->lt);
	memset(rep, 0, sizeof(*rep));
	for (i = 0; i < want; i++) {
		r = grant_one(s, c->session, group, &rep->u.lease_ok.lease[i]);
		if (r == -ENOSPC && node == WIRE_NODE_ANY)
			r = grant_one(s, c->session, MEMD_LEASE_ANY_GROUP,
				      &rep->u.lease_ok.lease[i]);
		if (r)
			break;
	}
	if (r) {
		/* All or nothing: give back what this request got. */
		for (uint32_t j = 0; j < i; j++) {
			struct wire_lease *l = &rep->u.lease_ok.lease[j];

			memd_lease_release(s->lt, c->session, l->slab,
					   l->generation, srv_now_ms(),
					   srv_revoke_mr, s);
		}
		srv_reclaim_kick(s);
		CTR_ADD(s, leases_refused, 1);
		srv_send_error(s, c, seq, -r, "lease of %u slab(s) failed: %s",
			       want, strerror(-r));
		return r;
	}
	CTR_ADD(s, leases_granted, want);
	memd_log(LOG_DEBUG, "lease: granted session=%" PRIx64 " n=%u node=%d",
		 memd_session_id(c->session), want, node);
	rep->u.lease_ok.ttl_ms = s->cfg.lease_ttl_ms;
	rep->u.lease_ok.count = want;
	srv_reply(c, rep, reply_type, seq);
	if (s->donor)
		memd_donor_kick(s->donor);
	return 0;
}

void srv_do_lease(struct memd_server *s, struct conn *c,
		  const struct wire_msg *req, struct wire_msg *rep)
{
	if (s->mode != MODE_STANDALONE) {
		CTR_ADD(s, leases_refused, 1);
		srv_send_error(
			s, c, req->seq, EOPNOTSUPP,
			"lease: this memd is part of a pool: leases need a "
			"ticket from the registry (PLACE, then "
			"LEASE_GRANT)");
		return;
	}
	srv_grant_request(s, c, req->seq, req->u.lease.nslabs,
			  req->u.lease.node, WIRE_LEASE_OK, rep);
}

/*
 * RELEASE is idempotent (docs/protocol.md): references to leases that are
 * already gone are skipped; a live lease of another session is left alone
 * and answered with EPERM after the rest is processed.
 */
void srv_do_release(struct memd_server *s, struct conn *c,
		    const struct wire_msg *req, struct wire_msg *rep)
{
	const struct wire_release *rel = &req->u.release;
	uint32_t released = 0, foreign = 0;

	for (uint32_t i = 0; i < rel->count; i++) {
		const struct wire_lease_ref *ref = &rel->ref[i];
		int r;

		if (ref->epoch != s->epoch || ref->slab >= s->nslabs)
			continue;
		/* the key stops working (srv_revoke_mr) before the slab is
		 * queued for zeroing, as on every other revocation */
		r = memd_lease_release(s->lt, c->session, ref->slab,
				       ref->generation, srv_now_ms(),
				       srv_revoke_mr, s);
		if (r == -EPERM) {
			foreign++;
			memd_log(LOG_WARNING,
				 "lease: release of another session's lease "
				 "peer=%s session=%" PRIx64 " slab=%u",
				 c->peer, memd_session_id(c->session),
				 ref->slab);
			continue;
		}
		if (r)
			continue; /* already gone: what was asked */
		CTR_ADD(s, leases_released, 1);
		released++;
	}
	if (released)
		srv_reclaim_kick(s);
	if (released && s->donor)
		memd_donor_kick(s->donor);
	if (foreign) {
		srv_send_error(s, c, req->seq, EPERM,
			       "%u lease(s) belong to another session; %u of "
			       "yours released",
			       foreign, released);
		return;
	}
	memset(rep, 0, sizeof(*rep));
	rep->u.release_ok.released = released;
	srv_reply(c, rep, WIRE_RELEASE_OK, req->seq);
}

void srv_fill_status(struct memd_server *s, struct wire_status_ok *st)
{
	struct memd_lease_counts cnt;

	memd_lease_get_counts(s->lt, &cnt);
	memset(st, 0, sizeof(*st));
	st->epoch = s->epoch;
	st->uptime_ms = srv_now_ms() - s->start_ms;
	st->donated_bytes = s->donated_bytes;
	st->slab_bytes = s->cfg.slab_bytes;
	st->slabs_total = cnt.total;
	st->slabs_free = cnt.free;
	st->slabs_leased = cnt.leased;
	st->slabs_reclaiming = cnt.reclaiming;
	st->sessions = srv_client_sessions(s, cnt.sessions);
	st->flags = s->draining ? WIRE_STATUS_DRAINING : 0;
	/* HUGEPAGES: every arena is backed by hugetlbfs pages. */
	st->flags |= WIRE_STATUS_HUGEPAGES;
	for (uint32_t a = 0; a < s->narenas; a++)
		if (!srv_arena_aep(s, a)->arena->hugetlb)
			st->flags &= ~WIRE_STATUS_HUGEPAGES;
	st->leases_expired = s->ctr.leases_expired;
	st->frames_rejected = s->ctr.frames_rejected;
	st->nnodes = (uint16_t)s->narenas;
	for (uint32_t a = 0; a < s->narenas; a++) {
		struct memd_lease_group_counts gc;

		memd_lease_get_group_counts(s->lt, a, &gc);
		st->node[a].node = srv_arena_aep(s, a)->node;
		st->node[a].slabs_total = gc.total;
		st->node[a].slabs_free = gc.free;
	}
}

/*
 * Opens arena a's domain and endpoint, bound where memd_nodes_bind_addr()
 * says. If the provider cannot bind to a NIC's address (one without IP
 * addressing), the endpoint falls back to the listen host, as without
 * NUMA placement.
 */
int srv_open_endpoint(struct memd_server *s, struct arena_ep *a,
		      const char *listen_host, char *err, size_t errlen)
{
	struct fab_opts fo = { .provider = s->cfg.provider };
	char why[160];
	int r;

	r = memd_nodes_bind_addr(s->topo, a->node, s->cfg.provider, listen_host,
				 s->cfg.fabric_node, a->bind, sizeof(a->bind),
				 why, sizeof(why));
	if (r) {
		snprintf(err, errlen, "fabric endpoint %u: address: %s",
			 a->index, strerror(-r));
		return r;
	}
	fo.node = a->bind;
	r = fab_domain_open(&fo, &a->fd);
	if (r == -ENODATA && strcmp(a->bind, listen_host) &&
	    !s->cfg.fabric_node[0]) {
		memd_log(LOG_WARNING,
			 "fabric: endpoint=%u node=%d provider=%s cannot bind "
			 "%s (%s); binding the listen host %s instead",
			 a->index, a->node, s->cfg.provider, a->bind, why,
			 listen_host);
		snprintf(a->bind, sizeof(a->bind), "%s", listen_host);
		snprintf(why, sizeof(why),
			 "fallback: provider refused the "
			 "NIC's address");
		fo.node = a->bind;
		r = fab_domain_open(&fo, &a->fd);
	}
	if (r) {
		snprintf(err, errlen, "fabric provider '%s' on node '%s': %s%s",
			 s->cfg.provider, fo.node, strerror(-r),
			 r == -ENODATA ? " (fi_info -l lists the providers "
					 "here)"
				       : "");
		return r;
	}
	if (a->index == 0 && !strncmp(fab_domain_provider(a->fd), "shm", 3))
		/* Measured with libfabric 1.17 (tests/test_fab.c): shm's
		 * fast RMA path checks no keys, so closing a lease's MR
		 * does not stop a former holder from reading it. */
		memd_log(LOG_WARNING,
			 "fabric: provider=shm does not enforce memory keys; "
			 "revoked leases stay readable by local processes; "
			 "use it only when every client is trusted");
	r = fab_ep_open(a->fd, 0, &a->ep);
	if (!r) {
		a->addr_len = sizeof(a->addr);
		r = fab_ep_name(a->ep, a->addr, &a->addr_len);
	}
	if (r) {
		snprintf(err, errlen, "fabric endpoint %u: %s", a->index,
			 strerror(-r));
		return r;
	}
	if (a->addr_len > WIRE_ADDR_MAX) {
		snprintf(err, errlen, "fabric address of %zu bytes is too long",
			 a->addr_len);
		return -EOVERFLOW;
	}
	memd_log(LOG_NOTICE,
		 "fabric: endpoint=%u node=%d bind=%s why=%s slabs=%u-%u "
		 "every=%u",
		 a->index, a->node, a->bind, why,
		 a->index / s->per_arena * s->arena_slabs +
			 a->index % s->per_arena,
		 (a->index / s->per_arena + 1) * s->arena_slabs - 1,
		 s->per_arena);
	return 0;
}
