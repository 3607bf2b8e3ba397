// SPDX-License-Identifier: MIT
/*
 * memd/redeem.c - redeemed grant tickets, one sliding bitmap window per
 * registry epoch (the design and its invariants: memd/redeem.h).
 *
 * Invariants, per slot holding an epoch:
 * - bit (id % window) is set iff id was redeemed and top - window < id
 *   <= top; ids above top have their bits clear (cleared as top passes
 *   them, which is when the id a window below leaves);
 * - last_expires_ms is the latest expires_ms of any ticket redeemed under
 *   the epoch, so once now > last_expires_ms + skew every one of them is
 *   refused as expired and the slot may go to another epoch.
 * A free slot has epoch 0 (registry epochs are never 0).
 * - An epoch whose slot was taken while its tickets were live is in
 *   retired[] until they have all expired: its tickets are refused
 *   (-ESTALE) meanwhile, so nothing it redeemed can be replayed.
 *
 * Used by memd-ctl only; no lock.
 */
#include "memd/redeem.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct epoch_win {
	uint64_t epoch; /* 0: free */
	uint64_t top;	/* highest grant id redeemed; 0: none yet */
	uint64_t last_expires_ms;
	uint64_t *bits; /* window / 64 words, ring indexed by id % window */
};

/* Epochs retired while their tickets were live (see memd_redeem_once). */
#define RETIRED_MAX 64

struct retired {
	uint64_t epoch; /* 0: free */
	uint64_t last_expires_ms;
};

struct memd_redeem {
	uint32_t window; /* ids, power of two >= 64 */
	uint32_t nepochs;
	uint32_t skew_ms;
	struct memd_redeem_stats st;
	struct retired retired[RETIRED_MAX];
	struct epoch_win win[];
};

int memd_redeem_create(uint32_t window_ids, uint32_t nepochs, uint32_t skew_ms,
		       struct memd_redeem **out)
{
	struct memd_redeem *r;

	*out = NULL;
	if (window_ids < 64 || (window_ids & (window_ids - 1)) || !nepochs ||
	    nepochs > 1024)
		return -EINVAL;
	r = calloc(1, sizeof(*r) + nepochs * sizeof(r->win[0]));
	if (!r)
		return -ENOMEM;
	r->window = window_ids;
	r->nepochs = nepochs;
	r->skew_ms = skew_ms;
	*out = r;
	return 0;
}

void memd_redeem_destroy(struct memd_redeem *r)
{
	if (!r)
		return;
	for (uint32_t i = 0; i < r->nepochs; i++)
		free(r->win[i].bits);
	free(r);
}

static bool win_is_dead(const struct memd_redeem *r, const struct epoch_win *w,
			uint64_t now_unix_ms)
{
	return w->last_expires_ms + r->skew_ms < now_unix_ms;
}

/* Whether epoch was retired and may still have live tickets. */
static bool is_retired(const struct memd_redeem *r, uint64_t epoch,
		       uint64_t now_unix_ms)
{
	for (uint32_t i = 0; i < RETIRED_MAX; i++)
		if (r->retired[i].epoch == epoch &&
		    r->retired[i].last_expires_ms + r->skew_ms >= now_unix_ms)
			return true;
	return false;
}

/* Retires w's epoch (its tickets live): false when retired[] has no
 * entry free or dead. */
static bool retire(struct memd_redeem *r, const struct epoch_win *w,
		   uint64_t now_unix_ms)
{
	for (uint32_t i = 0; i < RETIRED_MAX; i++) {
		struct retired *x = &r->retired[i];

		if (!x->epoch ||
		    x->last_expires_ms + r->skew_ms < now_unix_ms) {
			x->epoch = w->epoch;
			x->last_expires_ms = w->last_expires_ms;
			r->st.retired++;
			return true;
		}
	}
	return false;
}

/* The slot of epoch, or a free or dead one given to it; failing that,
 * with evict, the live one least recently redeemed into, its epoch
 * retired. NULL: none (-EBUSY), or -ESTALE (epoch retired), -ENOMEM. */
