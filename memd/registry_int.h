// SPDX-License-Identifier: MIT
/*
 * memd/registry_int.h - what the files of the registry share: its
 * structures, its limits, and the functions one file calls in another.
 * Private to memd/registry*.c; memd/registry.h is the API. One state
 * machine a file:
 *
 * memd/registry.c         the registry's life (open, close, attaching to
 *                         etcd), the lookups every part uses, tenant
 *                         authentication (keys, passes), /metrics snapshots
 * memd/registry_donors.c  donors: join, report, loss, liveness, and the
 *                         soft state their reports feed (usage, grants,
 *                         KV allowances)
 * memd/registry_place.c   placement: quota check, reservation and signed
 *                         tickets in one step
 * memd/registry_state.c   durable state: registry.json, and PREFIX/state in
 *                         etcd (sealed tenant keys, the MAC); migrate, seal
 * memd/registry_leader.c  leadership on etcd: lease, campaign, takeover,
 *                         the watch, resign; whether this registry serves
 * memd/registry_admin.c   the admin requests (status, donors, tenants,
 *                         tenant-add/-remove/-set, quota-get/-set, drain)
 *
 * Threads: none of their own. memd-ctl joins donors, takes their reports,
 * places and answers admin requests; the metrics thread reads snapshots;
 * a timer calls tick; memd-etcd steps the election and memd-etcdw
 * watches etcd. Everything goes through the one mutex, r->lock; a
 * function named _locked is called with it held.
 *
 * Durable vs soft state: tenants (id, name, key, quota), donor identities
 * (id, name, drain flag) and the id counters are durable; every change to
 * them is first written whole to registry.json (tmp, fsync, rename, fsync
 * of the directory) or to etcd, and only then applied here, so a failed
 * write leaves memory as it was. Everything else (donor incarnations,
 * reports, grants) is soft and rebuilt from the donors after a restart.
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
#ifndef MEMD_REGISTRY_INT_H
#define MEMD_REGISTRY_INT_H

#include "memd/registry.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memd/log.h"

#define MAX_DONORS 1024
#define MAX_TENANTS 65536
#define MISSED_REPORTS 3
struct tenant {
	uint32_t id;
	char name[WIRE_NAME_MAX];
	uint8_t key[AUTH_KEY_LEN];
	uint64_t quota_bytes;
	uint64_t used_slabs;	 /* sum of the counting donors' reports */
	uint64_t reserved_slabs; /* sum of live grants */
	uint64_t kv_slabs;	 /* of used_slabs, KV stores' (same reports) */
	/* A PLACE refused because KV memory fills the quota (cluster.md,
	 * "KV memory and quotas"): the KV allowances leave kv_demand_slabs
	 * free until kv_demand_until_ms (monotonic), or until a PLACE of
	 * the tenant's succeeds, so that its stores yield. */
	uint64_t kv_demand_slabs;
	uint64_t kv_demand_until_ms;
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
	/* The membership this incarnation has acted on (docs/kv.md, "Donors
	 * that come and go"): hears is set for a link of protocol 6, whose
	 * donor confirms each sequence (DONOR_REPORT, WIRE_REPORT_HEARD);
	 * heard is the newest it confirmed, or the one its JOIN_OK carried. A
	 * new sequence is published only once every up donor that hears has
	 * heard it. */
	bool hears;
	uint64_t heard;
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
	/* The membership (docs/kv.md, "Donors that come and go"): the
	 * sequence of the donor list last published (durable, and written
	 * before it is published), and that list, pub[0 .. npub): the ids of
	 * the donors up and not draining when it was written, in id order
	 * (durable too). A registry that loaded them (restarted, or took
	 * over: pub_restored) waits for those donors to join again, until
	 * restored_until_ms (set at its first sync), before it counts one
	 * that has not as gone; until they all have, it publishes no list
	 * (DONORS is EAGAIN: clients keep theirs), and if they all do the
	 * membership goes on unchanged and they keep their KV entries.
	 * pub_valid is false while there is no list (none written yet). */
	uint64_t membership;
	uint32_t *pub;
	size_t npub;
	bool pub_valid;
	bool pub_restored;
	uint64_t restored_until_ms;
	uint64_t pub_retry_ms; /* a write failed: not again before this */
	/* What clients are given (MEMBERS, DONORS): the newest sequence
	 * that every up donor that hears has confirmed (shown; 0: none yet)
	 * and its list, shown_ids[0 .. nshown). A donor's link is given the
	 * newest (membership, pub). members_since_ms: when membership was
	 * written; a donor that has not confirmed it MISSED_REPORTS report
	 * intervals later is marked down. members_dirty: a member restarted
	 * (joined with a new epoch while counted up), so the next sync
	 * writes a new sequence for the same ids. */
	uint64_t shown;
	uint32_t *shown_ids;
	size_t nshown;
	uint64_t members_since_ms;
	bool members_dirty;
};

