// SPDX-License-Identifier: MIT
/*
 * libpool/gpu_pipeline.c - the worker of a GPU prefetch engine
 * (pool-gpu): it cuts transfers into chunks, moves each through its
 * stages on the ring of staging slots (fabric, copy; or one direct RMA),
 * keeps every stage's deadline, and completes transfers. The engine's
 * invariants and threads are in gpu.c's DESIGN comment; this file is
 * where they are kept.
 *
 * Threads: pool-gpu only, but for gpu_xfer_fail(), which callers use to
 * cancel.
 */
#include "libpool/gpu_int.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/prctl.h>

#include "libpool/log.h"
#include "libpool/thread_role.h"
#include "numa/place.h"
#include "fabric/dlist.h"

#define IDLE_WAIT_MS 1000 /* idle worker re-checks this often anyway */
#define SLICE_US 2000	  /* longest block on one event before re-checking */
#define POLL_MAX_NS 50000 /* longest sleep between polls when busy */
#define SPIN_POLLS 64	  /* polls with sched_yield() only, after progress */

/*
 * Records err as x's error unless it already has one. A timeout becomes
 * -ETIME: -ETIMEDOUT from pool_gpu_xfer_wait() and pool_gpu_xfer_event()
 * means "still running", so it must never be a result.
 */
bool gpu_xfer_fail(struct pool_gpu_xfer *x, int err)
{
	int zero = 0;

	if (err == -ETIMEDOUT)
		err = -ETIME;

	return __atomic_compare_exchange_n(&x->err, &zero, err, false,
					   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static void unlink_pending_locked(struct pool_gpu *g, struct pool_gpu_xfer *x)
{
	TP_DLIST_UNLINK(g->pending, g->pending_tail, x, prev, next);
}

/*
 * Completes x when nothing of it is in flight any more: on error, or
 * once every chunk is issued and done. Worker only; takes g->lock.
 */
static void maybe_complete(struct pool_gpu *g, struct pool_gpu_xfer *x)
{
	int err = gpu_xfer_err(x);

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
	TP_DLIST_PUSH(g->done, x, prev, next);
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

/* Slot s's fabric operation is posted: s is in the fabric stage. */
static void fabric_posted(struct pool_gpu *g, struct slot *s)
{
	s->st = S_FABRIC;
	s->deadline_ms = gpu_mono_ms() + (uint64_t)g->timeout_ms;
	g->nfabric++;
	gpu_stat_max(&g->st_fabric_max, g->nfabric);
}

static int post_direct(struct pool_gpu *g, struct slot *s)
{
	int r = gpu_direct_post(g, s);

	if (!r)
		fabric_posted(g, s);
	return r;
}

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
		gpu_xfer_fail(x, r);
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
		if (x->direct && !x->inflight && x->all_issued &&
		    !gpu_xfer_err(x))
			direct_done_event(g, x);
		maybe_complete(g, x);
	}
}

static void slot_fail(struct pool_gpu *g, struct slot *s, int err)
{
	if (s->x)
		gpu_xfer_fail(s->x, err);
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
		gpu_xfer_fail(x, -ETIME);
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
		if (!x->all_issued && !gpu_xfer_err(x))
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
				gpu_xfer_fail(x, -ETIME);
				maybe_complete(g, x);
				moved = true;
				continue;
			}
			break;
		}
		len = x->len - x->issued < g->staging_bytes ? x->len - x->issued
							    : g->staging_bytes;
		if (x->direct && !x->registered)
			gpu_direct_register(g, x);
		if (x->direct) {
			r = gpu_direct_target(g, x, &len, &peer, &raddr, &key);
			if (r) {
				gpu_xfer_fail(x, r);
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
			break;	       /* its RMA is still running */
		if (gpu_xfer_err(x)) { /* cancelled or failed: drop */
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
		s->deadline_ms = gpu_mono_ms() + (uint64_t)g->timeout_ms;
		g->ncopy++;
		gpu_stat_max(&g->st_copy_max, g->ncopy);
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
	if (!x->store || gpu_xfer_err(x) || !s->len) {
		if (x->store && s->last && !gpu_xfer_err(x))
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
			gpu_xfer_fail(x, -ECANCELED);
		if (gpu_xfer_err(x) && !x->inflight)
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
		ts = pool_deadline_ms(IDLE_WAIT_MS);
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

void *gpu_worker_main(void *arg)
{
	struct pool_gpu *g = arg;
	int r;

	pthread_setname_np(pthread_self(), "pool-gpu");
	pool_thread_mark_internal();
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
		uint64_t now = gpu_mono_ms(), kick;
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
void gpu_settle_abandoned(struct pool_gpu *g)
{
	uint64_t deadline = gpu_mono_ms() + (uint64_t)g->timeout_ms;
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
	} while (left && gpu_mono_ms() < deadline);
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
