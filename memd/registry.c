// SPDX-License-Identifier: MIT
/*
 * memd/registry.c - the pool's directory (see registry.h, docs/cluster.md):
 * the registry's life (open, close, attaching to etcd), the lookups and
 * small helpers its other files share, tenant authentication (a tenant's
 * key by name, donor passes) and the snapshots /metrics reads. The other
 * parts, one state machine a file, are listed in registry_int.h, which
 * also holds the structures and their invariants.
 *
 * Threads: none of its own. open and close run before and after every
 * other thread; memd-ctl asks for keys and passes; the metrics thread
 * takes snapshots. foreach copies under the lock and calls back without
 * it (so a callback may call the registry).
 *
 * Invariants: open fills every field before it returns the registry (a
 * file-backed one with registry.json read; an etcd one empty, its state
 * read when it is elected: registry_leader.c); the epoch is never 0.
 */
#include "memd/registry_int.h"

#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STATE_FILE "registry.json"
#define STATE_TMP "registry.json.tmp"

/* ---- small helpers ---------------------------------------------------- */

uint64_t reg_unix_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t reg_mul_sat(uint64_t a, uint64_t b)
{
	uint64_t p;

	if (__builtin_mul_overflow(a, b, &p))
		return UINT64_MAX;
	return p;
}

struct tenant *reg_tenant_by_id(struct memd_registry *r, uint32_t id)
{
	for (size_t i = 0; i < r->ntenants; i++)
		if (r->tenant[i].id == id)
			return &r->tenant[i];
	return NULL;
}

struct tenant *reg_tenant_by_name(struct memd_registry *r, const char *name)
{
	for (size_t i = 0; i < r->ntenants; i++)
		if (!strcmp(r->tenant[i].name, name))
			return &r->tenant[i];
	return NULL;
}

struct donor *reg_donor_by_id(struct memd_registry *r, uint32_t id)
{
	for (size_t i = 0; i < r->ndonors; i++)
		if (r->donor[i].id == id)
			return &r->donor[i];
	return NULL;
}

struct donor *reg_donor_by_name(struct memd_registry *r, const char *name)
{
	for (size_t i = 0; i < r->ndonors; i++)
		if (!strcmp(r->donor[i].name, name))
			return &r->donor[i];
	return NULL;
}

/* Grows *arr to hold at least want elements. 0 or -ENOMEM. */
int reg_grow(void **arr, size_t *cap, size_t want, size_t elem)
{
	size_t n = *cap ? *cap : 8;
	void *p;

	if (want <= *cap)
		return 0;
	while (n < want)
		n *= 2;
	p = realloc(*arr, n * elem);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = n;
	return 0;
}

enum memd_donor_state reg_donor_state(const struct donor *d)
{
	if (!d->up)
		return MEMD_DONOR_DOWN;
	return d->draining ? MEMD_DONOR_DRAINING : MEMD_DONOR_UP;
}

const char *memd_donor_state_name(enum memd_donor_state s)
{
	switch (s) {
	case MEMD_DONOR_UP:
		return "up";
	case MEMD_DONOR_DRAINING:
		return "draining";
	case MEMD_DONOR_DOWN:
		return "down";
	}
	return "unknown";
}

void reg_donor_set_reason(struct donor *d, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(d->reason, sizeof(d->reason), fmt, ap);
	va_end(ap);
	d->since_unix_ms = reg_unix_ms();
}

/* ---- attaching to etcd ------------------------------------------------- */

int reg_etcd_attach(struct memd_registry *r, const struct memd_registry_opts *o,
		    char *err, size_t errlen)
{
	static const char label[] = "tidepool registry state v1";
	static const char mac_label[] = "tidepool registry state mac key v1";
	const char *pre = o->etcd_prefix && o->etcd_prefix[0] ? o->etcd_prefix
							      : "/tidepool";
	int rc;

	rc = memd_etcd_open(o->etcd, &r->etcd, err, errlen);
	if (rc)
		return rc;
	crypto_generichash(r->seal, sizeof(r->seal), (const uint8_t *)label,
			   sizeof(label) - 1, o->keys->admin,
			   sizeof(o->keys->admin));
	crypto_generichash(r->mac, sizeof(r->mac), (const uint8_t *)mac_label,
			   sizeof(mac_label) - 1, o->keys->admin,
			   sizeof(o->keys->admin));
	r->lease_ms = o->etcd_lease_ms < 2000 ? 2000 : o->etcd_lease_ms;
	if (asprintf(&r->state_key, "%s/state", pre) < 0)
		r->state_key = NULL;
	if (asprintf(&r->leader_key, "%s/leader", pre) < 0)
		r->leader_key = NULL;
	if (asprintf(&r->watch_prefix, "%s/", pre) < 0)
		r->watch_prefix = NULL;
	r->advertise = strdup(o->advertise ? o->advertise : "");
	snprintf(r->self_donor, sizeof(r->self_donor), "%s",
		 o->self_donor ? o->self_donor : "");
	if (!r->state_key || !r->leader_key || !r->watch_prefix ||
	    !r->advertise) {
		set_err(err, errlen, "registry: out of memory");
		return -ENOMEM;
	}
	return 0;
}

