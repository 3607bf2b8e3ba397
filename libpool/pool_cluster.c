// SPDX-License-Identifier: MIT
/*
 * libpool/pool_cluster.c - cluster sessions (docs/cluster.md): the
 * registry connection with its failover over a list of registries, the
 * donor pass, the links to donor incarnations, and placement (PLACE,
 * redeemed with LEASE_GRANT at each donor; replicas on another donor).
 */
#include "libpool/pool_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* cluster sessions: the registry, donor links, placement               */

/*
 * (Re)connects to the registry at addr: HELLO, AUTH as the tenant,
 * and takes the donor pass and its key from AUTH_OK. Replaces p->reg.
 * Caller holds lock (or owns p alone).
 */
static int reg_connect_one_locked(struct pool *p, const char *addr)
{
	struct wire_auth_ok *aok = malloc(sizeof(*aok));
	struct wire_hello_ok *hok = malloc(sizeof(*hok));
	uint8_t sk[AUTH_KEY_LEN], pk[AUTH_KEY_LEN];
	char text[WIRE_MSG_MAX];
	struct rpc *c = NULL;
	uint64_t sent = mono_ms();
	uint64_t deadline = sent + (uint64_t)p->timeout_ms;
	int r;

	if (!aok || !hok) {
		r = -ENOMEM;
		goto out;
	}
	for (unsigned attempt = 1;; attempt++) {
		r = rpc_connect(addr, pl_ms_left(deadline), &c, NULL, 0);
		if (r) {
			pool_log(LOG_WARNING,
				 "session: connect registry=%s err=%s", addr,
				 strerror(-r));
			goto out;
		}
		rpc_set_log(c, pl_rpc_log, NULL);
		text[0] = '\0';
		r = rpc_hello(c, p->client, WIRE_PROTO_MIN,
			      pl_ms_left(deadline), hok, text, sizeof(text));
		if (!r && hok->proto < 2) {
			snprintf(text, sizeof(text),
				 "memd speaks protocol %u, which has no "
				 "tenants",
				 hok->proto);
			r = -EOPNOTSUPP;
		}
		if (!r)
			r = rpc_auth(c, hok, p->tenant, p->tenant_key, NULL, 0,
				     pl_ms_left(deadline), aok, sk, text,
				     sizeof(text));
		if (!pl_handshake_lost(r) ||
		    !pl_handshake_retry_wait(deadline, attempt, "registry",
					     addr, r))
			break;
		rpc_close(c);
		c = NULL;
	}
	if (r == -EOPNOTSUPP) {
		pool_log(LOG_ERR,
			 "session: memd=%s is standalone: it has no tenants "
			 "(unset LIBPOOL_TENANT / pool_opts.tenant): %s",
			 addr, text);
		goto out;
	}
	if (r) {
		pool_log(r == -EAGAIN ? LOG_INFO : LOG_ERR,
			 "session: authentication as tenant=%s at memd=%s "
			 "err=%s %s",
			 p->tenant, addr, strerror(-r), text);
		goto out;
	}
	if (!(aok->flags & WIRE_AUTH_REGISTRY) ||
	    aok->role != WIRE_ROLE_TENANT) {
		pool_log(LOG_ERR,
			 "session: memd=%s is not the registry: connect to "
			 "the registry of the pool",
			 addr);
		r = -EINVAL;
		goto out;
	}
	if (!aok->pass_len || !aok->pass_ttl_ms ||
	    auth_open(sk, aok->box, aok->box_len, pk, sizeof(pk)) !=
		    AUTH_KEY_LEN) {
		pool_log(LOG_ERR,
			 "session: registry=%s sent no usable donor pass",
			 addr);
		r = -EPROTO;
		goto out;
	}
	if (hok->slab_bytes < CHUNK_BYTES || hok->slab_bytes % CHUNK_BYTES ||
	    (p->slab_bytes && hok->slab_bytes != p->slab_bytes)) {
		r = -EPROTO;
		goto out;
	}
	p->slab_bytes = hok->slab_bytes;
	p->reg_hello = *hok;
	memcpy(p->pass, aok->pass, aok->pass_len);
	p->pass_len = aok->pass_len;
	memcpy(p->pass_key, pk, sizeof(pk));
	p->pass_ttl_ms = aok->pass_ttl_ms;
	p->pass_until_ms = sent + aok->pass_ttl_ms;
	rpc_close(p->reg);
	p->reg = c;
	c = NULL;
	snprintf(p->reg_addr, sizeof(p->reg_addr), "%s", addr);
	pool_log(LOG_INFO,
		 "session: registry=%s tenant=%s tenant_id=%u pass_ttl_ms=%u",
		 addr, p->tenant, aok->tenant_id, aok->pass_ttl_ms);
out:
	explicit_bzero(sk, sizeof(sk));
	explicit_bzero(pk, sizeof(pk));
	if (aok)
		explicit_bzero(aok, sizeof(*aok));
	free(aok);
	free(hok);
	rpc_close(c);
	return r;
}

