/* SPDX-License-Identifier: MIT */
/*
 * memd/donor.h - a donor's link to its registry (docs/cluster.md,
 * "Donors"): the thread memd-donor connects, authenticates as "@donor",
 * joins, and reports (at least every report_ms, and soon after
 * memd_donor_kick), reconnecting with backoff whenever the registry is
 * away. The memd keeps serving while it is: the link only matters for
 * new tickets.
 *
 * memd-ctl asks the link what a ticket must match (memd_donor_state) and
 * queues the grants it redeemed (memd_donor_redeemed); the link sends them
 * in its next report and forgets them once the registry acknowledged it.
 * The registry's answer to each report carries per-tenant KV allowances,
 * which memd-ctl reads with memd_donor_kv_allowance.
 * One mutex inside; the snapshot callback runs on memd-donor.
 */
#ifndef TP_MEMD_DONOR_H
#define TP_MEMD_DONOR_H

#include <stdbool.h>
#include <stdint.h>

#include "fabric/auth.h"
#include "fabric/wire.h"

struct memd_donor;

struct memd_donor_opts {
	const char *registry;  /* "host:port[,host:port...]": the registries,
				* tried in turn (at most 9) */
	const char *name;      /* donor name (durable identity) */
	const char *advertise; /* "host:port" for clients; "" = listen */
	const char *listen;    /* memd's bound control address */
	uint8_t donor_key[AUTH_KEY_LEN];
	uint64_t epoch;
	uint64_t slab_bytes;
	uint32_t slabs_total;
	uint16_t nnodes;
	struct wire_node_slabs node[WIRE_MAX_NODES];
	/*
	 * Fills rep's counters and tenants (not donor_id, epoch, redeemed):
	 * called on memd-donor for every report, after the redeemed ids were
	 * taken, so a redeemed grant is always in the counts it travels with.
	 */
	void (*snapshot)(void *arg, struct wire_donor_report *rep);
	void *arg;
};

/* Starts memd-donor. 0, or -errno with err. */
int memd_donor_start(const struct memd_donor_opts *o, struct memd_donor **out,
		     char *err, size_t errlen);
void memd_donor_stop(struct memd_donor *d);

/* Report soon (coalesced: at most one report per 50 ms). Any thread. */
void memd_donor_kick(struct memd_donor *d);

/*
 * What a ticket must match: false while not joined; else the donor id and
 * the registry epoch of the current membership, and whether the registry
 * asked us to drain.
 */
bool memd_donor_state(struct memd_donor *d, uint32_t *donor_id,
		      uint64_t *registry_epoch, bool *drain);

/*
 * How many times the registry has started to drain this donor, as the
 * link has seen it (a JOIN_OK or REPORT_OK saying drain where the link
 * did not know it draining: a drain begun, or a memd started while its
 * donor is draining). memd-ctl forgets its KV entries at each one
 * (docs/kv.md, "Drain"). Any thread.
 */
uint64_t memd_donor_drain_starts(struct memd_donor *d);

/*
 * Whether the registry certainly counts this donor up now: joined on the
 * link in use, and the last JOIN_OK or REPORT_OK read within 2.5 report
 * intervals (the registry marks a donor down after 3 missed reports).
 * *joins gets how many JOIN_OKs the link has read that began a new
 * membership: after the registry restarted or marked this donor down (or
 * at start), unless the JOIN_OK carries the membership sequence the link
 * last read (protocol 5: nothing changed meanwhile). *membership (may be
 * NULL) gets that sequence as of the last JOIN_OK or REPORT_OK (0: the
 * registry sends none). memd-ctl serves KV only while this is true and forgets its
 * KV entries at each new membership (docs/kv.md, "Donors that come and
 * go"). Any thread.
 */
bool memd_donor_membership(struct memd_donor *d, uint64_t *joins,
			   uint64_t *membership);
/* How long ago (ms) the registry last answered a report (UINT64_MAX:
 * never), and the report interval in *interval_ms. Any thread. */
uint64_t memd_donor_report_age_ms(struct memd_donor *d, unsigned *interval_ms);

/*
 * The donor list (names, *n of them, WIRE_MAX_DONORS at most) the link
 * fetched (MEMBERS) after it read a new membership sequence; returns that
 * list's sequence (0: none yet). self gets this donor's name. Any thread.
 */
uint64_t memd_donor_members(struct memd_donor *d, char (*names)[WIRE_NAME_MAX],
			    uint16_t *n, char *self, size_t selflen);

/*
 * memd-ctl has acted on the donor list of membership (memd_donor_members):
 * it refuses requests routed by an older one, and has forgotten the keys
 * that list no longer ranks it first or second for; UINT64_MAX when it
 * keeps no KV. On links of protocol 6 the link confirms to the registry
 * the membership it last read once memd-ctl has acted on it (or on a
 * newer list), and the registry gives a new list to clients only once
 * every donor has (docs/kv.md, "Donors that come and go"). Reports soon
 * when that confirms more than the last report did. Any thread.
 */
void memd_donor_applied(struct memd_donor *d, uint64_t membership);

/*
 * The most KV slabs this donor may hold for tenant (docs/cluster.md, "KV
 * memory and quotas"): true with *max_slabs from the registry's last
 * REPORT_OK; false when the registry has not said (not joined, no report
 * answered since the last join, or the tenant not listed). Any thread.
 */
/*
 * Whether the registry has removed tenant: its last REPORT_OK listed every
 * tenant and a next tenant id above tenant, and tenant was not listed
 * (ids are never reused, so this is for good). False when it cannot tell
 * (no such report yet, or more tenants than a report lists). *reports
 * (may be NULL) gets how many REPORT_OKs the link has read, so memd-ctl
 * can look again only after a new one. Any thread.
 */
bool memd_donor_tenant_removed(struct memd_donor *d, uint32_t tenant,
			       uint64_t *reports);
bool memd_donor_kv_allowance(struct memd_donor *d, uint32_t tenant,
			     uint32_t *max_slabs);

/* Queues a redeemed grant id for the next report. -EBUSY when the queue
 * (4096 ids) is full because the registry has not acknowledged reports. */
int memd_donor_redeemed(struct memd_donor *d, uint64_t grant_id);

/*
 * Fencing (docs/cluster.md, "Fencing"): may a ticket of registry_epoch be
 * redeemed now (now_ms: CLOCK_MONOTONIC)? True when joined to that epoch
 * and either the registry sets no fence (registry = yes) or its last
 * REPORT_OK's fence_ms, counted from when that report was sent, has not
 * run out. False otherwise, *late_ms (may be NULL) = how long the fence
 * has been out (0 when not joined to that epoch). Any thread.
 */
bool memd_donor_fence(struct memd_donor *d, uint64_t registry_epoch,
		      uint64_t now_ms, uint64_t *late_ms);

/*
 * A ticket of registry_epoch refused for good (its id already burnt in
 * the replay record, so it can never be redeemed here): reported in
 * redeemed[] to that registry epoch when joined to it, so that the
 * registry drops its reservation; dropped once expired (expires_ms,
 * unix ms, + 60 s) while joined to another. Reports soon when joined to
 * that epoch. -EBUSY when 1024 such tickets wait (then do not burn it:
 * memd_donor_refused_room first). Any thread.
 */
int memd_donor_refused(struct memd_donor *d, uint64_t registry_epoch,
		       uint64_t grant_id, uint64_t expires_ms);
bool memd_donor_refused_room(struct memd_donor *d);

#endif
