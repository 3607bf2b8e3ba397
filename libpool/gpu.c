// SPDX-License-Identifier: MIT
/*
 * libpool/gpu.c - GPU prefetch (tidepool/pool_gpu.h): engines and
 * transfers, the device-side calls, the choice of backend. The worker's
 * pipeline, the direct path, NUMA placement and the host backend are
 * files of their own (libpool/gpu_int.h lists them).
 *
 * DESIGN
 * An engine (struct pool_gpu) = one session, one device backend
 * (libpool/gpu.h), a ring of N pinned staging buffers ("slots"), a copy
 * stream, and one worker thread. A transfer (struct pool_gpu_xfer) is cut
 * into chunks of at most one buffer; chunk number k (counted over the
 * engine's life) uses slot k % N. A chunk goes through two stages:
 *
 *   fetch: FABRIC (pool_read_async into the slot) -> READY -> COPY
 *          (memcpy_async slot -> device, then an event on the slot)
 *   store: READY -> COPY (device -> slot) -> FABRIC (pool_write_async)
 *
 * and is DONE after the second. The worker posts RMA for new chunks
 * whenever a slot is free, so the fabric fills slot k+1 while the copy
 * stream drains slot k.
 *
 * Invariants:
 *  - Slots are taken and given back in chunk order: [tail, head) are in
 *    use, and a slot is reused only when it is DONE, i.e. its copy's event
 *    has completed and its RMA has completed.
 *  - Copies are enqueued in chunk order (copy_seq walks the ring), so the
 *    copy stream carries them in submission order, and the event recorded
 *    after a transfer's last copy covers all of them. A transfer's done
 *    event is recorded just before its last slot's event, so when that
 *    slot completes the done event has too.
 *  - A transfer's first copy is enqueued only once its start event (on
 *    the caller's stream, recorded at submission) has completed: the
 *    worker waits for it rather than making the copy stream wait, so that
 *    the stage timeouts never count the caller's own work.
 *  - Every stage has a deadline (the engine timeout). A stage past it is
 *    "abandoned": its transfer fails with -ETIME, the slot stays out of
 *    use until the stage really ends (an RMA ends at the latest when the
 *    session fails), and while the ring is full with such a slot, new
 *    chunks fail at once with -ETIME instead of waiting. (-ETIMEDOUT is
 *    what waits return for "still running"; it is never a result.)
 *  - A transfer completes only when none of its stages are in flight
 *    (abandoned ones excepted): after pool_gpu_xfer_wait() returns, no
 *    RMA of its writes the region and no copy of its touches dev_ptr.
 *
 * Threads:
 *   callers     submit (record the start event on their stream, append to
 *               the FIFO), wait, cancel; they take g->lock only.
 *   pool-gpu    the worker: owns the ring, the copy stream and every
 *               pool_op it posts; takes g->lock to pick up transfers and to
 *               publish results. While RMA is in flight it polls
 *               (pool_test, event queries): SPIN_POLLS rounds with only a
 *               sched_yield() after any progress, then sleeping 1 us
 *               growing to POLL_MAX_NS; with only copies in flight it
 *               blocks in the backend's event wait; idle, it sleeps on
 *               g->cond.
 *   pool-gpu-hs host backend only: one thread per host stream, running
 *               its work in order (copies, event records and waits, host
 *               functions); they take the host device's lock, never
 *               g->lock.
 * Lock order: g->lock before the host device's lock.
 *
 * Direct path (FI_HMEM): when the session's provider reports FI_HMEM
 * (gpu_direct_choose()), the engine opens its own fabric endpoint to memd's
 * endpoints, registers each transfer's device range with its HMEM
 * interface, and a chunk (cut at lease boundaries, from
 * pool_region_extent()) is one RMA straight between the lease and the
 * device: READY (waiting for the start event, as a copy would) -> FABRIC
 * -> DONE, no staging buffer, no copy. The done event is recorded on the
 * copy stream once every chunk has completed. A transfer whose device
 * range cannot be registered is staged instead.
 *
 * NUMA (gpu_numa_choose()): the staging ring is allocated on the device's node
 * (place_alloc_on_node(), then pinned by the backend: cudaHostRegister or
 * mlock) and the worker pins itself to that node's CPUs
 * (place_bind_thread_to_node()). numa/ is the only code that talks to
 * hwloc and libnuma.
 */
