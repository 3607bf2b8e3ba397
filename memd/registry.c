// SPDX-License-Identifier: MIT
/*
 * memd/registry.c - the pool's directory (see registry.h, docs/cluster.md):
 * tenants and their quotas, donors and their states, placement of slabs
 * over donors, the admin requests, and STATE_DIR/registry.json.
 *
 * Threads: none of its own. memd-ctl joins donors, takes their reports,
 * places and answers admin requests; the metrics thread reads snapshots;
 * a timer calls tick. Everything goes through the one mutex; foreach
 * copies under it and calls back without it (so a callback may call the
 * registry).
 *
 * Durable vs soft state: tenants (id, name, key, quota), donor identities
 * (id, name, drain flag) and the id counters are durable; every change to
 * them is first written whole to registry.json (tmp, fsync, rename, fsync
 * of the directory) and only then applied here, so a failed write leaves
 * memory as it was. Everything else (donor incarnations, reports, grants)
 * is soft and rebuilt from the donors after a restart.
 *
 * Invariants (under the lock):
 * - A donor counts (its reported usage is part of its tenants' usage) iff
 *   it is up (up or draining); a donor marked down has no usage entries.
 *   tenant.used_slabs is the sum of the counting donors' entries for it.
 * - Every live grant belongs to its donor's current incarnation;
 *   donor.reserved_slabs and tenant.reserved_slabs are the sums of the
 *   live grants' nslabs on that donor / for that tenant.
 * - Ids are never reused: next_tenant_id and next_donor_id only grow, and
 *   are durable, so a stale report naming a removed tenant attaches to no
 *   one.
 */
#include "memd/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "memd/log.h"

#define STATE_FILE "registry.json"
#define STATE_TMP "registry.json.tmp"
#define STATE_VERSION 1
#define STATE_MAX_BYTES (64u << 20) /* a bigger registry.json is corrupt */
#define MAX_DONORS 1024
#define MAX_TENANTS 65536
#define MISSED_REPORTS 3
/*
 * A grant stays reserved past its ticket's expiry by the skew donors allow
 * when they check expires_ms against their own clocks (60 s) plus one
 * report interval (the redeeming donor's report is on its way): until then
 * the ticket may still be redeemed and show up as usage, and dropping the
 * reservation earlier could let the tenant overshoot its quota.
 */
#define TICKET_SKEW_MS 60000u
/*
 * An etcd registry that takes over answers EAGAIN instead of ENOSPC for
 * this long plus 3 report intervals: a donor whose registry died tries
 * the next one 100 ms later, every 100 ms while only standbys answer,
 * and at most 2 s apart when none answers at all (memd/donor.c); it
 * reports at once after it joined. The margin is for loaded hosts.
 */
#define TAKEOVER_WARM_MS 4000u

struct tenant {
	uint32_t id;
	char name[WIRE_NAME_MAX];
	uint8_t key[AUTH_KEY_LEN];
	uint64_t quota_bytes;
	uint64_t used_slabs;	 /* sum of the counting donors' reports */
	uint64_t reserved_slabs; /* sum of live grants */
	uint64_t kv_slabs;	 /* of used_slabs, KV stores' (same reports) */
	/* the capacity reports' cost model for this tenant (tenant-set;
	 * docs/capacity.md); 0: the donors' kv_prefill_tokens_per_s and
	 * kv_bytes_per_token */
	uint32_t prefill_tokens_per_s;
	uint64_t bytes_per_token;
};

/* bounds of a tenant's cost model: those of memd.conf's keys */
#define TENANT_TPS_MAX 1000000000u
#define TENANT_BPT_MAX (1ull << 30)

struct donor {
	/* durable */
	uint32_t id;
	char name[WIRE_NAME_MAX];
	bool draining;
	/* soft: the current incarnation */
	bool joined;   /* joined since this registry started */
	bool up;       /* joined and reporting (draining or not) */
	bool reported; /* this incarnation reported since it (re)joined */
	char reason[128];
	uint64_t since_unix_ms;
	uint64_t epoch;
	char addr[WIRE_HOSTPORT_MAX];
	uint16_t nnodes;
	int32_t node[WIRE_MAX_NODES];
	uint32_t slabs_total, slabs_free, slabs_leased;
	uint64_t bytes_read, bytes_written;
	uint64_t last_report_ms;
	uint64_t reports; /* usage reports taken since this registry started */
	uint64_t reserved_slabs;
	uint32_t nusage;
	struct wire_tenant_usage *usage;
};

struct grant {
	uint64_t id;
	uint32_t tenant_id;
	uint32_t donor_id;
	uint32_t nslabs;
	uint64_t deadline_ms; /* monotonic: dropped unredeemed after this */
};

struct memd_registry {
	pthread_mutex_t lock;
	char *dir, *path, *tmp_path;
	uint64_t slab_bytes;
	uint32_t report_ms, ticket_ttl_ms, pass_ttl_ms;
	struct auth_cluster_keys keys;
	uint64_t epoch;
	uint64_t open_unix_ms;
	uint32_t next_tenant_id, next_donor_id;
	struct tenant *tenant;
	size_t ntenants, tenant_cap;
	struct donor *donor;
	size_t ndonors, donor_cap;
	struct grant *grant;
	size_t ngrants, grant_cap;
	uint64_t grant_next_deadline_ms; /* no grant expires before this */
	uint64_t next_grant_id;
	/* The etcd backend (NULL: registry.json). etcd, the keys, seal,
	 * lease_ms and advertise are set at open; lease_id is memd-etcd's;
	 * the rest is under the lock. */
	struct memd_etcd *etcd;
	char *state_key, *leader_key, *advertise;
	char *watch_prefix;	    /* "PREFIX/": memd-etcdw watches under it */
	bool kick;		    /* a watch event: memd-etcd steps now */
	uint8_t seal[AUTH_KEY_LEN]; /* seals tenant keys in etcd */
	uint8_t mac[AUTH_KEY_LEN];  /* authenticates PREFIX/state */
	uint32_t lease_ms;
	int64_t lease_id;
	int64_t state_rev; /* mod_revision of the state we hold; 0: none */
	bool leader;
	bool resign; /* stepped down: memd-etcd gives up the lease */
	uint64_t serve_until_ms; /* monotonic: serves until then */
	uint64_t warm_until_ms;	 /* took over: donors rejoin until then */
	char leader_addr[WIRE_HOSTPORT_MAX]; /* the last leader seen */
	char leader_donor[WIRE_NAME_MAX];    /* its own donor part */
	/* took over from leader_addr: probe it (memd-etcd), and until the
	 * probe finds it gone, wait for leader_donor like any donor */
	char old_leader_addr[WIRE_HOSTPORT_MAX];
	bool old_leader_gone;
	char self_donor[WIRE_NAME_MAX];
	char etcd_err[160]; /* the last etcd failure */
	/* elected but refused the state: no campaign before this (a watch
	 * kick does not hurry it), and its reason, logged at err once */
	uint64_t campaign_after_ms;
	char load_err[768];
};

/* ---- small helpers ---------------------------------------------------- */

static uint64_t unix_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* memd_errf() (memd/log.h), by the name this file's callers use */
#define set_err memd_errf

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
	uint64_t p;

	if (__builtin_mul_overflow(a, b, &p))
		return UINT64_MAX;
	return p;
}

static struct tenant *tenant_by_id(struct memd_registry *r, uint32_t id)
{
	for (size_t i = 0; i < r->ntenants; i++)
		if (r->tenant[i].id == id)
			return &r->tenant[i];
	return NULL;
}

static struct tenant *tenant_by_name(struct memd_registry *r, const char *name)
{
	for (size_t i = 0; i < r->ntenants; i++)
		if (!strcmp(r->tenant[i].name, name))
			return &r->tenant[i];
	return NULL;
}

static struct donor *donor_by_id(struct memd_registry *r, uint32_t id)
{
	for (size_t i = 0; i < r->ndonors; i++)
		if (r->donor[i].id == id)
			return &r->donor[i];
	return NULL;
}

static struct donor *donor_by_name(struct memd_registry *r, const char *name)
{
	for (size_t i = 0; i < r->ndonors; i++)
		if (!strcmp(r->donor[i].name, name))
			return &r->donor[i];
	return NULL;
}

/* Grows *arr to hold at least want elements. 0 or -ENOMEM. */
static int grow(void **arr, size_t *cap, size_t want, size_t elem)
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

static enum memd_donor_state donor_state(const struct donor *d)
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

static void donor_set_reason(struct donor *d, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void donor_set_reason(struct donor *d, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(d->reason, sizeof(d->reason), fmt, ap);
	va_end(ap);
	d->since_unix_ms = unix_ms();
}

/* ---- soft state: usage and grants ------------------------------------- */

/* Adds (sign > 0) or removes d's reported usage from its tenants' sums. */
static void usage_apply_locked(struct memd_registry *r, const struct donor *d,
			       int sign)
{
	for (uint32_t i = 0; i < d->nusage; i++) {
		struct tenant *t = tenant_by_id(r, d->usage[i].tenant_id);

		if (!t)
			continue;
		if (sign > 0) {
			t->used_slabs += d->usage[i].slabs;
			t->kv_slabs += d->usage[i].kv_slabs;
		} else {
			t->used_slabs -= d->usage[i].slabs;
			t->kv_slabs -= d->usage[i].kv_slabs;
		}
	}
}

static void usage_clear_locked(struct memd_registry *r, struct donor *d)
{
	if (d->up)
		usage_apply_locked(r, d, -1);
	free(d->usage);
	d->usage = NULL;
	d->nusage = 0;
}

/* The up donors that are not draining, in order of id: d's rank among
 * them (-1: d is not one) and their number. */
static int kv_rank_locked(const struct memd_registry *r, const struct donor *d,
			  uint32_t *n)
{
	int rank = -1;

	*n = 0;
	for (size_t i = 0; i < r->ndonors; i++) {
		const struct donor *x = &r->donor[i];

		if (!x->up || x->draining)
			continue;
		if (x == d)
			rank = (int)*n;
		(*n)++;
	}
	return rank;
}

/* The KV slabs tenant holds on draining donors (they take no new ones). */
static uint64_t kv_draining_locked(const struct memd_registry *r,
				   uint32_t tenant)
{
	uint64_t n = 0;

	for (size_t i = 0; i < r->ndonors; i++) {
		const struct donor *x = &r->donor[i];

		if (!x->up || !x->draining)
			continue;
		for (uint32_t k = 0; k < x->nusage; k++)
			if (x->usage[k].tenant_id == tenant)
				n += x->usage[k].kv_slabs;
	}
	return n;
}

/*
 * The KV allowances for d's report, into ok->kv[] (cluster.md, "KV memory
 * and quotas"): one for each tenant (the first WIRE_MAX_TENANTS by id),
 * so a donor knows its allowance before a tenant's first KV put. What the
 * tenant's quota leaves for KV memory, after its other usage and its
 * reserved grants, and after its KV slabs on draining donors,
 *   kv = quota - (used - kv_used) - reserved - kv_on_draining
 * is split evenly over the up donors that are not draining (the first
 * kv % n of them, by id, get one slab more): rendezvous hashing spreads a
 * tenant's keys evenly, so an even split starves no donor. A draining
 * donor keeps what it holds. A donor holding more than its allowance
 * evicts the tenant's entries until it does not (memd_kv_trim).
 */
static void kv_allowances_locked(struct memd_registry *r, const struct donor *d,
				 struct wire_donor_report_ok *ok)
{
	uint32_t n, nd = 0;
	int rank = kv_rank_locked(r, d, &n);
	bool draining = false;

	for (size_t i = 0; i < r->ndonors && !draining; i++)
		draining = r->donor[i].up && r->donor[i].draining;
	ok->nkv = 0;
	for (size_t i = 0; i < r->ntenants && nd < WIRE_MAX_TENANTS; i++) {
		const struct tenant *t = &r->tenant[i];
		uint64_t quota = t->quota_bytes / r->slab_bytes, other, kv,
			 cap = 0;

		other = t->used_slabs - t->kv_slabs + t->reserved_slabs +
			(draining ? kv_draining_locked(r, t->id) : 0);
		kv = quota > other ? quota - other : 0;
		if (rank < 0) { /* draining: what it holds, no more */
			for (uint32_t k = 0; k < d->nusage; k++)
				if (d->usage[k].tenant_id == t->id)
					cap = d->usage[k].kv_slabs;
		} else {
			cap = kv / n + ((uint64_t)rank < kv % n ? 1 : 0);
		}
		ok->kv[nd].tenant_id = t->id;
		ok->kv[nd].kv_slabs_max =
			cap > UINT32_MAX ? UINT32_MAX : (uint32_t)cap;
		nd++;
	}
	ok->nkv = (uint16_t)nd;
}

static void grant_drop_locked(struct memd_registry *r, size_t i)
{
	struct grant *g = &r->grant[i];
	struct tenant *t = tenant_by_id(r, g->tenant_id);
	struct donor *d = donor_by_id(r, g->donor_id);

	if (t)
		t->reserved_slabs -= g->nslabs;
	if (d)
		d->reserved_slabs -= g->nslabs;
	r->grant[i] = r->grant[--r->ngrants];
}

static void donor_grants_drop_locked(struct memd_registry *r, uint32_t id)
{
	for (size_t i = 0; i < r->ngrants;)
		if (r->grant[i].donor_id == id)
			grant_drop_locked(r, i);
		else
			i++;
}

static void donor_down_locked(struct memd_registry *r, struct donor *d,
			      const char *why)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	usage_clear_locked(r, d);
	d->up = false;
	d->reported = false;
	donor_set_reason(d, "%s", why);
	memd_log(LOG_WARNING,
		 "registry: donor down name=%s id=%u epoch=%016" PRIx64
		 " reason=\"%s\"",
		 memd_log_quote(d->name, logq, sizeof(logq)), d->id, d->epoch,
		 d->reason);
}

