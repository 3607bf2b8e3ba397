/* SPDX-License-Identifier: MIT */
/*
 * memd/registry.h - the pool's directory, kept by the memd that runs with
 * `registry = yes` (docs/cluster.md): tenants (name, key, quota), donors
 * (identity, address, state, what they report), placement of new slabs
 * over donors under quotas, and the admin requests poolctl sends.
 *
 * No sockets. Callers pass the clocks that decide anything: now_ms
 * (monotonic: donor liveness, grant expiry) and now_unix_ms
 * (CLOCK_REALTIME: ticket and pass expiry, which donors check against
 * their own clocks). The registry reads CLOCK_REALTIME itself only for
 * the display timestamps of donor states (since_unix_ms). One mutex inside: any thread (memd-ctl
 * places and takes reports, the metrics thread reads).
 *
 * Durable state (tenants with their keys and quotas, donor identities and
 * their drain flags, the id counters) lives in STATE_DIR/registry.json. A
 * change is written to a temporary file, fsync'ed and renamed over the old
 * one (and the directory fsync'ed) BEFORE it is applied in memory: when
 * the write fails the call returns -EIO and nothing changed. Usage is
 * soft state: the sum of what donors report (DONOR_REPORT) plus grants
 * issued and not yet redeemed; after a restart it is rebuilt from the
 * donors' reports, never read from disk.
 *
 * The etcd backend (registry = etcd; docs/cluster.md, "The etcd
 * backend") keeps the same durable state in etcd instead, under
 * PREFIX/state, each tenant key sealed with a key derived from the
 * cluster secret; a write is one etcd transaction that succeeds only if
 * the state is still at the revision this registry read (else -EAGAIN,
 * nothing applied). Any number of memds run the registry role on one
 * etcd: they elect one leader through a key under an etcd lease
 * (PREFIX/leader), and only the leader serves (places, takes donors,
 * answers admin requests) while its lease is sure to be alive; the others
 * are standbys that answer -EAGAIN naming the leader, and take over, with
 * a new registry epoch and the state read afresh from etcd, when its
 * lease expires. memd_registry_etcd_step drives the election.
 */
#ifndef TP_MEMD_REGISTRY_H
#define TP_MEMD_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fabric/auth.h"
#include "fabric/wire.h"
#include "memd/etcd.h"

struct memd_registry;
struct json_t; /* jansson's */

struct memd_registry_opts {
	const char *state_dir;	/* must exist; registry.json lives there */
	uint64_t slab_bytes;	/* every donor must use this slab size */
	uint32_t report_ms;	/* donors report this often; down after 3x */
	uint32_t ticket_ttl_ms; /* grant tickets expire after this (30 s) */
	uint32_t pass_ttl_ms;	/* donor passes expire after this */
	/* the cluster keys (tickets are signed with keys->ticket) */
	const struct auth_cluster_keys *keys;
	/* The etcd backend: NULL for registry.json in state_dir. */
	const struct memd_etcd_opts *etcd;
	const char *etcd_prefix; /* keys live under it: "/tidepool" */
	uint32_t etcd_lease_ms;	 /* the leader's lease (whole seconds) */
	const char *advertise;	 /* this registry's address, for the others */
	const char *self_donor;	 /* its own donor part's name (or NULL) */
};

/*
 * Loads STATE_DIR/registry.json (a missing file is an empty registry; a
 * corrupt one is an error, never silently replaced) and starts a new
 * registry epoch (random). Returns 0 and *out, or -errno with err naming
 * the file and the problem (-EINVAL: corrupt or wrong version, -EACCES,
 * -ENOTDIR, -ENOENT for a missing state_dir, -ENOMEM).
 */
int memd_registry_open(const struct memd_registry_opts *o, uint64_t now_ms,
		       struct memd_registry **out, char *err, size_t errlen);
void memd_registry_close(struct memd_registry *r);
/* The current registry epoch (an etcd registry takes a new one each time
 * it becomes the leader). Thread-safe. */
uint64_t memd_registry_epoch(struct memd_registry *r);

