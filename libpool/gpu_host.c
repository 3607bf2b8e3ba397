// SPDX-License-Identifier: MIT
/*
 * libpool/gpu_host.c - the host backend of GPU prefetch (libpool/gpu.h),
 * what CI runs the whole pipeline on.
 *
 * "Device" memory is host memory; a stream is a thread that runs its
 * queue in order, as a GPU's copy engine runs a CUDA stream. Events have
 * CUDA's semantics: a record on a stream completes when the work enqueued
 * before it has; a query or a stream wait looks at the latest record made
 * before it; an event never recorded is complete. Everything is under
 * hd->lock; hd->cond is broadcast whenever an op completes.
 *
 * Threads: pool-gpu-hs, one per stream, runs that stream's queue in
 * order; it takes the device's lock only.
 */
#include "libpool/gpu_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "fabric/dlist.h"
#include "libpool/log.h"
#include "libpool/thread_role.h"

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
	pool_thread_mark_internal();
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
	TP_QUEUE_APPEND(s->head, s->tail, op, next);
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
	gpu_cond_init_mono(&d->cond);
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

	ts = pool_deadline_us(timeout_us >= 0 ? timeout_us : 0);
	pthread_mutex_lock(&d->lock);
	while (ev->completed < ev->recorded && r != ETIMEDOUT)
		r = timeout_us < 0
			    ? pthread_cond_wait(&d->cond, &d->lock)
			    : pthread_cond_timedwait(&d->cond, &d->lock, &ts);
	r = ev->completed >= ev->recorded ? 0 : -ETIMEDOUT;
	pthread_mutex_unlock(&d->lock);
	return r;
}

const struct gpu_backend gpu_host_backend = {
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
