// SPDX-License-Identifier: MIT
/*
 * libpool/gpu.c - GPU prefetch (tidepool/pool_gpu.h): the staging
 * pipeline, the choice of backend, and the host backend.
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
 * (direct_choose()), the engine opens its own fabric endpoint to memd's
 * endpoints, registers each transfer's device range with its HMEM
 * interface, and a chunk (cut at lease boundaries, from
 * pool_region_extent()) is one RMA straight between the lease and the
 * device: READY (waiting for the start event, as a copy would) -> FABRIC
 * -> DONE, no staging buffer, no copy. The done event is recorded on the
 * copy stream once every chunk has completed. A transfer whose device
 * range cannot be registered is staged instead.
 *
 * NUMA (numa_choose()): the staging ring is allocated on the device's node
 * (place_alloc_on_node(), then pinned by the backend: cudaHostRegister or
 * mlock) and the worker pins itself to that node's CPUs
 * (place_bind_thread_to_node()). numa/ is the only code that talks to
 * hwloc and libnuma.
 */
#include "tidepool/pool_gpu.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>

#include "fabric/fab.h"
#include "libpool/gpu.h"
#include "libpool/internal.h"
#include "libpool/log.h"
#include "libpool/paging.h"
#include "numa/place.h"

#define DEFAULT_STAGING (4u << 20)
#define DEFAULT_COUNT 4u
#define DEFAULT_TIMEOUT_MS 5000
#define IDLE_WAIT_MS 1000 /* idle worker re-checks this often anyway */
#define SLICE_US 2000	  /* longest block on one event before re-checking */
#define POLL_MAX_NS 50000 /* longest sleep between polls when busy */
#define SPIN_POLLS 64	  /* polls with sched_yield() only, after progress */

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

	/* NUMA placement (numa_choose) */
	int numa_node;	    /* chosen node, -1: none */
	bool numa_explicit; /* asked for by number: failures are errors */
	bool numa_apply;    /* this host: bind the ring, pin the worker */
	bool numa_pinned;   /* the worker pinned itself */
	char numa_cpus[128];
	struct place_topo *place; /* until the worker has pinned itself */

	/* direct path (direct_choose) */
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

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static struct timespec deadline_ts(int timeout_ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return ts;
}

static void cond_init_mono(pthread_cond_t *c)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(c, &ca);
	pthread_condattr_destroy(&ca);
}

static void stat_max(unsigned *m, unsigned v)
{
	unsigned cur = __atomic_load_n(m, __ATOMIC_RELAXED);

	while (v > cur &&
	       !__atomic_compare_exchange_n(m, &cur, v, false, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED))
		;
}

/* ================================================================== */
/* host backend                                                         */
/*
 * "Device" memory is host memory; a stream is a thread that runs its
 * queue in order, as a GPU's copy engine runs a CUDA stream. Events have
 * CUDA's semantics: a record on a stream completes when the work enqueued
 * before it has; a query or a stream wait looks at the latest record made
 * before it; an event never recorded is complete. Everything is under
 * hd->lock; hd->cond is broadcast whenever an op completes.
 */

enum hop_kind { HOP_COPY, HOP_RECORD, HOP_WAIT, HOP_FN };

struct hevent {
	uint64_t recorded;  /* records made */
	uint64_t completed; /* highest record that has completed */
	unsigned refs;	    /* queued ops that name it */
	bool dead;	    /* destroyed; freed when refs drops to 0 */
};

struct hop {
	enum hop_kind kind;
	void *dst;
	const void *src;
	size_t len;
	struct hevent *ev;
	uint64_t seq; /* HOP_RECORD: this record; HOP_WAIT: awaited one */
	void (*fn)(void *);
	void *arg;
	struct hop *next;
};

struct hstream {
	struct gpu_dev *d;
	pthread_t th;
	pthread_cond_t work;
	struct hop *head, *tail;
	bool stop;	      /* destroyed: drain, then exit */
	bool exited;	      /* thread has returned: join and free */
	struct hstream *next; /* d->streams */
};

struct gpu_dev {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool closing; /* waits give up */
	struct hstream *streams;
	struct hstream *def; /* the NULL stream */
};

#define HOST_HDR 4096u /* mapping header holding the length */

static void hevent_unref_locked(struct hevent *ev)
{
	if (--ev->refs == 0 && ev->dead)
		free(ev);
}