/* A change to the durable state, applied to the JSON of the current one. */
struct state_edit {
	const struct tenant *tenant_put; /* added, or replaces the same id */
	uint32_t tenant_del;		 /* id, or 0 */
	const struct donor *donor_put;	 /* added, or replaces the same id */
	uint32_t next_tenant_id, next_donor_id;
	uint64_t membership;
	const uint32_t *members; /* the list membership names */
	size_t nmembers;
};

/* memd_errf() (memd/log.h), by the name the registry's files use */
#define set_err memd_errf

/* registry.c: small helpers and lookups */
uint64_t reg_unix_ms(void);
uint64_t reg_mul_sat(uint64_t a, uint64_t b);
struct tenant *reg_tenant_by_id(struct memd_registry *r, uint32_t id);
struct tenant *reg_tenant_by_name(struct memd_registry *r, const char *name);
struct donor *reg_donor_by_id(struct memd_registry *r, uint32_t id);
struct donor *reg_donor_by_name(struct memd_registry *r, const char *name);
int reg_grow(void **arr, size_t *cap, size_t want, size_t elem);
enum memd_donor_state reg_donor_state(const struct donor *d);
void reg_donor_set_reason(struct donor *d, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Opens the etcd client of o and derives the keys under o->etcd_prefix
 * (the seal and MAC keys from the cluster secret). 0 or -errno with err. */
int reg_etcd_attach(struct memd_registry *r, const struct memd_registry_opts *o,
		    char *err, size_t errlen);

/* registry_donors.c */
void reg_expire_locked(struct memd_registry *r, uint64_t now_ms);
/* The KV slabs tenant holds on draining donors (they take no new ones,
 * and keep what they hold). */
uint64_t reg_kv_draining_locked(const struct memd_registry *r, uint32_t tenant);
/* The slabs t's KV allowances leave free now for a refused PLACE (0: no
 * demand, or it expired). */
uint64_t reg_kv_demand_locked(const struct tenant *t, uint64_t now_ms);
/* Publishes a new membership when the donors up and not draining are not
 * the published list: writes its sequence first (a failed write keeps the
 * old list and sequence, and is tried again a second later). Only while
 * serving. */
void reg_members_sync_locked(struct memd_registry *r, uint64_t now_ms);

/* registry_state.c */
struct state_edit reg_state_now(const struct memd_registry *r);
/* Writes the durable state as the current one changed by e (to
 * registry.json or etcd), logging a failure. 0: apply e; -errno with err:
 * apply nothing. */
int reg_state_write_logged(struct memd_registry *r, const struct state_edit *e,
			   char *err, size_t errlen);
int reg_state_load(struct memd_registry *r, char *err, size_t errlen);
int reg_etcd_state_load_locked(struct memd_registry *r, char *err,
			       size_t errlen, bool *unsigned_ok);
/* Members of a JSON object, checked: 0, or -EINVAL with err (where
 * prefixes it). An integer in [min, max]; a name (wire_name_is_valid);
 * true or false. */
int reg_json_get_uint(json_t *o, const char *key, uint64_t min, uint64_t max,
		      uint64_t *v, const char *where, char *err, size_t errlen);
int reg_json_get_name(json_t *o, const char *key, char out[WIRE_NAME_MAX],
		      const char *where, char *err, size_t errlen);
int reg_json_get_bool(json_t *o, const char *key, bool *v, const char *where,
		      char *err, size_t errlen);

/* registry_leader.c */
/* Whether this registry serves now (memd_registry_is_serving). */
bool reg_is_serving_locked(struct memd_registry *r, uint64_t now_ms, char *why,
			   size_t whylen);
/* Records err as the last etcd failure (logged when it is a new one). */
void reg_etcd_note_locked(struct memd_registry *r, const char *err);

#endif