/* Liveness and grant expiry as of now_ms; every entry point runs it, so
 * what now_ms says decides, whether or not tick ran. */
static void expire_locked(struct memd_registry *r, uint64_t now_ms)
{
	uint64_t limit = (uint64_t)MISSED_REPORTS * r->report_ms;

	for (size_t i = 0; i < r->ndonors; i++) {
		struct donor *d = &r->donor[i];
		char why[64];

		if (!d->up || now_ms <= d->last_report_ms ||
		    now_ms - d->last_report_ms <= limit)
			continue;
		snprintf(why, sizeof(why), "no report for %" PRIu64 " ms",
			 now_ms - d->last_report_ms);
		donor_down_locked(r, d, why);
	}
	/* Every call comes here: scan the grants only when the earliest
	 * deadline has passed (a full scan per call cost half of memd's CPU
	 * with 49k grants outstanding: docs/bench/registry.md). */
	if (now_ms < r->grant_next_deadline_ms)
		return;
	r->grant_next_deadline_ms = UINT64_MAX;
	for (size_t i = 0; i < r->ngrants;)
		if (r->grant[i].deadline_ms <= now_ms) {
			grant_drop_locked(r, i);
		} else {
			if (r->grant[i].deadline_ms < r->grant_next_deadline_ms)
				r->grant_next_deadline_ms =
					r->grant[i].deadline_ms;
			i++;
		}
}

/* ---- durable state ----------------------------------------------------- */

/* A change to the durable state, applied to the JSON of the current one. */
struct state_edit {
	const struct tenant *tenant_put; /* added, or replaces the same id */
	uint32_t tenant_del;		 /* id, or 0 */
	const struct donor *donor_put;	 /* added, or replaces the same id */
	uint32_t next_tenant_id, next_donor_id;
};