/*
 * Whether this registry serves requests now: always with registry.json;
 * with etcd, while it is the leader and its lease is sure to be alive
 * (the last keepalive etcd answered, sent at t, makes it sure until
 * t + lease - lease/4). When not, why says so and names the leader if
 * known ("standby: the leader is HOST:PORT"). Thread-safe.
 */
bool memd_registry_is_serving(struct memd_registry *r, uint64_t now_ms,
			      char *why, size_t whylen);

/*
 * One step of the etcd election (a no-op with registry.json): keeps this
 * registry's lease alive, and when no registry holds PREFIX/leader takes
 * it, reads the state afresh from etcd and starts a new epoch (every
 * donor must join again; until every known donor has reported, for at
 * most 4 s and 3 report intervals, PLACE answers -EAGAIN, and -EAGAIN
 * rather than -ENOSPC until that time is over). Blocks on
 * etcd (at most its timeout per endpoint). Returns the ms to wait before
 * the next step. Call from one thread (memd-etcd).
 */
uint32_t memd_registry_etcd_step(struct memd_registry *r, uint64_t now_ms);
/* Gives up leadership (revokes the lease): at a clean shutdown. */
void memd_registry_etcd_resign(struct memd_registry *r);

/*
 * Watches PREFIX/ (memd_etcd_watch; blocks up to max_ms or until *stop):
 * PREFIX/leader deleted (a resignation, an expired lease) or written by
 * another asks memd-etcd to step at once (memd_registry_etcd_kicked)
 * instead of at its next quarter-lease step; PREFIX/state written or
 * deleted by anyone else while this registry leads makes it step down at
 * once (as when its own next write finds the state changed). The
 * quarter-lease steps stay: a watch only makes them sooner. *rev: as
 * memd_etcd_watch. 0, -EIO with err (watch again later).
 */
int memd_registry_etcd_watch(struct memd_registry *r, int64_t *rev,
			     uint32_t max_ms, const volatile int *stop,
			     char *err, size_t errlen);
/* Whether a watch event asked for a step since the last call. */
bool memd_registry_etcd_kicked(struct memd_registry *r);

/*
 * After a takeover, the previous leader's own donor part (named in
 * PREFIX/leader) is waited for like any donor (it may be alive, only cut
 * off etcd, and hold leases) until memd-etcd finds its registry gone.
 * memd_registry_etcd_old_leader: whether to probe it now (this registry
 * leads, is in its warm-up, has not found it gone nor heard from its
 * donor part), and its address; memd_registry_etcd_old_leader_gone: a
 * probe found nothing listening there. Thread-safe.
 */
bool memd_registry_etcd_old_leader(struct memd_registry *r, char *addr,
				   size_t cap, uint64_t now_ms);
void memd_registry_etcd_old_leader_gone(struct memd_registry *r,
					const char *why);

/*
 * Copies the registry.json in o->state_dir into etcd (o->etcd,
 * o->etcd_prefix), tenant keys sealed. Only into an etcd that has no
 * registry state yet: -EEXIST otherwise (err says so; nothing written).
 * 0 with *ntenants, *ndonors copied; -errno with err.
 */
int memd_registry_migrate(const struct memd_registry_opts *o, size_t *ntenants,
			  size_t *ndonors, char *err, size_t errlen);

/*
 * memd --seal-registry: adds the MAC to etcd's PREFIX/state written by a
 * memd before the state was authenticated (docs/cluster.md, "Migration"),
 * after the old checks (every tenant key opens with the cluster secret,
 * the document is well formed), if it has not changed meanwhile. 0 with
 * *already true when it verifies already (nothing written); 0 having
 * sealed it; -ENOENT (no state), -EPERM (it has a MAC that does not
 * verify: never re-sealed), -EINVAL (corrupt), -EAGAIN (it changed
 * meanwhile), -EIO, with err. On 0, *listing (free it; may be NULL) lists
 * the tenants and donors, for the operator to check.
 */
int memd_registry_seal_etcd(const struct memd_registry_opts *o, bool *already,
			    char **listing, char *err, size_t errlen);