#include "libpool/gpu_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libpool/log.h"
#include "numa/place.h"
#include "fabric/dlist.h"

#define DEFAULT_STAGING (4u << 20)
#define DEFAULT_COUNT 4u
#define DEFAULT_TIMEOUT_MS 5000

/* ================================================================== */
/* backend choice                                                       */

/* The backend for kind, or NULL with *err set. */
static const struct gpu_backend *backend_for(enum pool_gpu_backend kind,
					     int *err)
{
	switch (kind) {
	case POOL_GPU_HOST:
		return &gpu_host_backend;
	case POOL_GPU_AUTO:
	case POOL_GPU_CUDA:
#ifdef TP_HAVE_CUDA
		return &gpu_cuda_backend;
#else
		*err = kind == POOL_GPU_AUTO ? -ENODEV : -EOPNOTSUPP;
		return NULL;
#endif
	default:
		*err = -EINVAL;
		return NULL;
	}
}

int pool_gpu_probe(enum pool_gpu_backend kind)
{
	int err = 0, n;
	const struct gpu_backend *be = backend_for(kind, &err);

	if (!be)
		return err;
	n = be->probe();
	if (kind == POOL_GPU_AUTO && n <= 0)
		return -ENODEV;
	return n;
}

void *gpu_test_staging_buf(struct pool_gpu *g, unsigned i)
{
	return g && i < g->count ? g->slots[i].buf : NULL;
}

/* ================================================================== */
/* events and transfers                                                 */

static int ev_get(struct pool_gpu *g, void **out)
{
	pthread_mutex_lock(&g->lock);
	if (g->nev_free) {
		*out = g->ev_free[--g->nev_free];
		pthread_mutex_unlock(&g->lock);
		return 0;
	}
	pthread_mutex_unlock(&g->lock);
	return g->be->event_create(g->dev, out);
}

static void ev_put(struct pool_gpu *g, void *ev)
{
	if (!ev)
		return;
	pthread_mutex_lock(&g->lock);
	if (g->nev_free == g->ev_cap) {
		unsigned cap = g->ev_cap ? g->ev_cap * 2 : 16;
		void **v = realloc(g->ev_free, cap * sizeof(*v));

		if (v) {
			g->ev_free = v;
			g->ev_cap = cap;
		}
	}
	if (g->nev_free < g->ev_cap) {
		g->ev_free[g->nev_free++] = ev;
		ev = NULL;
	}
	pthread_mutex_unlock(&g->lock);
	if (ev)
		g->be->event_destroy(g->dev, ev);
}

static void xfer_free(struct pool_gpu *g, struct pool_gpu_xfer *x)
{
	ev_put(g, x->start_ev);
	ev_put(g, x->done_ev);
	free(x);
}

static bool direct_path_available(struct pool_gpu *g)
{
	return g->direct;
}

/* ================================================================== */
/* public: engines                                                      */

/* 1 when the ring is on numa_node and the worker pinned to its CPUs. */
static int numa_applied(const struct pool_gpu *g)
{
	return g->numa_apply && g->numa_pinned;
}

void pool_gpu_opts_init(struct pool_gpu_opts *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->backend = POOL_GPU_AUTO;
	o->numa_node = POOL_GPU_NUMA_AUTO;
	o->direct = POOL_GPU_DIRECT_AUTO;
}

