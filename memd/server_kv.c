// SPDX-License-Identifier: MIT
/*
 * memd/server_kv.c - the KV tier's server side (docs/kv.md; the KV
 * paragraph of memd/server.c's DESIGN comment): each tenant's internal KV
 * session and the slabs the store asks for (kv_slab_get/kv_slab_put within
 * kv_share and the registry's allowance), the KV requests, and the KV
 * metrics writer.
 */
#include "memd/server_int.h"
#include "fabric/rendezvous.h"

/* The tenant's KV entry, or NULL. Caller holds kvlock (or is memd-ctl,
 * the only writer). */
const struct kv_tenant *srv_kv_tenant_find_locked(struct memd_server *s,
						  uint32_t tenant)
{
	for (uint32_t i = 0; i < s->nkvt; i++)
		if (s->kvt[i].tenant_id == tenant)
			return &s->kvt[i];
	return NULL;
}

/* How many of the sessions memd_lease_tenant_usage() counts for tenant
 * are KV sessions (0 or 1). Any thread. */
uint32_t srv_kv_sessions_of(struct memd_server *s, uint32_t tenant)
{
	uint32_t n;

	pthread_mutex_lock(&s->kvlock);
	n = srv_kv_tenant_find_locked(s, tenant) ? 1 : 0;
	pthread_mutex_unlock(&s->kvlock);
	return n;
}

/* ---- capacity planning (docs/capacity.md) ------------------------- */

/* The sizes every report and /metrics give the curve at, as multiples of
 * the tenant's KV capacity on this memd. */
static const double kv_cap_mult[] = { 0.25, 0.5, 1, 2, 4 };
#define KV_NMULT (sizeof(kv_cap_mult) / sizeof(kv_cap_mult[0]))

static uint32_t kv_cap_slabs(struct memd_server *s, uint32_t tenant,
			     bool *by_registry);

/*
 * The bytes of blocks the tenant's store may hold here: cap_slabs slabs
 * at the packing of its blocks (their mean size: floor(slab / block)
 * blocks a slab; a chunked value fills whole slabs), which is what the
 * curve's sizes count.
 */
static uint64_t kv_cap_bytes(uint64_t slab, uint32_t cap_slabs,
			     const struct memd_kv_stats *st)
{
	uint64_t n = st->entries + st->reserved;
	double eff = 1, avg;

	if (n && st->bytes_used) {
		avg = (double)st->bytes_used / (double)n;
		if (avg < (double)slab)
			eff = (double)(uint64_t)((double)slab / avg) * avg /
			      (double)slab;
	}
	return (uint64_t)((double)cap_slabs * (double)slab * eff);
}

/* A tenant's cost model here: the client's hint (KV_MODEL) when one came,
 * else memd.conf's (kv_prefill_tokens_per_s, kv_bytes_per_token). */
struct kv_model {
	uint32_t tps;
	uint64_t bpt;
	bool from_client;
};

/* The model of kt (NULL: no KV entry yet). Caller holds kvlock, or is
 * memd-ctl. */
static struct kv_model kv_model_of_locked(struct memd_server *s,
					  const struct kv_tenant *kt)
{
	struct kv_model m = {
		.tps = __atomic_load_n(&s->kv_cost_tps, __ATOMIC_RELAXED),
		.bpt = __atomic_load_n(&s->kv_cost_bpt, __ATOMIC_RELAXED),
	};

	if (kt && kt->hint_tps && kt->hint_bpt) {
		m.tps = kt->hint_tps;
		m.bpt = kt->hint_bpt;
		m.from_client = true;
	}
	return m;
}

/* Seconds of prefill that bytes of KV served save in model m. */
static double kv_saved_s(const struct kv_model *m, uint64_t bytes)
{
	return (double)bytes / (double)(m->bpt ? m->bpt : 1) /
	       (double)(m->tps ? m->tps : 1);
}