static struct epoch_win *win_for(struct memd_redeem *r, uint64_t epoch,
				 uint64_t now_unix_ms, bool evict, int *err)
{
	struct epoch_win *pick = NULL;
	size_t words = r->window / 64;

	for (uint32_t i = 0; i < r->nepochs; i++)
		if (r->win[i].epoch == epoch)
			return &r->win[i];
	if (is_retired(r, epoch, now_unix_ms)) {
		*err = -ESTALE;
		return NULL;
	}
	/* A free slot first; else the dead one that died first. */
	for (uint32_t i = 0; i < r->nepochs; i++) {
		struct epoch_win *w = &r->win[i];

		if (!w->epoch) {
			pick = w;
			break;
		}
		if (win_is_dead(r, w, now_unix_ms) &&
		    (!pick || w->last_expires_ms < pick->last_expires_ms))
			pick = w;
	}
	if (!pick && evict) {
		for (uint32_t i = 0; i < r->nepochs; i++)
			if (!pick ||
			    r->win[i].last_expires_ms < pick->last_expires_ms)
				pick = &r->win[i];
		if (!retire(r, pick, now_unix_ms))
			pick = NULL;
	}
	if (!pick) {
		*err = -EBUSY;
		return NULL;
	}
	if (!pick->bits) {
		pick->bits = calloc(words, sizeof(uint64_t));
		if (!pick->bits) {
			*err = -ENOMEM;
			return NULL;
		}
	} else {
		memset(pick->bits, 0, words * sizeof(uint64_t));
	}
	if (!pick->epoch)
		r->st.epochs++;
	pick->epoch = epoch;
	pick->top = 0;
	pick->last_expires_ms = 0;
	return pick;
}

/* Clears the bits of ids first .. first + n - 1 (n < window). */
static void clear_ids(struct memd_redeem *r, struct epoch_win *w,
		      uint64_t first, uint64_t n)
{
	while (n) {
		uint32_t pos = (uint32_t)(first & (r->window - 1));
		uint32_t off = pos % 64;
		uint64_t cnt = 64 - off < n ? 64 - off : n;
		uint64_t mask = cnt == 64 ? ~0ull : ((1ull << cnt) - 1) << off;

		w->bits[pos / 64] &= ~mask;
		first += cnt;
		n -= cnt;
	}
}

static int record(struct memd_redeem *r, uint64_t registry_epoch,
		  uint64_t grant_id, uint64_t expires_ms, uint64_t now_unix_ms,
		  uint64_t *oldest, bool evict)
{
	struct epoch_win *w;
	uint64_t *word, bit;
	int err = 0;

	if (!registry_epoch || !grant_id)
		return -EINVAL;
	if (now_unix_ms > expires_ms + r->skew_ms)
		return -ETIME;
	w = win_for(r, registry_epoch, now_unix_ms, evict, &err);
	if (!w) {
		if (err == -EBUSY)
			r->st.busy++;
		if (err == -ESTALE) {
			if (oldest)
				*oldest = 0;
			r->st.too_old++;
		}
		return err;
	}
	if (w->top >= r->window && grant_id <= w->top - r->window) {
		if (oldest)
			*oldest = w->top - r->window + 1;
		r->st.too_old++;
		return -ESTALE;
	}
	word = &w->bits[(grant_id & (r->window - 1)) / 64];
	bit = 1ull << (grant_id % 64);
	if (grant_id <= w->top && (*word & bit)) {
		r->st.replayed++;
		return -EALREADY;
	}
	if (grant_id > w->top) {
		uint64_t n = grant_id - w->top;

		if (n >= r->window)
			memset(w->bits, 0, r->window / 8);
		else
			clear_ids(r, w, w->top + 1, n);
		w->top = grant_id;
	}
	*word |= bit;
	if (expires_ms > w->last_expires_ms)
		w->last_expires_ms = expires_ms;
	r->st.redeemed++;
	return 0;
}

int memd_redeem_once(struct memd_redeem *r, uint64_t registry_epoch,
		     uint64_t grant_id, uint64_t expires_ms,
		     uint64_t now_unix_ms, uint64_t *oldest)
{
	return record(r, registry_epoch, grant_id, expires_ms, now_unix_ms,
		      oldest, true);
}

int memd_redeem_burn(struct memd_redeem *r, uint64_t registry_epoch,
		     uint64_t grant_id, uint64_t expires_ms,
		     uint64_t now_unix_ms, bool current)
{
	int rc = record(r, registry_epoch, grant_id, expires_ms, now_unix_ms,
			NULL, current);

	if (!rc) {
		r->st.redeemed--;
		r->st.burnt++;
	}
	return rc;
}

void memd_redeem_get_stats(const struct memd_redeem *r,
			   struct memd_redeem_stats *st)
{
	*st = r->st;
}