/*
 * Connects to one of the registries in p->addr, trying each once from
 * p->reg_next on (the one that answered last is first next time). 0, or
 * the error of the last one tried (-EAGAIN: reached, but none serves now).
 * Caller holds lock.
 */
int pl_reg_connect_locked(struct pool *p)
{
	char one[WIRE_HOSTPORT_MAX];
	const char *a[16];
	int n = 0, r = -EINVAL;

	for (const char *q = p->addr; *q && n < 16;) {
		a[n++] = q;
		q += strcspn(q, ",");
		if (*q)
			q++;
	}
	for (int k = 0; k < n; k++) {
		int i = (p->reg_next + k) % n;
		size_t len = strcspn(a[i], ",");

		if (!len || len >= sizeof(one))
			continue;
		memcpy(one, a[i], len);
		one[len] = '\0';
		r = reg_connect_one_locked(p, one);
		if (!r) {
			p->reg_next = i;
			return 0;
		}
	}
	return r;
}

/* The longest wait between two asks of one registry that answered EAGAIN
 * (it took over and donors are rejoining; the tenant's KV stores are
 * yielding to a PLACE: docs/cluster.md, "KV memory and quotas"). */
#define REG_RETRY_MAX_MS 500

/* Sleeps *wait_ms, no later than until, and doubles *wait_ms up to
 * REG_RETRY_MAX_MS. */
static void reg_retry_sleep(uint32_t *wait_ms, uint64_t until)
{
	uint64_t now = mono_ms(), ms = *wait_ms;

	if (now >= until)
		return;
	if (ms > until - now)
		ms = until - now;
	usleep((useconds_t)(ms * 1000));
	*wait_ms = *wait_ms * 2 > REG_RETRY_MAX_MS ? REG_RETRY_MAX_MS
						   : *wait_ms * 2;
}

/*
 * A call to the registries: with a list, a broken connection, a registry
 * that died or one that does not serve now is failed over to the next in
 * p->addr (and round again) for up to p->failover_ms; with one registry,
 * a broken connection is opened again once, as before lists, and EAGAIN
 * is asked again, 100 ms doubling to REG_RETRY_MAX_MS apart, for as long.
 * At the end the last refusal and its text are the answer. Caller holds
 * lock.
 */
static int reg_call_locked(struct pool *p, struct wire_msg *req,
			   struct wire_msg *rep, int expect, char *text,
			   size_t textlen)
{
	uint64_t until = mono_ms() + ((uint32_t)p->timeout_ms > p->failover_ms
					      ? (uint64_t)p->timeout_ms
					      : p->failover_ms);
	uint32_t wait_ms = REG_RETRY_MS;
	int r = -ENOTCONN;

	if (!strchr(p->addr, ',')) {
		/* One registry: a broken connection (it restarted) is opened
		 * again, once; EAGAIN (an etcd registry taking over, KV
		 * stores yielding to a PLACE) is asked again until the
		 * failover time is over; other refusals are final. */
		for (int i = 0; i < 2 && (r == -ENOTCONN || r == -EAGAIN);) {
			if (!p->reg || rpc_is_broken(p->reg)) {
				r = pl_reg_connect_locked(p);
				if (r)
					return r;
			}
			r = rpc_call(p->reg, req, rep, expect, p->timeout_ms,
				     text, textlen);
			if (r != -EAGAIN) {
				i++;
			} else if (mono_ms() >= until) {
				break;
			} else {
				if (wait_ms == REG_RETRY_MS)
					pool_log(LOG_INFO,
						 "session: registry=%s asks "
						 "again: %s",
						 p->reg_addr, text);
				reg_retry_sleep(&wait_ms, until);
			}
		}
		return r;
	}
	for (;;) {
		if (!p->reg || rpc_is_broken(p->reg)) {
			r = pl_reg_connect_locked(p);
			if (r) {
				snprintf(text, textlen,
					 "no registry of %.160s answered: %s",
					 p->addr, strerror(-r));
				goto retry;
			}
		}
		r = rpc_call(p->reg, req, rep, expect, p->timeout_ms, text,
			     textlen);
		/* Sent and not answered (the registry died), or refused by
		 * one that does not serve now (an etcd standby, a leader
		 * unsure of its lease, one that just took over): another
		 * registry, or this one again, places afresh. A PLACE that
		 * was never answered reserved nothing that will be used:
		 * its ticket never reached us, and donors refuse tickets of
		 * an epoch they left (docs/cluster.md). */
		if (r != -ENOTCONN && r != -EAGAIN && r != -ETIMEDOUT &&
		    r != -ECONNRESET && r != -EPIPE)
			return r;
		pool_log(LOG_INFO,
			 "session: registry=%s err=%s %s; failing over",
			 p->reg_addr, strerror(-r), text);
		rpc_close(p->reg);
		p->reg = NULL;
		p->reg_next++;
	retry:
		if (mono_ms() >= until)
			return r;
		usleep(REG_RETRY_MS * 1000);
	}
}