static json_t *tenant_state_json(const struct tenant *t)
{
	char hex[2 * AUTH_KEY_LEN + 1];
	json_t *o;

	auth_hex(t->key, AUTH_KEY_LEN, hex);
	o = json_pack("{s:I, s:s, s:s, s:I}", "id", (json_int_t)t->id, "name",
		      t->name, "key", hex, "quota_bytes",
		      (json_int_t)t->quota_bytes);
	memset(hex, 0, sizeof(hex));
	/* only when set: a file without them is what older memds wrote */
	if (o && t->prefill_tokens_per_s &&
	    json_object_set_new(o, "prefill_tokens_per_s",
				json_integer(t->prefill_tokens_per_s))) {
		json_decref(o);
		return NULL;
	}
	if (o && t->bytes_per_token &&
	    json_object_set_new(o, "bytes_per_token",
				json_integer((json_int_t)t->bytes_per_token))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *donor_state_json(const struct donor *d)
{
	return json_pack("{s:I, s:s, s:b}", "id", (json_int_t)d->id, "name",
			 d->name, "draining", (int)d->draining);
}

static json_t *state_json_locked(struct memd_registry *r,
				 const struct state_edit *e)
{
	json_t *doc, *ts, *ds;
	bool put = false;
	int rc = 0;

	doc = json_pack("{s:i, s:I, s:I, s:[], s:[]}", "version", STATE_VERSION,
			"next_tenant_id", (json_int_t)e->next_tenant_id,
			"next_donor_id", (json_int_t)e->next_donor_id,
			"tenants", "donors");
	if (!doc)
		return NULL;
	ts = json_object_get(doc, "tenants");
	ds = json_object_get(doc, "donors");
	for (size_t i = 0; i < r->ntenants && !rc; i++) {
		const struct tenant *t = &r->tenant[i];

		if (t->id == e->tenant_del)
			continue;
		if (e->tenant_put && e->tenant_put->id == t->id) {
			t = e->tenant_put;
			put = true;
		}
		rc = json_array_append_new(ts, tenant_state_json(t));
	}
	if (!rc && e->tenant_put && !put)
		rc = json_array_append_new(ts,
					   tenant_state_json(e->tenant_put));
	put = false;
	for (size_t i = 0; i < r->ndonors && !rc; i++) {
		const struct donor *d = &r->donor[i];

		if (e->donor_put && e->donor_put->id == d->id) {
			d = e->donor_put;
			put = true;
		}
		rc = json_array_append_new(ds, donor_state_json(d));
	}
	if (!rc && e->donor_put && !put)
		rc = json_array_append_new(ds, donor_state_json(e->donor_put));
	if (rc) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static struct state_edit state_now(const struct memd_registry *r)
{
	struct state_edit e = { .next_tenant_id = r->next_tenant_id,
				.next_donor_id = r->next_donor_id };
	return e;
}

/*
 * Writes the durable state as the current one changed by e: the whole
 * file to registry.json.tmp (0600), fsync, rename over registry.json,
 * fsync of the directory. 0, or -EIO (-ENOMEM) with err naming the file
 * and the step that failed; *renamed says whether the new file had
 * replaced registry.json before the failure (only the directory fsync
 * comes after that).
 */
static int state_file_put(struct memd_registry *r, const struct state_edit *e,
			  bool *renamed, char *err, size_t errlen)
{
	const char *step = "encode";
	json_t *doc = state_json_locked(r, e);
	char *text = NULL;
	int fd = -1, dfd = -1, rc = 0;

	*renamed = false;
	if (!doc || !(text = json_dumps(doc, JSON_INDENT(2)))) {
		json_decref(doc);
		set_err(err, errlen, "%s: out of memory", r->path);
		return -ENOMEM;
	}
	json_decref(doc);
	fd = open(r->tmp_path,
		  O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		rc = -errno;
		step = "open";
		goto fail;
	}
	step = "write";
	if (fchmod(fd, 0600) < 0 || (rc = write_all(fd, text, strlen(text))) ||
	    (rc = write_all(fd, "\n", 1))) {
		rc = rc ? rc : -errno;
		goto fail;
	}
	step = "fsync";
	if (fsync(fd) < 0) {
		rc = -errno;
		goto fail;
	}
	step = "close";
	rc = close(fd);
	fd = -1;
	if (rc < 0) {
		rc = -errno;
		goto fail;
	}
	step = "rename";
	if (rename(r->tmp_path, r->path) < 0) {
		rc = -errno;
		goto fail;
	}
	*renamed = true;
	step = "fsync of the directory";
	dfd = open(r->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) < 0) {
		rc = -errno;
		if (dfd >= 0)
			close(dfd);
		set_err(err, errlen, "%s: %s: %s", r->dir, step, strerror(-rc));
		memset(text, 0, strlen(text));
		free(text);
		return -EIO;
	}
	close(dfd);
	memset(text, 0, strlen(text)); /* it holds tenant keys */
	free(text);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	unlink(r->tmp_path);
	set_err(err, errlen, "%s: %s: %s", r->tmp_path, step, strerror(-rc));
	memset(text, 0, strlen(text));
	free(text);
	return -EIO;
}

/*
 * Writes the durable state as the current one changed by e. 0: written
 * and synced, apply e. -EIO (-ENOMEM) with err: nothing may be applied,
 * and registry.json holds what it held before, so that a restart reads
 * what callers were told. When only the directory fsync failed, the new
 * file is already in place: the old state is written back over it (its
 * own directory fsync may fail too; the file then holds the old state,
 * which is what callers see). Should even that write fail before its
 * rename, the file keeps the new state: e is applied (0), with an error
 * logged that a crash may lose it.
 */
static int etcd_state_put_locked(struct memd_registry *r,
				 const struct state_edit *e, char *err,
				 size_t errlen);

static int state_write_locked(struct memd_registry *r,
			      const struct state_edit *e, char *err,
			      size_t errlen)
{
	struct state_edit now = state_now(r);
	char err2[256];
	bool renamed, back;
	int rc;

	if (r->etcd)
		return etcd_state_put_locked(r, e, err, errlen);
	rc = state_file_put(r, e, &renamed, err, errlen);

	if (!rc || !renamed)
		return rc;
	if (state_file_put(r, &now, &back, err2, sizeof(err2)) && !back) {
		memd_log(LOG_ERR,
			 "registry: the change is applied but may not survive "
			 "a crash: %s; undoing it failed too: %s",
			 err && errlen ? err : "", err2);
		return 0;
	}
	memd_log(LOG_WARNING,
		 "registry: %s: the change was undone (registry.json holds "
		 "the state before it)",
		 err && errlen ? err : "");
	return -EIO;
}

static int state_write_logged(struct memd_registry *r,
			      const struct state_edit *e, char *err,
			      size_t errlen)
{
	int rc = state_write_locked(r, e, err, errlen);

	if (rc)
		memd_log(LOG_ERR, "registry: state not saved: %s",
			 err && errlen ? err : "");
	return rc;
}

/* Reads an integer member in [min, max]. 0, or -EINVAL with err. */
static int json_get_uint(json_t *o, const char *key, uint64_t min, uint64_t max,
			 uint64_t *v, const char *where, char *err,
			 size_t errlen)
{
	json_t *x = json_object_get(o, key);
	json_int_t i;

	if (!x) {
		set_err(err, errlen, "%smissing field '%s'", where, key);
		return -EINVAL;
	}
	if (!json_is_integer(x)) {
		set_err(err, errlen, "%sfield '%s' is not an integer", where,
			key);
		return -EINVAL;
	}
	i = json_integer_value(x);
	if (i < 0 || (uint64_t)i < min || (uint64_t)i > max) {
		set_err(err, errlen,
			"%sfield '%s' is %lld, not %" PRIu64 "..%" PRIu64,
			where, key, (long long)i, min, max);
		return -EINVAL;
	}
	*v = (uint64_t)i;
	return 0;
}

static int json_get_name(json_t *o, const char *key, char out[WIRE_NAME_MAX],
			 const char *where, char *err, size_t errlen)
{
	json_t *x = json_object_get(o, key);
	const char *s;

	if (!x) {
		set_err(err, errlen, "%smissing field '%s'", where, key);
		return -EINVAL;
	}
	if (!json_is_string(x)) {
		set_err(err, errlen, "%sfield '%s' is not a string", where,
			key);
		return -EINVAL;
	}
	s = json_string_value(x);
	if (strlen(s) != json_string_length(x) || !wire_name_is_valid(s)) {
		set_err(err, errlen,
			"%sfield '%s': '%.64s' is not a name "
			"([A-Za-z0-9_.-], 1 to %d characters)",
			where, key, s, WIRE_NAME_MAX - 1);
		return -EINVAL;
	}
	strcpy(out, s);
	return 0;
}

static int json_get_bool(json_t *o, const char *key, bool *v, const char *where,
			 char *err, size_t errlen)
{
	json_t *x = json_object_get(o, key);

	if (!x) {
		set_err(err, errlen, "%smissing field '%s'", where, key);
		return -EINVAL;
	}
	if (!json_is_boolean(x)) {
		set_err(err, errlen, "%sfield '%s' is not true or false", where,
			key);
		return -EINVAL;
	}
	*v = json_is_true(x);
	return 0;
}

/* Every member of o is one of the NULL-terminated keys. */
static int json_only(json_t *o, const char *const *keys, const char *where,
		     char *err, size_t errlen)
{
	const char *k;
	json_t *v;

	json_object_foreach(o, k, v)
	{
		size_t i;

		for (i = 0; keys[i] && strcmp(keys[i], k); i++)
			;
		if (!keys[i]) {
			set_err(err, errlen, "%sunknown field '%.64s'", where,
				k);
			return -EINVAL;
		}
	}
	return 0;
}

static int load_tenant(struct memd_registry *r, json_t *o, size_t idx,
		       char *err, size_t errlen)
{
	static const char *const keys[] = { "id",
					    "name",
					    "key",
					    "quota_bytes",
					    "prefill_tokens_per_s",
					    "bytes_per_token",
					    NULL };
	struct tenant t = { 0 };
	char where[48];
	json_t *k;
	uint64_t v;

	snprintf(where, sizeof(where), "tenants[%zu]: ", idx);
	if (!json_is_object(o)) {
		set_err(err, errlen, "%snot an object", where);
		return -EINVAL;
	}
	if (json_only(o, keys, where, err, errlen) ||
	    json_get_uint(o, "id", 1, r->next_tenant_id - 1, &v, where, err,
			  errlen))
		return -EINVAL;
	t.id = (uint32_t)v;
	if (json_get_name(o, "name", t.name, where, err, errlen) ||
	    json_get_uint(o, "quota_bytes", 0, INT64_MAX, &t.quota_bytes, where,
			  err, errlen))
		return -EINVAL;
	if (json_object_get(o, "prefill_tokens_per_s")) {
		if (json_get_uint(o, "prefill_tokens_per_s", 1, TENANT_TPS_MAX,
				  &v, where, err, errlen))
			return -EINVAL;
		t.prefill_tokens_per_s = (uint32_t)v;
	}
	if (json_object_get(o, "bytes_per_token") &&
	    json_get_uint(o, "bytes_per_token", 1, TENANT_BPT_MAX,
			  &t.bytes_per_token, where, err, errlen))
		return -EINVAL;
	k = json_object_get(o, "key");
	if (!json_is_string(k) || json_string_length(k) != 2 * AUTH_KEY_LEN ||
	    auth_unhex(json_string_value(k), t.key, AUTH_KEY_LEN) !=
		    AUTH_KEY_LEN) {
		set_err(err, errlen, "%sfield 'key' is not %d hex digits",
			where, 2 * AUTH_KEY_LEN);
		return -EINVAL;
	}
	if (tenant_by_id(r, t.id) || tenant_by_name(r, t.name)) {
		set_err(err, errlen, "%sid %u or name '%s' appears twice",
			where, t.id, t.name);
		return -EINVAL;
	}
	if (r->ntenants >= MAX_TENANTS) {
		set_err(err, errlen, "more than %d tenants", MAX_TENANTS);
		return -EINVAL;
	}
	if (grow((void **)&r->tenant, &r->tenant_cap, r->ntenants + 1,
		 sizeof(t))) {
		set_err(err, errlen, "out of memory");
		return -ENOMEM;
	}
	r->tenant[r->ntenants++] = t;
	memset(&t, 0, sizeof(t));
	return 0;
}

static int load_donor(struct memd_registry *r, json_t *o, size_t idx, char *err,
		      size_t errlen)
{
	static const char *const keys[] = { "id", "name", "draining", NULL };
	struct donor d = { 0 };
	char where[48];
	uint64_t v;

	snprintf(where, sizeof(where), "donors[%zu]: ", idx);
	if (!json_is_object(o)) {
		set_err(err, errlen, "%snot an object", where);
		return -EINVAL;
	}
	if (json_only(o, keys, where, err, errlen) ||
	    json_get_uint(o, "id", 1, r->next_donor_id - 1, &v, where, err,
			  errlen) ||
	    json_get_name(o, "name", d.name, where, err, errlen) ||
	    json_get_bool(o, "draining", &d.draining, where, err, errlen))
		return -EINVAL;
	d.id = (uint32_t)v;
	if (donor_by_id(r, d.id) || donor_by_name(r, d.name)) {
		set_err(err, errlen, "%sid %u or name '%s' appears twice",
			where, d.id, d.name);
		return -EINVAL;
	}
	if (r->ndonors >= MAX_DONORS) {
		set_err(err, errlen, "more than %d donors", MAX_DONORS);
		return -EINVAL;
	}
	if (grow((void **)&r->donor, &r->donor_cap, r->ndonors + 1,
		 sizeof(d))) {
		set_err(err, errlen, "out of memory");
		return -ENOMEM;
	}
	snprintf(d.reason, sizeof(d.reason),
		 "not joined since the registry started");
	d.since_unix_ms = r->open_unix_ms;
	r->donor[r->ndonors++] = d;
	return 0;
}

static int load_doc(struct memd_registry *r, json_t *doc, char *err,
		    size_t errlen)
{
	static const char *const keys[] = { "version",	     "next_tenant_id",
					    "next_donor_id", "tenants",
					    "donors",	     NULL };
	json_t *ts, *ds, *x;
	uint64_t v;
	size_t i;
	int rc;

	if (!json_is_object(doc)) {
		set_err(err, errlen, "not a JSON object");
		return -EINVAL;
	}
	if (json_only(doc, keys, "", err, errlen))
		return -EINVAL;
	x = json_object_get(doc, "version");
	if (!json_is_integer(x) || json_integer_value(x) != STATE_VERSION) {
		set_err(err, errlen, "version is not %d (this memd reads %d)",
			STATE_VERSION, STATE_VERSION);
		return -EINVAL;
	}
	if (json_get_uint(doc, "next_tenant_id", 1, UINT32_MAX, &v, "", err,
			  errlen))
		return -EINVAL;
	r->next_tenant_id = (uint32_t)v;
	if (json_get_uint(doc, "next_donor_id", 1, UINT32_MAX, &v, "", err,
			  errlen))
		return -EINVAL;
	r->next_donor_id = (uint32_t)v;
	ts = json_object_get(doc, "tenants");
	ds = json_object_get(doc, "donors");
	if (!json_is_array(ts) || !json_is_array(ds)) {
		set_err(err, errlen, "'tenants' or 'donors' is not an array");
		return -EINVAL;
	}
	json_array_foreach(ts, i, x)
	{
		if ((rc = load_tenant(r, x, i, err, errlen)))
			return rc;
	}
	json_array_foreach(ds, i, x)
	{
		if ((rc = load_donor(r, x, i, err, errlen)))
			return rc;
	}
	return 0;
}

/* Loads registry.json; a missing one is an empty registry. */
static int state_load(struct memd_registry *r, char *err, size_t errlen)
{
	char msg[200];
	json_error_t je;
	struct stat st;
	json_t *doc;
	char *buf;
	size_t got = 0;
	int fd, rc;

	fd = open(r->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		rc = -errno;
		set_err(err, errlen, "%s: %s", r->path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size > STATE_MAX_BYTES) {
		close(fd);
		set_err(err, errlen,
			"%s: not a regular file of at most %u bytes", r->path,
			STATE_MAX_BYTES);
		return -EINVAL;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		set_err(err, errlen, "%s: out of memory", r->path);
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			close(fd);
			free(buf);
			set_err(err, errlen, "%s: read: %s", r->path,
				strerror(-rc));
			return rc;
		}
		got += (size_t)n;
	}
	close(fd);
	doc = json_loadb(buf, got, JSON_REJECT_DUPLICATES, &je);
	memset(buf, 0, got);
	free(buf);
	if (!doc) {
		set_err(err, errlen, "%s: corrupt: line %d: %s", r->path,
			je.line, je.text);
		return -EINVAL;
	}
	rc = load_doc(r, doc, msg, sizeof(msg));
	json_decref(doc);
	if (rc) {
		set_err(err, errlen, "%s: %s%s", r->path,
			rc == -EINVAL ? "corrupt: " : "", msg);
		return rc;
	}
	return 0;
}

/* ---- the etcd backend -------------------------------------------------- */

/*
 * PREFIX/state holds what registry.json holds, but each tenant's "key"
 * is "key_sealed": hex of auth_seal(seal, key), the seal key derived from
 * the cluster secret (docs/cluster.md, "What etcd learns"). seal true:
 * key -> key_sealed; false: back. 0, or -EINVAL with err.
 */
static int doc_seal(struct memd_registry *r, json_t *doc, bool seal, char *err,
		    size_t errlen)
{
	json_t *ts = json_object_get(doc, "tenants"), *t;
	size_t i;

	json_array_foreach(ts, i, t)
	{
		uint8_t key[AUTH_KEY_LEN],
			box[AUTH_SEAL_OVERHEAD + AUTH_KEY_LEN];
		char hex[2 * sizeof(box) + 1];
		json_t *x = json_object_get(t, seal ? "key" : "key_sealed");
		int n = -EINVAL;

		if (json_is_string(x) && seal)
			n = auth_unhex(json_string_value(x), key, sizeof(key));
		else if (json_is_string(x))
			n = auth_unhex(json_string_value(x), box, sizeof(box));
		if (n == (seal ? AUTH_KEY_LEN : (int)sizeof(box))) {
			if (seal) {
				n = auth_seal(r->seal, key, sizeof(key), box,
					      sizeof(box));
				auth_hex(box, sizeof(box), hex);
			} else {
				n = auth_open(r->seal, box, sizeof(box), key,
					      sizeof(key));
				auth_hex(key, sizeof(key), hex);
			}
		}
		if (n < 0 ||
		    json_object_set_new(t, seal ? "key_sealed" : "key",
					json_string(hex)) ||
		    json_object_del(t, seal ? "key" : "key_sealed")) {
			sodium_memzero(key, sizeof(key));
			sodium_memzero(hex, sizeof(hex));
			set_err(err, errlen, "tenants[%zu]: %s", i,
				seal ? "cannot seal its key"
				     : "'key_sealed' does not open with this "
				       "cluster's secret");
			return -EINVAL;
		}
		sodium_memzero(key, sizeof(key));
		sodium_memzero(hex, sizeof(hex));
	}
	return 0;
}

/*
 * The MAC of PREFIX/state (docs/cluster.md, "What etcd learns"): BLAKE2b
 * keyed with the state MAC key (derived from the cluster secret) over
 * "tidepool registry state mac v1", the length (u32, little endian) and
 * bytes of the etcd key, and the document without "mac" as jansson
 * writes it compact with sorted keys (tenant keys sealed). So it covers
 * every tenant's id, name, quota, cost model and sealed key together,
 * the donors, the counters, and which pool (prefix) it is for: a writer
 * to etcd cannot move a sealed key to another tenant, change an id or a
 * quota, or copy another prefix's state. 0, or -ENOMEM.
 */
static int doc_mac(const struct memd_registry *r, json_t *doc,
		   uint8_t out[AUTH_KEY_LEN])
{
	static const char label[] = "tidepool registry state mac v1";
	crypto_generichash_state st;
	uint32_t klen = (uint32_t)strlen(r->state_key);
	uint8_t le[4] = { (uint8_t)klen, (uint8_t)(klen >> 8),
			  (uint8_t)(klen >> 16), (uint8_t)(klen >> 24) };
	char *canon = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);

	if (!canon)
		return -ENOMEM;
	crypto_generichash_init(&st, r->mac, sizeof(r->mac), AUTH_KEY_LEN);
	crypto_generichash_update(&st, (const uint8_t *)label,
				  sizeof(label) - 1);
	crypto_generichash_update(&st, le, sizeof(le));
	crypto_generichash_update(&st, (const uint8_t *)r->state_key, klen);
	crypto_generichash_update(&st, (const uint8_t *)canon, strlen(canon));
	crypto_generichash_final(&st, out, AUTH_KEY_LEN);
	free(canon);
	return 0;
}

/*
 * Checks and removes doc's "mac". 0: it verifies; -ENOENT: there is none
 * (state of a memd before the MAC, or written by hand); -EPERM: it does
 * not verify (or is malformed), err says so.
 */
static int doc_verify(const struct memd_registry *r, json_t *doc, char *err,
		      size_t errlen)
{
	uint8_t got[AUTH_KEY_LEN], want[AUTH_KEY_LEN];
	json_t *x = json_object_get(doc, "mac");
	int bad;

	if (!x)
		return -ENOENT;
	bad = !json_is_string(x) || auth_unhex(json_string_value(x), got,
					       sizeof(got)) != (int)sizeof(got);
	json_object_del(doc, "mac");
	if (bad) {
		set_err(err, errlen, "its \"mac\" is not %d hex digits",
			2 * AUTH_KEY_LEN);
		return -EPERM;
	}
	if (doc_mac(r, doc, want)) {
		set_err(err, errlen, "out of memory");
		return -EPERM;
	}
	if (sodium_memcmp(got, want, sizeof(got))) {
		set_err(err, errlen,
			"it does not verify with this cluster's secret: it "
			"was changed outside the registries (a tenant's "
			"sealed key, id or quota edited, records swapped, "
			"another prefix's state copied) or written with "
			"another cluster secret; never used. Restore a good "
			"revision (etcdctl get --rev=N %s, then put it back)",
			r->state_key);
		return -EPERM;
	}
	return 0;
}

static void etcd_note_locked(struct memd_registry *r, const char *err)
{
	if (strncmp(r->etcd_err, err, sizeof(r->etcd_err) - 1))
		memd_log(LOG_WARNING, "registry: etcd: %s", err);
	snprintf(r->etcd_err, sizeof(r->etcd_err), "%s", err);
}

/* The state as the current one changed by e, written to etcd if it is
 * still at the revision we read. */
static int etcd_state_put_locked(struct memd_registry *r,
				 const struct state_edit *e, char *err,
				 size_t errlen)
{
	json_t *doc = state_json_locked(r, e);
	char *text = NULL;
	int64_t rev = 0;
	int rc;

	uint8_t mac[AUTH_KEY_LEN];
	char hex[2 * AUTH_KEY_LEN + 1];

	if (!doc || doc_seal(r, doc, true, err, errlen) ||
	    doc_mac(r, doc, mac) ||
	    (auth_hex(mac, sizeof(mac), hex),
	     json_object_set_new(doc, "mac", json_string(hex))) ||
	    !(text = json_dumps(doc, JSON_COMPACT))) {
		json_decref(doc);
		set_err(err, errlen, "registry: cannot encode the state");
		return -ENOMEM;
	}
	json_decref(doc);
	rc = memd_etcd_put_if(r->etcd, r->state_key, text, strlen(text),
			      r->state_rev, 0, &rev, err, errlen);
	sodium_memzero(text, strlen(text));
	free(text);
	if (rc == -ECANCELED) {
		/* Another writer: we were not the only leader, or the state
		 * was migrated in. Stop serving until we read it again. */
		if (r->leader)
			memd_log(LOG_ERR,
				 "registry: %s: stepping down to read it "
				 "again",
				 err);
		r->leader = false;
		r->resign = true; /* its lease still holds PREFIX/leader */
		r->serve_until_ms = 0;
		set_err(err, errlen,
			"registry: the state in etcd (%s) changed under this "
			"registry; nothing was changed: retry",
			r->state_key);
		return -EAGAIN;
	}
	if (rc) {
		etcd_note_locked(r, err);
		return rc == -ENOMEM ? rc : -EIO;
	}
	r->state_rev = rev;
	return 0;
}

/* Forgets every tenant, donor and grant (before a fresh read). */
static void registry_reset_locked(struct memd_registry *r)
{
	for (size_t i = 0; i < r->ndonors; i++)
		free(r->donor[i].usage);
	if (r->tenant)
		sodium_memzero(r->tenant, r->tenant_cap * sizeof(*r->tenant));
	r->ntenants = r->ndonors = r->ngrants = 0;
	r->next_tenant_id = r->next_donor_id = 1;
	r->grant_next_deadline_ms = UINT64_MAX;
	r->state_rev = 0;
}

/* Reads PREFIX/state afresh (none: an empty registry). 0 or -errno with
 * err; on failure the registry is empty. State without a MAC is refused
 * (-EPERM) unless *unsigned_ok, which then says whether it had none
 * (memd --seal-registry). */
static int etcd_state_load_locked(struct memd_registry *r, char *err,
				  size_t errlen, bool *unsigned_ok)
{
	char msg[600];
	json_error_t je;
	json_t *doc;
	char *text;
	size_t len;
	int64_t rev;
	int rc;

	registry_reset_locked(r);
	rc = memd_etcd_get(r->etcd, r->state_key, &text, &len, &rev, NULL, err,
			   errlen);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	sodium_memzero(text, len);
	free(text);
	rc = doc ? doc_verify(r, doc, msg, sizeof(msg)) : -EINVAL;
	if (rc == -ENOENT && unsigned_ok && *unsigned_ok) {
		rc = 0;
	} else if (rc == -ENOENT) {
		json_decref(doc);
		registry_reset_locked(r);
		set_err(err, errlen,
			"etcd %s (revision %" PRId64 "): not authenticated "
			"(no \"mac\": written by a memd before the state was "
			"authenticated, or by hand); never used. Once every "
			"registry runs this release, check it and run `memd "
			"--seal-registry` with this pool's config "
			"(docs/cluster.md, \"Migration\")",
			r->state_key, rev);
		return -EPERM;
	} else if (unsigned_ok) {
		*unsigned_ok = false;
	}
	if (rc == -EPERM) {
		json_decref(doc);
		registry_reset_locked(r);
		set_err(err, errlen, "etcd %s (revision %" PRId64 "): %s",
			r->state_key, rev, msg);
		return -EPERM;
	}
	if (!rc)
		rc = doc_seal(r, doc, false, msg, sizeof(msg));
	if (!doc)
		snprintf(msg, sizeof(msg), "line %d: %s", je.line, je.text);
	if (!rc)
		rc = load_doc(r, doc, msg, sizeof(msg));
	json_decref(doc);
	if (rc) {
		registry_reset_locked(r);
		set_err(err, errlen, "etcd %s: corrupt: %s", r->state_key, msg);
		return -EINVAL;
	}
	r->state_rev = rev;
	return 0;
}

static int etcd_attach(struct memd_registry *r,
		       const struct memd_registry_opts *o, char *err,
		       size_t errlen)
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

static bool is_serving_locked(struct memd_registry *r, uint64_t now_ms,
			      char *why, size_t whylen)
{
	if (!r->etcd || (r->leader && now_ms < r->serve_until_ms))
		return true;
	if (r->leader)
		set_err(why, whylen,
			"registry: not sure of its etcd lease (%s): not "
			"serving; ask another registry",
			r->etcd_err[0] ? r->etcd_err : "etcd did not answer");
	else if (r->leader_addr[0])
		set_err(why, whylen, "registry: standby; the leader is %s",
			r->leader_addr);
	else
		set_err(why, whylen, "registry: standby; no leader (%s)",
			r->etcd_err[0] ? r->etcd_err : "election under way");
	return false;
}

bool memd_registry_is_serving(struct memd_registry *r, uint64_t now_ms,
			      char *why, size_t whylen)
{
	bool ok;

	pthread_mutex_lock(&r->lock);
	ok = is_serving_locked(r, now_ms, why, whylen);
	pthread_mutex_unlock(&r->lock);
	return ok;
}

uint32_t memd_registry_etcd_step(struct memd_registry *r, uint64_t now_ms)
{
	uint32_t idle = r->lease_ms / 4;
	char err[768] = "", val[WIRE_HOSTPORT_MAX + WIRE_NAME_MAX + 2];
	int64_t ttl_s, mrev;
	char *lv;
	size_t len;
	int rc;

	if (!r->etcd)
		return 1000;
	pthread_mutex_lock(&r->lock);
	if (!r->leader && now_ms < r->campaign_after_ms) {
		idle = (uint32_t)(r->campaign_after_ms - now_ms);
		pthread_mutex_unlock(&r->lock);
		return idle;
	}
	if (r->resign && r->lease_id) {
		/* revoking deletes PREFIX/leader: a new election follows */
		r->resign = false;
		pthread_mutex_unlock(&r->lock);
		if (memd_etcd_lease_revoke(r->etcd, r->lease_id, err,
					   sizeof(err)))
			memd_log(LOG_WARNING, "registry: resign: %s", err);
		r->lease_id = 0;
	} else {
		r->resign = false;
		pthread_mutex_unlock(&r->lock);
	}
	/* The lease is alive until at least now_ms + lease once etcd
	 * answers: now_ms was read before the request went out. */
	if (!r->lease_id)
		rc = memd_etcd_lease_grant(r->etcd, (r->lease_ms + 999) / 1000,
					   &r->lease_id, &ttl_s, err,
					   sizeof(err));
	else
		rc = memd_etcd_lease_keepalive(r->etcd, r->lease_id, &ttl_s,
					       err, sizeof(err));
	pthread_mutex_lock(&r->lock);
	if (rc) {
		etcd_note_locked(r, err);
		if (rc == -ENOENT) {
			if (r->leader)
				memd_log(LOG_ERR,
					 "registry: etcd lease expired: no "
					 "longer the leader epoch=%016" PRIx64,
					 r->epoch);
			r->leader = false;
			r->serve_until_ms = 0;
			r->lease_id = 0;
			idle = 0;
		}
		pthread_mutex_unlock(&r->lock);
		return idle;
	}
	r->etcd_err[0] = '\0';
	if (r->leader) {
		r->serve_until_ms = now_ms + r->lease_ms - r->lease_ms / 4;
		pthread_mutex_unlock(&r->lock);
		return idle;
	}
	pthread_mutex_unlock(&r->lock);
	/* Campaign: the leader key exists only under a live lease. Its
	 * value: our address, and our own donor part's name. */
	snprintf(val, sizeof(val), "%s %s", r->advertise, r->self_donor);
	rc = memd_etcd_put_if(r->etcd, r->leader_key, val, strlen(val), 0,
			      r->lease_id, NULL, err, sizeof(err));
	if (rc == -ECANCELED) {
		rc = memd_etcd_get(r->etcd, r->leader_key, &lv, &len, &mrev,
				   NULL, err, sizeof(err));
		pthread_mutex_lock(&r->lock);
		if (!rc) {
			size_t n = strcspn(lv, " ");

			snprintf(r->leader_addr, sizeof(r->leader_addr), "%.*s",
				 (int)n, lv);
			snprintf(r->leader_donor, sizeof(r->leader_donor), "%s",
				 lv[n] ? lv + n + 1 : "");
		}
		pthread_mutex_unlock(&r->lock);
		if (!rc)
			free(lv);
		return rc == -ENOENT ? 0 : idle;
	}
	pthread_mutex_lock(&r->lock);
	if (rc) {
		etcd_note_locked(r, err);
		pthread_mutex_unlock(&r->lock);
		return idle;
	}
	rc = etcd_state_load_locked(r, err, sizeof(err), NULL);
	if (rc) {
		/* at err once per reason (it names the revision): every
		 * registry campaigns again each lease while it lasts */
		memd_log(strcmp(err, r->load_err) ? LOG_ERR : LOG_DEBUG,
			 "registry: elected, but cannot read the state: %s; "
			 "resigning",
			 err);
		snprintf(r->load_err, sizeof(r->load_err), "%s", err);
		r->campaign_after_ms = now_ms + r->lease_ms;
		etcd_note_locked(r, err);
		pthread_mutex_unlock(&r->lock);
		memd_etcd_lease_revoke(r->etcd, r->lease_id, err, sizeof(err));
		r->lease_id = 0;
		return r->lease_ms;
	}
	do
		auth_random(&r->epoch, sizeof(r->epoch));
	while (!r->epoch);
	r->open_unix_ms = unix_ms();
	for (size_t i = 0; i < r->ndonors; i++)
		r->donor[i].since_unix_ms = r->open_unix_ms;
	r->load_err[0] = '\0';
	r->leader = true;
	r->serve_until_ms = now_ms + r->lease_ms - r->lease_ms / 4;
	r->warm_until_ms = now_ms + TAKEOVER_WARM_MS +
			   (uint64_t)MISSED_REPORTS * r->report_ms;
	/* r->leader_donor keeps the previous leader's donor part, which
	 * the warm-up waits for until a probe of its address finds nothing
	 * there (memd_registry_etcd_old_leader) */
	snprintf(r->old_leader_addr, sizeof(r->old_leader_addr), "%s",
		 r->leader_addr);
	r->old_leader_gone = !r->leader_donor[0] || !r->old_leader_addr[0];
	snprintf(r->leader_addr, sizeof(r->leader_addr), "%s", r->advertise);
	memd_log(LOG_NOTICE,
		 "registry: elected leader addr=%s registry_epoch=%016" PRIx64
		 " tenants=%zu donors=%zu state_revision=%" PRId64,
		 r->advertise, r->epoch, r->ntenants, r->ndonors, r->state_rev);
	pthread_mutex_unlock(&r->lock);
	return idle;
}

bool memd_registry_etcd_old_leader(struct memd_registry *r, char *addr,
				   size_t cap, uint64_t now_ms)
{
	bool probe = false;

	pthread_mutex_lock(&r->lock);
	if (r->leader && !r->old_leader_gone && now_ms < r->warm_until_ms) {
		const struct donor *d = donor_by_name(r, r->leader_donor);

		probe = !d || !d->up || !d->reported;
	}
	if (probe)
		snprintf(addr, cap, "%s", r->old_leader_addr);
	pthread_mutex_unlock(&r->lock);
	return probe;
}

void memd_registry_etcd_old_leader_gone(struct memd_registry *r,
					const char *why)
{
	pthread_mutex_lock(&r->lock);
	if (r->leader && !r->old_leader_gone)
		memd_log(LOG_NOTICE,
			 "registry: the previous leader %s is gone (%s): its "
			 "donor part '%s' is not waited for",
			 r->old_leader_addr, why, r->leader_donor);
	r->old_leader_gone = true;
	pthread_mutex_unlock(&r->lock);
}

/* A watch event under PREFIX/ (memd-etcdw). */
static void on_etcd_event(void *arg, const char *key, bool deleted,
			  int64_t mod_rev)
{
	struct memd_registry *r = arg;

	pthread_mutex_lock(&r->lock);
	if (!strcmp(key, r->leader_key)) {
		/* gone (resigned, lease expired): campaign now; put: learn
		 * who leads now */
		if (deleted || !r->leader)
			r->kick = true;
	} else if (!strcmp(key, r->state_key) && r->leader &&
		   (deleted || mod_rev > r->state_rev)) {
		/* a write this leader did not make (its own are applied
		 * under this lock before their event is seen) */
		memd_log(LOG_ERR,
			 "registry: %s %s at revision %" PRId64
			 " behind this leader (it holds %" PRId64
			 "): stepping down to read it again",
			 r->state_key, deleted ? "deleted" : "written", mod_rev,
			 r->state_rev);
		r->leader = false;
		r->resign = true;
		r->serve_until_ms = 0;
		r->kick = true;
	}
	pthread_mutex_unlock(&r->lock);
}

int memd_registry_etcd_watch(struct memd_registry *r, int64_t *rev,
			     uint32_t max_ms, const volatile int *stop,
			     char *err, size_t errlen)
{
	if (!r->etcd)
		return -EINVAL;
	return memd_etcd_watch(r->etcd, r->watch_prefix, rev, max_ms,
			       on_etcd_event, r, stop, err, errlen);
}

bool memd_registry_etcd_kicked(struct memd_registry *r)
{
	bool k;

	pthread_mutex_lock(&r->lock);
	k = r->kick;
	r->kick = false;
	pthread_mutex_unlock(&r->lock);
	return k;
}

void memd_registry_etcd_resign(struct memd_registry *r)
{
	char err[256];

	if (!r || !r->etcd || !r->lease_id)
		return;
	pthread_mutex_lock(&r->lock);
	r->leader = false;
	r->serve_until_ms = 0;
	pthread_mutex_unlock(&r->lock);
	if (memd_etcd_lease_revoke(r->etcd, r->lease_id, err, sizeof(err)))
		memd_log(LOG_WARNING, "registry: resign: %s", err);
	r->lease_id = 0;
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
		rc = etcd_attach(r, o, err, errlen);
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
	r->open_unix_ms = unix_ms();
	do
		auth_random(&r->epoch, sizeof(r->epoch));
	while (!r->epoch);
	r->grant_next_deadline_ms = UINT64_MAX;
	/* etcd: the state is read when this registry is elected */
	rc = r->etcd ? 0 : state_load(r, err, errlen);
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

int memd_registry_migrate(const struct memd_registry_opts *o, size_t *ntenants,
			  size_t *ndonors, char *err, size_t errlen)
{
	struct memd_registry_opts fo;
	struct memd_registry *r;
	struct state_edit e;
	int rc;

	if (!o || !o->etcd || !o->state_dir) {
		set_err(err, errlen, "migrate: needs state_dir and etcd");
		return -EINVAL;
	}
	fo = *o;
	fo.etcd = NULL;
	rc = memd_registry_open(&fo, 0, &r, err, errlen);
	if (rc)
		return rc;
	rc = etcd_attach(r, o, err, errlen);
	if (!rc) {
		pthread_mutex_lock(&r->lock);
		e = state_now(r);
		r->state_rev = 0; /* create only */
		rc = etcd_state_put_locked(r, &e, err, errlen);
		*ntenants = r->ntenants;
		*ndonors = r->ndonors;
		pthread_mutex_unlock(&r->lock);
		if (rc == -EAGAIN) {
			set_err(err, errlen,
				"migrate: etcd already holds registry state at "
				"%s: not overwritten",
				r->state_key);
			rc = -EEXIST;
		}
	}
	memd_registry_close(r);
	return rc;
}

int memd_registry_seal_etcd(const struct memd_registry_opts *o, bool *already,
			    char **listing, char *err, size_t errlen)
{
	struct memd_registry *r;
	struct state_edit e;
	bool unsigned_ok = true;
	char *out = NULL;
	size_t len = 0;
	FILE *f;
	int rc;

	*already = false;
	*listing = NULL;
	if (!o || !o->etcd) {
		set_err(err, errlen, "seal: needs registry = etcd");
		return -EINVAL;
	}
	rc = memd_registry_open(o, 0, &r, err, errlen);
	if (rc)
		return rc;
	pthread_mutex_lock(&r->lock);
	rc = etcd_state_load_locked(r, err, errlen, &unsigned_ok);
	if (!rc && !r->state_rev) {
		set_err(err, errlen, "etcd holds no registry state at %s",
			r->state_key);
		rc = -ENOENT;
	}
	if (!rc && !unsigned_ok) {
		*already = true;
	} else if (!rc) {
		e = state_now(r);
		rc = etcd_state_put_locked(r, &e, err, errlen);
		if (rc == -EAGAIN)
			set_err(err, errlen,
				"%s changed while it was being sealed: "
				"nothing written; run this again",
				r->state_key);
	}
	if (!rc && (f = open_memstream(&out, &len))) {
		for (size_t i = 0; i < r->ntenants; i++)
			fprintf(f,
				"  tenant %s id %u quota_bytes %" PRIu64 "\n",
				r->tenant[i].name, r->tenant[i].id,
				r->tenant[i].quota_bytes);
		for (size_t i = 0; i < r->ndonors; i++)
			fprintf(f, "  donor %s id %u%s\n", r->donor[i].name,
				r->donor[i].id,
				r->donor[i].draining ? " draining" : "");
		fclose(f);
		*listing = out;
	}
	pthread_mutex_unlock(&r->lock);
	memd_registry_close(r);
	return rc;
}

int memd_registry_tenant_key(struct memd_registry *r, const char *name,
			     uint32_t *id, uint8_t key[AUTH_KEY_LEN])
{
	struct tenant *t;
	int rc = -ENOENT;

	pthread_mutex_lock(&r->lock);
	t = name ? tenant_by_name(r, name) : NULL;
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

/* ---- donors ------------------------------------------------------------ */

int memd_registry_donor_join(struct memd_registry *r,
			     const struct wire_donor_join *j, uint64_t now_ms,
			     struct wire_donor_join_ok *ok, char *err,
			     size_t errlen)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	char have[32], want[32];
	struct donor *d;
	uint32_t nfree = 0;
	int rc;

	if (!j || !ok)
		return -EINVAL;
	if (strnlen(j->name, WIRE_NAME_MAX) >= WIRE_NAME_MAX ||
	    !wire_name_is_valid(j->name)) {
		set_err(err, errlen,
			"donor name '%.63s' is not [A-Za-z0-9_.-], 1 to %d "
			"characters",
			j->name, WIRE_NAME_MAX - 1);
		return -EINVAL;
	}
	if (strnlen(j->addr, WIRE_HOSTPORT_MAX) >= WIRE_HOSTPORT_MAX ||
	    !j->addr[0]) {
		set_err(err, errlen, "donor '%s': no address", j->name);
		return -EINVAL;
	}
	if (j->slab_bytes != r->slab_bytes) {
		memd_log_bytes(j->slab_bytes, have, sizeof(have));
		memd_log_bytes(r->slab_bytes, want, sizeof(want));
		set_err(err, errlen,
			"donor '%s': slab size %s (%" PRIu64
			" bytes), the registry's is %s (%" PRIu64 " bytes)",
			j->name, have, j->slab_bytes, want, r->slab_bytes);
		return -EINVAL;
	}
	if (j->nnodes > WIRE_MAX_NODES) {
		set_err(err, errlen, "donor '%s': %u nodes, at most %d",
			j->name, j->nnodes, WIRE_MAX_NODES);
		return -EINVAL;
	}
	for (uint16_t i = 0; i < j->nnodes; i++)
		nfree += j->node[i].slabs_free;
	pthread_mutex_lock(&r->lock);
	if (!is_serving_locked(r, now_ms, err, errlen)) {
		rc = -EAGAIN;
		goto out;
	}
	expire_locked(r, now_ms);
	d = donor_by_name(r, j->name);
	if (!d) {
		struct state_edit e = state_now(r);
		struct donor nd = { 0 };

		if (r->ndonors >= MAX_DONORS) {
			set_err(err, errlen,
				"donor '%s': the registry has %d donors "
				"already, its most",
				j->name, MAX_DONORS);
			rc = -ENOSPC;
			goto out;
		}
		if (r->next_donor_id == UINT32_MAX ||
		    grow((void **)&r->donor, &r->donor_cap, r->ndonors + 1,
			 sizeof(*d))) {
			set_err(err, errlen, "registry: out of memory or ids");
			rc = -ENOMEM;
			goto out;
		}
		nd.id = r->next_donor_id;
		strcpy(nd.name, j->name);
		e.donor_put = &nd;
		e.next_donor_id = r->next_donor_id + 1;
		rc = state_write_logged(r, &e, err, errlen);
		if (rc)
			goto out;
		r->next_donor_id++;
		r->donor[r->ndonors++] = nd;
		d = &r->donor[r->ndonors - 1];
	} else if (!d->joined || d->epoch != j->epoch) {
		/* A new incarnation: the old one's leases and tickets are
		 * gone with it. */
		usage_clear_locked(r, d);
		donor_grants_drop_locked(r, d->id);
		d->up = false;
		d->reported = false;
	}
	d->joined = true;
	d->epoch = j->epoch;
	memcpy(d->addr, j->addr, sizeof(d->addr));
	d->nnodes = j->nnodes;
	for (uint16_t i = 0; i < j->nnodes; i++)
		d->node[i] = j->node[i].node;
	d->slabs_total = j->slabs_total;
	if (!d->reported) {
		/* until its first report, what the join says (for display:
		 * placement waits for a report) */
		d->slabs_free = j->nnodes ? nfree : j->slabs_total;
		d->slabs_leased = 0;
	}
	d->last_report_ms = now_ms;
	if (!d->up) {
		d->up = true;
		donor_set_reason(d, "joined");
	}
	memd_log(
		LOG_NOTICE,
		"registry: donor joined name=%s id=%u addr=%s epoch=%016" PRIx64
		" slabs=%u draining=%d",
		memd_log_quote(d->name, logq, sizeof(logq)), d->id, d->addr,
		d->epoch, d->slabs_total, (int)d->draining);
	ok->donor_id = d->id;
	ok->registry_epoch = r->epoch;
	ok->report_ms = r->report_ms;
	ok->flags = d->draining ? WIRE_DONOR_DRAIN : 0;
	rc = 0;
out:
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int memd_registry_donor_report(struct memd_registry *r,
			       const struct wire_donor_report *rep,
			       uint64_t now_ms, struct wire_donor_report_ok *ok,
			       char *err, size_t errlen)
{
	struct wire_tenant_usage *u = NULL;
	struct donor *d;
	int rc = 0;

	if (!rep || !ok)
		return -EINVAL;
	if (rep->ntenants > WIRE_MAX_TENANTS ||
	    rep->nredeemed > WIRE_MAX_REDEEMED) {
		set_err(err, errlen,
			"donor %u: report of %u tenants and %u grants, at "
			"most %d and %d",
			rep->donor_id, rep->ntenants, rep->nredeemed,
			WIRE_MAX_TENANTS, WIRE_MAX_REDEEMED);
		return -EINVAL;
	}
	for (uint16_t i = 0; i < rep->ntenants; i++) {
		if (rep->tenant[i].kv_slabs > rep->tenant[i].slabs) {
			set_err(err, errlen,
				"donor %u: tenant %u has %u KV slabs of %u",
				rep->donor_id, rep->tenant[i].tenant_id,
				rep->tenant[i].kv_slabs, rep->tenant[i].slabs);
			return -EINVAL;
		}
	}
	if (rep->ntenants) {
		u = malloc(rep->ntenants * sizeof(*u));
		if (!u) {
			set_err(err, errlen, "registry: out of memory");
			return -ENOMEM;
		}
		memcpy(u, rep->tenant, rep->ntenants * sizeof(*u));
	}
	pthread_mutex_lock(&r->lock);
	if (!is_serving_locked(r, now_ms, err, errlen)) {
		free(u);
		rc = -EAGAIN;
		goto out;
	}
	expire_locked(r, now_ms);
	d = donor_by_id(r, rep->donor_id);
	if (!d || !d->up || d->epoch != rep->epoch) {
		if (!d)
			set_err(err, errlen, "donor %u: unknown: join first",
				rep->donor_id);
		else if (!d->up)
			set_err(err, errlen,
				"donor %u ('%s'): marked down (%s): join again",
				d->id, d->name, d->reason);
		else
			set_err(err, errlen,
				"donor %u ('%s'): epoch %016" PRIx64
				" is not the one it joined with (%016" PRIx64
				"): join again",
				d->id, d->name, rep->epoch, d->epoch);
		free(u);
		rc = -ESTALE;
		goto out;
	}
	usage_clear_locked(r, d);
	d->usage = u;
	d->nusage = rep->ntenants;
	usage_apply_locked(r, d, +1);
	d->slabs_free = rep->slabs_free;
	d->slabs_leased = rep->slabs_leased;
	d->bytes_read = rep->bytes_read;
	d->bytes_written = rep->bytes_written;
	d->last_report_ms = now_ms;
	d->reports++;
	d->reported = true;
	/* The redeemed grants are in this report's usage: counted once. */
	for (uint16_t k = 0; k < rep->nredeemed; k++)
		for (size_t i = 0; i < r->ngrants; i++)
			if (r->grant[i].id == rep->redeemed[k] &&
			    r->grant[i].donor_id == d->id) {
				grant_drop_locked(r, i);
				break;
			}
	ok->registry_epoch = r->epoch;
	ok->flags = d->draining ? WIRE_DONOR_DRAIN : 0;
	kv_allowances_locked(r, d, ok);
	/* Every tenant listed: the donor may tell a removed one. */
	if (r->ntenants <= WIRE_MAX_TENANTS) {
		ok->flags |= WIRE_DONOR_TENANTS;
		ok->next_tenant_id = r->next_tenant_id;
	}
	/* Fencing (docs/cluster.md): on etcd, no other registry can lead
	 * before serve_until_ms + a quarter lease; the donor redeems this
	 * epoch's tickets only until serve_until_ms - now_ms after it sent
	 * the report (which is before now_ms), so never once another
	 * registry may place. The quarter lease is the margin for clock
	 * rates, as for the leader's own serving. */
	if (r->etcd) {
		ok->flags |= WIRE_DONOR_FENCE;
		ok->fence_ms = (uint32_t)(r->serve_until_ms - now_ms);
	}
out:
	pthread_mutex_unlock(&r->lock);
	return rc;
}

void memd_registry_donor_lost(struct memd_registry *r, uint32_t donor_id,
			      uint64_t epoch, uint64_t now_ms, const char *why)
{
	struct donor *d;

	pthread_mutex_lock(&r->lock);
	expire_locked(r, now_ms);
	d = donor_by_id(r, donor_id);
	if (d && d->up && d->epoch == epoch)
		donor_down_locked(r, d, why && why[0] ? why : "link closed");
	pthread_mutex_unlock(&r->lock);
}

void memd_registry_tick(struct memd_registry *r, uint64_t now_ms)
{
	pthread_mutex_lock(&r->lock);
	expire_locked(r, now_ms);
	pthread_mutex_unlock(&r->lock);
}

void memd_registry_loop_gap(struct memd_registry *r, uint64_t gap_ms)
{
	uint64_t half = (uint64_t)MISSED_REPORTS * r->report_ms / 2;

	if (gap_ms <= half)
		return;
	pthread_mutex_lock(&r->lock);
	for (size_t i = 0; i < r->ndonors; i++)
		if (r->donor[i].up)
			r->donor[i].last_report_ms += gap_ms - half;
	pthread_mutex_unlock(&r->lock);
	memd_log(LOG_NOTICE,
		 "registry: did not run for %" PRIu64
		 " ms; donors' reports are read before their liveness",
		 gap_ms);
}

/* ---- placement --------------------------------------------------------- */

struct cand {
	struct donor *d;
	uint64_t avail; /* free slabs left for this request */
	int grant;	/* index into out->grant, or -1 */
};

static bool donor_serves(const struct donor *d, int32_t node)
{
	if (node == WIRE_NODE_ANY)
		return true;
	for (uint16_t i = 0; i < d->nnodes; i++)
		if (d->node[i] == node)
			return true;
	return false;
}

/* More free first, then lower id. */
static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->avail != y->avail)
		return x->avail > y->avail ? -1 : 1;
	return x->d->id < y->d->id ? -1 : x->d->id > y->d->id;
}

/* The candidate with the most avail, lowest id on a tie, other than
 * skip; -1 when none has any left. */
static int cand_best(const struct cand *c, size_t n, int skip)
{
	int best = -1;

	for (size_t i = 0; i < n; i++) {
		if ((int)i == skip || !c[i].avail)
			continue;
		if (best < 0 || c[i].avail > c[best].avail ||
		    (c[i].avail == c[best].avail && c[i].d->id < c[best].d->id))
			best = (int)i;
	}
	return best;
}

static int cand_use(struct cand *c, int i, struct wire_place_ok *out)
{
	c[i].avail--;
	if (c[i].grant < 0) {
		c[i].grant = out->ngrants++;
		out->grant[c[i].grant].ticket.nslabs = 0;
	}
	out->grant[c[i].grant].ticket.nslabs++;
	return c[i].grant;
}

int memd_registry_place(struct memd_registry *r, uint32_t tenant_id,
			const struct wire_place *req, uint64_t now_ms,
			uint64_t now_unix_ms, struct wire_place_ok *out,
			char *err, size_t errlen)
{
	struct cand c[MAX_DONORS];
	size_t by_grant[WIRE_MAX_GRANTS];
	char q[32], u[32], s[32], a[32];
	bool replica, served = false;
	uint64_t copies, total, freesum = 0;
	struct tenant *t;
	size_t n = 0, nall;
	int rc = 0;

	if (!req || !out)
		return -EINVAL;
	if (req->flags & ~WIRE_PLACE_KNOWN) {
		set_err(err, errlen, "PLACE: unknown flags 0x%x",
			req->flags & ~WIRE_PLACE_KNOWN);
		return -EINVAL;
	}
	if (req->nslabs < 1 || req->nslabs > WIRE_MAX_LEASES) {
		set_err(err, errlen, "PLACE: %u slabs, not 1..%d", req->nslabs,
			WIRE_MAX_LEASES);
		return -EINVAL;
	}
	if (req->node != WIRE_NODE_ANY &&
	    (req->node < 0 || req->node >= WIRE_NODE_MAX)) {
		set_err(err, errlen, "PLACE: node %d is not -1 or 0..%d",
			req->node, WIRE_NODE_MAX - 1);
		return -EINVAL;
	}
	replica = req->flags & WIRE_PLACE_REPLICA;
	copies = (uint64_t)req->nslabs * (replica ? 2 : 1);
	memset(out, 0, sizeof(*out));

	pthread_mutex_lock(&r->lock);
	if (!is_serving_locked(r, now_ms, err, errlen)) {
		rc = -EAGAIN;
		goto out;
	}
	expire_locked(r, now_ms);
	if (r->etcd && now_ms < r->warm_until_ms) {
		/* Just took over: the tenants' usage is the sum of the
		 * donors' reports, so place only once every donor known
		 * (draining ones hold memory too) has reported to us, or
		 * the wait is over (one that has not is down, as for any
		 * registry). Placing on part of the reports could pass a
		 * quota by what the silent donors hold. */
		for (size_t i = 0; i < r->ndonors; i++) {
			const struct donor *d = &r->donor[i];

			/* The leader we replace: if nothing listens at its
			 * address any more, it died with its own donor part
			 * (one that lives on rejoins with a new epoch and
			 * holds nothing): not waited for. If it lives (cut
			 * off etcd only), its donor part holds leases and
			 * rejoins us like any donor: waited for. */
			if ((d->up && d->reported) ||
			    (r->old_leader_gone && r->leader_donor[0] &&
			     !strcmp(d->name, r->leader_donor)))
				continue;
			set_err(err, errlen,
				"registry: took over as leader; waiting up to "
				"%" PRIu64 " ms for donor '%s' to report: "
				"place again",
				r->warm_until_ms - now_ms, d->name);
			rc = -EAGAIN;
			goto out;
		}
	}
	t = tenant_by_id(r, tenant_id);
	if (!t) {
		set_err(err, errlen, "no tenant with id %u (removed?)",
			tenant_id);
		rc = -ENOENT;
		goto out;
	}
	total = t->used_slabs + t->reserved_slabs + copies;
	if (total > t->quota_bytes / r->slab_bytes) {
		memd_log_bytes(t->quota_bytes, q, sizeof(q));
		memd_log_bytes(mul_sat(t->used_slabs, r->slab_bytes), u,
			       sizeof(u));
		memd_log_bytes(mul_sat(t->reserved_slabs, r->slab_bytes), s,
			       sizeof(s));
		memd_log_bytes(mul_sat(copies, r->slab_bytes), a, sizeof(a));
		set_err(err, errlen,
			"tenant '%s': quota %s, used %s, reserved %s, asked %s",
			t->name, q, u, s, a);
		rc = -EDQUOT;
		goto out;
	}
	if (grow((void **)&r->grant, &r->grant_cap,
		 r->ngrants + WIRE_MAX_GRANTS, sizeof(*r->grant))) {
		set_err(err, errlen, "registry: out of memory");
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < r->ndonors; i++) {
		struct donor *d = &r->donor[i];

		if (!d->up || d->draining || !d->reported ||
		    !donor_serves(d, req->node))
			continue;
		served = true;
		if (d->slabs_free <= d->reserved_slabs)
			continue;
		c[n].d = d;
		c[n].avail = d->slabs_free - d->reserved_slabs;
		c[n].grant = -1;
		n++;
	}
	if (!served && req->node != WIRE_NODE_ANY) {
		set_err(err, errlen, "tenant '%s': no up donor serves node %d",
			t->name, req->node);
		rc = -EINVAL;
		goto out;
	}
	nall = n;
	if (n > WIRE_MAX_GRANTS) {
		qsort(c, n, sizeof(c[0]), cand_cmp);
		n = WIRE_MAX_GRANTS;
	}
	for (size_t i = 0; i < nall; i++)
		freesum += c[i].avail;
	for (uint32_t k = 0; k < req->nslabs; k++) {
		int p = cand_best(c, n, -1), x = -1;

		if (p >= 0 && replica)
			x = cand_best(c, n, p);
		if (p < 0 || (replica && x < 0)) {
			if (replica && n < 2)
				set_err(err, errlen,
					"tenant '%s': a replica needs a second "
					"donor with free slabs, and %zu up "
					"donor(s) have any",
					t->name, n);
			else
				set_err(err, errlen,
					"tenant '%s': %" PRIu64
					" slabs free on %zu up donors (a "
					"place uses at most %d), asked %" PRIu64
					"%s",
					t->name, freesum, nall, WIRE_MAX_GRANTS,
					copies,
					replica ? " with each replica on "
						  "another donor"
						: "");
			rc = -ENOSPC;
			goto out;
		}
		out->layout[k].primary = (uint8_t)cand_use(c, p, out);
		out->layout[k].replica =
			replica ? (uint8_t)cand_use(c, x, out) : WIRE_NO_GRANT;
	}
	out->registry_epoch = r->epoch;
	out->nslabs = (uint16_t)req->nslabs;
	for (size_t i = 0; i < n; i++)
		if (c[i].grant >= 0)
			by_grant[c[i].grant] = i;
	/* Grant ids in grant order: the first slab's donor has the lowest. */
	for (uint16_t gi = 0; gi < out->ngrants; gi++) {
		size_t i = by_grant[gi];
		struct wire_grant *g = &out->grant[gi];
		struct grant *rg;

		g->donor_id = c[i].d->id;
		g->donor_epoch = c[i].d->epoch;
		memcpy(g->addr, c[i].d->addr, sizeof(g->addr));
		g->ticket.grant_id = r->next_grant_id++;
		g->ticket.registry_epoch = r->epoch;
		g->ticket.tenant_id = t->id;
		g->ticket.donor_id = c[i].d->id;
		g->ticket.donor_epoch = c[i].d->epoch;
		g->ticket.node = req->node;
		g->ticket.expires_ms = now_unix_ms + r->ticket_ttl_ms;
		auth_ticket_sign(r->keys.ticket, &g->ticket);
		rg = &r->grant[r->ngrants++];
		rg->id = g->ticket.grant_id;
		rg->tenant_id = t->id;
		rg->donor_id = c[i].d->id;
		rg->nslabs = g->ticket.nslabs;
		rg->deadline_ms = now_ms + r->ticket_ttl_ms + TICKET_SKEW_MS +
				  r->report_ms;
		if (rg->deadline_ms < r->grant_next_deadline_ms)
			r->grant_next_deadline_ms = rg->deadline_ms;
		c[i].d->reserved_slabs += rg->nslabs;
		t->reserved_slabs += rg->nslabs;
	}
out:
	if (rc == -ENOSPC && r->etcd && now_ms < r->warm_until_ms) {
		/* Just took over: donors are still joining us. */
		set_err(err, errlen,
			"registry: took over as leader; donors are rejoining "
			"for %" PRIu64 " ms more: place again",
			r->warm_until_ms - now_ms);
		rc = -EAGAIN;
	}
	pthread_mutex_unlock(&r->lock);
	if (rc)
		memset(out, 0, sizeof(*out));
	return rc;
}

int memd_registry_make_pass(struct memd_registry *r, uint32_t tenant_id,
			    uint64_t now_unix_ms, struct auth_pass *p)
{
	struct tenant *t;
	int rc = -ENOENT;

	memset(p, 0, sizeof(*p));
	pthread_mutex_lock(&r->lock);
	t = tenant_by_id(r, tenant_id);
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

/* ---- admin requests ---------------------------------------------------- */

struct admin_ctx {
	struct memd_registry *r;
	json_t *req;
	const uint8_t *session_key;
	json_t *reply; /* set by the handler on success */
	char *err;
	size_t errlen;
};

static json_t *tenant_info_json_base(const struct memd_registry *r,
				     const struct tenant *t,
				     bool with_name_first)
{
	if (with_name_first)
		return json_pack(
			"{s:s, s:I, s:I, s:I, s:I}", "name", t->name, "id",
			(json_int_t)t->id, "quota_bytes",
			(json_int_t)t->quota_bytes, "used_bytes",
			(json_int_t)mul_sat(t->used_slabs, r->slab_bytes),
			"reserved_bytes",
			(json_int_t)mul_sat(t->reserved_slabs, r->slab_bytes));
	return json_pack("{s:I, s:s, s:I, s:I, s:I}", "id", (json_int_t)t->id,
			 "name", t->name, "quota_bytes",
			 (json_int_t)t->quota_bytes, "used_bytes",
			 (json_int_t)mul_sat(t->used_slabs, r->slab_bytes),
			 "reserved_bytes",
			 (json_int_t)mul_sat(t->reserved_slabs, r->slab_bytes));
}

/* A tenant as admin replies show it: with its cost model (0: the
 * donors'). */
static json_t *tenant_info_json(const struct memd_registry *r,
				const struct tenant *t, bool with_name_first)
{
	json_t *o = tenant_info_json_base(r, t, with_name_first);

	if (o && (json_object_set_new(o, "prefill_tokens_per_s",
				      json_integer(t->prefill_tokens_per_s)) ||
		  json_object_set_new(
			  o, "bytes_per_token",
			  json_integer((json_int_t)t->bytes_per_token)))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static int admin_status(struct admin_ctx *x)
{
	struct memd_registry *r = x->r;
	uint64_t cap = 0, used = 0, resv = 0, freeb = 0;
	uint32_t nup = 0, ndrain = 0, ndown = 0;
	json_t *ts = json_array();

	for (size_t i = 0; i < r->ndonors; i++) {
		const struct donor *d = &r->donor[i];

		switch (donor_state(d)) {
		case MEMD_DONOR_UP:
			nup++;
			if (d->slabs_free > d->reserved_slabs)
				freeb += (d->slabs_free - d->reserved_slabs) *
					 r->slab_bytes;
			break;
		case MEMD_DONOR_DRAINING:
			ndrain++;
			break;
		case MEMD_DONOR_DOWN:
			ndown++;
			continue;
		}
		cap += (uint64_t)d->slabs_total * r->slab_bytes;
	}
	for (size_t i = 0; i < r->ntenants && ts; i++) {
		const struct tenant *t = &r->tenant[i];

		used += t->used_slabs * r->slab_bytes;
		resv += t->reserved_slabs * r->slab_bytes;
		if (json_array_append_new(ts, tenant_info_json(r, t, true))) {
			json_decref(ts);
			ts = NULL;
		}
	}
	if (!ts)
		return -ENOMEM;
	x->reply = json_pack(
		"{s:I, s:I, s:I, s:I, s:I, s:{s:I, s:I, s:I}, "
		"s:o}",
		"slab_bytes", (json_int_t)r->slab_bytes, "capacity_bytes",
		(json_int_t)cap, "used_bytes", (json_int_t)used,
		"reserved_bytes", (json_int_t)resv, "free_bytes",
		(json_int_t)freeb, "donors", "up", (json_int_t)nup, "draining",
		(json_int_t)ndrain, "down", (json_int_t)ndown, "tenants", ts);
	return x->reply ? 0 : -ENOMEM;
}

static json_t *donor_info_json(struct memd_registry *r, const struct donor *d)
{
	uint64_t avail = 0;
	char epoch[17];
	json_t *ts = json_array();

	for (uint32_t i = 0; i < d->nusage && ts; i++) {
		const struct tenant *t = tenant_by_id(r, d->usage[i].tenant_id);

		if (!t)
			continue; /* removed since the donor counted it */
		if (json_array_append_new(
			    ts, json_pack("{s:s, s:I, s:I}", "name", t->name,
					  "used_bytes",
					  (json_int_t)mul_sat(d->usage[i].slabs,
							      r->slab_bytes),
					  "sessions",
					  (json_int_t)d->usage[i].sessions))) {
			json_decref(ts);
			ts = NULL;
		}
	}
	if (!ts)
		return NULL;
	if (d->up && d->slabs_free > d->reserved_slabs)
		avail = d->slabs_free - d->reserved_slabs;
	snprintf(epoch, sizeof(epoch), "%016" PRIx64, d->epoch);
	return json_pack(
		"{s:I, s:s, s:s, s:s, s:s, s:I, s:s, s:I, s:I, s:I, s:I, "
		"s:I, s:I, s:I, s:I, s:o}",
		"id", (json_int_t)d->id, "name", d->name, "addr", d->addr,
		"state", memd_donor_state_name(donor_state(d)), "reason",
		d->reason, "since_unix_ms", (json_int_t)d->since_unix_ms,
		"epoch", epoch, "slabs_total", (json_int_t)d->slabs_total,
		"slabs_free", (json_int_t)d->slabs_free, "slabs_leased",
		(json_int_t)d->slabs_leased, "capacity_bytes",
		(json_int_t)((uint64_t)d->slabs_total * r->slab_bytes),
		"free_bytes", (json_int_t)(avail * r->slab_bytes), "bytes_read",
		(json_int_t)d->bytes_read, "bytes_written",
		(json_int_t)d->bytes_written, "reports", (json_int_t)d->reports,
		"tenants", ts);
}

static int admin_donors(struct admin_ctx *x)
{
	json_t *ds = json_array();

	for (size_t i = 0; i < x->r->ndonors && ds; i++)
		if (json_array_append_new(
			    ds, donor_info_json(x->r, &x->r->donor[i]))) {
			json_decref(ds);
			ds = NULL;
		}
	if (!ds)
		return -ENOMEM;
	x->reply = json_pack("{s:o}", "donors", ds);
	return x->reply ? 0 : -ENOMEM;
}

static int admin_tenants(struct admin_ctx *x)
{
	json_t *ts = json_array();

	for (size_t i = 0; i < x->r->ntenants && ts; i++)
		if (json_array_append_new(
			    ts,
			    tenant_info_json(x->r, &x->r->tenant[i], false))) {
			json_decref(ts);
			ts = NULL;
		}
	if (!ts)
		return -ENOMEM;
	x->reply = json_pack("{s:o}", "tenants", ts);
	return x->reply ? 0 : -ENOMEM;
}

/* The named tenant of the request, or NULL with -EINVAL / -ENOENT. */
static struct tenant *admin_tenant(struct admin_ctx *x, int *rc)
{
	char name[WIRE_NAME_MAX];
	struct tenant *t;

	*rc = json_get_name(x->req, "name", name, "", x->err, x->errlen);
	if (*rc)
		return NULL;
	t = tenant_by_name(x->r, name);
	if (!t) {
		set_err(x->err, x->errlen, "no tenant '%s'", name);
		*rc = -ENOENT;
	}
	return t;
}

static int admin_tenant_add(struct admin_ctx *x)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	struct memd_registry *r = x->r;
	struct state_edit e = state_now(r);
	uint8_t box[WIRE_BOX_MAX];
	struct tenant t = { 0 };
	json_t *kb;
	int n, rc;

	if ((rc = json_get_name(x->req, "name", t.name, "", x->err,
				x->errlen)) ||
	    (rc = json_get_uint(x->req, "quota_bytes", 0, INT64_MAX,
				&t.quota_bytes, "", x->err, x->errlen)))
		return rc;
	kb = json_object_get(x->req, "key_box");
	if (!kb) {
		set_err(x->err, x->errlen, "missing field 'key_box'");
		return -EINVAL;
	}
	n = json_is_string(kb)
		    ? auth_unhex(json_string_value(kb), box, sizeof(box))
		    : -EINVAL;
	if (n < 0) {
		set_err(x->err, x->errlen,
			"field 'key_box' is not hex of at most %d bytes",
			WIRE_BOX_MAX);
		return -EINVAL;
	}
	if (!x->session_key || auth_open(x->session_key, box, (size_t)n, t.key,
					 AUTH_KEY_LEN) != AUTH_KEY_LEN) {
		memset(&t, 0, sizeof(t));
		set_err(x->err, x->errlen,
			"field 'key_box' does not open to a %d-byte key with "
			"this session's key",
			AUTH_KEY_LEN);
		return -EINVAL;
	}
	if (tenant_by_name(r, t.name)) {
		set_err(x->err, x->errlen, "tenant '%s' exists", t.name);
		rc = -EEXIST;
		goto out;
	}
	if (r->ntenants >= MAX_TENANTS || r->next_tenant_id == UINT32_MAX) {
		set_err(x->err, x->errlen,
			"the registry has %zu tenants, its most", r->ntenants);
		rc = -ENOSPC;
		goto out;
	}
	if (grow((void **)&r->tenant, &r->tenant_cap, r->ntenants + 1,
		 sizeof(t))) {
		rc = -ENOMEM;
		goto out;
	}
	t.id = r->next_tenant_id;
	e.tenant_put = &t;
	e.next_tenant_id = r->next_tenant_id + 1;
	rc = state_write_logged(r, &e, x->err, x->errlen);
	if (rc)
		goto out;
	/* A donor may have counted slabs under this id already (a report
	 * racing the add): the sum must hold from the start. */
	for (size_t i = 0; i < r->ndonors; i++)
		for (uint32_t k = 0; r->donor[i].up && k < r->donor[i].nusage;
		     k++)
			if (r->donor[i].usage[k].tenant_id == t.id)
				t.used_slabs += r->donor[i].usage[k].slabs;
	r->next_tenant_id++;
	r->tenant[r->ntenants++] = t;
	memd_log(LOG_NOTICE,
		 "registry: tenant added name=%s id=%u quota_bytes=%" PRIu64,
		 memd_log_quote(t.name, logq, sizeof(logq)), t.id,
		 t.quota_bytes);
	x->reply = json_pack("{s:I}", "id", (json_int_t)t.id);
	/* The tenant exists now; a reply we cannot build is still -ENOMEM. */
	rc = x->reply ? 0 : -ENOMEM;
out:
	memset(&t, 0, sizeof(t));
	return rc;
}

static int admin_tenant_remove(struct admin_ctx *x)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	struct memd_registry *r = x->r;
	struct state_edit e = state_now(r);
	char u[32], s[32];
	struct tenant *t;
	int rc;

	t = admin_tenant(x, &rc);
	if (!t)
		return rc;
	if (t->used_slabs || t->reserved_slabs) {
		memd_log_bytes(mul_sat(t->used_slabs, r->slab_bytes), u,
			       sizeof(u));
		memd_log_bytes(mul_sat(t->reserved_slabs, r->slab_bytes), s,
			       sizeof(s));
		set_err(x->err, x->errlen,
			"tenant '%s' still holds memory: used %s, reserved %s",
			t->name, u, s);
		return -EBUSY;
	}
	e.tenant_del = t->id;
	rc = state_write_logged(r, &e, x->err, x->errlen);
	if (rc)
		return rc;
	memd_log(LOG_NOTICE, "registry: tenant removed name=%s id=%u",
		 memd_log_quote(t->name, logq, sizeof(logq)), t->id);
	/* keep the others in order of id (listings, registry.json) */
	memset(t, 0, sizeof(*t));
	memmove(t, t + 1,
		(size_t)(r->tenant + r->ntenants - (t + 1)) * sizeof(*t));
	memset(&r->tenant[--r->ntenants], 0, sizeof(*t));
	x->reply = json_object();
	return x->reply ? 0 : -ENOMEM;
}

static int admin_quota_get(struct admin_ctx *x)
{
	struct tenant *t;
	int rc;

	t = admin_tenant(x, &rc);
	if (!t)
		return rc;
	x->reply = json_pack(
		"{s:s, s:I, s:I, s:I}", "name", t->name, "quota_bytes",
		(json_int_t)t->quota_bytes, "used_bytes",
		(json_int_t)mul_sat(t->used_slabs, x->r->slab_bytes),
		"reserved_bytes",
		(json_int_t)mul_sat(t->reserved_slabs, x->r->slab_bytes));
	return x->reply ? 0 : -ENOMEM;
}

static int admin_quota_set(struct admin_ctx *x)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	struct state_edit e = state_now(x->r);
	struct tenant *t, nt;
	uint64_t q;
	int rc;

	t = admin_tenant(x, &rc);
	if (!t)
		return rc;
	rc = json_get_uint(x->req, "quota_bytes", 0, INT64_MAX, &q, "", x->err,
			   x->errlen);
	if (rc)
		return rc;
	nt = *t;
	nt.quota_bytes = q;
	e.tenant_put = &nt;
	rc = state_write_logged(x->r, &e, x->err, x->errlen);
	memset(&nt, 0, sizeof(nt));
	if (rc)
		return rc;
	memd_log(LOG_NOTICE,
		 "registry: quota set name=%s quota_bytes=%" PRIu64
		 " was=%" PRIu64,
		 memd_log_quote(t->name, logq, sizeof(logq)), q,
		 t->quota_bytes);
	t->quota_bytes = q;
	x->reply = json_object();
	return x->reply ? 0 : -ENOMEM;
}

/*
 * tenant-set {"name", "prefill_tokens_per_s"?, "bytes_per_token"?}: the
 * tenant's cost model for capacity reports (docs/capacity.md); 0 sets a
 * field back to the donors' memd.conf value. At least one field.
 */
static int admin_tenant_set(struct admin_ctx *x)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	struct state_edit e = state_now(x->r);
	struct tenant *t, nt;
	bool tps = json_object_get(x->req, "prefill_tokens_per_s") != NULL,
	     bpt = json_object_get(x->req, "bytes_per_token") != NULL;
	uint64_t v;
	int rc;

	t = admin_tenant(x, &rc);
	if (!t)
		return rc;
	if (!tps && !bpt) {
		set_err(x->err, x->errlen,
			"tenant-set: give prefill_tokens_per_s or "
			"bytes_per_token (0: the donors' memd.conf value)");
		return -EINVAL;
	}
	nt = *t;
	if (tps) {
		rc = json_get_uint(x->req, "prefill_tokens_per_s", 0,
				   TENANT_TPS_MAX, &v, "", x->err, x->errlen);
		if (rc)
			goto out;
		nt.prefill_tokens_per_s = (uint32_t)v;
	}
	if (bpt) {
		rc = json_get_uint(x->req, "bytes_per_token", 0, TENANT_BPT_MAX,
				   &nt.bytes_per_token, "", x->err, x->errlen);
		if (rc)
			goto out;
	}
	e.tenant_put = &nt;
	rc = state_write_logged(x->r, &e, x->err, x->errlen);
	if (rc)
		goto out;
	memd_log(LOG_NOTICE,
		 "registry: tenant set name=%s prefill_tokens_per_s=%u "
		 "bytes_per_token=%" PRIu64,
		 memd_log_quote(t->name, logq, sizeof(logq)),
		 nt.prefill_tokens_per_s, nt.bytes_per_token);
	t->prefill_tokens_per_s = nt.prefill_tokens_per_s;
	t->bytes_per_token = nt.bytes_per_token;
	x->reply = json_object();
	rc = x->reply ? 0 : -ENOMEM;
out:
	sodium_memzero(&nt, sizeof(nt));
	return rc;
}