static void *hstream_main(void *arg)
{
	struct hstream *s = arg;
	struct gpu_dev *d = s->d;

	pthread_setname_np(pthread_self(), "pool-gpu-hs");
	pool_paging_mark_engine_thread();
	pthread_mutex_lock(&d->lock);
	for (;;) {
		struct hop *op;

		while (!s->head && !s->stop)
			pthread_cond_wait(&s->work, &d->lock);
		op = s->head;
		if (!op)
			break;
		switch (op->kind) {
		case HOP_COPY:
			pthread_mutex_unlock(&d->lock);
			memcpy(op->dst, op->src, op->len);
			pthread_mutex_lock(&d->lock);
			break;
		case HOP_FN:
			pthread_mutex_unlock(&d->lock);
			op->fn(op->arg);
			pthread_mutex_lock(&d->lock);
			break;
		case HOP_RECORD:
			if (op->seq > op->ev->completed)
				op->ev->completed = op->seq;
			break;
		case HOP_WAIT:
			while (op->ev->completed < op->seq && !d->closing)
				pthread_cond_wait(&d->cond, &d->lock);
			break;
		}
		s->head = op->next;
		if (!s->head)
			s->tail = NULL;
		if (op->ev)
			hevent_unref_locked(op->ev);
		free(op);
		pthread_cond_broadcast(&d->cond);
	}
	s->exited = true;
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

/* Joins and frees streams whose threads are gone (all, when closing). */
static void hstreams_reap(struct gpu_dev *d, bool all)
{
	for (;;) {
		struct hstream **pp, *s = NULL;

		pthread_mutex_lock(&d->lock);
		for (pp = &d->streams; *pp; pp = &(*pp)->next)
			if ((*pp)->exited || all) {
				s = *pp;
				*pp = s->next;
				break;
			}
		pthread_mutex_unlock(&d->lock);
		if (!s)
			return;
		pthread_join(s->th, NULL);
		pthread_cond_destroy(&s->work);
		free(s);
	}
}

static int host_stream_create(struct gpu_dev *d, void **out)
{
	struct hstream *s = calloc(1, sizeof(*s));
	int r;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	hstreams_reap(d, false);
	s->d = d;
	pthread_cond_init(&s->work, NULL);
	r = pthread_create(&s->th, NULL, hstream_main, s);
	if (r) {
		pthread_cond_destroy(&s->work);
		free(s);
		return -r;
	}
	pthread_mutex_lock(&d->lock);
	s->next = d->streams;
	d->streams = s;
	pthread_mutex_unlock(&d->lock);
	*out = s;
	return 0;
}

static void host_stream_stop(struct gpu_dev *d, struct hstream *s)
{
	pthread_mutex_lock(&d->lock);
	s->stop = true;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&d->lock);
}

static void host_stream_destroy(struct gpu_dev *d, void *s)
{
	if (s && s != d->def)
		host_stream_stop(d, s);
}

/* Queues op on s (NULL: the default stream). Takes ownership of op. */
static int host_enqueue(struct gpu_dev *d, void *stream, struct hop *op)
{
	struct hstream *s = stream ? stream : d->def;

	pthread_mutex_lock(&d->lock);
	if (s->stop) {
		pthread_mutex_unlock(&d->lock);
		free(op);
		return -EINVAL; /* a destroyed stream */
	}
	if (op->kind == HOP_RECORD)
		op->seq = ++op->ev->recorded;
	if (op->kind == HOP_WAIT) {
		op->seq = op->ev->recorded;
		if (!op->seq) { /* never recorded: nothing to wait for */
			pthread_mutex_unlock(&d->lock);
			free(op);
			return 0;
		}
	}
	if (op->ev)
		op->ev->refs++;
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&d->lock);
	return 0;
}

static int host_probe(void)
{
	return 1;
}

