// SPDX-License-Identifier: MIT
/*
 * libpool/pool.c - sessions: connect and close, the session's settings
 * (pool_opts, LIBPOOL_*), stats, pool_strerror, memd status and the
 * internal views of a session (tidepool/pool.h, libpool/internal.h).
 * How the files of libpool's core share the work: libpool/pool_int.h.
 */
#include "libpool/pool_int.h"
#include "fabric/locked.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* public: sessions                                                     */

/* The tenant's name and key (from its secret file). */
static int tenant_init(struct pool *p, const char *tenant, const char *file)
{
	uint8_t *secret;
	char err[256];
	size_t len = strlen(tenant);
	int r;

	for (size_t i = 0; i < len; i++) {
		char c = tenant[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '.' ||
		      c == '-'))
			len = 0; /* not a tenant name */
	}
	if (len == 0 || len >= WIRE_NAME_MAX) {
		pool_log(LOG_ERR,
			 "session: tenant name must be 1-63 of A-Z a-z 0-9 _ "
			 ". -");
		return -EINVAL;
	}
	if (!file || !*file) {
		pool_log(LOG_ERR,
			 "session: tenant=%s needs a secret file "
			 "(LIBPOOL_SECRET_FILE or "
			 "pool_opts.secret_file)",
			 tenant);
		return -EINVAL;
	}
	r = auth_init();
	if (r)
		return r;
	secret = malloc(AUTH_SECRET_MAX);
	if (!secret)
		return -ENOMEM;
	r = auth_read_secret_file(file, secret, err, sizeof(err));
	if (r < 0) {
		pool_log(LOG_ERR, "session: tenant=%s: %s", tenant, err);
		free(secret);
		return r;
	}
	auth_tenant_key(secret, (size_t)r, p->tenant_key);
	explicit_bzero(secret, AUTH_SECRET_MAX);
	free(secret);
	memcpy(p->tenant, tenant, len + 1);
	return 0;
}

static bool fabric_background_default;

void pool_set_fabric_background(bool on)
{
	__atomic_store_n(&fabric_background_default, on, __ATOMIC_RELAXED);
}