/* ---- lifecycle --------------------------------------------------------- */

static char *path_join(const char *dir, const char *name)
{
	char *p;

	if (asprintf(&p, "%s/%s", dir, name) < 0)
		return NULL;
	return p;
}

static void registry_free(struct memd_registry *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->ndonors; i++) {
		free(r->donor[i].usage);
	}
	if (r->tenant)
		memset(r->tenant, 0, r->tenant_cap * sizeof(*r->tenant));
	free(r->tenant);
	free(r->donor);
	free(r->grant);
	free(r->pub);
	free(r->shown_ids);
	free(r->dir);
	free(r->path);
	free(r->tmp_path);
	memd_etcd_close(r->etcd);
	free(r->state_key);
	free(r->leader_key);
	free(r->watch_prefix);
	free(r->advertise);
	sodium_memzero(r->seal, sizeof(r->seal));
	sodium_memzero(r->mac, sizeof(r->mac));
	memset(&r->keys, 0, sizeof(r->keys));
	free(r);
}

int memd_registry_open(const struct memd_registry_opts *o, uint64_t now_ms,
		       struct memd_registry **out, char *err, size_t errlen)
{
	struct memd_registry *r;
	struct stat st;
	int rc;

	*out = NULL;
	if (!o || (!o->state_dir && !o->etcd) || !o->keys || !o->slab_bytes ||
	    !o->report_ms || !o->ticket_ttl_ms || !o->pass_ttl_ms) {
		set_err(err, errlen,
			"registry: state_dir (or etcd), keys, slab size, "
			"report, ticket and pass intervals are required");
		return -EINVAL;
	}
	if (o->etcd) {
		if (auth_init()) {
			set_err(err, errlen,
				"registry: libsodium failed to start");
			return -EIO;
		}
		r = calloc(1, sizeof(*r));
		if (!r)
			goto nomem;
		r->dir = strdup("");
		r->path = strdup("");
		r->tmp_path = strdup("");
		if (!r->dir || !r->path || !r->tmp_path)
			goto nomem;
		rc = reg_etcd_attach(r, o, err, errlen);
		if (rc) {
			registry_free(r);
			return rc;
		}
		goto common;
	}
	if (stat(o->state_dir, &st) < 0) {
		rc = -errno;
		set_err(err, errlen, "%s: %s", o->state_dir, strerror(-rc));
		return rc;
	}
	if (!S_ISDIR(st.st_mode)) {
		set_err(err, errlen, "%s: not a directory", o->state_dir);
		return -ENOTDIR;
	}
	if (access(o->state_dir, R_OK | W_OK | X_OK) < 0) {
		rc = -errno;
		set_err(err, errlen, "%s: %s", o->state_dir, strerror(-rc));
		return rc;
	}
	if (auth_init()) {
		set_err(err, errlen, "registry: libsodium failed to start");
		return -EIO;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		goto nomem;
	r->dir = strdup(o->state_dir);
	r->path = path_join(o->state_dir, STATE_FILE);
	r->tmp_path = path_join(o->state_dir, STATE_TMP);
	if (!r->dir || !r->path || !r->tmp_path)
		goto nomem;
common:
	r->slab_bytes = o->slab_bytes;
	r->report_ms = o->report_ms;
	r->ticket_ttl_ms = o->ticket_ttl_ms;
	r->pass_ttl_ms = o->pass_ttl_ms;
	r->keys = *o->keys;
	r->next_tenant_id = 1;
	r->next_donor_id = 1;
	r->next_grant_id = 1;
	r->open_unix_ms = reg_unix_ms();
	do
		auth_random(&r->epoch, sizeof(r->epoch));
	while (!r->epoch);
	r->grant_next_deadline_ms = UINT64_MAX;
	/* etcd: the state is read when this registry is elected */
	rc = r->etcd ? 0 : reg_state_load(r, err, errlen);
	if (rc) {
		registry_free(r);
		return rc;
	}
	rc = pthread_mutex_init(&r->lock, NULL);
	if (rc) {
		registry_free(r);
		set_err(err, errlen, "registry: mutex: %s", strerror(rc));
		return -rc;
	}
	(void)now_ms;
	*out = r;
	return 0;
nomem:
	registry_free(r);
	set_err(err, errlen, "registry: out of memory");
	return -ENOMEM;
}

void memd_registry_close(struct memd_registry *r)
{
	if (!r)
		return;
	pthread_mutex_destroy(&r->lock);
	registry_free(r);
}

uint64_t memd_registry_epoch(struct memd_registry *r)
{
	uint64_t e;

	pthread_mutex_lock(&r->lock);
	e = r->epoch;
	pthread_mutex_unlock(&r->lock);
	return e;
}

/* ---- authentication ---------------------------------------------------- */

int memd_registry_tenant_key(struct memd_registry *r, const char *name,
			     uint32_t *id, uint8_t key[AUTH_KEY_LEN])
{
	struct tenant *t;
	int rc = -ENOENT;

	pthread_mutex_lock(&r->lock);
	t = name ? reg_tenant_by_name(r, name) : NULL;
	if (t) {
		if (id)
			*id = t->id;
		if (key)
			memcpy(key, t->key, AUTH_KEY_LEN);
		rc = 0;
	}
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int memd_registry_make_pass(struct memd_registry *r, uint32_t tenant_id,
			    uint64_t now_unix_ms, struct auth_pass *p)
{
	struct tenant *t;
	int rc = -ENOENT;

	memset(p, 0, sizeof(*p));
	pthread_mutex_lock(&r->lock);
	t = reg_tenant_by_id(r, tenant_id);
	if (t) {
		p->tenant_id = t->id;
		memcpy(p->tenant, t->name, sizeof(p->tenant));
		p->registry_epoch = r->epoch;
		p->expires_ms = now_unix_ms + r->pass_ttl_ms;
		auth_random(p->key, sizeof(p->key));
		auth_tenant_ident(t->key, p->ident);
		rc = 0;
	}
	pthread_mutex_unlock(&r->lock);
	return rc;
}

/* ---- snapshots --------------------------------------------------------- */

void memd_registry_foreach_tenant(
	struct memd_registry *r,
	void (*fn)(void *arg, const struct memd_registry_tenant_info *t),
	void *arg)
{
	struct memd_registry_tenant_info *s;
	size_t n;

	pthread_mutex_lock(&r->lock);
	n = r->ntenants;
	s = calloc(n ? n : 1, sizeof(*s));
	for (size_t i = 0; s && i < n; i++) {
		const struct tenant *t = &r->tenant[i];

		s[i].id = t->id;
		memcpy(s[i].name, t->name, sizeof(s[i].name));
		s[i].quota_bytes = t->quota_bytes;
		s[i].used_bytes = reg_mul_sat(t->used_slabs, r->slab_bytes);
		s[i].reserved_bytes =
			reg_mul_sat(t->reserved_slabs, r->slab_bytes);
	}
	pthread_mutex_unlock(&r->lock);
	for (size_t i = 0; s && i < n; i++)
		fn(arg, &s[i]);
	free(s);
}

void memd_registry_foreach_donor(
	struct memd_registry *r,
	void (*fn)(void *arg, const struct memd_registry_donor_info *d),
	void *arg)
{
	struct memd_registry_donor_info *s;
	size_t n;

	pthread_mutex_lock(&r->lock);
	n = r->ndonors;
	s = calloc(n ? n : 1, sizeof(*s));
	for (size_t i = 0; s && i < n; i++) {
		const struct donor *d = &r->donor[i];

		s[i].id = d->id;
		memcpy(s[i].name, d->name, sizeof(s[i].name));
		memcpy(s[i].addr, d->addr, sizeof(s[i].addr));
		s[i].state = reg_donor_state(d);
		memcpy(s[i].reason, d->reason, sizeof(s[i].reason));
		s[i].since_unix_ms = d->since_unix_ms;
		s[i].epoch = d->epoch;
		s[i].slabs_total = d->slabs_total;
		s[i].slabs_free = d->slabs_free;
		s[i].slabs_leased = d->slabs_leased;
		s[i].bytes_read = d->bytes_read;
		s[i].bytes_written = d->bytes_written;
	}
	pthread_mutex_unlock(&r->lock);
	for (size_t i = 0; s && i < n; i++)
		fn(arg, &s[i]);
	free(s);
}