static int admin_drain(struct admin_ctx *x)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	struct state_edit e = state_now(x->r);
	char name[WIRE_NAME_MAX];
	struct donor *d, nd;
	bool drain;
	int rc;

	if ((rc = json_get_name(x->req, "donor", name, "", x->err,
				x->errlen)) ||
	    (rc = json_get_bool(x->req, "drain", &drain, "", x->err,
				x->errlen)))
		return rc;
	d = donor_by_name(x->r, name);
	if (!d) {
		set_err(x->err, x->errlen, "no donor '%s'", name);
		return -ENOENT;
	}
	if (d->draining != drain) {
		nd = *d;
		nd.draining = drain;
		e.donor_put = &nd;
		rc = state_write_logged(x->r, &e, x->err, x->errlen);
		if (rc)
			return rc;
		d->draining = drain;
		memd_log(LOG_NOTICE, "registry: donor name=%s id=%u drain=%d",
			 memd_log_quote(d->name, logq, sizeof(logq)), d->id,
			 (int)drain);
		if (d->up)
			donor_set_reason(d, drain ? "drained by an operator"
						  : "drain ended by an "
						    "operator");
	}
	x->reply = json_object();
	return x->reply ? 0 : -ENOMEM;
}

struct admin_cmd {
	const char *name;
	int (*fn)(struct admin_ctx *x);
	const char *fields[4]; /* besides "cmd"; NULL-terminated */
};