static void host_close(struct gpu_dev *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	d->closing = true;
	for (struct hstream *s = d->streams; s; s = s->next) {
		s->stop = true;
		pthread_cond_signal(&s->work);
	}
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	hstreams_reap(d, true);
	pthread_cond_destroy(&d->cond);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

static int host_open(int device, struct gpu_dev **out)
{
	struct gpu_dev *d;
	void *s;
	int r;

	*out = NULL;
	if (device != 0)
		return -ENODEV;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	pthread_mutex_init(&d->lock, NULL);
	cond_init_mono(&d->cond);
	r = host_stream_create(d, &s);
	if (r) {
		host_close(d);
		return r;
	}
	d->def = s;
	*out = d;
	return 0;
}

static int host_bind_thread(struct gpu_dev *d)
{
	return 0;
}

static void host_pci_bus_id(struct gpu_dev *d, char *buf, size_t len)
{
	if (len)
		buf[0] = '\0';
}

static int host_map(size_t len, bool lock, void **out)
{
	size_t total = len + HOST_HDR;
	uint8_t *m;

	*out = NULL;
	if (len > SIZE_MAX - HOST_HDR)
		return -ENOMEM;
	m = mmap(NULL, total, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return -ENOMEM;
	memcpy(m, &total, sizeof(total));
	/* Pinning is best effort (RLIMIT_MEMLOCK): the pipeline is the same
	 * either way, only page-fault behaviour differs. */
	if (lock && mlock(m + HOST_HDR, len))
		pool_log(LOG_DEBUG, "gpu: host staging not locked len=%zu",
			 len);
	*out = m + HOST_HDR;
	return 0;
}

static void host_unmap(void *p)
{
	uint8_t *m;
	size_t total;

	if (!p)
		return;
	m = (uint8_t *)p - HOST_HDR;
	memcpy(&total, m, sizeof(total));
	munmap(m, total);
}

static int host_pinned_alloc(struct gpu_dev *d, size_t len, void **out)
{
	return host_map(len, true, out);
}

static void host_pinned_free(struct gpu_dev *d, void *p)
{
	host_unmap(p);
}

static int host_host_register(struct gpu_dev *d, void *p, size_t len)
{
	if (mlock(p, len)) /* best effort, as host_map() */
		pool_log(LOG_DEBUG, "gpu: host staging not locked len=%zu",
			 len);
	return 0;
}

static void host_host_unregister(struct gpu_dev *d, void *p, size_t len)
{
	munlock(p, len);
}

static int host_dev_alloc(struct gpu_dev *d, size_t len, void **out)
{
	return host_map(len, false, out);
}

static void host_dev_free(struct gpu_dev *d, void *p)
{
	host_unmap(p);
}

/* Queues a copy of op on stream s. */
static int host_post(struct gpu_dev *d, void *s, struct hop op)
{
	struct hop *p = malloc(sizeof(*p));

	if (!p)
		return -ENOMEM;
	*p = op;
	return host_enqueue(d, s, p);
}

static int host_stream_wait_event(struct gpu_dev *d, void *s, void *ev)
{
	return host_post(d, s, (struct hop){ .kind = HOP_WAIT, .ev = ev });
}

static int host_host_fn(struct gpu_dev *d, void *s, void (*fn)(void *),
			void *arg)
{
	return host_post(d, s,
			 (struct hop){ .kind = HOP_FN, .fn = fn, .arg = arg });
}

static int host_memcpy_async(struct gpu_dev *d, void *dst, const void *src,
			     size_t len, void *s)
{
	return host_post(
		d, s,
		(struct hop){
			.kind = HOP_COPY, .dst = dst, .src = src, .len = len });
}

static int host_event_create(struct gpu_dev *d, void **out)
{
	*out = calloc(1, sizeof(struct hevent));
	return *out ? 0 : -ENOMEM;
}

static void host_event_destroy(struct gpu_dev *d, void *p)
{
	struct hevent *ev = p;

	if (!ev)
		return;
	pthread_mutex_lock(&d->lock);
	ev->dead = true;
	if (!ev->refs)
		free(ev);
	pthread_mutex_unlock(&d->lock);
}

static int host_event_record(struct gpu_dev *d, void *ev, void *s)
{
	return host_post(d, s, (struct hop){ .kind = HOP_RECORD, .ev = ev });
}

static int host_event_query(struct gpu_dev *d, void *p)
{
	struct hevent *ev = p;
	int r;

	pthread_mutex_lock(&d->lock);
	r = ev->completed >= ev->recorded ? 0 : -EAGAIN;
	pthread_mutex_unlock(&d->lock);
	return r;
}

static int host_event_wait(struct gpu_dev *d, void *p, int64_t timeout_us)
{
	struct hevent *ev = p;
	struct timespec ts;
	int r = 0;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += timeout_us / 1000000;
	ts.tv_nsec += (long)(timeout_us % 1000000) * 1000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&d->lock);
	while (ev->completed < ev->recorded && r != ETIMEDOUT)
		r = timeout_us < 0
			    ? pthread_cond_wait(&d->cond, &d->lock)
			    : pthread_cond_timedwait(&d->cond, &d->lock, &ts);
	r = ev->completed >= ev->recorded ? 0 : -ETIMEDOUT;
	pthread_mutex_unlock(&d->lock);
	return r;
}

static const struct gpu_backend host_backend = {
	.name = "host",
	.probe = host_probe,
	.open = host_open,
	.close = host_close,
	.bind_thread = host_bind_thread,
	.pci_bus_id = host_pci_bus_id,
	.pinned_alloc = host_pinned_alloc,
	.pinned_free = host_pinned_free,
	.host_register = host_host_register,
	.host_unregister = host_host_unregister,
	.dev_alloc = host_dev_alloc,
	.dev_free = host_dev_free,
	.stream_create = host_stream_create,
	.stream_destroy = host_stream_destroy,
	.stream_wait_event = host_stream_wait_event,
	.host_fn = host_host_fn,
	.memcpy_async = host_memcpy_async,
	.event_create = host_event_create,
	.event_destroy = host_event_destroy,
	.event_record = host_event_record,
	.event_query = host_event_query,
	.event_wait = host_event_wait,
};

/* ================================================================== */
/* backend choice                                                       */

/* The backend for kind, or NULL with *err set. */
static const struct gpu_backend *backend_for(enum pool_gpu_backend kind,
					     int *err)
{
	switch (kind) {
	case POOL_GPU_HOST:
		return &host_backend;
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

static int force_hmem; /* gpu_test_force_hmem() */

void gpu_test_force_hmem(int on)
{
	__atomic_store_n(&force_hmem, on != 0, __ATOMIC_RELAXED);
}

void *gpu_test_staging_buf(struct pool_gpu *g, unsigned i)
{
	return g && i < g->count ? g->slots[i].buf : NULL;
}

/* ================================================================== */
/* NUMA placement                                                       */

/*
 * Chooses the node of the staging ring and the worker (see
 * pool_gpu_opts.numa_node) from g->bus_id or o->pci_bus_id. When the
 * placement is to be applied (the topology is this host's), g->place
 * stays open for the worker to pin itself. Returns 0 (also when nothing
 * is placed: logged at info) or -errno for a request that cannot hold.
 */
static int numa_choose(struct pool_gpu *g, const struct pool_gpu_opts *o)
{
	const char *bus = o->pci_bus_id[0] ? o->pci_bus_id : g->bus_id;
	const char *bad = NULL, *why = NULL;
	struct place_topo *t = NULL;
	int node = -1, r;

	g->numa_node = -1;
	if (o->numa_node == POOL_GPU_NUMA_OFF) {
		pool_log(LOG_INFO, "gpu: numa: placement off (numa_node=off); "
				   "staging and worker not placed");
		return 0;
	}
	g->numa_explicit = o->numa_node >= 0;
	r = place_topo_open(o->topology_xml, &t);
	if (r) {
		pool_log(g->numa_explicit || o->topology_xml ? LOG_WARNING
							     : LOG_INFO,
			 "gpu: numa: no topology xml=%s err=%s%s",
			 o->topology_xml ? o->topology_xml : "(this host)",
			 strerror(-r),
			 g->numa_explicit || o->topology_xml
				 ? ""
				 : "; staging and worker not placed");
		return g->numa_explicit || o->topology_xml ? r : 0;
	}
	r = place_topo_apply_env(t, &bad);
	if (r) {
		pool_log(LOG_WARNING, "gpu: numa: bad %s err=%s",
			 bad ? bad : "TIDEPOOL_GPU_NODE", strerror(-r));
		goto out;
	}
	if (g->numa_explicit) {
		node = o->numa_node;
		if (!place_topo_has_node(t, node)) {
			pool_log(LOG_WARNING, "gpu: numa: no node %d here",
				 node);
			r = -ENXIO;
			goto out;
		}
	} else if (!bus[0]) {
		why = "the device has no PCI bus id (see pci_bus_id)";
	} else if (place_topo_nnodes(t) < 2) {
		why = "this machine has one NUMA node";
	} else {
		node = place_gpu_node(t, bus);
		if (node == -ENODATA)
			why = "hwloc gives the device no single node "
			      "(set TIDEPOOL_GPU_NODE or numa_node)";
		else if (node == -ENOENT)
			why = "no PCI device at that bus id in the topology";
		else if (node < 0)
			why = strerror(-node);
	}
	if (node < 0) {
		pool_log(LOG_INFO,
			 "gpu: numa: node unknown pci=%s: %s; staging and "
			 "worker not placed",
			 bus[0] ? bus : "-", why);
		goto out;
	}
	g->numa_node = node;
	r = place_node_cpulist(t, node, g->numa_cpus, sizeof(g->numa_cpus));
	if (r < 0 && r != -ENOSPC) /* -ENOSPC: truncated, still useful */
		g->numa_cpus[0] = '\0';
	r = 0;
	if (!place_topo_is_host(t)) {
		pool_log(LOG_INFO,
			 "gpu: numa: node=%d cpus=%s pci=%s from topology %s: "
			 "computed, not applied (not this host)",
			 node, g->numa_cpus, bus[0] ? bus : "-",
			 o->topology_xml ? o->topology_xml : "$HWLOC_XMLFILE");
		goto out;
	}
	g->numa_apply = true;
	g->place = t;
	t = NULL;
out:
	place_topo_close(t);
	return r;
}

/*
 * One staging buffer: on the chosen node (bound there, then pinned by
 * the backend), else the backend's own pinned allocation, as without
 * NUMA. An automatic placement that fails is logged and given up.
 */
static int staging_alloc(struct pool_gpu *g, struct slot *s)
{
	size_t len = g->staging_bytes;
	void *p = NULL;
	int r;

	if (g->numa_apply) {
		r = place_alloc_on_node(len, g->numa_node, PLACE_MEM_POPULATE,
					&p);
		if (!r) {
			r = g->be->host_register(g->dev, p, len);
			if (r)
				place_free(p, len);
		}
		if (!r) {
			s->buf = p;
			s->placed = true;
			return 0;
		}
		pool_log(g->numa_explicit ? LOG_WARNING : LOG_INFO,
			 "gpu: numa: staging not placed node=%d len=%zu err=%s",
			 g->numa_node, len, strerror(-r));
		if (g->numa_explicit)
			return r;
		g->numa_apply = false;
	}
	return g->be->pinned_alloc(g->dev, len, &s->buf);
}

static void staging_free(struct pool_gpu *g, struct slot *s)
{
	if (!s->buf)
		return;
	if (s->placed) {
		g->be->host_unregister(g->dev, s->buf, g->staging_bytes);
		place_free(s->buf, g->staging_bytes);
	} else {
		g->be->pinned_free(g->dev, s->buf);
	}
	s->buf = NULL;
}

/* ================================================================== */
/* direct path (FI_HMEM)                                                */

/*
 * Decides the path: direct when the session's provider reports FI_HMEM
 * (a domain asked for FAB_HMEM_CUDA opens), or gpu_test_force_hmem() says
 * to act as if; then opens the engine's own endpoint to every memd
 * endpoint. Returns 0 (direct or not), or -errno when
 * POOL_GPU_DIRECT_ON cannot be honoured.
 */
static int direct_choose(struct pool_gpu *g, const struct pool_gpu_opts *o)
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
static void direct_register(struct pool_gpu *g, struct pool_gpu_xfer *x)
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
static int direct_target(struct pool_gpu *g, struct pool_gpu_xfer *x,
			 size_t *len, uint64_t *peer, uint64_t *raddr,
			 uint64_t *key)
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

/* Slot s's fabric operation is posted: s is in the fabric stage. */
static void fabric_posted(struct pool_gpu *g, struct slot *s)
{
	s->st = S_FABRIC;
	s->deadline_ms = mono_ms() + (uint64_t)g->timeout_ms;
	g->nfabric++;
	stat_max(&g->st_fabric_max, g->nfabric);
}

static int post_direct(struct pool_gpu *g, struct slot *s)
{
	struct pool_gpu_xfer *x = s->x;
	uint8_t *buf = x->dev + s->xoff;
	int r;

	memset(&s->fop, 0, sizeof(s->fop));
	r = x->store ? fab_ep_write(g->fep, buf, s->len, x->desc, s->peer,
				    s->raddr, s->key, &s->fop, g->timeout_ms)
		     : fab_ep_read(g->fep, buf, s->len, x->desc, s->peer,
				   s->raddr, s->key, &s->fop, g->timeout_ms);
	if (r)
		return r;
	fabric_posted(g, s);
	return 0;
}

static bool direct_path_available(struct pool_gpu *g)
{
	return g->direct;
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

static int xfer_err(struct pool_gpu_xfer *x)
{
	return __atomic_load_n(&x->err, __ATOMIC_ACQUIRE);
}

/*
 * Records err as x's error unless it already has one. A timeout becomes
 * -ETIME: -ETIMEDOUT from pool_gpu_xfer_wait() and pool_gpu_xfer_event()
 * means "still running", so it must never be a result.
 */
static bool xfer_fail(struct pool_gpu_xfer *x, int err)
{
	int zero = 0;

	if (err == -ETIMEDOUT)
		err = -ETIME;

	return __atomic_compare_exchange_n(&x->err, &zero, err, false,
					   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static void xfer_free(struct pool_gpu *g, struct pool_gpu_xfer *x)
{
	ev_put(g, x->start_ev);
	ev_put(g, x->done_ev);
	free(x);
}

static void unlink_pending_locked(struct pool_gpu *g, struct pool_gpu_xfer *x)
{
	if (x->prev)
		x->prev->next = x->next;
	else
		g->pending = x->next;
	if (x->next)
		x->next->prev = x->prev;
	else
		g->pending_tail = x->prev;
	x->next = x->prev = NULL;
}

/*
 * Completes x when nothing of it is in flight any more: on error, or
 * once every chunk is issued and done. Worker only; takes g->lock.
 */
static void maybe_complete(struct pool_gpu *g, struct pool_gpu_xfer *x)
{
	int err = xfer_err(x);

	if (x->inflight || (!err && !x->all_issued))
		return;
	/* Counted first: a caller that sees x complete sees it counted. */
	__atomic_add_fetch(&g->st_xfers, 1, __ATOMIC_RELAXED);
	if (err == -ECANCELED)
		__atomic_add_fetch(&g->st_cancelled, 1, __ATOMIC_RELAXED);
	else if (err)
		__atomic_add_fetch(&g->st_errors, 1, __ATOMIC_RELAXED);
	else
		__atomic_add_fetch(x->store ? &g->st_stored : &g->st_fetched,
				   x->len, __ATOMIC_RELAXED);
	if (!err && x->direct)
		__atomic_add_fetch(&g->st_direct_xfers, 1, __ATOMIC_RELAXED);
	/* Nothing of x is in flight (abandoned stages aside). */
	fab_mr_close(x->mr);
	x->mr = NULL;
	if (err && err != -ECANCELED)
		pool_log(LOG_INFO, "gpu: transfer failed dir=%s len=%zu err=%s",
			 x->store ? "store" : "fetch", x->len, strerror(-err));
	pthread_mutex_lock(&g->lock);
	unlink_pending_locked(g, x);
	x->complete = true;
	x->result = err;
	x->next = g->done;
	if (g->done)
		g->done->prev = x;
	g->done = x;
	pthread_cond_broadcast(&g->done_cond);
	pthread_mutex_unlock(&g->lock);
	/* x belongs to its waiter from here on: not one more look. */
}

/* Tells callers that x's done event is recorded (ev_ready) and/or that
 * every chunk has entered its last stage (committed: too late to cancel). */
static void publish(struct pool_gpu *g, struct pool_gpu_xfer *x, bool ev_ready,
		    bool committed)
{
	pthread_mutex_lock(&g->lock);
	if (ev_ready)
		x->ev_ready = true;
	if (committed)
		x->committed = true;
	pthread_cond_broadcast(&g->done_cond);
	pthread_mutex_unlock(&g->lock);
}

/* ================================================================== */
/* the worker                                                           */

static struct slot *slot_at(struct pool_gpu *g, uint64_t seq)
{
	return &g->slots[seq % g->count];
}

/* Every chunk of direct transfer x has landed: its done event (nothing
 * of x is on the copy stream, so it completes with what is there). */
static void direct_done_event(struct pool_gpu *g, struct pool_gpu_xfer *x)
{
	int r = g->be->event_record(g->dev, x->done_ev, g->copy_stream);

	if (r)
		xfer_fail(x, r);
	else
		publish(g, x, true, false);
}

/* The chunk of s is over (done, dropped or failed): give x its due. */
static void slot_finish(struct pool_gpu *g, struct slot *s)
{
	struct pool_gpu_xfer *x = s->x;

	s->st = S_DONE;
	s->x = NULL;
	if (x) {
		x->inflight--;
		if (x->direct && !x->inflight && x->all_issued && !xfer_err(x))
			direct_done_event(g, x);
		maybe_complete(g, x);
	}
}

static void slot_fail(struct pool_gpu *g, struct slot *s, int err)
{
	if (s->x)
		xfer_fail(s->x, err);
	slot_finish(g, s);
}

/* The stage of s outlived its deadline: fail its transfer, keep the
 * slot until the stage really ends. */
static void slot_abandon(struct pool_gpu *g, struct slot *s)
{
	struct pool_gpu_xfer *x = s->x;

	pool_log(LOG_ERR,
		 "gpu: %s stage of a chunk timed out len=%zu "
		 "timeout_ms=%d",
		 s->st == S_FABRIC ? "fabric" : "copy", s->len, g->timeout_ms);
	s->abandoned = true;
	s->x = NULL;
	__atomic_add_fetch(&g->st_abandoned, 1, __ATOMIC_RELAXED);
	if (x) {
		xfer_fail(x, -ETIME);
		x->inflight--;
		maybe_complete(g, x);
	}
}

/* Was some other chunk still in stage `st` just now? (overlap stats) */
static bool other_in_stage(struct pool_gpu *g, struct slot *self, enum stage st)
{
	for (uint64_t q = g->tail; q < g->head; q++) {
		struct slot *o = slot_at(g, q);

		if (o == self || o->st != st || o->abandoned)
			continue;
		if (st == S_COPY &&
		    g->be->event_query(g->dev, o->ev) == -EAGAIN)
			return true;
		if (st == S_FABRIC &&
		    (o->direct ? !__atomic_load_n(&o->fop.complete,
						  __ATOMIC_ACQUIRE)
			       : pool_test(g->p, o->op) == 0))
			return true;
	}
	return false;
}

static int post_rma(struct pool_gpu *g, struct slot *s)
{
	struct pool_gpu_xfer *x = s->x;
	uint64_t off = x->off + s->xoff;
	int r;

	r = x->store ? pool_write_async(g->p, x->r, off, s->buf, s->len, &s->op)
		     : pool_read_async(g->p, x->r, off, s->buf, s->len, &s->op);
	if (r)
		return r;
	fabric_posted(g, s);
	return 0;
}

/* The next transfer that has chunks to hand out, or NULL. */
static struct pool_gpu_xfer *next_to_issue(struct pool_gpu *g)
{
	struct pool_gpu_xfer *x;

	pthread_mutex_lock(&g->lock);
	for (x = g->pending; x; x = x->next)
		if (!x->all_issued && !xfer_err(x))
			break;
	pthread_mutex_unlock(&g->lock);
	return x;
}

static bool issue_chunks(struct pool_gpu *g)
{
	bool moved = false;

	for (;;) {
		struct pool_gpu_xfer *x = next_to_issue(g);
		uint64_t peer = 0, raddr = 0, key = 0;
		struct slot *s;
		size_t len;
		int r;

		if (!x)
			break;
		if (g->head - g->tail == g->count) {
			/* Full. With a stuck stage in the ring, waiting for
			 * a slot could last as long as that stage does. */
			if (slot_at(g, g->tail)->abandoned) {
				xfer_fail(x, -ETIME);
				maybe_complete(g, x);
				moved = true;
				continue;
			}
			break;
		}
		len = x->len - x->issued < g->staging_bytes ? x->len - x->issued
							    : g->staging_bytes;
		if (x->direct && !x->registered)
			direct_register(g, x);
		if (x->direct) {
			r = direct_target(g, x, &len, &peer, &raddr, &key);
			if (r) {
				xfer_fail(x, r);
				maybe_complete(g, x);
				moved = true;
				continue;
			}
		}
		s = slot_at(g, g->head++);
		s->x = x;
		s->xoff = x->issued;
		s->len = len;
		s->op = NULL;
		s->abandoned = false;
		s->direct = x->direct;
		s->peer = peer;
		s->raddr = raddr;
		s->key = key;
		x->issued += len;
		s->last = x->issued == x->len;
		x->all_issued = s->last;
		x->inflight++;
		__atomic_add_fetch(&g->st_chunks, 1, __ATOMIC_RELAXED);
		moved = true;
		/* Direct chunks wait for the start event, as copies do. */
		if (x->store || !len || s->direct) {
			s->st = S_READY;
			continue;
		}
		r = post_rma(g, s);
		if (r)
			slot_fail(g, s, r);
	}
	return moved;
}

/* Enqueues the copies of READY chunks, strictly in chunk order. */
static bool advance_copies(struct pool_gpu *g)
{
	bool moved = false;

	while (g->copy_seq < g->head) {
		struct slot *s = slot_at(g, g->copy_seq);
		struct pool_gpu_xfer *x = s->x;
		void *dst, *src;
		int r;

		if (s->st == S_DONE || s->abandoned) {
			g->copy_seq++;
			continue;
		}
		if (s->st != S_READY)
			break;	   /* its RMA is still running */
		if (xfer_err(x)) { /* cancelled or failed: drop */
			slot_finish(g, s);
			g->copy_seq++;
			moved = true;
			continue;
		}
		if (!x->started) {
			r = g->be->event_query(g->dev, x->start_ev);
			if (r == -EAGAIN)
				break; /* the caller's stream is still busy */
			if (r) {
				slot_fail(g, s, r);
				g->copy_seq++;
				moved = true;
				continue;
			}
			x->started = true;
		}
		if (s->direct) {
			r = post_direct(g, s);
			g->copy_seq++;
			moved = true;
			if (r)
				slot_fail(g, s, r);
			else if (s->last)
				publish(g, x, false, true);
			continue;
		}
		dst = x->store ? s->buf : x->dev + s->xoff;
		src = x->store ? x->dev + s->xoff : s->buf;
		r = s->len ? g->be->memcpy_async(g->dev, dst, src, s->len,
						 g->copy_stream)
			   : 0;
		if (!r && s->last)
			r = g->be->event_record(g->dev, x->done_ev,
						g->copy_stream);
		if (!r)
			r = g->be->event_record(g->dev, s->ev, g->copy_stream);
		g->copy_seq++;
		moved = true;
		if (r) {
			slot_fail(g, s, r);
			continue;
		}
		s->st = S_COPY;
		s->deadline_ms = mono_ms() + (uint64_t)g->timeout_ms;
		g->ncopy++;
		stat_max(&g->st_copy_max, g->ncopy);
		if (s->last)
			publish(g, x, true, !x->store);
	}
	return moved;
}

/*
 * Slot s's stage ended with r while the other stage (S_COPY or S_FABRIC)
 * may be busy with another slot: counts the overlap; an abandoned slot
 * is done, a failed one fails. True when s goes on.
 */
static bool stage_ended(struct pool_gpu *g, struct slot *s, int r,
			enum stage other)
{
	if (s->abandoned) {
		s->st = S_DONE;
		__atomic_sub_fetch(&g->st_abandoned, 1, __ATOMIC_RELAXED);
		return false;
	}
	if (other_in_stage(g, s, other))
		__atomic_add_fetch(&g->st_overlapped, 1, __ATOMIC_RELAXED);
	if (r) {
		slot_fail(g, s, r);
		return false;
	}
	return true;
}

static void fabric_done(struct pool_gpu *g, struct slot *s, int r)
{
	struct pool_gpu_xfer *x = s->x;

	s->op = NULL;
	g->nfabric--;
	if (!stage_ended(g, s, r, S_COPY))
		return;
	if (x->store || s->direct)
		slot_finish(g, s);
	else
		s->st = S_READY;
}

static void copy_done(struct pool_gpu *g, struct slot *s, int r)
{
	struct pool_gpu_xfer *x = s->x;

	g->ncopy--;
	if (!stage_ended(g, s, r, S_FABRIC))
		return;
	if (!x->store || xfer_err(x) || !s->len) {
		if (x->store && s->last && !xfer_err(x))
			publish(g, x, false, true);
		slot_finish(g, s);
		return;
	}
	r = post_rma(g, s);
	if (r) {
		slot_fail(g, s, r);
		return;
	}
	if (s->last)
		publish(g, x, false, true);
}

/* Looks at every stage in flight once. */
/* Whether the RMA of s (S_FABRIC) has completed; *res is its result. */
static bool fabric_complete(struct pool_gpu *g, struct slot *s, int *res)
{
	if (s->direct) {
		if (!__atomic_load_n(&s->fop.complete, __ATOMIC_ACQUIRE))
			return false;
		*res = s->fop.status;
		return true;
	}
	if (pool_test(g->p, s->op) != 1)
		return false;
	/* Complete, so this returns its result (never "still running")
	 * and frees it. */
	*res = pool_wait(g->p, s->op, 0);
	return true;
}

static bool poll_stages(struct pool_gpu *g, uint64_t now)
{
	bool moved = false;

	if (g->fep && g->nfabric) /* the direct path's own endpoint */
		fab_ep_progress(g->fep, 0);
	for (uint64_t q = g->tail; q < g->head; q++) {
		struct slot *s = slot_at(g, q);
		int r;

		if (s->st == S_FABRIC) {
			if (fabric_complete(g, s, &r)) {
				fabric_done(g, s, r);
				moved = true;
			} else if (!s->abandoned && now >= s->deadline_ms) {
				slot_abandon(g, s);
				moved = true;
			}
		} else if (s->st == S_COPY) {
			r = g->be->event_query(g->dev, s->ev);
			if (r != -EAGAIN) {
				copy_done(g, s, r);
				moved = true;
			} else if (!s->abandoned && now >= s->deadline_ms) {
				slot_abandon(g, s);
				moved = true;
			}
		}
	}
	return moved;
}

/* Gives DONE slots back, oldest first. */
static void retire(struct pool_gpu *g)
{
	while (g->tail < g->head && slot_at(g, g->tail)->st == S_DONE) {
		struct slot *s = slot_at(g, g->tail++);

		s->st = S_FREE;
		s->x = NULL;
		s->abandoned = false;
	}
	if (g->copy_seq < g->tail)
		g->copy_seq = g->tail;
}

/*
 * Applies cancels and stop: completes transfers that failed with nothing
 * in flight. Walks the FIFO only when a caller changed something (the
 * worker completes what it fails itself). Returns true when the worker
 * should exit: stopping, no transfer left, no stage in flight other than
 * abandoned ones.
 */
static bool sweep(struct pool_gpu *g, uint64_t *seen_kick)
{
	struct pool_gpu_xfer *x, *next;
	bool stop, changed;

	pthread_mutex_lock(&g->lock);
	stop = g->stop;
	*seen_kick = g->kick;
	changed = g->kick != g->swept_kick;
	g->swept_kick = g->kick;
	x = g->pending;
	pthread_mutex_unlock(&g->lock);
	if (!changed && !stop)
		return false;
	/* Only the worker unlinks from the FIFO; callers append. */
	for (; x; x = next) {
		pthread_mutex_lock(&g->lock);
		next = x->next;
		pthread_mutex_unlock(&g->lock);
		if (stop)
			xfer_fail(x, -ECANCELED);
		if (xfer_err(x) && !x->inflight)
			maybe_complete(g, x);
	}
	if (!stop)
		return false;
	pthread_mutex_lock(&g->lock);
	x = g->pending;
	pthread_mutex_unlock(&g->lock);
	if (x)
		return false;
	for (uint64_t q = g->tail; q < g->head; q++) {
		struct slot *s = slot_at(g, q);

		if (!s->abandoned && s->st != S_DONE)
			return false;
	}
	return true;
}

/* Nothing moved: sleep until something may have. */
static void block(struct pool_gpu *g, uint64_t seen_kick)
{
	struct slot *copy = NULL, *start = NULL;
	bool fabric = false;
	struct timespec ts;

	for (uint64_t q = g->tail; q < g->head; q++) {
		struct slot *s = slot_at(g, q);

		if (s->st == S_FABRIC)
			fabric = true;
		else if (s->st == S_COPY && !copy)
			copy = s;
	}
	if (g->copy_seq < g->head) {
		struct slot *s = slot_at(g, g->copy_seq);

		if (s->st == S_READY && s->x && !s->x->started)
			start = s;
	}
	if (!fabric && !copy && !start) {
		g->poll_ns = 0;
		pthread_mutex_lock(&g->lock);
		ts = deadline_ts(IDLE_WAIT_MS);
		if (g->kick == seen_kick)
			pthread_cond_timedwait(&g->cond, &g->lock, &ts);
		pthread_mutex_unlock(&g->lock);
		return;
	}
	if (!fabric) {
		/* Only device work pending: the backend can block on it. */
		g->poll_ns = 0;
		g->be->event_wait(g->dev, copy ? copy->ev : start->x->start_ev,
				  SLICE_US);
		return;
	}
	/*
	 * An RMA is in flight. Blocking in pool_wait() is not an option:
	 * it can return -ETIMEDOUT both for "still running" and as a
	 * transfer's result (having freed the op), so ops are only ever
	 * waited for after pool_test() said they are complete. Poll,
	 * backing off to POLL_MAX_NS.
	 */
	if (g->spins < SPIN_POLLS) {
		/* Just after progress the next completion is likely near: a
		 * chunk of 4 MiB takes ~160 us on a 25 GB/s fabric, and a
		 * sleep would add tens of microseconds to it. */
		g->spins++;
		sched_yield();
		return;
	}
	g->poll_ns = g->poll_ns ? g->poll_ns * 2 : 1000;
	if (g->poll_ns > POLL_MAX_NS)
		g->poll_ns = POLL_MAX_NS;
	ts.tv_sec = 0;
	ts.tv_nsec = g->poll_ns;
	nanosleep(&ts, NULL);
}

static void worker_started(struct pool_gpu *g, int err)
{
	pthread_mutex_lock(&g->lock);
	g->ready = true;
	g->start_err = err;
	pthread_cond_broadcast(&g->done_cond);
	pthread_mutex_unlock(&g->lock);
}

static void *worker_main(void *arg)
{
	struct pool_gpu *g = arg;
	int r;

	pthread_setname_np(pthread_self(), "pool-gpu");
	pool_paging_mark_engine_thread();
	/* Our polls sleep a few microseconds: without this the kernel may
	 * stretch each sleep by its default slack of 50 us. */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
	if (g->numa_apply) {
		r = place_bind_thread_to_node(g->place, g->numa_node);
		if (r) {
			pool_log(g->numa_explicit ? LOG_WARNING : LOG_INFO,
				 "gpu: numa: worker not pinned node=%d err=%s",
				 g->numa_node, strerror(-r));
			if (g->numa_explicit) {
				worker_started(g, r);
				return NULL;
			}
		}
		g->numa_pinned = !r; /* read after worker_started() */
	}
	r = g->be->bind_thread(g->dev);
	worker_started(g, r);
	if (r)
		return NULL;
	for (;;) {
		uint64_t now = mono_ms(), kick;
		bool moved;

		if (sweep(g, &kick))
			break;
		moved = issue_chunks(g);
		moved |= advance_copies(g);
		moved |= poll_stages(g, now);
		retire(g);
		if (moved) {
			g->poll_ns = 0;
			g->spins = 0;
		} else {
			block(g, kick);
		}
	}
	return NULL;
}

/*
 * After the worker exits: waits (bounded) for abandoned stages, then
 * frees what is safe to free. Memory a stuck stage may still write is
 * leaked, on purpose.
 */
static void settle_abandoned(struct pool_gpu *g)
{
	uint64_t deadline = mono_ms() + (uint64_t)g->timeout_ms;
	bool left;
	int r;

	do {
		struct timespec ts = { 0, 1000000 };

		left = false;
		for (uint64_t q = g->tail; q < g->head; q++) {
			struct slot *s = slot_at(g, q);

			if (!s->abandoned || s->st == S_DONE)
				continue;
			if (s->direct && s->st == S_FABRIC)
				fab_ep_progress(g->fep, 0);
			if (s->st == S_FABRIC && fabric_complete(g, s, &r)) {
				fabric_done(g, s, 0);
			} else if (s->st == S_COPY &&
				   g->be->event_query(g->dev, s->ev) !=
					   -EAGAIN) {
				copy_done(g, s, 0);
			} else {
				left = true;
			}
		}
		if (left)
			nanosleep(&ts, NULL);
	} while (left && mono_ms() < deadline);
	for (uint64_t q = g->tail; q < g->head; q++) {
		struct slot *s = slot_at(g, q);

		/* A direct RMA ends when pool_gpu_close() closes the
		 * endpoint; it never used the staging buffer. */
		if (s->abandoned && s->st != S_DONE && !s->direct) {
			pool_log(LOG_ERR,
				 "gpu: close: a stage never ended; "
				 "leaking its staging buffer len=%zu",
				 g->staging_bytes);
			s->buf = NULL;
			s->ev = NULL;
		}
	}
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
	g->kind = be == &host_backend ? POOL_GPU_HOST : POOL_GPU_CUDA;
	g->device = o.device;
	g->staging_bytes = o.staging_bytes ? o.staging_bytes : DEFAULT_STAGING;
	g->count = o.staging_count;
	g->numa_node = -1;
	g->timeout_ms = o.timeout_ms ? o.timeout_ms : DEFAULT_TIMEOUT_MS;
	pthread_mutex_init(&g->lock, NULL);
	cond_init_mono(&g->cond);
	cond_init_mono(&g->done_cond);

	r = be->open(o.device, &g->dev);
	if (r) {
		g->dev = NULL;
		goto fail;
	}
	be->pci_bus_id(g->dev, g->bus_id, sizeof(g->bus_id));
	r = numa_choose(g, &o);
	if (!r)
		r = direct_choose(g, &o);
	if (!r)
		r = be->stream_create(g->dev, &g->copy_stream);
	if (r)
		goto fail;
	/* The ring exists on the direct path too: for transfers whose
	 * device range cannot be registered. */
	for (unsigned i = 0; i < g->count; i++) {
		r = staging_alloc(g, &g->slots[i]);
		if (!r)
			r = be->event_create(g->dev, &g->slots[i].ev);
		if (r)
			goto fail;
	}
	r = pthread_create(&g->worker, NULL, worker_main, g);
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
		settle_abandoned(g);
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
			staging_free(g, &g->slots[i]);
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
	x->prev = g->pending_tail;
	if (g->pending_tail)
		g->pending_tail->next = x;
	else
		g->pending = x;
	g->pending_tail = x;
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
	struct timespec ts = deadline_ts(timeout_ms > 0 ? timeout_ms : 0);

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
	return x->complete || x->ev_ready || xfer_err(x);
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
	if (x->prev)
		x->prev->next = x->next;
	else
		g->done = x->next;
	if (x->next)
		x->next->prev = x->prev;
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
	if (!x->complete && !x->committed && xfer_fail(x, -ECANCELED)) {
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
		r = xfer_err(x);
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