int pool_connect(const struct pool_opts *opts, struct pool **out)
{
	struct pool_opts o = { 0 };
	struct plink *lk;
	const char *env;
	struct pool *p;
	int r;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (opts)
		o = *opts;
	if (!o.addr)
		o.addr = getenv("LIBPOOL_ADDR");
	if (!o.addr || !*o.addr)
		o.addr = DEFAULT_ADDR;
	if (o.timeout_ms < 0)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	if (snprintf(p->addr, sizeof(p->addr), "%s", o.addr) >=
	    (int)sizeof(p->addr)) {
		free(p);
		return -EINVAL;
	}
	p->timeout_ms = o.timeout_ms ? o.timeout_ms : DEFAULT_TIMEOUT_MS;
	p->max_inflight = o.max_inflight ? o.max_inflight : DEFAULT_INFLIGHT;
	p->xfer_bytes = DEFAULT_XFER;
	p->fabric_background =
		__atomic_load_n(&fabric_background_default, __ATOMIC_RELAXED);
	p->failover_ms = REG_FAILOVER_MS;
	env = getenv("LIBPOOL_REGISTRY_FAILOVER_MS");
	if (env && *env) {
		char *end;
		unsigned long v = strtoul(env, &end, 10);

		if (*end || v > 3600000) {
			pool_log(
				LOG_ERR,
				"session: LIBPOOL_REGISTRY_FAILOVER_MS='%s' is "
				"not 0 to 3600000 (ms)",
				env);
			free(p);
			return -EINVAL;
		}
		p->failover_ms = (uint32_t)v;
	}
	p->shm = true;
	env = getenv("LIBPOOL_SHM");
	if (env && *env) {
		if (!strcmp(env, "off")) {
			p->shm = false;
		} else if (!strcmp(env, "map")) {
			p->shm_map = true;
		} else if (strcmp(env, "auto")) {
			pool_log(
				LOG_ERR,
				"session: LIBPOOL_SHM='%s' is not auto, map or "
				"off",
				env);
			free(p);
			return -EINVAL;
		}
	}
	/* Off by default beside the preload shim (its exported mark): the
	 * mappings' pages would count in the RSS it bounds (docs/kv.md). */
	p->kv_map = !dlsym(RTLD_DEFAULT, "tidepool_preload");
	env = getenv("LIBPOOL_KV_MAP");
	if (env && *env) {
		if (!strcmp(env, "off") || !strcmp(env, "0")) {
			p->kv_map = false;
		} else if (!strcmp(env, "on") || !strcmp(env, "1")) {
			p->kv_map = true;
		} else {
			pool_log(
				LOG_ERR,
				"session: LIBPOOL_KV_MAP='%s' is not on or off",
				env);
			free(p);
			return -EINVAL;
		}
	}
	p->kv_streams = DEFAULT_KV_STREAMS;
	env = getenv("LIBPOOL_KV_STREAMS");
	if (env && *env) {
		char *end;
		unsigned long v;

		errno = 0;
		v = strtoul(env, &end, 10);
		if (errno || *end || *env == '-' || v < 1 ||
		    v > POOL_STREAMS_MAX) {
			pool_log(LOG_ERR,
				 "session: LIBPOOL_KV_STREAMS='%s' is not 1 to "
				 "%d",
				 env, POOL_STREAMS_MAX);
			free(p);
			return -EINVAL;
		}
		p->kv_streams = (unsigned)v;
	}
	env = getenv("LIBPOOL_XFER_BYTES");
	if (env && strtoull(env, NULL, 0) >= 4096)
		p->xfer_bytes = strtoull(env, NULL, 0);
	if (o.client_name)
		snprintf(p->client, sizeof(p->client), "%s", o.client_name);
	else
		snprintf(p->client, sizeof(p->client), "%s pid %d",
			 program_invocation_short_name, (int)getpid());
	/* Printable bytes only: the name ends up in memd's log lines. */
	for (char *c = p->client; *c; c++)
		if (*c < 0x20 || *c > 0x7e)
			*c = '?';
	pthread_mutex_init(&p->lock, NULL);

	if (!o.tenant)
		o.tenant = getenv("LIBPOOL_TENANT");
	if (!o.secret_file)
		o.secret_file = getenv("LIBPOOL_SECRET_FILE");
	if (o.tenant && *o.tenant) {
		r = tenant_init(p, o.tenant, o.secret_file);
		if (!r)
			r = pl_reg_connect_locked(p);
		if (r)
			goto fail;
		p->cluster = true;
	} else {
		if (strchr(p->addr, ',')) {
			pool_log(LOG_ERR,
				 "session: %s is a list of registries; a "
				 "session without a tenant takes one memd",
				 p->addr);
			r = -EINVAL;
			goto fail;
		}
		r = pl_link_open(p, p->addr, NULL, &lk);
		if (r)
			goto fail;
		pl_link_publish_locked(p, lk);
	}
	*out = p;
	return 0;
fail:
	pool_close(p);
	return r;
}

void pool_close(struct pool *p)
{
	if (!p)
		return;
	/* Attached objects (KV handles) go first: they use the links. */
	while (p->attached) {
		struct pool_attached *a = p->attached;

		p->attached = a->next;
		a->destroy(a);
	}
	for (struct plink *lk = p->links; lk; lk = lk->next)
		pl_link_stop_hb(lk);
	while (p->links) {
		struct plink *lk = p->links;

		p->links = lk->next;
		pl_link_close(lk);
	}
	while (p->regions) {
		struct pool_region *r = p->regions;

		p->regions = r->next;
		free(r);
	}
	while (p->slabs) {
		struct slab *s = p->slabs;

		p->slabs = s->next;
		pl_slab_free(s);
	}
	rpc_close(p->reg);
	explicit_bzero(p->tenant_key, sizeof(p->tenant_key));
	explicit_bzero(p->pass_key, sizeof(p->pass_key));
	pthread_mutex_destroy(&p->lock);
	free(p);
}

