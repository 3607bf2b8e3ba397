// SPDX-License-Identifier: MIT
/*
 * fabric/fab_ep.c - endpoints: opening one (AV, CQ, endpoint), closing it
 * or quarantining it ("Closing mid-read"), its address and its peers.
 * The design notes and invariants are fabric/fab.c's top comment.
 */
#include "fabric/fab_int.h"

#include <errno.h>
#include <stdlib.h>

static unsigned fab_quarantined; /* endpoints among fab.c's fab_graves */

/* ---- endpoint ------------------------------------------------------ */

/*
 * Opens the CQ. A wait object lets a leader sleep in fi_cq_sread; we ask
 * for FI_WAIT_FD explicitly rather than FI_WAIT_UNSPEC because some
 * providers (shm) answer UNSPEC with FI_WAIT_YIELD, a spin that burns a
 * core. Without one, leaders poll with short sleeps.
 */
static int ep_cq_open(struct fab_ep *ep)
{
	struct fi_cq_attr attr = {
		.format = FI_CQ_FORMAT_CONTEXT,
		.wait_obj = FI_WAIT_FD,
		.wait_cond = FI_CQ_COND_NONE,
	};
	size_t tx_size = ep->d->info->tx_attr->size;
	int ret;

	attr.size = tx_size > ep->max_inflight ? tx_size : ep->max_inflight;
	ep->wait_fd = -1;
	ret = fi_cq_open(ep->d->domain, &attr, &ep->cq, NULL);
	if (ret == 0) {
		int fd = -1;

		ep->cq_can_block = true;
		/* fab_ep_serve blocks in poll(2) on it: a wake-up it sees
		 * is how it knows a peer is active. */
		if (fi_control(&ep->cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0)
			ep->wait_fd = fd;
		return 0;
	}
	attr.wait_obj = FI_WAIT_NONE;
	ep->cq_can_block = false;
	return fab_errno(fi_cq_open(ep->d->domain, &attr, &ep->cq, NULL));
}

static int ep_av_open(struct fab_ep *ep)
{
	struct fi_av_attr attr = { .count = FAB_AV_COUNT };
	enum fi_av_type want = ep->d->info->domain_attr->av_type;
	int ret;

	attr.type = want == FI_AV_UNSPEC ? FI_AV_TABLE : want;
	ret = fi_av_open(ep->d->domain, &attr, &ep->av, NULL);
	if (ret && want == FI_AV_UNSPEC) {
		attr.type = FI_AV_MAP;
		ret = fi_av_open(ep->d->domain, &attr, &ep->av, NULL);
	}
	return fab_errno(ret);
}

/*
 * Opens AV, CQ and endpoint, binds them and enables the endpoint. The CQ
 * is bound for both directions (some providers want an rx CQ to enable);
 * every operation is posted with FI_COMPLETION.
 */
int fab_ep_open(struct fab_domain *d, unsigned max_inflight,
		struct fab_ep **out)
{
	pthread_condattr_t ca;
	struct fab_ep *ep;
	size_t tx_size;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!d)
		return -EINVAL;
	tx_size = d->info->tx_attr->size;
	if (max_inflight == 0) {
		max_inflight = FAB_INFLIGHT_DEFAULT_MAX;
		if (tx_size && tx_size < max_inflight)
			max_inflight = (unsigned)tx_size;
	} else if (tx_size && max_inflight > tx_size) {
		max_inflight = (unsigned)tx_size;
	}

	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -ENOMEM;
	ep->d = d;
	ep->max_inflight = max_inflight;
	ret = -pthread_mutex_init(&ep->mu, NULL);
	if (ret)
		goto free_ep;
	ret = -pthread_mutex_init(&ep->prog_mu, NULL);
	if (ret)
		goto destroy_mu;
	ret = -pthread_condattr_init(&ca);
	if (ret)
		goto destroy_prog_mu;
	ret = -pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (!ret)
		ret = -pthread_cond_init(&ep->prog_cv, &ca);
	pthread_condattr_destroy(&ca);
	if (ret)
		goto destroy_prog_mu;

	pthread_mutex_lock(&fab_ctl_mu);
	ret = ep_av_open(ep);
	if (ret)
		goto unlock;
	ret = ep_cq_open(ep);
	if (ret)
		goto close_av;
	ret = fab_errno(fi_endpoint(d->domain, d->info, &ep->ep, NULL));
	if (ret)
		goto close_cq;
	ret = fab_errno(fi_ep_bind(ep->ep, &ep->av->fid, 0));
	if (ret)
		goto close_ep;
	ret = fab_errno(
		fi_ep_bind(ep->ep, &ep->cq->fid, FI_TRANSMIT | FI_RECV));
	if (ret)
		goto close_ep;
	ret = fab_errno(fi_enable(ep->ep));
	if (ret)
		goto close_ep;
	pthread_mutex_unlock(&fab_ctl_mu);
	*out = ep;
	return 0;

close_ep:
	fi_close(&ep->ep->fid);
close_cq:
	fi_close(&ep->cq->fid);
close_av:
	fi_close(&ep->av->fid);
unlock:
	pthread_mutex_unlock(&fab_ctl_mu);
	pthread_cond_destroy(&ep->prog_cv);
destroy_prog_mu:
	pthread_mutex_destroy(&ep->prog_mu);
destroy_mu:
	pthread_mutex_destroy(&ep->mu);
free_ep:
	free(ep);
	return ret;
}

