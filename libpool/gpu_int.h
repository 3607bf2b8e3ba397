// SPDX-License-Identifier: MIT
/*
 * libpool/gpu_int.h - what the files of GPU prefetch share: the engine,
 * its transfers and staging slots, small helpers, and the functions one
 * file calls in another. Private to libpool/gpu*.c; tidepool/pool_gpu.h
 * is the API, libpool/gpu.h the backends' interface.
 *
 * libpool/gpu.c           engines and transfers (tidepool/pool_gpu.h):
 *                         open, close, submit, wait, cancel, events, the
 *                         device-side calls, stats; the choice of backend
 * libpool/gpu_pipeline.c  the worker (pool-gpu): the chunk ring and its
 *                         stages, deadlines, completion
 * libpool/gpu_direct.c    the direct path (FI_HMEM): the engine's own
 *                         endpoint, device registrations, lease targets
 * libpool/gpu_place.c     NUMA placement: the device's node, the staging
 *                         ring allocated and pinned there
 * libpool/gpu_host.c      the host backend (host memory, stream threads)
 * libpool/gpu_cuda.c      the CUDA backend
 *
 * The DESIGN comment of gpu.c holds the engine's invariants and threads.
 */
#ifndef TP_LIBPOOL_GPU_INT_H
#define TP_LIBPOOL_GPU_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "fabric/fab.h"
#include "libpool/deadline.h"
#include "libpool/gpu.h"
#include "libpool/internal.h"
#include "tidepool/pool_gpu.h"

enum stage { S_FREE, S_FABRIC, S_READY, S_COPY, S_DONE };

struct slot {
	void *buf;		 /* pinned staging buffer */
	void *ev;		 /* recorded after this slot's copy */
	struct pool_op *op;	 /* S_FABRIC */
	struct pool_gpu_xfer *x; /* NULL once DONE or abandoned */
	uint64_t xoff;		 /* offset of the chunk in the transfer */
	size_t len;
	enum stage st;
	bool last;	/* last chunk of x */
	bool abandoned; /* stage timed out; x no longer counts it */
	uint64_t deadline_ms;
	bool placed; /* buf from place_alloc_on_node() + host_register */
	/* direct path: the RMA goes between the lease and x->dev itself */
	bool direct;
	uint64_t peer, raddr, key;
	struct fab_op fop;
};

struct pool_gpu_xfer {
	struct pool_gpu *g;
	struct pool_region *r;
	uint64_t off;
	uint8_t *dev;
	size_t len;
	bool store;
	void *start_ev; /* on the caller's stream, recorded at submit */
	void *done_ev;	/* on the copy stream, after the last copy */
	struct pool_gpu_xfer *next, *prev; /* g->pending or g->done */

	/* worker only */
	size_t issued;	   /* bytes given to chunks */
	bool all_issued;   /* every chunk has had a slot */
	bool started;	   /* start_ev seen complete */
	unsigned inflight; /* chunks not DONE, not abandoned */
	bool direct;	   /* RMA straight to/from dev (set at submit) */
	bool registered;   /* direct: registration tried */
	struct fab_mr *mr; /* direct: dev's registration, or NULL */
	void *desc;
	uint32_t ext;	    /* direct: extent of the next chunk */
	uint64_t ext_start; /* direct: its offset in the region */

	int err; /* atomic: 0, or the first error (CAS) */
	/* under g->lock */
	bool committed; /* every chunk entered its last stage */
	bool ev_ready;	/* done_ev recorded */
	bool complete;
	int result;
};

struct pool_gpu {
	struct pool *p;
	const struct gpu_backend *be;
	enum pool_gpu_backend kind;
	struct gpu_dev *dev;
	int device;
	char bus_id[20];
	size_t staging_bytes;
	unsigned count;
	int timeout_ms;
	void *copy_stream;

	/* NUMA placement (gpu_numa_choose) */
	int numa_node;	    /* chosen node, -1: none */
	bool numa_explicit; /* asked for by number: failures are errors */
	bool numa_apply;    /* this host: bind the ring, pin the worker */
	bool numa_pinned;   /* the worker pinned itself */
	char numa_cpus[128];
	struct place_topo *place; /* until the worker has pinned itself */

