// SPDX-License-Identifier: MIT
/*
 * libpool/gpu_direct.c - the direct path of GPU prefetch (FI_HMEM): when
 * the session's provider can reach device memory, the engine opens its
 * own fabric endpoint to memd's endpoints, registers each transfer's
 * device range, and a chunk is one RMA straight between a lease and the
 * device. The worker (gpu_pipeline.c) drives the chunks; this file
 * decides the path and says where each chunk goes.
 *
 * Threads: gpu_direct_choose() runs in pool_gpu_open()'s caller; the rest
 * in the worker.
 */
#include "libpool/gpu_int.h"

#include <errno.h>
#include <string.h>

#include "libpool/log.h"

static int force_hmem; /* gpu_test_force_hmem() */

void gpu_test_force_hmem(int on)
{
	__atomic_store_n(&force_hmem, on != 0, __ATOMIC_RELAXED);
}

/*
 * Decides the path: direct when the session's provider reports FI_HMEM
 * (a domain asked for FAB_HMEM_CUDA opens), or gpu_test_force_hmem() says
 * to act as if; then opens the engine's own endpoint to every memd
 * endpoint. Returns 0 (direct or not), or -errno when
 * POOL_GPU_DIRECT_ON cannot be honoured.
 */
int gpu_direct_choose(struct pool_gpu *g, const struct pool_gpu_opts *o)
{
	struct fab_opts fo = { 0 };
	const uint8_t *addr;
	uint16_t alen;
	const char *prov;
	bool forced = __atomic_load_n(&force_hmem, __ATOMIC_RELAXED);
	int r, node;

	if (o->direct == POOL_GPU_DIRECT_OFF)
		return 0;
	pool_session_fabric(g->p, &prov, &addr, &alen);
	fo.provider = prov;
	fo.hmem = FAB_HMEM_CUDA;
	r = fab_domain_open(&fo, &g->fd);
	if (r == -ENODATA && forced) {
		fo.hmem = 0;
		r = fab_domain_open(&fo, &g->fd);
	}
	if (r) {
		g->fd = NULL;
		pool_log(LOG_INFO, "gpu: direct: provider=%s %s%s; staging",
			 prov, r == -ENODATA ? "reports no FI_HMEM" : "err=",
			 r == -ENODATA ? "" : strerror(-r));
		return o->direct == POOL_GPU_DIRECT_ON ? -EOPNOTSUPP : 0;
	}
	g->hmem_iface = g->kind == POOL_GPU_CUDA ? FAB_HMEM_CUDA : 0;
	g->max_msg = fab_domain_max_msg(g->fd);
	g->npeers = pool_session_nendpoints(g->p);
	r = fab_ep_open(g->fd, g->count, &g->fep);
	for (uint16_t i = 0; !r && i < g->npeers; i++) {
		r = pool_session_endpoint(g->p, i, &node, &addr, &alen);
		if (!r)
			r = fab_ep_av_insert(g->fep, addr, alen, &g->peer[i]);
	}
	if (r) {
		pool_log(LOG_WARNING,
			 "gpu: direct: endpoint provider=%s err=%s",
			 fab_domain_provider(g->fd), strerror(-r));
		fab_ep_close(g->fep);
		fab_domain_close(g->fd);
		g->fep = NULL;
		g->fd = NULL;
		return o->direct == POOL_GPU_DIRECT_ON ? r : 0;
	}
	g->direct = true;
	pool_log(LOG_INFO, "gpu: direct: provider=%s hmem=%s%s",
		 fab_domain_provider(g->fd),
		 fab_domain_has_hmem(g->fd, FAB_HMEM_CUDA) ? "cuda" : "none",
		 forced ? " (forced by a test)" : "");
	return 0;
}

/*
 * Registers x's device range for direct RMA where the provider needs it
 * (FAB_MR_LOCAL, or device memory under FI_HMEM). On failure x is staged
 * instead: it has no chunk yet. Worker only.
 */
void gpu_direct_register(struct pool_gpu *g, struct pool_gpu_xfer *x)
{
	int r = 0;

	x->registered = true;
	if (!(fab_domain_mr_mode(g->fd) & FAB_MR_LOCAL) && !g->hmem_iface)
		return;
	for (int tries = 0; tries < 8; tries++) {
		r = fab_mr_reg_hmem(g->fd, g->fep, x->dev, x->len,
				    FAB_ACCESS_LOCAL, g->hmem_iface, g->device,
				    ++g->mr_key, &x->mr);
		if (r != -ENOKEY)
			break;
	}
	if (r) {
		pool_log(LOG_INFO,
			 "gpu: direct: device range not registered len=%zu "
			 "err=%s; staging this transfer",
			 x->len, strerror(-r));
		x->direct = false;
		return;
	}
	x->desc = fab_mr_desc(x->mr);
}

/*
 * Where the next direct chunk of x goes: the lease under region offset
 * x->off + x->issued. Shortens *len to the end of that lease's piece and
 * to the provider's largest message. Worker only.
 */
int gpu_direct_target(struct pool_gpu *g, struct pool_gpu_xfer *x, size_t *len,
		      uint64_t *peer, uint64_t *raddr, uint64_t *key)
{
	uint64_t pos = x->off + x->issued, slab_off, elen, in;
	struct wire_lease l;

	for (;;) {
		if (pool_region_extent(x->r, x->ext, &l, &slab_off, &elen))
			return -EIO; /* shorter than its size: a bug */
		if (pos < x->ext_start + elen)
			break;
		x->ext_start += elen;
		x->ext++;
	}
	in = pos - x->ext_start;
	if (*len > elen - in)
		*len = elen - in;
	if (*len > g->max_msg)
		*len = g->max_msg;
	if (l.endpoint >= g->npeers)
		return -EPROTO;
	*peer = g->peer[l.endpoint];
	*raddr = l.base + slab_off + in;
	*key = l.key;
	return 0;
}

/* The RMA of direct chunk s; the caller marks s posted. */
int gpu_direct_post(struct pool_gpu *g, struct slot *s)
{
	struct pool_gpu_xfer *x = s->x;
	uint8_t *buf = x->dev + s->xoff;

	memset(&s->fop, 0, sizeof(s->fop));
	return x->store ? fab_ep_write(g->fep, buf, s->len, x->desc, s->peer,
				       s->raddr, s->key, &s->fop, g->timeout_ms)
			: fab_ep_read(g->fep, buf, s->len, x->desc, s->peer,
				      s->raddr, s->key, &s->fop, g->timeout_ms);
}