/* The link to a donor incarnation (donor_id, epoch at addr): one we have
 * and that is not lost, else a new one (with a fresh pass when ours runs
 * out soon). Caller holds lock. */
int pl_donor_link_open_locked(struct pool *p, uint32_t donor_id, uint64_t epoch,
			      const char *addr, struct plink **out)
{
	uint32_t renew = p->pass_ttl_ms / 4 < PASS_RENEW_MS ? p->pass_ttl_ms / 4
							    : PASS_RENEW_MS;
	struct link_auth au;
	struct plink *lk;
	int r;

	pl_links_reap_locked(p);
	for (lk = p->links; lk; lk = lk->next)
		if (lk->donor_id == donor_id && lk->donor_epoch == epoch &&
		    !link_is_lost(lk)) {
			*out = lk;
			return 0;
		}
	if (mono_ms() + renew >= p->pass_until_ms) {
		r = pl_reg_connect_locked(p);
		/* The registry is away: the old pass serves until it ends. */
		if (r && mono_ms() >= p->pass_until_ms)
			return r;
	}
	p->pass_left_at_open_ms =
		(int64_t)p->pass_until_ms - (int64_t)mono_ms();
	au = (struct link_auth){ .principal = p->tenant,
				 .key = p->pass_key,
				 .pass = p->pass,
				 .pass_len = p->pass_len,
				 .donor_id = donor_id,
				 .donor_epoch = epoch };
	r = pl_link_open(p, addr, &au, &lk);
	if (r)
		return r;
	pl_link_publish_locked(p, lk);
	*out = lk;
	return 0;
}

/* The link to a granted donor incarnation. Caller holds lock. */
static int donor_link_locked(struct pool *p, const struct wire_grant *g,
			     struct plink **out)
{
	return pl_donor_link_open_locked(p, g->donor_id, g->donor_epoch,
					 g->addr, out);
}

/* PLACE_OK makes sense for k slabs (replica: with a second copy on
 * another donor each). */
static bool place_ok_is_sane(const struct wire_place_ok *ok, uint32_t k,
			     bool replica)
{
	uint32_t uses[WIRE_MAX_GRANTS] = { 0 };

	if (ok->ngrants < 1 || ok->ngrants > WIRE_MAX_GRANTS || ok->nslabs != k)
		return false;
	for (uint32_t i = 0; i < k; i++) {
		const struct wire_layout *l = &ok->layout[i];

		if (l->primary >= ok->ngrants)
			return false;
		uses[l->primary]++;
		if (!replica) {
			if (l->replica != WIRE_NO_GRANT)
				return false;
			continue;
		}
		if (l->replica >= ok->ngrants ||
		    ok->grant[l->replica].donor_id ==
			    ok->grant[l->primary].donor_id)
			return false;
		uses[l->replica]++;
	}
	for (uint16_t g = 0; g < ok->ngrants; g++)
		if (uses[g] != ok->grant[g].ticket.nslabs)
			return false;
	return true;
}

/*
 * One PLACE of k (<= WIRE_MAX_LEASES) slabs at the registry, redeemed at
 * the donors it names; slab i goes to out[i] (and its copy to rep[i]).
 * On failure nothing stays tracked. Caller holds lock.
 */