int pool_get_stats(struct pool *p, struct pool_stats *st)
{
	if (!p || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&p->lock);
	st->slabs_held = p->nslabs;
	st->regions = p->nregions;
	st->heartbeats = p->hb_reaped;
	for (struct plink *lk = p->links; lk; lk = lk->next)
		st->heartbeats +=
			__atomic_load_n(&lk->st_heartbeats, __ATOMIC_RELAXED);
	st->epoch = p->links ? p->links->epoch : 0;
	pthread_mutex_unlock(&p->lock);
	st->slab_bytes = p->slab_bytes;
	st->bytes_read = __atomic_load_n(&p->st_read, __ATOMIC_RELAXED);
	st->bytes_written = __atomic_load_n(&p->st_written, __ATOMIC_RELAXED);
	st->ops = __atomic_load_n(&p->st_ops, __ATOMIC_RELAXED);
	st->errors = __atomic_load_n(&p->st_errors, __ATOMIC_RELAXED);
	return 0;
}

const char *pool_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -ENOTCONN:
		return "pool session lost (memd unreachable or leases "
		       "expired)";
	case -ENOSPC:
		return "no free memory in the pool";
	case -ERANGE:
		return "offset or length outside the region";
	case -EPROTONOSUPPORT:
		return "memd speaks no protocol version this library does";
	case -ENODATA:
		return "memd's fabric provider is not available on this host";
	case -ESTALE:
		return "stale lease (memd restarted or lease expired)";
	case -EPROTO:
		return "protocol error talking to memd, or memd's fabric "
		       "refuses this process (FI_OFI_RXM_BUFFER_SIZE differs: "
		       "LIBPOOL_LOG=err names both values)";
	case -EACCES:
		return "authentication failed or not allowed (tenant, secret)";
	case -EDQUOT:
		return "the tenant's quota does not allow this allocation";
	case -EOPNOTSUPP:
		return "not supported by this session (replicas need a "
		       "cluster)";
	default:
		return err < 0 ? strerror(-err) : "not an error code";
	}
}

/* ------------------------------------------------------------------ */
/* internal views                                                       */
int pool_session_fabric(struct pool *p, const char **provider,
			const uint8_t **addr, uint16_t *addr_len)
{
	if (!p->links)
		return -ENOTCONN;
	*provider = p->links->provider;
	*addr = p->links->mep[0].addr;
	*addr_len = p->links->mep[0].addr_len;
	return 0;
}

uint16_t pool_session_nendpoints(const struct pool *p)
{
	return p->links ? p->links->nendpoints : 0;
}

int pool_session_endpoint(const struct pool *p, uint16_t i, int *node,
			  const uint8_t **addr, uint16_t *addr_len)
{
	if (!p->links || i >= p->links->nendpoints)
		return -ERANGE;
	*node = p->links->mep[i].node;
	*addr = p->links->mep[i].addr;
	*addr_len = p->links->mep[i].addr_len;
	return 0;
}

bool pool_session_is_cluster(const struct pool *p)
{
	return p->cluster;
}

uint32_t pool_session_nlinks(struct pool *p)
{
	uint32_t n = 0;

	pthread_mutex_lock(&p->lock);
	for (struct plink *lk = p->links; lk; lk = lk->next)
		n++;
	pthread_mutex_unlock(&p->lock);
	return n;
}

uint64_t pool_session_links_reaped(struct pool *p)
{
	return TP_LOCKED_READ(&p->lock, p->links_reaped);
}