static int opts_check(const struct pool_gpu_opts *o)
{
	struct place_pci_addr a;

	if (o->device < 0 || o->numa_node < POOL_GPU_NUMA_OFF ||
	    o->numa_node >= PLACE_NODE_MAX || o->timeout_ms < 0)
		return -EINVAL;
	if (o->direct < POOL_GPU_DIRECT_AUTO || o->direct > POOL_GPU_DIRECT_ON)
		return -EINVAL;
	if (!memchr(o->pci_bus_id, '\0', sizeof(o->pci_bus_id)) ||
	    (o->pci_bus_id[0] && place_pci_parse(o->pci_bus_id, &a)))
		return -EINVAL;
	if (o->staging_bytes && (o->staging_bytes < POOL_GPU_STAGING_MIN ||
				 o->staging_bytes > POOL_GPU_STAGING_MAX))
		return -EINVAL;
	if (o->staging_count && (o->staging_count < POOL_GPU_COUNT_MIN ||
				 o->staging_count > POOL_GPU_COUNT_MAX))
		return -EINVAL;
	return 0;
}

int pool_gpu_open(struct pool *p, const struct pool_gpu_opts *opts,
		  struct pool_gpu **out)
{
	struct pool_gpu_opts o;
	const struct gpu_backend *be;
	struct pool_gpu *g;
	int r = 0;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!p)
		return -EINVAL;
	if (opts)
		o = *opts;
	else
		pool_gpu_opts_init(&o);
	r = opts_check(&o);
	if (r)
		return r;
	be = backend_for(o.backend, &r);
	if (!be)
		return r;
	if (o.backend == POOL_GPU_AUTO && be->probe() <= 0)
		return -ENODEV;
	if (!o.staging_count)
		o.staging_count = DEFAULT_COUNT;
	g = calloc(1, sizeof(*g) + o.staging_count * sizeof(g->slots[0]));
	if (!g)
		return -ENOMEM;
	g->p = p;
	g->be = be;
	g->kind = be == &gpu_host_backend ? POOL_GPU_HOST : POOL_GPU_CUDA;
	g->device = o.device;
	g->staging_bytes = o.staging_bytes ? o.staging_bytes : DEFAULT_STAGING;
	g->count = o.staging_count;
	g->numa_node = -1;
	g->timeout_ms = o.timeout_ms ? o.timeout_ms : DEFAULT_TIMEOUT_MS;
	pthread_mutex_init(&g->lock, NULL);
	gpu_cond_init_mono(&g->cond);
	gpu_cond_init_mono(&g->done_cond);

	r = be->open(o.device, &g->dev);
	if (r) {
		g->dev = NULL;
		goto fail;
	}
	be->pci_bus_id(g->dev, g->bus_id, sizeof(g->bus_id));
	r = gpu_numa_choose(g, &o);
	if (!r)
		r = gpu_direct_choose(g, &o);
	if (!r)
		r = be->stream_create(g->dev, &g->copy_stream);
	if (r)
		goto fail;
	/* The ring exists on the direct path too: for transfers whose
	 * device range cannot be registered. */
	for (unsigned i = 0; i < g->count; i++) {
		r = gpu_staging_alloc(g, &g->slots[i]);
		if (!r)
			r = be->event_create(g->dev, &g->slots[i].ev);
		if (r)
			goto fail;
	}
	r = pthread_create(&g->worker, NULL, gpu_worker_main, g);
	if (r) {
		r = -r;
		goto fail;
	}
	g->worker_started = true;
	pthread_mutex_lock(&g->lock);
	while (!g->ready)
		pthread_cond_wait(&g->done_cond, &g->lock);
	r = g->start_err;
	pthread_mutex_unlock(&g->lock);
	if (r)
		goto fail;
	place_topo_close(g->place); /* the worker has pinned itself */
	g->place = NULL;
	pool_log(LOG_INFO,
		 "gpu: open backend=%s device=%d pci=%s staging=%zux%u "
		 "numa_node=%d cpus=%s numa_applied=%d direct=%d "
		 "timeout_ms=%d",
		 be->name, g->device, g->bus_id[0] ? g->bus_id : "-",
		 g->staging_bytes, g->count, g->numa_node,
		 g->numa_cpus[0] ? g->numa_cpus : "-", numa_applied(g),
		 direct_path_available(g), g->timeout_ms);
	*out = g;
	return 0;
