// SPDX-License-Identifier: MIT
/*
 * memd/registry_leader.c - leadership of an etcd registry (registry.h,
 * docs/cluster.md, "The etcd backend"): one lease per registry, kept
 * alive every quarter lease; a campaign for PREFIX/leader under it; on
 * election the state read afresh, a new epoch and a warm-up while donors
 * rejoin (with the previous leader's own donor part waited for until a
 * probe finds it gone); the watch under PREFIX/ that hurries a step or
 * makes this leader step down; resignation. With registry.json there is
 * no election: the registry always serves.
 *
 * Threads: memd-etcd steps the election and resigns (the etcd requests
 * go out without the lock; lease_id is its own); memd-etcdw watches and
 * its events take the lock; any thread asks is_serving.
 *
 * Invariants: a leader serves only until serve_until_ms, a quarter lease
 * before its lease can have expired as of the last keepalive etcd
 * answered; a registry that lost its lease, found the state written by
 * another or was refused the state is not the leader.
 */
#include "memd/registry_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * An etcd registry that takes over answers EAGAIN instead of ENOSPC for
 * this long plus 3 report intervals: a donor whose registry died tries
 * the next one 100 ms later, every 100 ms while only standbys answer,
 * and at most 2 s apart when none answers at all (memd/donor.c); it
 * reports at once after it joined. The margin is for loaded hosts.
 */
#define TAKEOVER_WARM_MS 4000u

void reg_etcd_note_locked(struct memd_registry *r, const char *err)
{
	if (strncmp(r->etcd_err, err, sizeof(r->etcd_err) - 1))
		memd_log(LOG_WARNING, "registry: etcd: %s", err);
	snprintf(r->etcd_err, sizeof(r->etcd_err), "%s", err);
}

bool reg_is_serving_locked(struct memd_registry *r, uint64_t now_ms, char *why,
			   size_t whylen)
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
	ok = reg_is_serving_locked(r, now_ms, why, whylen);
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
		reg_etcd_note_locked(r, err);
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
		reg_etcd_note_locked(r, err);
		pthread_mutex_unlock(&r->lock);
		return idle;
	}
	rc = reg_etcd_state_load_locked(r, err, sizeof(err), NULL);
	if (rc) {
		/* at err once per reason (it names the revision): every
		 * registry campaigns again each lease while it lasts */
		memd_log(strcmp(err, r->load_err) ? LOG_ERR : LOG_DEBUG,
			 "registry: elected, but cannot read the state: %s; "
			 "resigning",
			 err);
		snprintf(r->load_err, sizeof(r->load_err), "%s", err);
		r->campaign_after_ms = now_ms + r->lease_ms;
		reg_etcd_note_locked(r, err);
		pthread_mutex_unlock(&r->lock);
		memd_etcd_lease_revoke(r->etcd, r->lease_id, err, sizeof(err));
		r->lease_id = 0;
		return r->lease_ms;
	}
	do
		auth_random(&r->epoch, sizeof(r->epoch));
	while (!r->epoch);
	r->open_unix_ms = reg_unix_ms();
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
		const struct donor *d = reg_donor_by_name(r, r->leader_donor);

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
