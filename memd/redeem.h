/* SPDX-License-Identifier: MIT */
/*
 * memd/redeem.h - a donor's record of redeemed grant tickets: exactly-once
 * redemption (docs/cluster.md, "Exactly-once redemption") in fixed memory
 * and O(1) per ticket, at any redemption rate.
 *
 * The registry numbers grants 1, 2, 3, ... per registry epoch (its
 * incarnation; memd/registry_place.c, one counter under its lock, for all
 * donors). So a donor keeps, per registry epoch, an anti-replay window
 * like IPsec's (RFC 4303, 3.4.3): top, the highest grant id it redeemed,
 * and one bit for each of the window_ids ids up to top. A grant id
 *   > top                      is new: the window slides up to it;
 *   in (top - window_ids, top] is new unless its bit is set;
 *   <= top - window_ids        is refused: it is too old to tell whether
 *                              it was redeemed (-ESTALE: place again).
 * Nothing is forgotten while it can still matter: a slid-out id is
 * refused for ever, never accepted again.
 *
 * At most nepochs registry epochs are remembered. A slot is given to a
 * new epoch when it is free or when every ticket redeemed under its
 * epoch has expired (expires_ms + skew_ms < now): a replay of those is
 * refused as expired, so their bits are no longer needed. This relies on
 * the donor's wall clock not stepping back by more than the skew, as the
 * expiry check itself does. When no slot is free or dead, the one least
 * recently redeemed into (the oldest last expiry) is taken and its epoch
 * *retired*: every ticket of a retired epoch is refused (-ESTALE) until
 * all it redeemed have expired, so nothing is ever accepted twice. A
 * donor redeems only tickets of the registry incarnation it is joined
 * to, and an incarnation that was replaced never serves again (a
 * restarted registry, each etcd election, takes a new epoch), so a
 * retired epoch costs nothing in practice. At most 64 epochs are retired
 * with live tickets at once; past that -EBUSY (more than 68 registry
 * epochs within a ticket's life + skew).
 *
 * Pure bookkeeping: no I/O, no clock reads (callers pass now), no lock:
 * one thread at a time (memd-ctl). Bitmaps are allocated on an epoch's
 * first ticket and kept: at most nepochs * window_ids / 8 bytes.
 */
#ifndef TP_MEMD_REDEEM_H
#define TP_MEMD_REDEEM_H

#include <stdbool.h>
#include <stdint.h>

struct memd_redeem;

/* memd's sizes: 4,194,304 ids (512 KiB) per epoch, 4 epochs. */
#define MEMD_REDEEM_WINDOW_IDS (1u << 22)
#define MEMD_REDEEM_EPOCHS 4u

struct memd_redeem_stats {
	uint64_t redeemed; /* tickets accepted */
	uint64_t replayed; /* -EALREADY */
	uint64_t too_old;  /* -ESTALE: below the window */
	uint64_t busy;	   /* -EBUSY: no epoch slot */
	uint64_t retired;  /* epochs retired with live tickets */
	uint64_t burnt;	   /* refused, recorded by memd_redeem_burn */
	uint32_t epochs;   /* slots holding an epoch */
};

/*
 * Creates an empty record. window_ids: ids remembered per epoch, a power
 * of two >= 64; nepochs >= 1; skew_ms: how long past expires_ms a ticket
 * is still accepted (the caller's rule). Returns 0, -EINVAL (bad sizes),
 * -ENOMEM. *out is NULL on failure.
 */
int memd_redeem_create(uint32_t window_ids, uint32_t nepochs, uint32_t skew_ms,
		       struct memd_redeem **out);
/* Frees r; NULL is a no-op. */
void memd_redeem_destroy(struct memd_redeem *r);

/*
 * Records the redemption of grant grant_id of registry epoch
 * registry_epoch, whose ticket expires at expires_ms (unix ms). Returns
 *   0          first redemption: now recorded;
 *   -EALREADY  redeemed before (a replay);
 *   -ESTALE    grant_id is window_ids or more below the highest id
 *              redeemed in its epoch: too old to check, refused for ever;
 *              *oldest (when not NULL) = the lowest id still checked;
 *              or the epoch was retired (*oldest = 0);
 *   -ETIME     the ticket has expired (now_unix_ms > expires_ms +
 *              skew_ms); callers normally refuse those before;
 *   -EBUSY     nepochs other epochs hold tickets that have not expired
 *              and 64 more are retired with live tickets; retry once
 *              they have expired (at most their life + skew_ms);
 *   -EINVAL    registry_epoch or grant_id is 0 (never issued);
 *   -ENOMEM    no memory for a new epoch's window.
 * Nothing is recorded unless it returns 0. O(1) amortised: sliding the
 * window clears at most window_ids / 64 words, once per id passed.
 */
int memd_redeem_once(struct memd_redeem *r, uint64_t registry_epoch,
		     uint64_t grant_id, uint64_t expires_ms,
		     uint64_t now_unix_ms, uint64_t *oldest);

/*
 * Records grant_id of registry_epoch as spent without redeeming it: a
 * ticket the donor refused for good (and reports to its registry, which
 * then drops the reservation), so that it is never redeemed later. The
 * same checks and returns as memd_redeem_once; counted as burnt, not
 * redeemed. current: the epoch is the one the donor is joined to; only
 * then may it take a live epoch's slot (a burn of another epoch's ticket
 * must not retire the current one: -EBUSY instead). A caller may tell the registry the grant is gone when this
 * returns 0, -ESTALE or -ETIME (refused for ever), not otherwise.
 */
int memd_redeem_burn(struct memd_redeem *r, uint64_t registry_epoch,
		     uint64_t grant_id, uint64_t expires_ms,
		     uint64_t now_unix_ms, bool current);

/* Counters since creation, and the epochs held. */
void memd_redeem_get_stats(const struct memd_redeem *r,
			   struct memd_redeem_stats *st);

#endif