int64_t pool_session_pass_left_ms(struct pool *p, bool at_last_open)
{
	int64_t left;

	pthread_mutex_lock(&p->lock);
	left = at_last_open ? p->pass_left_at_open_ms
			    : (int64_t)p->pass_until_ms - (int64_t)mono_ms();
	pthread_mutex_unlock(&p->lock);
	return left;
}

/* ------------------------------------------------------------------ */
/* links for other modules of libpool (the KV tier)                     */

void pool_attach(struct pool *p, struct pool_attached *a)
{
	pthread_mutex_lock(&p->lock);
	a->next = p->attached;
	p->attached = a;
	pthread_mutex_unlock(&p->lock);
}

int pool_timeout_ms(const struct pool *p)
{
	return p->timeout_ms;
}

uint64_t pool_slab_bytes(const struct pool *p)
{
	return p->slab_bytes;
}

size_t pool_xfer_bytes(struct pool *p)
{
	return __atomic_load_n(&p->xfer_bytes, __ATOMIC_RELAXED);
}

/* STATUS over lk into *st (name and addr already set). */
static void link_status(struct plink *lk, struct wire_msg *req,
			struct wire_msg *rep, struct pool_memd_status *st)
{
	const struct wire_status_ok *ok = &rep->u.status_ok;

	memset(req, 0, sizeof(*req));
	req->type = WIRE_STATUS;
	st->err = pool_link_call(lk, req, rep, WIRE_STATUS_OK, NULL, 0);
	if (st->err)
		return;
	st->epoch = ok->epoch;
	st->uptime_ms = ok->uptime_ms;
	st->donated_bytes = ok->donated_bytes;
	st->slab_bytes = ok->slab_bytes;
	st->slabs_total = ok->slabs_total;
	st->slabs_free = ok->slabs_free;
	st->slabs_leased = ok->slabs_leased;
	st->slabs_reclaiming = ok->slabs_reclaiming;
	st->sessions = ok->sessions;
	st->draining = !!(ok->flags & WIRE_STATUS_DRAINING);
	st->hugepages = !!(ok->flags & WIRE_STATUS_HUGEPAGES);
}

ssize_t pool_get_status(struct pool *p, struct pool_memd_status *st, size_t max)
{
	struct wire_msg *req, *rep, *don = NULL;
	struct plink *lk;
	ssize_t n = 1;
	int r;

	if (!p || (!st && max))
		return -EINVAL;
	req = malloc(sizeof(*req));
	rep = malloc(sizeof(*rep));
	if (!req || !rep) {
		n = -ENOMEM;
		goto out;
	}
	if (!p->cluster) {
		r = pool_link_get(p, 0, 0, NULL, &lk);
		if (r) {
			n = r;
			goto out;
		}
		if (max) {
			memset(st, 0, sizeof(*st));
			snprintf(st->addr, sizeof(st->addr), "%s",
				 pool_link_addr(lk));
			link_status(lk, req, rep, st);
		}
		pool_link_put(lk);
		goto out;
	}
	don = malloc(sizeof(*don));
	if (!don) {
		n = -ENOMEM;
		goto out;
	}
	r = pool_donors(p, don);
	if (r) {
		n = r;
		goto out;
	}
	n = don->u.donors_ok.count;
	for (size_t i = 0; i < (size_t)n && i < max; i++) {
		const struct wire_donor_entry *d = &don->u.donors_ok.donor[i];

		memset(&st[i], 0, sizeof(st[i]));
		snprintf(st[i].name, sizeof(st[i].name), "%s", d->name);
		snprintf(st[i].addr, sizeof(st[i].addr), "%s", d->addr);
		r = pool_link_get(p, d->donor_id, d->epoch, d->addr, &lk);
		if (r) {
			st[i].err = r;
			continue;
		}
		link_status(lk, req, rep, &st[i]);
		pool_link_put(lk);
	}
out:
	free(don);
	free(req);
	free(rep);
	return n;
}