static const struct admin_cmd admin_cmds[] = {
	{ "status", admin_status, { NULL } },
	{ "donors", admin_donors, { NULL } },
	{ "tenants", admin_tenants, { NULL } },
	{ "tenant-add",
	  admin_tenant_add,
	  { "name", "quota_bytes", "key_box" } },
	{ "tenant-remove", admin_tenant_remove, { "name", NULL } },
	{ "quota-get", admin_quota_get, { "name", NULL } },
	{ "quota-set", admin_quota_set, { "name", "quota_bytes", NULL } },
	{ "tenant-set",
	  admin_tenant_set,
	  { "name", "prefill_tokens_per_s", "bytes_per_token", NULL } },
	{ "drain", admin_drain, { "donor", "drain", NULL } },
};

static int admin_check_fields(json_t *req, const struct admin_cmd *c, char *err,
			      size_t errlen)
{
	const char *k;
	json_t *v;

	json_object_foreach(req, k, v)
	{
		bool known = !strcmp(k, "cmd");

		for (size_t i = 0; !known && i < 4 && c->fields[i]; i++)
			known = !strcmp(k, c->fields[i]);
		if (!known) {
			set_err(err, errlen, "%s: unknown field '%.64s'",
				c->name, k);
			return -EINVAL;
		}
	}
	return 0;
}