static int place_once_locked(struct pool *p, uint32_t k, bool packed, int node,
			     bool replica, struct slab **out, struct slab **rep)
{
	struct wire_msg *req = calloc(1, sizeof(*req));
	struct wire_msg *ok = malloc(sizeof(*ok));
	struct wire_msg *lr = malloc(sizeof(*lr));
	struct slab **gs = calloc(2 * (size_t)k, sizeof(*gs));
	uint32_t base[WIRE_MAX_GRANTS], next[WIRE_MAX_GRANTS] = { 0 };
	const struct wire_place_ok *po;
	char text[WIRE_MSG_MAX];
	uint32_t total = 0;
	int r;

	if (!req || !ok || !lr || !gs) {
		r = -ENOMEM;
		goto out;
	}
	req->type = WIRE_PLACE;
	req->u.place.nslabs = k;
	req->u.place.flags = replica ? WIRE_PLACE_REPLICA : 0;
	req->u.place.node = node;
	r = reg_call_locked(p, req, ok, WIRE_PLACE_OK, text, sizeof(text));
	if (r) {
		if (r == -EDQUOT || r == -ENOSPC)
			pool_log(LOG_INFO, "alloc: registry: %s", text);
		else if (text[0])
			pool_log(LOG_WARNING,
				 "alloc: node=%d refused by registry: %s", node,
				 text);
		goto out;
	}
	po = &ok->u.place_ok;
	if (!place_ok_is_sane(po, k, replica)) {
		pool_log(LOG_ERR, "alloc: registry=%s sent a bad placement",
			 p->reg_addr);
		r = -EPROTO;
		goto out;
	}
	for (uint16_t g = 0; g < po->ngrants; g++) {
		const struct wire_grant *gr = &po->grant[g];
		uint32_t n = gr->ticket.nslabs;
		struct plink *lk;
		uint64_t sent;

		base[g] = total;
		total += n;
		r = donor_link_locked(p, gr, &lk);
		if (r)
			goto out;
		memset(req, 0, sizeof(*req));
		req->type = WIRE_LEASE_GRANT;
		req->u.lease_grant.ticket = gr->ticket;
		sent = mono_ms();
		r = rpc_call(lk->ctl, req, lr, WIRE_LEASE_GRANT_OK,
			     p->timeout_ms, text, sizeof(text));
		if (r) {
			pool_log(r == -ENOSPC || r == -ESTALE ? LOG_INFO
							      : LOG_WARNING,
				 "alloc: donor=%u memd=%s refused a grant "
				 "err=%s %s",
				 gr->donor_id, lk->addr, strerror(-r), text);
			goto out;
		}
		r = pl_leases_take_locked(p, lk, &lr->u.lease_ok, n, packed,
					  node, gs + base[g]);
		if (r)
			goto out;
		extend_validity(lk, sent);
	}
	for (uint32_t i = 0; i < k; i++) {
		const struct wire_layout *l = &po->layout[i];

		out[i] = gs[base[l->primary] + next[l->primary]++];
		if (replica)
			rep[i] = gs[base[l->replica] + next[l->replica]++];
	}
	r = 0;
out:
	if (r && gs)
		pl_drop_slabs_locked(p, gs, total);
	free(gs);
	free(lr);
	free(ok);
	free(req);
	return r;
}

/* PLACE of n slabs in batches the protocol allows; a grant that went
 * stale (a donor restarted, a ticket expired) is placed again, once. */
int pl_place_locked(struct pool *p, uint32_t n, bool packed, int node,
		    bool replica, struct slab **out, struct slab **rep)
{
	bool retried = false;

	for (uint32_t done = 0; done < n;) {
		uint32_t k =
			n - done < WIRE_MAX_LEASES ? n - done : WIRE_MAX_LEASES;
		int r = place_once_locked(p, k, packed, node, replica,
					  out + done, rep ? rep + done : NULL);

		if (r == -ESTALE && !retried) {
			retried = true;
			continue;
		}
		if (r)
			return r;
		done += k;
	}
	return 0;
}

int pool_donors(struct pool *p, struct wire_msg *rep)
{
	struct wire_msg *req;
	char text[WIRE_MSG_MAX];
	int r;

	if (!p->cluster)
		return -EOPNOTSUPP;
	req = calloc(1, sizeof(*req));
	if (!req)
		return -ENOMEM;
	text[0] = '\0';
	pthread_mutex_lock(&p->lock);
	/* protocol 5: the list with its membership sequence (docs/kv.md);
	 * a registry failed over to that speaks less refuses it once
	 * (EPROTO), and the next call asks as that one's HELLO_OK says */
	req->type = p->reg_hello.proto >= 5 ? WIRE_MEMBERS : WIRE_DONORS;
	r = reg_call_locked(p, req, rep, req->type | 0x80, text, sizeof(text));
	pthread_mutex_unlock(&p->lock);
	if (r)
		pool_log(LOG_WARNING, "kv: %s at registry=%s err=%s %s",
			 wire_type_name(req->type), p->addr, strerror(-r),
			 text);
	free(req);
	return r;
}