static bool ep_read_in_flight(struct fab_ep *ep)
{
	bool found = false;

	pthread_mutex_lock(&ep->mu);
	for (struct fab_op *op = ep->live; op && !found; op = op->next_live)
		found = op->kind == FAB_OP_READ;
	pthread_mutex_unlock(&ep->mu);
	return found;
}

/*
 * On a close_hazard provider with a read in flight: progresses ep for up
 * to FAB_CLOSE_DRAIN_MS and returns true when a read is still in flight,
 * i.e. when ep must not be closed ("Closing mid-read"). The caller owns ep
 * (no other thread uses it), so this reads the CQ without the leader role.
 */
static bool ep_must_quarantine(struct fab_ep *ep)
{
	int64_t end;

	if (!ep->d->close_hazard || !ep_read_in_flight(ep))
		return false;
	end = now_ns() + (int64_t)FAB_CLOSE_DRAIN_MS * 1000000;
	for (;;) {
		int ret = fab_ep_cq_poll(ep);

		if (!ep_read_in_flight(ep))
			return false;
		if (ret < 0 || now_ns() >= end)
			return true;
		if (ret == 0)
			sleep_ns(FAB_POLL_SLEEP_MAX_NS / 4);
	}
}

bool fab_domain_close_hazard(const struct fab_domain *d)
{
	return d->close_hazard;
}

unsigned fab_quarantined_eps(void)
{
	unsigned n;

	pthread_mutex_lock(&fab_ctl_mu);
	n = fab_quarantined;
	pthread_mutex_unlock(&fab_ctl_mu);
	return n;
}

/*
 * Closes the provider endpoint first: once fi_close returns the provider
 * no longer touches posted buffers, so what is still on the live list can
 * be completed with -ECANCELED and handed back. Then CQ and AV. A
 * quarantined endpoint is not closed but never progressed again, which
 * holds the same promise ("Closing mid-read").
 */
bool fab_ep_close(struct fab_ep *ep)
{
	struct fab_op *op, *next;
	bool quarantine;

	if (!ep)
		return false;
	quarantine = ep_must_quarantine(ep);
	pthread_mutex_lock(&fab_ctl_mu);
	if (quarantine) {
		fab_grave_add_locked(&ep->ep->fid, &ep->cq->fid, &ep->av->fid);
		ep->d->quarantined++;
		fab_quarantined++;
	} else {
		fi_close(&ep->ep->fid);
	}
	pthread_mutex_unlock(&fab_ctl_mu);

	pthread_mutex_lock(&ep->mu);
	op = ep->live;
	ep->live = NULL;
	ep->inflight = 0;
	ep->broken = true;
	pthread_mutex_unlock(&ep->mu);
	for (; op; op = next) {
		next = op->next_live;
		op->next_live = op->prev_live = NULL;
		op_finish(op, -ECANCELED);
	}

	if (!quarantine) {
		pthread_mutex_lock(&fab_ctl_mu);
		fi_close(&ep->cq->fid);
		fi_close(&ep->av->fid);
		pthread_mutex_unlock(&fab_ctl_mu);
	}
	pthread_cond_destroy(&ep->prog_cv);
	pthread_mutex_destroy(&ep->prog_mu);
	pthread_mutex_destroy(&ep->mu);
	free(ep);
	return quarantine;
}

int fab_ep_name(struct fab_ep *ep, void *addr, size_t *len)
{
	size_t cap;
	int ret;

	if (!ep || !addr || !len)
		return -EINVAL;
	cap = *len;
	ret = fi_getname(&ep->ep->fid, addr, len);
	if (ret == -FI_ETOOSMALL || (ret == 0 && *len > cap))
		return -ENOSPC;
	return fab_errno(ret);
}

int fab_ep_av_insert(struct fab_ep *ep, const void *addr, size_t len,
		     uint64_t *peer)
{
	fi_addr_t fa = FI_ADDR_NOTAVAIL;
	int ret;

	if (!ep || !addr || !len || len > FAB_ADDR_MAX || !peer)
		return -EINVAL;
	ret = fi_av_insert(ep->av, addr, 1, &fa, 0, NULL);
	if (ret < 0)
		return fab_errno(ret);
	if (ret != 1 || fa == FI_ADDR_NOTAVAIL)
		return -EINVAL; /* the provider rejected the address */
	*peer = fa;
	return 0;
}

/*
 * Forgets a peer (a donor that left): its handle becomes invalid and the
 * provider may drop its connection. It does not repair a connection the
 * provider has broken (see fab_ep_read in the header).
 */
int fab_ep_av_remove(struct fab_ep *ep, uint64_t peer)
{
	fi_addr_t fa = peer;

	if (!ep)
		return -EINVAL;
	return fab_errno(fi_av_remove(ep->av, &fa, 1, 0));
}