int memd_registry_admin(struct memd_registry *r, json_t *req,
			const uint8_t session_key[AUTH_KEY_LEN],
			uint64_t now_ms, uint64_t now_unix_ms, char *out,
			size_t cap, char *err, size_t errlen)
{
	struct admin_ctx x = {
		.r = r, .session_key = session_key, .err = err, .errlen = errlen
	};
	const struct admin_cmd *c = NULL;
	const char *cmd;
	char *text;
	size_t n;
	int rc;

	(void)now_unix_ms;
	if (!req || !out) {
		set_err(err, errlen, "no request");
		return -EINVAL;
	}
	x.req = req;
	if (!json_is_object(x.req)) {
		set_err(err, errlen, "not a JSON object");
		rc = -EINVAL;
		goto out;
	}
	cmd = json_string_value(json_object_get(x.req, "cmd"));
	if (!cmd) {
		set_err(err, errlen, "missing string field 'cmd'");
		rc = -EINVAL;
		goto out;
	}
	for (size_t i = 0; i < sizeof(admin_cmds) / sizeof(admin_cmds[0]); i++)
		if (!strcmp(cmd, admin_cmds[i].name))
			c = &admin_cmds[i];
	if (!c) {
		set_err(err, errlen, "unknown cmd '%.64s'", cmd);
		rc = -EINVAL;
		goto out;
	}
	rc = admin_check_fields(x.req, c, err, errlen);
	if (rc)
		goto out;
	pthread_mutex_lock(&r->lock);
	if (is_serving_locked(r, now_ms, err, errlen)) {
		expire_locked(r, now_ms);
		rc = c->fn(&x);
	} else {
		rc = -EAGAIN;
	}
	pthread_mutex_unlock(&r->lock);
	if (rc) {
		if (rc == -ENOMEM)
			set_err(err, errlen, "registry: out of memory");
		goto out;
	}
	text = json_dumps(x.reply, JSON_COMPACT);
	if (!text) {
		set_err(err, errlen, "registry: out of memory");
		rc = -ENOMEM;
		goto out;
	}
	n = strlen(text);
	if (n >= cap) {
		set_err(err, errlen, "reply of %zu bytes, room for %zu", n,
			cap ? cap - 1 : 0);
		rc = -ENOSPC;
	} else {
		memcpy(out, text, n + 1);
		rc = (int)n;
	}
	free(text);
out:
	json_decref(x.reply);
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
		s[i].used_bytes = mul_sat(t->used_slabs, r->slab_bytes);
		s[i].reserved_bytes = mul_sat(t->reserved_slabs, r->slab_bytes);
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
		s[i].state = donor_state(d);
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
