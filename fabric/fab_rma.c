// SPDX-License-Identifier: MIT
/*
 * fabric/fab_rma.c - one-sided RMA: posting reads and writes within an
 * endpoint's window, and its counters. The design notes and invariants
 * are fabric/fab.c's top comment.
 */
#include "fabric/fab_int.h"

#include <errno.h>

/* Caller holds ep->mu. */
static void live_link_locked(struct fab_ep *ep, struct fab_op *op)
{
	op->prev_live = NULL;
	op->next_live = ep->live;
	if (ep->live)
		ep->live->prev_live = op;
	ep->live = op;
	/* Atomic only for pred_window_open, which peeks without mu. */
	__atomic_store_n(&ep->inflight, ep->inflight + 1, __ATOMIC_RELAXED);
}

static bool pred_window_open(struct fab_ep *ep, void *arg)
{
	(void)arg;
	return __atomic_load_n(&ep->inflight, __ATOMIC_RELAXED) <
	       ep->max_inflight;
}

/* ---- RMA ----------------------------------------------------------- */

struct rma_args {
	void *buf;
	size_t len;
	void *desc;
	fi_addr_t peer;
	uint64_t raddr;
	uint64_t key;
};

/*
 * Common post path: reserves a window slot (progressing until one frees up),
 * links op, then posts, progressing and retrying while the provider says
 * -FI_EAGAIN (rxm says so until its connection to a new peer is up). On any
 * failure op is unlinked and the slot returned.
 *
 * Writes ask for FI_DELIVERY_COMPLETE: the default, transmit-complete, lets
 * tcp report a write done once the bytes left our socket, before the target
 * has placed them (measured: the target buffer still held the old bytes
 * when the completion came). A client that writes, then commits over the
 * control plane, needs the bytes in place first.
 */
static int ep_post(struct fab_ep *ep, int kind, const struct rma_args *a,
		   struct fab_op *op, int timeout_ms)
{
	int64_t deadline = deadline_after_ms(timeout_ms);
	struct iovec iov = { .iov_base = a->buf, .iov_len = a->len };
	struct fi_rma_iov rma = { .addr = a->raddr,
				  .len = a->len,
				  .key = a->key };
	void *desc = a->desc;
	struct fi_msg_rma msg = {
		.msg_iov = &iov,
		.desc = &desc,
		.iov_count = 1,
		.addr = a->peer,
		.rma_iov = &rma,
		.rma_iov_count = 1,
		.context = op,
	};
	ssize_t fret;
	int ret;

	if (!ep || !op || (!a->buf && a->len))
		return -EINVAL;
	if (a->len > ep->d->max_msg)
		return -EMSGSIZE;

	pthread_mutex_lock(&ep->mu);
	for (;;) {
		if (ep->broken) {
			pthread_mutex_unlock(&ep->mu);
			return -ESHUTDOWN;
		}
		if (ep->inflight < ep->max_inflight)
			break;
		pthread_mutex_unlock(&ep->mu);
		ret = fab_ep_drive(ep, pred_window_open, NULL, deadline,
				   FAB_BLOCK_MAX_MS, NULL);
		if (ret)
			return ret;
		pthread_mutex_lock(&ep->mu);
	}
	op->status = 0;
	op->len = a->len;
	op->kind = kind;
	__atomic_store_n(&op->complete, 0, __ATOMIC_RELAXED);
	live_link_locked(ep, op);
	if (kind == FAB_OP_READ)
		ep->stats.reads++;
	else
		ep->stats.writes++;
	pthread_mutex_unlock(&ep->mu);

	for (;;) {
		if (kind == FAB_OP_READ)
			fret = fi_readmsg(ep->ep, &msg, FI_COMPLETION);
		else
			fret = fi_writemsg(ep->ep, &msg,
					   FI_COMPLETION |
						   FI_DELIVERY_COMPLETE);
		if (fret == 0)
			return 0;
		if (fret != -FI_EAGAIN) {
			ret = fab_errno((int)fret);
			break;
		}
		ret = fab_ep_progress_turn(ep, deadline);
		if (ret)
			break;
	}

	pthread_mutex_lock(&ep->mu);
	live_unlink_locked(ep, op);
	if (kind == FAB_OP_READ)
		ep->stats.reads--;
	else
		ep->stats.writes--;
	pthread_mutex_unlock(&ep->mu);
	/* A waiter for a window slot may be asleep: tell it one is free. */
	pthread_mutex_lock(&ep->prog_mu);
	gen_bump_locked(ep);
	pthread_cond_broadcast(&ep->prog_cv);
	pthread_mutex_unlock(&ep->prog_mu);
	return ret;
}

int fab_ep_read(struct fab_ep *ep, void *buf, size_t len, void *desc,
		uint64_t peer, uint64_t raddr, uint64_t key, struct fab_op *op,
		int timeout_ms)
{
	struct rma_args a = { buf, len, desc, peer, raddr, key };

	return ep_post(ep, FAB_OP_READ, &a, op, timeout_ms);
}

int fab_ep_write(struct fab_ep *ep, const void *buf, size_t len, void *desc,
		 uint64_t peer, uint64_t raddr, uint64_t key, struct fab_op *op,
		 int timeout_ms)
{
	/* fi_write takes a non-const buffer but only reads it. */
	struct rma_args a = { (void *)buf, len, desc, peer, raddr, key };

	return ep_post(ep, FAB_OP_WRITE, &a, op, timeout_ms);
}

void fab_ep_get_stats(struct fab_ep *ep, struct fab_ep_stats *st)
{
	pthread_mutex_lock(&ep->mu);
	*st = ep->stats;
	st->inflight = ep->inflight;
	pthread_mutex_unlock(&ep->mu);
}