/* Authentication: a tenant's id and key by name. 0 or -ENOENT. */
int memd_registry_tenant_key(struct memd_registry *r, const char *name,
			     uint32_t *id, uint8_t key[AUTH_KEY_LEN]);

/*
 * A donor joins (or rejoins after a restart: same name, new epoch). Its
 * identity (name -> donor id) is durable; its address, epoch and capacity
 * are not. A donor joining under a name that is up with another epoch
 * replaces that incarnation (whose leases are lost). Fills *ok. Returns 0,
 * -EINVAL (slab size differs from the registry's; err says both), -EIO
 * (could not persist a new identity), -ENOSPC (too many donors).
 */
int memd_registry_donor_join(struct memd_registry *r,
			     const struct wire_donor_join *j, uint64_t now_ms,
			     struct wire_donor_join_ok *ok, char *err,
			     size_t errlen);
/*
 * A donor's report: its free slabs, per-tenant usage and the grants it
 * is done with since its last acknowledged report (redeemed, their slabs
 * in this report's usage, or refused for good: either way no longer
 * reserved). Fills *ok (the drain flag tells the donor to lease nothing
 * new; on etcd, WIRE_DONOR_FENCE and how long it may redeem this epoch's
 * tickets). -ESTALE: unknown donor id or an epoch other than the one it
 * joined with (the donor must join again).
 */
int memd_registry_donor_report(struct memd_registry *r,
			       const struct wire_donor_report *rep,
			       uint64_t now_ms, struct wire_donor_report_ok *ok,
			       char *err, size_t errlen);
/* The donor's link negotiated protocol 6: it confirms each new
 * membership in its reports (WIRE_REPORT_HEARD), and no sequence is given
 * to clients before it has (docs/kv.md). Call after its JOIN. */
void memd_registry_donor_hears(struct memd_registry *r, uint32_t donor_id,
			       uint64_t epoch);
/* The donor's link to us closed: marks that incarnation down at once,
 * with why as the reason. Unknown (id, epoch): no-op. */
void memd_registry_donor_lost(struct memd_registry *r, uint32_t donor_id,
			      uint64_t epoch, uint64_t now_ms, const char *why);
/* Marks donors that missed 3 reports down; drops expired grants. Call
 * every ~100 ms. */
void memd_registry_tick(struct memd_registry *r, uint64_t now_ms);
/*
 * memd-ctl's loop woke gap_ms after it last woke. A gap far longer than
 * its tick means this process did not run (stopped, a paused VM, a pass
 * that blocked): the donors' reports waited in their sockets, and their
 * silence over that time is ours. Of a gap over half the liveness limit
 * (3 report intervals), the part above that half is added to every up
 * donor's last report, so that the reports that waited are read before
 * anyone is marked down; a registry whose every pass is slow still
 * counts half a limit of silence per pass and marks a dead donor down.
 * Call before handling what the loop woke for. Thread-safe.
 */
void memd_registry_loop_gap(struct memd_registry *r, uint64_t gap_ms);

/*
 * Places req->nslabs slabs (twice as many with WIRE_PLACE_REPLICA, the
 * copy of each slab on another donor) for tenant_id, and fills *out with
 * one signed ticket per donor used and the per-slab layout. Atomic with
 * respect to every other place: the quota check and the reservation are
 * one step, so concurrent requests cannot overshoot. Striping: each slab
 * goes to the up donor with the most free slabs left (after this
 * request's earlier slabs; lowest id on a tie), so large regions spread
 * over donors; a draining or down donor gets nothing. Returns 0, or
 *   -EDQUOT  (used + reserved + asked) * slab_bytes > quota; err says all
 *            three
 *   -ENOSPC  not enough free slabs on up donors (or no second donor for
 *            a replica); err says how many are free
 *   -EINVAL  bad flags or nslabs, node no up donor serves
 *   -ENOENT  no such tenant (removed since it authenticated)
 *   -EAGAIN  an etcd registry that is not serving (a standby, or a
 *            leader unsure of its lease), or one that just took over
 *            and would answer -ENOSPC while donors rejoin: place at
 *            another registry, or again
 */