fail:
	pool_log(LOG_INFO, "gpu: open backend=%s device=%d err=%s", be->name,
		 o.device, strerror(-r));
	pool_gpu_close(g);
	return r;
}

void pool_gpu_close(struct pool_gpu *g)
{
	if (!g)
		return;
	if (g->worker_started) {
		pthread_mutex_lock(&g->lock);
		g->stop = true;
		g->kick++;
		pthread_cond_signal(&g->cond);
		pthread_mutex_unlock(&g->lock);
		pthread_join(g->worker, NULL);
		gpu_settle_abandoned(g);
	}
	/* Direct RMA still in flight (abandoned) ends here, cancelled. */
	fab_ep_close(g->fep);
	fab_domain_close(g->fd);
	place_topo_close(g->place);
	while (g->done) {
		struct pool_gpu_xfer *x = g->done;

		g->done = x->next;
		xfer_free(g, x);
	}
	if (g->dev) {
		for (unsigned i = 0; i < g->nev_free; i++)
			g->be->event_destroy(g->dev, g->ev_free[i]);
		for (unsigned i = 0; i < g->count; i++) {
			if (g->slots[i].ev)
				g->be->event_destroy(g->dev, g->slots[i].ev);
			gpu_staging_free(g, &g->slots[i]);
		}
		if (g->copy_stream)
			g->be->stream_destroy(g->dev, g->copy_stream);
		g->be->close(g->dev);
	}
	free(g->ev_free);
	pthread_cond_destroy(&g->done_cond);
	pthread_cond_destroy(&g->cond);
	pthread_mutex_destroy(&g->lock);
	free(g);
}

/* ================================================================== */
/* public: transfers                                                    */

static int submit(struct pool_gpu *g, struct pool_region *r, uint64_t off,
		  void *dev, size_t len, void *stream, bool store,
		  struct pool_gpu_xfer **out)
{
	struct pool_gpu_xfer *x;
	size_t size;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!g || !r || (!dev && len) || (uintptr_t)dev > UINTPTR_MAX - len)
		return -EINVAL;
	size = pool_region_size(r);
	if (off > size || len > size - off)
		return -ERANGE;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->g = g;
	x->r = r;
	x->off = off;
	x->dev = dev;
	x->len = len;
	x->store = store;
	x->direct = g->direct && len;
	ret = ev_get(g, &x->start_ev);
	if (!ret)
		ret = ev_get(g, &x->done_ev);
	/* The copies start after what the caller enqueued on stream so far:
	 * record that point now, in the caller's thread. */
	if (!ret)
		ret = g->be->event_record(g->dev, x->start_ev, stream);
	if (ret) {
		xfer_free(g, x);
		return ret;
	}
	pthread_mutex_lock(&g->lock);
	TP_DLIST_APPEND(g->pending, g->pending_tail, x, prev, next);
	g->kick++;
	pthread_cond_signal(&g->cond);
	pthread_mutex_unlock(&g->lock);
	*out = x;
	return 0;
}

int pool_gpu_fetch(struct pool_gpu *g, struct pool_region *r, uint64_t off,
		   void *dev_ptr, size_t len, void *stream,
		   struct pool_gpu_xfer **x)
{
	return submit(g, r, off, dev_ptr, len, stream, false, x);
}

int pool_gpu_store(struct pool_gpu *g, struct pool_region *r, uint64_t off,
		   const void *dev_ptr, size_t len, void *stream,
		   struct pool_gpu_xfer **x)
{
	return submit(g, r, off, (void *)dev_ptr, len, stream, true, x);
}

/* Waits on done_cond until cond(x) holds or timeout_ms (-1: no limit).
 * Caller holds g->lock. Returns true when it holds. */