	/* direct path (gpu_direct_choose) */
	bool direct;
	unsigned hmem_iface; /* FAB_HMEM_CUDA, or 0 for host "device" memory */
	struct fab_domain *fd;
	struct fab_ep *fep;
	uint64_t peer[WIRE_MAX_ENDPOINTS];
	uint16_t npeers;
	size_t max_msg;
	uint64_t mr_key; /* worker only: keys for device registrations */

	pthread_t worker;
	bool worker_started;

	pthread_mutex_t lock;
	pthread_cond_t cond;	  /* worker: new work, cancel, stop */
	pthread_cond_t done_cond; /* callers: completion, event ready */
	struct pool_gpu_xfer *pending, *pending_tail; /* FIFO, incomplete */
	struct pool_gpu_xfer *done; /* complete, not yet waited for */
	uint64_t kick;	     /* bumped on every change the worker must see */
	uint64_t swept_kick; /* kick the worker last swept for */
	bool stop;
	bool ready; /* worker started (start_err valid) */
	int start_err;
	void **ev_free; /* spare events */
	unsigned nev_free, ev_cap;

	/* worker only */
	uint64_t head, tail, copy_seq;
	unsigned nfabric, ncopy;
	long poll_ns;	/* current sleep between polls */
	unsigned spins; /* yield-only polls since the last progress */

	/* atomics */
	uint64_t st_xfers, st_errors, st_cancelled, st_fetched, st_stored;
	uint64_t st_chunks, st_overlapped, st_direct_xfers;
	unsigned st_fabric_max, st_copy_max, st_abandoned;

	struct slot slots[];
};

static inline uint64_t gpu_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void gpu_cond_init_mono(pthread_cond_t *c)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(c, &ca);
	pthread_condattr_destroy(&ca);
}

static inline void gpu_stat_max(unsigned *m, unsigned v)
{
	unsigned cur = __atomic_load_n(m, __ATOMIC_RELAXED);

	while (v > cur &&
	       !__atomic_compare_exchange_n(m, &cur, v, false, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED))
		;
}

static inline int gpu_xfer_err(struct pool_gpu_xfer *x)
{
	return __atomic_load_n(&x->err, __ATOMIC_ACQUIRE);
}

/* --- gpu_pipeline.c: the worker ------------------------------------- */

/*
 * Records err as x's error unless it already has one (-ETIMEDOUT becomes
 * -ETIME). True when err is now x's error.
 */
bool gpu_xfer_fail(struct pool_gpu_xfer *x, int err);
/* The pool-gpu thread; pool_gpu_open() starts it with g. */
void *gpu_worker_main(void *arg);
/* After the worker exits: waits (bounded) for abandoned stages, then
 * frees what is safe to free. */
void gpu_settle_abandoned(struct pool_gpu *g);

/* --- gpu_place.c: NUMA placement ------------------------------------ */

/* Chooses the node of the staging ring and the worker; 0 or -errno for a
 * request that cannot hold. */
int gpu_numa_choose(struct pool_gpu *g, const struct pool_gpu_opts *o);
/* One staging buffer of g's size for s, on the chosen node if any. */
int gpu_staging_alloc(struct pool_gpu *g, struct slot *s);
void gpu_staging_free(struct pool_gpu *g, struct slot *s);

/* --- gpu_direct.c: the direct path (FI_HMEM) ------------------------ */

/* Decides the path, opening the engine's endpoint when direct; 0, or
 * -errno when POOL_GPU_DIRECT_ON cannot be honoured. */
int gpu_direct_choose(struct pool_gpu *g, const struct pool_gpu_opts *o);
/* Registers x's device range where the provider needs it; on failure x
 * is staged instead. Worker only. */
void gpu_direct_register(struct pool_gpu *g, struct pool_gpu_xfer *x);
/* Where the next direct chunk of x goes; shortens *len to fit. Worker
 * only. */
int gpu_direct_target(struct pool_gpu *g, struct pool_gpu_xfer *x, size_t *len,
		      uint64_t *peer, uint64_t *raddr, uint64_t *key);
/* Posts the RMA of direct chunk s. Worker only. */
int gpu_direct_post(struct pool_gpu *g, struct slot *s);

#endif