static json_t *kv_report_tenant(struct memd_server *s, uint32_t tenant,
				bool points, uint64_t now)
{
	struct memd_kv_stats st;
	struct memd_kv_curve *cv = calloc(1, sizeof(*cv));
	const struct kv_tenant *kt;
	uint64_t sizes[KV_NMULT], first = s->start_ms, cap;
	double at[KV_NMULT], period_s;
	json_t *o, *j, *arr;
	bool by_registry;
	uint32_t cap_slabs;
	struct kv_model model;

	if (!cv)
		return NULL;
	memd_kv_get_stats(s->kv, tenant, &st);
	pthread_mutex_lock(&s->kvlock);
	kt = srv_kv_tenant_find_locked(s, tenant);
	if (kt)
		first = kt->first_ms;
	model = kv_model_of_locked(s, kt);
	pthread_mutex_unlock(&s->kvlock);
	period_s = (double)(now - first) / 1000.0;
	cap_slabs = kv_cap_slabs(s, tenant, &by_registry);
	cap = kv_cap_bytes(s->cfg.slab_bytes, cap_slabs, &st);
	for (size_t i = 0; i < KV_NMULT; i++)
		sizes[i] = (uint64_t)(kv_cap_mult[i] * (double)cap);
	o = json_object();
	j = json_object();
	if (!o || !j)
		goto fail;
#define X(name, help)                                                          \
	json_object_set_new(j, #name, json_integer((json_int_t)st.name));
	MEMD_KV_STATS(X)
#undef X
	json_object_set_new(o, "stats", j);
	j = NULL; /* o holds it */
	json_object_set_new(o, "tenant_id", json_integer(tenant));
	json_object_set_new(o, "cap_slabs", json_integer(cap_slabs));
	json_object_set_new(o, "cap_by_registry", json_boolean(by_registry));
	json_object_set_new(o, "cap_bytes", json_integer((json_int_t)cap));
	json_object_set_new(o, "period_s", json_real(period_s));
	json_object_set_new(o, "hit_ratio",
			    st.requests ? json_real((double)st.request_hits /
						    (double)st.requests)
					: json_null());
	json_object_set_new(o, "saved_s",
			    json_real(kv_saved_s(&model, st.hit_bytes)));
	json_object_set_new(
		o, "saved_s_per_hour",
		period_s > 0 ? json_real(kv_saved_s(&model, st.hit_bytes) *
					 3600.0 / period_s)
			     : json_null());
	/* the model saved_s is in: the client's hint or memd.conf's */
	json_object_set_new(o, "model",
			    json_pack("{sIsIss}", "prefill_tokens_per_s",
				      (json_int_t)model.tps, "bytes_per_token",
				      (json_int_t)model.bpt, "from",
				      model.from_client ? "client" : "memd"));
	json_object_set_new(o, "oneshot_put_s",
			    json_real((double)st.oneshot_put_ms / 1000.0));
	if (memd_kv_curve(s->kv, tenant, sizes, at, KV_NMULT, cv)) {
		json_object_set_new(o, "curve", json_null());
		goto out;
	}
	j = json_pack("{sf sI sI sI sf sI sI}", "rate", cv->info.rate,
		      "sample_max", (json_int_t)cv->info.sample_max, "tracked",
		      (json_int_t)cv->info.tracked, "window_samples",
		      (json_int_t)cv->info.window_samples, "window_requests",
		      cv->info.window_requests, "window_refs",
		      (json_int_t)cv->info.window_refs, "memory_bytes",
		      (json_int_t)cv->info.bytes);
	arr = json_array();
	if (!j || !arr) {
		json_decref(arr);
		goto fail; /* frees j */
	}
	/* what the curve predicts: memd's own eviction (memd/mrc.h) */
	json_object_set_new(j, "policy", json_string("S3-FIFO"));
	for (size_t i = 0; i < KV_NMULT; i++)
		json_array_append_new(arr, json_pack("{sf sI sf}", "mult",
						     kv_cap_mult[i], "bytes",
						     (json_int_t)sizes[i],
						     "hit", at[i]));
	json_object_set_new(j, "at", arr);
	if (points) {
		arr = json_array();
		for (size_t i = 0; arr && i < cv->npoints; i++)
			json_array_append_new(
				arr,
				json_pack("[I f]", (json_int_t)cv->bytes[i],
					  cv->hit[i]));
		json_object_set_new(j, "points", arr ? arr : json_null());
	}
	json_object_set_new(o, "curve", j);
out:
	free(cv);
	return o;
fail:
	free(cv);
	json_decref(o);
	json_decref(j);
	return NULL;
}

/*
 * ADMIN {"cmd": "kv_report", "tenant_id": N?, "points": bool?}: the KV
 * capacity statistics of one tenant (with the curve's points unless
 * "points" is false) or of every tenant of this memd's KV store (without
 * points unless "points" is true). Any memd serves it, for its own store.
 * Returns the reply's length, or -errno with err set.
 */
int srv_admin_kv_report(struct memd_server *s, const json_t *req, char *out,
			size_t cap, char *err, size_t errlen)
{
	const json_t *jt = json_object_get(req, "tenant_id");
	const json_t *jp = json_object_get(req, "points");
	uint32_t ids[WIRE_MAX_TENANTS];
	json_t *rep, *arr;
	uint64_t now = srv_now_ms();
	size_t n = 0, len;
	bool points;

	const char *k;
	json_t *v;

	if (!req) {
		snprintf(err, errlen, "kv_report: malformed JSON");
		return -EINVAL;
	}
	json_object_foreach((json_t *)req, k, v)
	{
		if (strcmp(k, "cmd") && strcmp(k, "tenant_id") &&
		    strcmp(k, "points")) {
			snprintf(err, errlen,
				 "kv_report: unknown field '%.64s' (it takes "
				 "tenant_id and points)",
				 k);
			return -EINVAL;
		}
	}
	if (jt && (!json_is_integer(jt) || json_integer_value(jt) < 0 ||
		   json_integer_value(jt) > UINT32_MAX)) {
		snprintf(err, errlen,
			 "kv_report: tenant_id must be a tenant id (a whole "
			 "number from 0 to 4294967295)");
		return -EINVAL;
	}
	if (jp && !json_is_boolean(jp)) {
		snprintf(err, errlen,
			 "kv_report: points must be true or false");
		return -EINVAL;
	}
	if (!s->kv) {
		snprintf(err, errlen,
			 "kv_report: the KV tier is off on this memd (kv_share "
			 "= 0)");
		return -EOPNOTSUPP;
	}
	points = jp ? json_is_true(jp) : jt != NULL;
	n = memd_kv_tenant_ids(s->kv, ids, WIRE_MAX_TENANTS);
	if (jt) {
		uint32_t want = (uint32_t)json_integer_value(jt);
		bool found = false;

		for (size_t i = 0; i < n && !found; i++)
			found = ids[i] == want;
		if (!found) {
			snprintf(err, errlen,
				 "kv_report: tenant_id %u has no KV store on "
				 "this memd (no KV request yet)",
				 want);
			return -ENOENT;
		}
		ids[0] = want;
		n = 1;
	}
	rep = json_pack(
		"{sI sI sI sI sI s[]}", "slab_bytes",
		(json_int_t)s->cfg.slab_bytes, "nslabs", (json_int_t)s->nslabs,
		"kv_share", (json_int_t)s->cfg.kv_share, "prefill_tokens_per_s",
		(json_int_t)s->cfg.kv_prefill_tokens_per_s, "bytes_per_token",
		(json_int_t)s->cfg.kv_bytes_per_token, "tenants");
	arr = rep ? json_object_get(rep, "tenants") : NULL;
	for (size_t i = 0; arr && i < n; i++) {
		json_t *t = kv_report_tenant(s, ids[i], points, now);

		if (!t || json_array_append_new(arr, t)) {
			json_decref(rep);
			rep = NULL;
		}
	}
	if (!rep) {
		snprintf(err, errlen, "kv_report: out of memory");
		return -ENOMEM;
	}
	len = json_dumpb(rep, out, cap, JSON_COMPACT);
	json_decref(rep);
	if (len == 0 || len > cap) {
		snprintf(err, errlen,
			 "kv_report: the report does not fit one reply; ask "
			 "for one tenant, or without points");
		return -EMSGSIZE;
	}
	return (int)len;
}

/* ------------------------------------------------------------------ */
/* KV tier (docs/kv.md)                                                 */

/* The tenant's KV entry, opening its KV session when create is set.
 * NULL: none (or no memory for one). memd-ctl only. */
struct kv_tenant *srv_kv_tenant(struct memd_server *s, uint32_t tenant,
				bool create)
{
	struct memd_session *ses;
	struct kv_tenant *t;

	for (uint32_t i = 0; i < s->nkvt; i++)
		if (s->kvt[i].tenant_id == tenant)
			return &s->kvt[i];
	if (!create || memd_session_open(s->lt, srv_now_ms(), &ses))
		return NULL;
	memd_session_set_tenant(s->lt, ses, tenant);
	pthread_mutex_lock(&s->kvlock);
	if (s->nkvt == s->kvt_cap) {
		uint32_t cap = s->kvt_cap ? 2 * s->kvt_cap : 8;

		t = realloc(s->kvt, cap * sizeof(*t));
		if (!t) {
			pthread_mutex_unlock(&s->kvlock);
			memd_session_close(s->lt, ses, srv_now_ms(),
					   srv_revoke_mr, s);
			return NULL;
		}
		s->kvt = t;
		s->kvt_cap = cap;
	}
	t = &s->kvt[s->nkvt];
	*t = (struct kv_tenant){ .tenant_id = tenant,
				 .ses = ses,
				 .first_ms = srv_now_ms() };
	__atomic_store_n(&s->nkvt, s->nkvt + 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&s->kvlock);
	memd_log(LOG_INFO, "kv: store opened tenant=%u session=%" PRIx64,
		 tenant, memd_session_id(ses));
	if (s->donor) /* the registry allots KV memory to reported stores */
		memd_donor_kick(s->donor);
	return t;
}

/* Slabs one tenant's KV store may hold: kv_share percent of the slabs. */
static uint32_t kv_share_slabs(const struct memd_server *s)
{
	return (uint32_t)((uint64_t)s->nslabs * s->cfg.kv_share / 100);
}

/*
 * In a cluster, what a tenant's KV store may hold here until the registry
 * says otherwise: one slab (docs/cluster.md, "KV memory and quotas").
 */
#define KV_BOOTSTRAP_SLABS 1u

/*
 * Slabs tenant's KV store may hold on this memd: its kv_share, and in a
 * cluster no more than the registry's allowance (KV_BOOTSTRAP_SLABS
 * before there is one). *by_registry: the allowance is the tighter cap.
 */
static uint32_t kv_cap_slabs(struct memd_server *s, uint32_t tenant,
			     bool *by_registry)
{
	uint32_t cap = kv_share_slabs(s), allow;

	*by_registry = false;
	if (!s->donor)
		return cap; /* standalone: the share is the only cap */
	if (!memd_donor_kv_allowance(s->donor, tenant, &allow))
		allow = KV_BOOTSTRAP_SLABS;
	if (allow < cap) {
		cap = allow;
		*by_registry = true;
	}
	return cap;
}

/* The store's slab_get: runs on memd-ctl, under the store's lock. */
static int kv_slab_get(void *arg, uint32_t tenant, uint32_t *slabp,
		       uint8_t **base)
{
	struct memd_server *s = arg;
	struct kv_tenant *t = srv_kv_tenant(s, tenant, true);
	uint32_t slab, gen, id, cap;
	struct fab_mr *mr = NULL, *mr_ro = NULL;
	uint64_t reg_epoch;
	bool drain = false, by_registry;
	int group, r;

	if (!t)
		return -ENOMEM;
	if (s->donor)
		memd_donor_state(s->donor, &id, &reg_epoch, &drain);
	if (s->draining || drain)
		return -ENOSPC;
	cap = kv_cap_slabs(s, tenant, &by_registry);
	if (t->cap_slabs != cap) {
		pthread_mutex_lock(&s->kvlock);
		t->cap_slabs = cap;
		pthread_mutex_unlock(&s->kvlock);
	}
	if (t->slabs >= cap) {
		/* the store evicts the tenant's own blocks; a fresh report
		 * brings a fresh allowance if the quota has room */
		if (by_registry) {
			CTR_ADD(s, kv_allowance_refusals, 1);
			memd_donor_kick(s->donor);
		}
		return -ENOSPC;
	}
	group = memd_lease_fullest_group(s->lt);
	if (group < 0)
		return -ENOSPC;
	r = memd_lease_grant_in(s->lt, t->ses, srv_now_ms(), group, &slab,
				&gen);
	if (r)
		return r == -ENOSPC ? -ENOSPC : r;
	r = srv_register_slab(s, slab, &mr);
	if (!r) {
		r = srv_register_slab_access(s, slab, FAB_ACCESS_REMOTE_READ,
					     &mr_ro);
		if (r)
			fab_mr_close(mr);
	}
	if (r) {
		memd_log(LOG_ERR, "fabric: register kv slab=%u err=%s", slab,
			 strerror(-r));
		memd_lease_release(s->lt, t->ses, slab, gen, srv_now_ms(), NULL,
				   NULL);
		srv_reclaim_kick(s);
		return r;
	}
	s->mr[slab] = mr;
	s->key[slab] = fab_mr_key(mr);
	s->mr_ro[slab] = mr_ro;
	s->key_ro[slab] = fab_mr_key(mr_ro);
	s->kvs[slab] = (struct kv_slab){ .generation = gen,
					 .tenant_id = tenant,
					 .used = true };
	pthread_mutex_lock(&s->kvlock);
	t->slabs++;
	pthread_mutex_unlock(&s->kvlock);
	CTR_ADD(s, kv_slabs_taken, 1);
	memd_log(LOG_DEBUG, "kv: slab taken tenant=%u slab=%u held=%u", tenant,
		 slab, t->slabs);
	if (s->donor)
		memd_donor_kick(s->donor);
	*slabp = slab;
	*base = srv_slab_base(s, slab);
	return 0;
}

/* The store's slab_put: the slab goes the way of a released lease. */
static void kv_slab_put(void *arg, uint32_t slab)
{
	struct memd_server *s = arg;
	struct kv_slab *k = &s->kvs[slab];
	struct kv_tenant *t = srv_kv_tenant(s, k->tenant_id, false);

	if (!k->used || !t) {
		memd_log(LOG_ERR, "kv: slab=%u given back but not a kv slab",
			 slab);
		return;
	}
	pthread_mutex_lock(&s->kvlock);
	t->slabs--; /* before the lease goes: see struct kv_tenant */
	pthread_mutex_unlock(&s->kvlock);
	if (memd_lease_release(s->lt, t->ses, slab, k->generation, srv_now_ms(),
			       srv_revoke_mr, s)) {
		memd_log(LOG_ERR, "kv: release slab=%u tenant=%u failed", slab,
			 k->tenant_id);
		srv_revoke_mr(slab,
			      s); /* whatever the table says, the key goes */
	}
	k->used = false;
	CTR_ADD(s, kv_slabs_returned, 1);
	memd_log(LOG_DEBUG, "kv: slab returned tenant=%u slab=%u held=%u",
		 k->tenant_id, slab, t->slabs);
	srv_reclaim_kick(s);
	if (s->donor)
		memd_donor_kick(s->donor);
}

/* How soon a slab on its way back must be due for a put that needs it
 * to be told to try again (-EAGAIN) rather than -ENOSPC. */
#define KV_SLAB_SOON_MS 1000u

/*
 * The store's slab_soon: runs on memd-ctl, under the store's lock, when
 * slab_get said -ENOSPC and tenant has nothing to evict; must not block
 * (memd-ctl serves every client). Slabs given back (by any tenant: a put
 * and delete of a few classes hands back a slab per class) are free
 * again only after the quiesce delay and the reclaimer's zeroing; a put
 * meanwhile would fail -ENOSPC with the donor's memory a moment from
 * free. So: while the tenant is under its cap and slabs are on their way
 * back, one due within KV_SLAB_SOON_MS (or being zeroed now), the put is
 * answered -EAGAIN and the reclaimer is kicked; the client tries again.
 */
static bool kv_slab_soon(void *arg, uint32_t tenant)
{
	struct memd_server *s = arg;
	struct kv_tenant *t = srv_kv_tenant(s, tenant, false);
	struct memd_lease_counts c;
	bool drain = false;
	int64_t due;

	if (s->donor) {
		uint32_t id;
		uint64_t reg_epoch;

		memd_donor_state(s->donor, &id, &reg_epoch, &drain);
	}
	if (!t || s->draining || drain || t->slabs >= t->cap_slabs)
		return false;
	memd_lease_get_counts(s->lt, &c);
	if (c.reclaiming == 0)
		return false;
	/* reclaiming counts the slabs being zeroed too (due < 0 then) */
	due = memd_lease_next_reclaim_ms(s->lt, srv_now_ms());
	if (c.free == 0 && due > (int64_t)KV_SLAB_SOON_MS)
		return false;
	srv_reclaim_kick(s);
	return true;
}

/*
 * In a cluster, a tenant's store holding more than the registry's latest
 * allowance evicts its own entries down to it (the quota moved: another
 * PLACE, a lower quota, a donor more in the split). memd-ctl, every tick.
 */
void srv_kv_trim(struct memd_server *s)
{
	if (!s->donor)
		return; /* standalone: kv_share only limits growth */
	for (uint32_t i = 0; i < s->nkvt; i++) {
		uint32_t tenant = s->kvt[i].tenant_id, cap;
		bool by_registry;
		ssize_t n;

		/* without an allowance (a registry not heard from since
		 * joining) a store keeps what it holds */
		if (!memd_donor_kv_allowance(s->donor, tenant, &cap))
			continue;
		cap = kv_cap_slabs(s, tenant, &by_registry);
		if (!by_registry || s->kvt[i].slabs <= cap)
			continue;
		n = memd_kv_trim(s->kv, tenant, cap, srv_now_ms());
		if (n > 0) {
			CTR_ADD(s, kv_trimmed, (uint64_t)n);
			memd_log(LOG_INFO,
				 "kv: trimmed tenant=%u to allowance=%u "
				 "evicted=%zd held=%u",
				 tenant, cap, n, s->kvt[i].slabs);
		}
	}
}

/* KV sessions never expire: renewed on every tick, before expiry runs. */
void srv_kv_renew(struct memd_server *s)
{
	for (uint32_t i = 0; i < s->nkvt; i++)
		if (memd_session_renew(s->lt, s->kvt[i].ses, srv_now_ms()) < 0)
			memd_log(LOG_ERR, "kv: session of tenant=%u expired",
				 s->kvt[i].tenant_id);
}

void srv_kv_cost_publish(struct memd_server *s)
{
	__atomic_store_n(&s->kv_cost_bpt, s->cfg.kv_bytes_per_token,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&s->kv_cost_tps, s->cfg.kv_prefill_tokens_per_s,
			 __ATOMIC_RELAXED);
}

/*
 * A drain begun (docs/kv.md, "Drain"): the registry has taken this donor
 * out of the donors clients hash keys over, so its KV entries can no
 * longer be reached, deleted or replaced, and after an undrain they would
 * answer again with whatever they held before: values deleted or put
 * anew elsewhere meanwhile. Every tenant's entries are forgotten and
 * their spill files deleted now; the KV slabs go back (reclaim), which is
 * what a drain is for.
 */
void srv_kv_drained(struct memd_server *s)
{
	uint64_t starts;

	if (!s->donor || !s->kv)
		return;
	starts = memd_donor_drain_starts(s->donor);
	if (starts == s->drains_seen)
		return;
	s->drains_seen = starts;
	memd_log(LOG_NOTICE,
		 "kv: draining: entries=%zd of every tenant forgotten and "
		 "their spill files deleted (an undrained donor starts empty)",
		 memd_kv_forget_all(s->kv, srv_now_ms()));
}

/*
 * Donors that come and go (docs/kv.md): while the registry counts this
 * donor down (its link lost, its reports missed: a partition, SIGSTOP,
 * a registry restart), clients hash its keys to other donors, and
 * deletes and newer puts of those keys happen there. So a donor serves
 * KV only while the registry certainly counts it up, and each new
 * membership after the first (a JOIN_OK after the registry restarted or
 * marked it down) begins with every tenant's entries and spill files
 * forgotten, before any KV request is served. The first keeps the spill
 * files an earlier run left only if they were written under the
 * membership sequence its JOIN_OK carries (memd_kv_spill_membership:
 * the sequence the directory records, which this keeps up to date). Called on every KV request
 * and every tick (memd-ctl). Returns 0 when KV may be served, -EAGAIN
 * while the membership is in doubt. A standalone memd has no registry:
 * always 0.
 */
/* This donor's rank among the donor list for one key (fabric/rendezvous.h):
 * kept while fewer than two donors rank above it. */
struct kv_rank {
	uint16_t n, self;
	uint64_t seed[WIRE_MAX_DONORS];
	const char (*names)[WIRE_NAME_MAX];
	char name[WIRE_MAX_DONORS][WIRE_NAME_MAX]; /* names points here */
	uint64_t gone;				   /* forgotten so far */
};

static bool kv_ranked_first_or_second(const uint8_t *key, void *arg)
{
	const struct kv_rank *rk = arg;
	uint64_t own = tp_rendezvous_score(rk->seed[rk->self], key);
	int above = 0;

	for (uint16_t i = 0; i < rk->n && above < 2; i++)
		above += i != rk->self &&
			 tp_rendezvous_above(
				 tp_rendezvous_score(rk->seed[i], key),
				 rk->names[i], own, rk->names[rk->self]);
	return above < 2;
}

/*
 * Homes that move without the donor leaving (docs/kv.md): after a join
 * that ranks this donor third or lower for a key, deletes and puts of the
 * key reach its home and second choice only, so its entry here could come
 * back as the home's when the joined donors leave again. At each donor
 * list its link fetched for a new membership, the entries of keys it no
 * longer ranks first or second for go. A list that does not name this
 * donor (drained, down) changes nothing here: that is the membership's.
 */
static void kv_forget_unranked(struct memd_server *s)
{
	char names[WIRE_MAX_DONORS][WIRE_NAME_MAX];
	char self[WIRE_NAME_MAX];
	struct kv_rank *rk = s->kv_pass_rank;
	uint64_t seq;
	uint16_t n;

	seq = memd_donor_members(s->donor, names, &n, self, sizeof(self));
	if (!seq || seq == s->kv_ranked || seq == s->kv_pass_seq)
		return;
	if (!rk && !(rk = s->kv_pass_rank = calloc(1, sizeof(*rk))))
		return; /* tried again at the next call */
	/* a pass under way reads rk under the store's mutex: stop it
	 * before rk changes */
	memd_kv_forget_begin(s->kv, NULL, NULL);
	memcpy(rk->name, names, (size_t)n * WIRE_NAME_MAX);
	rk->names = (const char(*)[WIRE_NAME_MAX])rk->name;
	rk->n = n;
	rk->self = UINT16_MAX;
	for (uint16_t i = 0; i < n; i++) {
		rk->seed[i] = tp_rendezvous_seed(names[i]);
		if (!strcmp(names[i], self))
			rk->self = i;
	}
	if (rk->self == UINT16_MAX || n < 3) {
		/* nothing to forget; a pass of an older list under way
		 * stops (what it forgot was ranked away by that list) */
		memd_kv_forget_begin(s->kv, NULL, NULL);
		s->kv_pass_seq = 0;
		s->kv_ranked = seq;
		memd_donor_applied(s->donor, seq);
		return;
	}
	/* the pass runs in steps (srv_kv_pass_step): a million entries
	 * take about a second (docs/bench/kv.md, "The forget pass") */
	memd_kv_forget_begin(s->kv, kv_ranked_first_or_second, rk);
	s->kv_pass_seq = seq;
	rk->gone = 0;
}

/* entries a step visits: a few milliseconds of memd-ctl */
#define KV_PASS_STEP 4096

bool srv_kv_pass_step(struct memd_server *s)
{
	struct kv_rank *rk = s->kv_pass_rank;
	bool done;
	ssize_t r;

	if (!s->kv_pass_seq || !s->kv || !rk)
		return false;
	r = memd_kv_forget_step(s->kv, KV_PASS_STEP, srv_now_ms(), &done);
	if (r > 0)
		rk->gone += (uint64_t)r;
	if (!done)
		return true;
	if (rk->gone)
		memd_log(LOG_NOTICE,
			 "kv: membership=%" PRIu64
			 " donors=%u: entries=%" PRIu64
			 " of keys this donor no longer ranks first or second "
			 "for forgotten",
			 s->kv_pass_seq, rk->n, rk->gone);
	/* acted on: the link may confirm this membership (protocol 6) */
	s->kv_ranked = s->kv_pass_seq;
	s->kv_pass_seq = 0;
	memd_donor_applied(s->donor, s->kv_ranked);
	return false;
}

/* Logs when this donor falls out of touch with its registry (KV refused,
 * "try again") and when it is back, with how old its last answered
 * report was and how long KV was refused: the cause of clients' misses
 * while it lasts (docs/kv.md, "In doubt, refuse"). Not before the first
 * time in touch (a donor still joining). */
static void kv_touch_changed(struct memd_server *s, bool up)
{
	uint64_t now = srv_now_ms(), age;
	unsigned every = 0;

	if (up == s->kv_in_touch)
		return;
	s->kv_in_touch = up;
	if (!up) {
		age = memd_donor_report_age_ms(s->donor, &every);
		s->kv_out_since_ms = now ? now : 1;
		memd_log(LOG_NOTICE,
			 "kv: out of touch with the registry: its last "
			 "answered report is %" PRIu64
			 " ms old (reports every %u ms, 2.5 intervals at "
			 "most); KV refused until one is answered",
			 age, every);
	} else if (s->kv_out_since_ms) {
		memd_log(LOG_NOTICE,
			 "kv: in touch with the registry again after %" PRIu64
			 " ms: KV served",
			 now - s->kv_out_since_ms);
		s->kv_out_since_ms = 0;
	}
}

int srv_kv_membership(struct memd_server *s)
{
	uint64_t joins, seq, had;
	bool up;
	int r;

	if (s->donor && !s->kv) /* no KV: nothing to act on */
		memd_donor_applied(s->donor, UINT64_MAX);
	if (!s->donor || !s->kv)
		return 0;
	up = memd_donor_membership(s->donor, &joins, &seq);
	kv_touch_changed(s, up);
	if (joins != s->kv_joins_seen) {
		bool first = !s->kv_joins_seen;

		s->kv_joins_seen = joins;
		had = memd_kv_spill_membership(s->kv);
		if (first && joins == 1 && !s->cfg.kv_spill_dir[0]) {
			/* nothing from an earlier run */
		} else if (first && joins == 1 && seq && had == seq) {
			/* The process's first membership keeps what the
			 * spill directory brought (a warm restart) only if
			 * its files were written under the very membership
			 * it joined: the registry never counted this donor
			 * down meanwhile, so no delete or put of its keys
			 * went elsewhere. */
			memd_log(LOG_NOTICE,
				 "kv: spill files of membership=%" PRIu64
				 " kept (the membership goes on)",
				 seq);
		} else if (first && joins == 1) {
			memd_log(LOG_NOTICE,
				 "kv: first membership=%" PRIu64
				 ": entries=%zd of the spill directory's "
				 "membership=%" PRIu64
				 " (0: unknown) forgotten and their spill "
				 "files deleted (deletes and puts may have "
				 "gone to other donors meanwhile)",
				 seq, memd_kv_forget_all(s->kv, srv_now_ms()),
				 had);
		} else {
			memd_log(LOG_NOTICE,
				 "kv: new membership joins=%" PRIu64
				 ": entries=%zd of every tenant forgotten and "
				 "their spill files deleted (deletes and puts "
				 "may have gone to other donors meanwhile)",
				 joins,
				 memd_kv_forget_all(s->kv, srv_now_ms()));
		}
	}
	/* Every spill file is valid under the membership the link last
	 * read (those of an earlier one are gone): record it, so that a
	 * restart knows (0, a registry before protocol 5: unknown). */
	if (s->kv_joins_seen)
		kv_forget_unranked(s);
	if (s->kv_joins_seen &&
	    seq != (had = memd_kv_spill_membership(s->kv)) &&
	    (r = memd_kv_spill_membership_set(s->kv, seq)))
		memd_log(LOG_WARNING,
			 "kv: cannot record membership=%" PRIu64
			 " in the spill directory (it names %" PRIu64
			 ", which a restart will not keep): %s",
			 seq, had, strerror(-r));
	return up ? 0 : -EAGAIN;
}

int srv_kv_open(struct memd_server *s, char *err, size_t errlen)
{
	struct memd_kv_options o = {
		.slab_bytes = s->cfg.slab_bytes,
		.epoch = s->epoch,
		.reserve_ms = s->cfg.kv_reserve_ms,
		.max_reserved = s->cfg.kv_max_reserved,
		.lease_ms = s->cfg.kv_lease_ms,
		.slab_get = kv_slab_get,
		.slab_put = kv_slab_put,
		.slab_soon = kv_slab_soon,
		.slab_arg = s,
		.spill_dir =
			s->cfg.kv_spill_dir[0] ? s->cfg.kv_spill_dir : NULL,
		.spill_bytes = s->cfg.kv_spill_bytes,
		.policy = MEMD_KV_POLICY_S3FIFO,
		.mrc_samples = s->cfg.kv_mrc_samples,
	};
	struct memd_kv_scan_result sr = { 0 };
	int r;

	s->kvs = calloc(s->nslabs, sizeof(*s->kvs));
	if (!s->kvs) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	srv_kv_cost_publish(s);
	r = memd_kv_create(&o, &s->kv);
	if (r) {
		snprintf(err, errlen, "kv store%s%s: %s",
			 o.spill_dir ? " with kv_spill_dir " : "",
			 o.spill_dir ? o.spill_dir : "", strerror(-r));
		return r;
	}
	r = memd_kv_scan_spill(s->kv, &sr);
	if (r) {
		snprintf(err, errlen, "kv_spill_dir %s: %s", o.spill_dir,
			 strerror(-r));
		return r;
	}
	if (o.spill_dir)
		memd_log(LOG_NOTICE,
			 "kv: spill dir=%s files=%" PRIu64 " bytes=%" PRIu64
			 " deleted=%" PRIu64 " dropped=%" PRIu64,
			 o.spill_dir, sr.files, sr.bytes, sr.deleted,
			 sr.dropped);
	return 0;
}

/*
 * One KV location for a session of tenant: the block's RMA address in the
 * slab's registration. -EIO (logged) if the slab is not that tenant's KV
 * slab: the store's bookkeeping and ours disagree, and no key of another
 * tenant's slab may leave memd.
 */
static int kv_fill_loc(struct memd_server *s, uint32_t tenant,
		       const struct memd_kv_loc *l, bool write,
		       struct wire_kv_loc *out)
{
	if (l->slab >= s->nslabs || !s->kvs[l->slab].used ||
	    s->kvs[l->slab].tenant_id != tenant || !s->mr[l->slab] ||
	    !s->mr_ro[l->slab]) {
		memd_log(LOG_ERR,
			 "kv: location slab=%u is not a kv slab of tenant=%u",
			 l->slab, tenant);
		return -EIO;
	}
	/* a reader gets the read-only registration's key, a writer (KV
	 * RESERVE) the one that writes */
	out->raddr =
		fab_mr_remote_base(write ? s->mr[l->slab] : s->mr_ro[l->slab]) +
		l->offset;
	out->rkey = write ? s->key[l->slab] : s->key_ro[l->slab];
	out->block_bytes = l->block_bytes;
	out->endpoint = (uint16_t)srv_slab_aep(s, l->slab)->index;
	return 0;
}

/*
 * The gate of every KV request: a tenant session (any session on a
 * standalone memd) and the KV tier on; with in_touch, also this donor in
 * touch with its registry (srv_kv_membership). Otherwise it refuses req,
 * counted in kv_refused, and returns false.
 */
static bool kv_admit(struct memd_server *s, struct conn *c,
		     const struct wire_msg *req, bool in_touch)
{
	const char *why;
	int err;

	if (s->mode != MODE_STANDALONE && c->role != WIRE_ROLE_TENANT) {
		err = EACCES;
		why = "only a tenant session uses the KV tier";
	} else if (!s->cfg.kv_share) {
		err = EOPNOTSUPP;
		why = "the KV tier is off on this memd (kv_share = 0)";
	} else if (in_touch && srv_kv_membership(s)) {
		err = EAGAIN;
		why = "this donor is out of touch with its registry; KV "
		      "resumes once it reports again";
	} else {
		return true;
	}
	CTR_ADD(s, kv_refused, 1);
	srv_send_error(s, c, req->seq, err, "%s: %s", wire_type_name(req->type),
		       why);
	return false;
}

/*
 * KV_MODEL (protocol 3): the client's hint of its model's cost for the
 * tenant's store here (docs/capacity.md). The last hint of any of the
 * tenant's sessions holds until the next; memd.conf's model until the
 * first. Opens the tenant's KV entry, as its first KV request would.
 */
void srv_do_kv_model(struct memd_server *s, struct conn *c,
		     const struct wire_msg *req, struct wire_msg *rep)
{
	const struct wire_kv_model *k = &req->u.kv_model;
	struct kv_tenant *t;
	bool changed;

	if (!kv_admit(s, c, req, false))
		return;
	if (k->prefill_tokens_per_s < 1 ||
	    k->prefill_tokens_per_s > WIRE_KV_TPS_MAX) {
		srv_send_error(s, c, req->seq, EINVAL,
			       "KV_MODEL: prefill_tokens_per_s %" PRIu32
			       " is not 1 to %u",
			       k->prefill_tokens_per_s, WIRE_KV_TPS_MAX);
		return;
	}
	if (k->bytes_per_token < 1 || k->bytes_per_token > WIRE_KV_BPT_MAX) {
		srv_send_error(s, c, req->seq, EINVAL,
			       "KV_MODEL: bytes_per_token %" PRIu64
			       " is not 1 to %llu",
			       k->bytes_per_token, WIRE_KV_BPT_MAX);
		return;
	}
	t = srv_kv_tenant(s, c->tenant_id, true);
	if (!t) {
		srv_send_error(s, c, req->seq, ENOMEM,
			       "KV_MODEL: out of memory");
		return;
	}
	changed = t->hint_tps != k->prefill_tokens_per_s ||
		  t->hint_bpt != k->bytes_per_token; /* memd-ctl writes */
	pthread_mutex_lock(&s->kvlock);
	t->hint_tps = k->prefill_tokens_per_s;
	t->hint_bpt = k->bytes_per_token;
	pthread_mutex_unlock(&s->kvlock);
	if (changed)
		memd_log(
			LOG_INFO,
			"kv: model hint tenant=%u prefill_tokens_per_s=%" PRIu32
			" bytes_per_token=%" PRIu64 " peer=%s",
			c->tenant_id, k->prefill_tokens_per_s,
			k->bytes_per_token, c->peer);
	memset(rep, 0, sizeof(*rep));
	srv_reply(c, rep, WIRE_KV_MODEL_OK, req->seq);
}

/*
 * KV_CLEAR (protocol 4): empties the requesting tenant's store on this
 * memd (memd_kv_clear: every entry as KV_DELETE would drop it, pinned
 * ones too, and its spill files). Only the session's own tenant.
 */
void srv_do_kv_clear(struct memd_server *s, struct conn *c,
		     const struct wire_msg *req, struct wire_msg *rep)
{
	uint32_t tenant = c->tenant_id;
	uint64_t now = srv_now_ms();
	ssize_t r;

	if (!kv_admit(s, c, req, true))
		return;
	r = memd_kv_clear(s->kv, tenant, now);
	if (r < 0) {
		srv_send_error(s, c, req->seq, (int)-r, "KV_CLEAR: %s",
			       strerror((int)-r));
		return;
	}
	CTR_ADD(s, kv_deleted, (uint64_t)r);
	memd_log(LOG_INFO, "kv: clear tenant=%u entries=%zd peer=%s", tenant, r,
		 c->peer);
	memset(rep, 0, sizeof(*rep));
	srv_reply(c, rep, WIRE_KV_CLEAR_OK, req->seq);
}

/* The store's items for request in's keys (key, value_len, generation,
 * checksum; the rest zero), in an array of memd-ctl's own: valid until
 * the next call. in->count is at most WIRE_KV_BATCH (wire_decode). */
static struct memd_kv_item *kv_items_of(const struct wire_kv *in)
{
	static struct memd_kv_item items[WIRE_KV_BATCH];

	memset(items, 0, in->count * sizeof(items[0]));
	for (size_t i = 0; i < in->count; i++) {
		memcpy(items[i].key, in->item[i].key, MEMD_KV_KEY_BYTES);
		items[i].value_len = in->item[i].value_len;
		items[i].generation = in->item[i].generation;
		items[i].checksum = in->item[i].checksum;
	}
	return items;
}

/*
 * A COMMIT_AT refused ESTALE: its client puts those keys again under the
 * newer list, maybe here, and would find its own reservations (-EBUSY
 * until kv_reserve_ttl): they go now. Only a reservation of the very
 * generation the commit names (its reserve's) is dropped.
 */
static void kv_unreserve_refused(struct memd_server *s, uint32_t tenant,
				 const struct wire_kv *in)
{
	struct memd_kv_item *items;
	ssize_t r;

	if (!s->kv)
		return;
	items = kv_items_of(in);
	r = memd_kv_unreserve(s->kv, tenant, items, in->count, srv_now_ms());
	if (r > 0)
		memd_log(LOG_INFO,
			 "kv: commit refused (stale membership): dropped "
			 "reservations=%zd tenant=%u",
			 r, tenant);
}

void srv_do_kv(struct memd_server *s, struct conn *c,
	       const struct wire_msg *req, struct wire_msg *rep)
{
	static struct memd_kv_loc locs[WIRE_KV_MAX_LOCS]; /* memd-ctl only */
	static uint8_t keys[WIRE_KV_BATCH][MEMD_KV_KEY_BYTES];
	struct memd_kv_item *items;
	const struct wire_kv *in = &req->u.kv;
	struct wire_kv *out = &rep->u.kv;
	uint32_t tenant = c->tenant_id;
	uint8_t type = wire_kv_plain(req->type); /* _AT: served as plain */
	uint64_t now = srv_now_ms();
	size_t n = in->count;
	uint32_t j;
	ssize_t r;

	if (!kv_admit(s, c, req, true))
		return;
	if (type != req->type) { /* an _AT request: routed by which list? */
		uint64_t own = 0, joins;

		if (s->donor)
			memd_donor_membership(s->donor, &joins, &own);
		/* A client whose list is newer than ours routed by it: ours
		 * is the one behind (we hear of a change at our next report,
		 * which we ask for now), and our entries are as good as
		 * they were. One whose list is older may have missed homes
		 * that moved since: it must fetch the list again. */
		if (in->membership > own && s->donor)
			memd_donor_kick(s->donor);
		if (in->membership < own || !s->donor) {
			CTR_ADD(s, kv_refused, 1);
			if (type == WIRE_KV_COMMIT && s->donor)
				kv_unreserve_refused(s, tenant, in);
			srv_send_error(s, c, req->seq, ESTALE,
				       "%s: routed by membership %" PRIu64
				       ", this donor's is %" PRIu64
				       ": fetch the donor list again",
				       wire_type_name(req->type),
				       in->membership, own);
			return;
		}
	}
	/* Before anything of the tenant's is served: its spill files must
	 * be its own (another pool's or tenant's are deleted). */
	r = memd_kv_bind_tenant(
		s->kv, tenant,
		s->mode == MODE_STANDALONE ? s->solo_bind : c->spill_bind, now);
	if (r > 0) {
		CTR_ADD(s, kv_spill_refused, (uint64_t)r);
		memd_log(LOG_NOTICE,
			 "kv: tenant=%u bound: dropped=%zd entries or spill "
			 "files of another pool or tenant",
			 tenant, r);
	}
	items = kv_items_of(in);
	for (size_t i = 0; i < n; i++)
		memcpy(keys[i], in->item[i].key, MEMD_KV_KEY_BYTES);
	switch (type) {
	case WIRE_KV_RESERVE:
		r = memd_kv_reserve(s->kv, tenant, items, n, locs,
				    WIRE_KV_MAX_LOCS, now);
		break;
	case WIRE_KV_COMMIT:
		r = memd_kv_commit(s->kv, tenant, items, n, now);
		break;
	case WIRE_KV_LOOKUP:
		r = memd_kv_lookup(s->kv, tenant, items, n, locs,
				   WIRE_KV_MAX_LOCS, now);
		break;
	case WIRE_KV_DONE:
		r = memd_kv_done(s->kv, tenant, items, n, now);
		break;
	case WIRE_KV_EXISTS:
		r = memd_kv_exists(s->kv, tenant,
				   (const uint8_t(*)[MEMD_KV_KEY_BYTES])keys,
				   n);
		break;
	case WIRE_KV_DELETE:
		r = memd_kv_delete(s->kv, tenant, items, n, now);
		break;
	default: /* WIRE_KV_PIN */
		if ((in->flags & WIRE_KV_UNPIN) && (in->flags & WIRE_KV_DROP)) {
			srv_send_error(s, c, req->seq, EINVAL,
				       "KV_PIN: UNPIN and DROP together");
			return;
		}
		r = in->flags & WIRE_KV_DROP
			    ? memd_kv_drop(s->kv, tenant, items, n, now)
		    : in->flags & WIRE_KV_UNPIN
			    ? memd_kv_unpin(s->kv, tenant, items, n)
			    : memd_kv_pin(s->kv, tenant, items, n, now);
		break;
	}
	if (r < 0) { /* the batch itself: cannot happen for a decoded one */
		srv_send_error(s, c, req->seq, (int)-r, "%s: %s",
			       wire_type_name(req->type), strerror((int)-r));
		return;
	}
	CTR_ADD(s, kv_requests, 1);
	memset(rep, 0, sizeof(*rep));
	rep->type = (uint8_t)(req->type | 0x80);
	rep->seq = req->seq;
	if (type == WIRE_KV_EXISTS) {
		out->count = (uint16_t)r;
		goto send;
	}
	out->count = (uint16_t)n;
	for (size_t i = 0; i < n; i++) {
		const struct memd_kv_item *it = &items[i];
		struct wire_kv_item *o = &out->item[i];
		bool ok = it->status == 0;

		o->status = it->status;
		switch (type) {
		case WIRE_KV_RESERVE:
			o->generation = ok || it->status == -EEXIST
						? it->generation
						: 0;
			if (ok)
				CTR_ADD(s, kv_reserved, 1);
			if (it->status == -EDQUOT)
				CTR_ADD(s, kv_reserve_refused, 1);
			break;
		case WIRE_KV_LOOKUP:
			if (ok) {
				o->value_len = it->value_len;
				o->generation = it->generation;
				o->checksum = it->checksum;
			}
			if (ok)
				CTR_ADD(s, kv_hits, 1);
			else
				CTR_ADD(s, kv_misses, 1);
			break;
		case WIRE_KV_COMMIT:
			if (ok)
				CTR_ADD(s, kv_committed, 1);
			break;
		case WIRE_KV_DELETE:
			if (ok)
				CTR_ADD(s, kv_deleted, 1);
			break;
		}
		if (!ok || (type != WIRE_KV_RESERVE && type != WIRE_KV_LOOKUP))
			continue;
		/* This key's chunks, packed after the previous key's. */
		o->first_loc = out->nlocs;
		o->nchunks = it->nchunks;
		for (j = 0; j < it->nchunks; j++)
			if (kv_fill_loc(s, tenant, &locs[it->first_loc + j],
					type == WIRE_KV_RESERVE,
					&out->loc[out->nlocs + j]))
				break;
		if (j < it->nchunks) {
			memset(o, 0, sizeof(*o));
			o->status = -EIO;
			memset(&out->loc[out->nlocs], 0,
			       j * sizeof(out->loc[0]));
			continue;
		}
		out->nlocs = (uint16_t)(out->nlocs + j);
	}
send:
	if (srv_conn_send(c, rep)) {
		memd_log(LOG_ERR, "kv: reply %s does not encode",
			 wire_type_name(rep->type));
		c->closing = true;
	}
}

/* The KV statistics that only grow are counters; the rest are gauges. */
static bool kv_stat_is_counter(const char *name)
{
	static const char *const counters[] = {
		"hits",		  "misses",	  "evictions",
		"spills",	  "spill_errors", "reloads",
		"expired",	  "requests",	  "request_hits",
		"hit_bytes",	  "oneshot",	  "oneshot_bytes",
		"oneshot_put_ms", "recuts",	  "recut_evictions"
	};

	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
		if (!strcmp(name, counters[i]))
			return true;
	return false;
}

/* Per-tenant statistics of the KV store (memd/kvstore.h's X-macro). */
static void write_kv_capacity_metrics(struct memd_metrics_buf *b,
				      struct memd_server *s,
				      const uint32_t *ids, const uint32_t *caps,
				      const struct kv_model *models,
				      const struct memd_kv_stats *st,
				      uint32_t n);

void srv_write_kv_metrics(struct memd_metrics_buf *b, struct memd_server *s)
{
	struct kv_model models[WIRE_MAX_TENANTS];
	uint32_t ids[WIRE_MAX_TENANTS], caps[WIRE_MAX_TENANTS], n = 0;
	struct memd_kv_stats *st;

	pthread_mutex_lock(&s->kvlock);
	for (uint32_t i = 0; i < s->nkvt && n < WIRE_MAX_TENANTS; i++) {
		caps[n] = s->kvt[i].cap_slabs;
		models[n] = kv_model_of_locked(s, &s->kvt[i]);
		ids[n++] = s->kvt[i].tenant_id;
	}
	pthread_mutex_unlock(&s->kvlock);
	st = calloc(n ? n : 1, sizeof(*st));
	if (!st)
		return;
	for (uint32_t i = 0; i < n; i++)
		memd_kv_get_stats(s->kv, ids[i], &st[i]);
#define X(name, help)                                                          \
	{                                                                      \
		bool ctr = kv_stat_is_counter(#name);                          \
		const char *sfx = ctr ? "_total" : "";                         \
		memd_metrics_printf(b,                                         \
				    "# HELP tidepool_memd_kv_tenant_" #name    \
				    "%s KV store of each tenant: " help        \
				    ".\n# TYPE tidepool_memd_kv_tenant_" #name \
				    "%s %s\n",                                 \
				    sfx, sfx, ctr ? "counter" : "gauge");      \
		for (uint32_t i = 0; i < n; i++)                               \
			memd_metrics_printf(b,                                 \
					    "tidepool_memd_kv_tenant_" #name   \
					    "%s{tenant_id=\"%u\"} %" PRIu64    \
					    "\n",                              \
					    sfx, ids[i], st[i].name);          \
	}
	MEMD_KV_STATS(X)
#undef X
	write_kv_capacity_metrics(b, s, ids, caps, models, st, n);
	free(st);
}

/* Capacity planning gauges (docs/capacity.md): hit ratio, saved seconds,
 * the curve at 1/4 .. 4 x the tenant's KV capacity. */
static void write_kv_capacity_metrics(struct memd_metrics_buf *b,
				      struct memd_server *s,
				      const uint32_t *ids, const uint32_t *caps,
				      const struct kv_model *models,
				      const struct memd_kv_stats *st,
				      uint32_t n)
{
	struct memd_kv_curve *cv = malloc(sizeof(*cv));

	memd_metrics_printf(
		b, "# HELP tidepool_memd_kv_tenant_hit_ratio Keys found of "
		   "the keys each tenant asked for (request_hits / "
		   "requests).\n# TYPE tidepool_memd_kv_tenant_hit_ratio "
		   "gauge\n");
	for (uint32_t i = 0; i < n; i++)
		if (st[i].requests)
			memd_metrics_printf(
				b,
				"tidepool_memd_kv_tenant_hit_ratio{tenant_id="
				"\"%u\"} %.6f\n",
				ids[i],
				(double)st[i].request_hits /
					(double)st[i].requests);
	memd_metrics_printf(
		b, "# HELP tidepool_memd_kv_tenant_saved_seconds Prefill "
		   "seconds the KV bytes served saved (hit_bytes / "
		   "bytes_per_token / prefill_tokens_per_s: the client's "
		   "hint, else kv_bytes_per_token and "
		   "kv_prefill_tokens_per_s).\n# TYPE "
		   "tidepool_memd_kv_tenant_saved_seconds gauge\n");
	for (uint32_t i = 0; i < n; i++)
		memd_metrics_printf(b,
				    "tidepool_memd_kv_tenant_saved_seconds{"
				    "tenant_id=\"%u\"} %.3f\n",
				    ids[i],
				    kv_saved_s(&models[i], st[i].hit_bytes));
	memd_metrics_printf(
		b, "# HELP tidepool_memd_kv_tenant_capacity_bytes Bytes of "
		   "blocks each tenant's KV store may hold here.\n# TYPE "
		   "tidepool_memd_kv_tenant_capacity_bytes gauge\n");
	for (uint32_t i = 0; i < n; i++)
		memd_metrics_printf(
			b,
			"tidepool_memd_kv_tenant_capacity_bytes{"
			"tenant_id=\"%u\"} %" PRIu64 "\n",
			ids[i],
			kv_cap_bytes(s->cfg.slab_bytes, caps[i], &st[i]));
	memd_metrics_printf(
		b, "# HELP tidepool_memd_kv_tenant_curve_hit_ratio The hit "
		   "ratio each tenant's miss-ratio curve predicts (memd's "
		   "S3-FIFO, miniature simulations) at "
		   "a multiple of its KV capacity.\n# TYPE "
		   "tidepool_memd_kv_tenant_curve_hit_ratio gauge\n");
	for (uint32_t i = 0; cv && i < n; i++) {
		uint64_t cap = kv_cap_bytes(s->cfg.slab_bytes, caps[i], &st[i]);
		uint64_t sizes[KV_NMULT];
		double at[KV_NMULT];

		for (size_t k = 0; k < KV_NMULT; k++)
			sizes[k] = (uint64_t)(kv_cap_mult[k] * (double)cap);
		if (memd_kv_curve(s->kv, ids[i], sizes, at, KV_NMULT, cv))
			continue;
		for (size_t k = 0; k < KV_NMULT; k++)
			memd_metrics_printf(
				b,
				"tidepool_memd_kv_tenant_curve_hit_ratio{"
				"tenant_id=\"%u\",capacity=\"%g\"} %.6f\n",
				ids[i], kv_cap_mult[k], at[k]);
	}
	free(cv);
}