static bool wait_locked(struct pool_gpu *g, struct pool_gpu_xfer *x,
			bool (*cond)(struct pool_gpu_xfer *), int timeout_ms)
{
	struct timespec ts = pool_deadline_ms(timeout_ms > 0 ? timeout_ms : 0);

	while (!cond(x)) {
		if (timeout_ms == 0)
			return false;
		if (timeout_ms < 0)
			pthread_cond_wait(&g->done_cond, &g->lock);
		else if (pthread_cond_timedwait(&g->done_cond, &g->lock, &ts) ==
			 ETIMEDOUT)
			return cond(x);
	}
	return true;
}

static bool is_complete(struct pool_gpu_xfer *x)
{
	return x->complete;
}

static bool is_event_ready(struct pool_gpu_xfer *x)
{
	return x->complete || x->ev_ready || gpu_xfer_err(x);
}

int pool_gpu_xfer_wait(struct pool_gpu_xfer *x, int timeout_ms)
{
	struct pool_gpu *g;
	int r;

	if (!x)
		return -EINVAL;
	g = x->g;
	pthread_mutex_lock(&g->lock);
	if (!wait_locked(g, x, is_complete, timeout_ms)) {
		pthread_mutex_unlock(&g->lock);
		return -ETIMEDOUT;
	}
	r = x->result;
	TP_DLIST_REMOVE(g->done, x, prev, next);
	pthread_mutex_unlock(&g->lock);
	xfer_free(g, x);
	return r;
}

int pool_gpu_xfer_test(struct pool_gpu_xfer *x)
{
	int done;

	if (!x)
		return -EINVAL;
	pthread_mutex_lock(&x->g->lock);
	done = x->complete;
	pthread_mutex_unlock(&x->g->lock);
	return done;
}

int pool_gpu_xfer_cancel(struct pool_gpu_xfer *x)
{
	struct pool_gpu *g;
	int r = -EALREADY;

	if (!x)
		return -EINVAL;
	g = x->g;
	pthread_mutex_lock(&g->lock);
	if (!x->complete && !x->committed && gpu_xfer_fail(x, -ECANCELED)) {
		r = 0;
		g->kick++;
		pthread_cond_signal(&g->cond);
	}
	pthread_mutex_unlock(&g->lock);
	return r;
}

int pool_gpu_xfer_event(struct pool_gpu_xfer *x, int timeout_ms, void **event)
{
	struct pool_gpu *g;
	int r;

	if (!x || !event)
		return -EINVAL;
	*event = NULL;
	g = x->g;
	pthread_mutex_lock(&g->lock);
	if (!wait_locked(g, x, is_event_ready, timeout_ms)) {
		r = -ETIMEDOUT;
	} else {
		r = gpu_xfer_err(x);
		if (!r)
			*event = x->done_ev;
	}
	pthread_mutex_unlock(&g->lock);
	return r;
}

/* ================================================================== */
/* public: the device side                                              */

/* Memory through the backend: on the device, or pinned on the host. */
static int gpu_mem_alloc(struct pool_gpu *g, size_t len, void **out,
			 bool pinned)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!g || !len)
		return -EINVAL;
	return pinned ? g->be->pinned_alloc(g->dev, len, out)
		      : g->be->dev_alloc(g->dev, len, out);
}

static void gpu_mem_free(struct pool_gpu *g, void *p, bool pinned)
{
	if (!g || !p)
		return;
	if (pinned)
		g->be->pinned_free(g->dev, p);
	else
		g->be->dev_free(g->dev, p);
}

int pool_gpu_dev_alloc(struct pool_gpu *g, size_t len, void **dev_ptr)
{
	return gpu_mem_alloc(g, len, dev_ptr, false);
}

void pool_gpu_dev_free(struct pool_gpu *g, void *dev_ptr)
{
	gpu_mem_free(g, dev_ptr, false);
}

int pool_gpu_pinned_alloc(struct pool_gpu *g, size_t len, void **ptr)
{
	return gpu_mem_alloc(g, len, ptr, true);
}