int memd_registry_place(struct memd_registry *r, uint32_t tenant_id,
			const struct wire_place *req, uint64_t now_ms,
			uint64_t now_unix_ms, struct wire_place_ok *out,
			char *err, size_t errlen);

/*
 * A donor pass for a tenant that just authenticated: fills *p (random key,
 * expiry now_unix_ms + pass_ttl_ms) . 0 or -ENOENT.
 */
int memd_registry_make_pass(struct memd_registry *r, uint32_t tenant_id,
			    uint64_t now_unix_ms, struct auth_pass *p);

/*
 * One admin request (docs/cluster.md, "Admin requests": a JSON object
 * with "cmd"), already parsed by the caller (memd's server parses it
 * once, with JSON_REJECT_DUPLICATES, and says why when it cannot);
 * borrowed: the caller keeps and frees req. From an authenticated
 * "@admin" session whose session key is session_key (tenant-add's
 * key_box is sealed with it). Writes the JSON reply (NUL-terminated) to
 * out and returns its length, or -errno with err for the ERROR text:
 *   -EINVAL  req NULL or not an object, unknown cmd, a missing or bad
 *            field
 *   -ENOENT  no such tenant / donor
 *   -EEXIST  tenant-add of an existing name
 *   -EBUSY   tenant-remove of a tenant that still holds memory
 *   -EIO     the state file could not be written (nothing changed)
 *   -ENOSPC  out too small
 */
int memd_registry_admin(struct memd_registry *r, struct json_t *req,
			const uint8_t session_key[AUTH_KEY_LEN],
			uint64_t now_ms, uint64_t now_unix_ms, char *out,
			size_t cap, char *err, size_t errlen);

/* For /metrics: a snapshot of every tenant and donor. */
struct memd_registry_tenant_info {
	uint32_t id;
	char name[WIRE_NAME_MAX];
	uint64_t quota_bytes;
	uint64_t used_bytes;	 /* reported by donors */
	uint64_t reserved_bytes; /* granted, not yet redeemed */
};
enum memd_donor_state {
	MEMD_DONOR_UP = 0,
	MEMD_DONOR_DRAINING,
	MEMD_DONOR_DOWN,
};
struct memd_registry_donor_info {
	uint32_t id;
	char name[WIRE_NAME_MAX];
	char addr[WIRE_HOSTPORT_MAX];
	enum memd_donor_state state;
	char reason[128];
	uint64_t since_unix_ms; /* when state last changed */
	uint64_t epoch;
	uint32_t slabs_total, slabs_free, slabs_leased;
	uint64_t bytes_read, bytes_written;
};
void memd_registry_foreach_tenant(
	struct memd_registry *r,
	void (*fn)(void *arg, const struct memd_registry_tenant_info *t),
	void *arg);
void memd_registry_foreach_donor(
	struct memd_registry *r,
	void (*fn)(void *arg, const struct memd_registry_donor_info *d),
	void *arg);
const char *memd_donor_state_name(enum memd_donor_state s);

/*
 * The published donor list and its membership sequence (DONORS_OK,
 * MEMBERS_OK; docs/kv.md, "Donors that come and go"), published anew
 * first when the donors up and not draining changed, and given out only
 * once every up donor whose link hears (memd_registry_donor_hears) has
 * confirmed it (newest: a donor's link, the newest sequence written,
 * confirmed or not). Fills out (at most
 * WIRE_MAX_DONORS entries; *nlisted gets how many the list has). 0, or
 * -EAGAIN with err: not serving, no list written yet, or the list loaded
 * with the state (a restart, a takeover) still has donors that have not
 * joined again (for at most MISSED_REPORTS + 1 report intervals and
 * 3 s).
 */
int memd_registry_members(struct memd_registry *r, uint64_t now_ms, bool newest,
			  struct wire_donors_ok *out, uint32_t *nlisted,
			  char *err, size_t errlen);
/* The newest membership sequence written (0: none yet): memd-ctl tells
 * the donors' links of protocol 6 when it changes (DONOR_NEWS). */
uint64_t memd_registry_membership(struct memd_registry *r);

#endif