void pool_gpu_pinned_free(struct pool_gpu *g, void *ptr)
{
	gpu_mem_free(g, ptr, true);
}

int pool_gpu_stream_create(struct pool_gpu *g, void **stream)
{
	if (!stream)
		return -EINVAL;
	*stream = NULL;
	if (!g)
		return -EINVAL;
	return g->be->stream_create(g->dev, stream);
}

void pool_gpu_stream_destroy(struct pool_gpu *g, void *stream)
{
	if (g && stream)
		g->be->stream_destroy(g->dev, stream);
}

int pool_gpu_stream_sync(struct pool_gpu *g, void *stream, int timeout_ms)
{
	void *ev;
	int r;

	if (!g)
		return -EINVAL;
	r = ev_get(g, &ev);
	if (r)
		return r;
	r = g->be->event_record(g->dev, ev, stream);
	while (!r) {
		int64_t us =
			timeout_ms < 0 ? 1000000 : (int64_t)timeout_ms * 1000;

		r = g->be->event_wait(g->dev, ev, us);
		if (r != -ETIMEDOUT || timeout_ms >= 0)
			break;
		r = 0;
	}
	/* A timed-out event may still complete later: not for reuse. */
	if (r == -ETIMEDOUT)
		g->be->event_destroy(g->dev, ev);
	else
		ev_put(g, ev);
	return r;
}

int pool_gpu_stream_wait_event(struct pool_gpu *g, void *stream, void *event)
{
	if (!g || !event)
		return -EINVAL;
	return g->be->stream_wait_event(g->dev, stream, event);
}

int pool_gpu_stream_host_fn(struct pool_gpu *g, void *stream,
			    void (*fn)(void *arg), void *arg)
{
	if (!g || !fn)
		return -EINVAL;
	return g->be->host_fn(g->dev, stream, fn, arg);
}

int pool_gpu_memcpy_async(struct pool_gpu *g, void *dst, const void *src,
			  size_t len, void *stream)
{
	if (!g || ((!dst || !src) && len))
		return -EINVAL;
	if (!len)
		return 0;
	return g->be->memcpy_async(g->dev, dst, src, len, stream);
}

int pool_gpu_get_stats(struct pool_gpu *g, struct pool_gpu_stats *st)
{
	if (!g || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	st->backend = g->kind;
	st->device = g->device;
	snprintf(st->pci_bus_id, sizeof(st->pci_bus_id), "%s", g->bus_id);
	st->staging_bytes = g->staging_bytes;
	st->staging_count = g->count;
	st->numa_node = g->numa_node;
	st->numa_applied = numa_applied(g);
	snprintf(st->numa_cpus, sizeof(st->numa_cpus), "%s", g->numa_cpus);
	st->direct = direct_path_available(g);
	st->direct_xfers =
		__atomic_load_n(&g->st_direct_xfers, __ATOMIC_RELAXED);
	st->xfers = __atomic_load_n(&g->st_xfers, __ATOMIC_RELAXED);
	st->errors = __atomic_load_n(&g->st_errors, __ATOMIC_RELAXED);
	st->cancelled = __atomic_load_n(&g->st_cancelled, __ATOMIC_RELAXED);
	st->bytes_fetched = __atomic_load_n(&g->st_fetched, __ATOMIC_RELAXED);
	st->bytes_stored = __atomic_load_n(&g->st_stored, __ATOMIC_RELAXED);
	st->chunks = __atomic_load_n(&g->st_chunks, __ATOMIC_RELAXED);
	st->overlapped = __atomic_load_n(&g->st_overlapped, __ATOMIC_RELAXED);
	st->fabric_max = __atomic_load_n(&g->st_fabric_max, __ATOMIC_RELAXED);
	st->copy_max = __atomic_load_n(&g->st_copy_max, __ATOMIC_RELAXED);
	st->abandoned = __atomic_load_n(&g->st_abandoned, __ATOMIC_RELAXED);
	return 0;
}
