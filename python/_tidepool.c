/* SPDX-License-Identifier: MIT */
/*
 * _tidepool - the CPython extension of the tidepool package: libpool's
 * public API (tidepool/pool.h, kv.h, pool_map.h, pool_gpu.h) as Python
 * types. The pure-Python layer (python/tidepool/) adds futures, asyncio,
 * torch and numpy conveniences and the connectors; nothing here or there
 * re-implements keys, hashing or the wire (docs/python.md).
 *
 * Types: Pool (a session), Region, Mapping (a pool_map() range exported
 * through the buffer protocol), KV (a KV handle), KVOp (one asynchronous
 * KV operation), GPU (a pool_gpu engine), GPUStream and GPUXfer (a
 * region <-> device transfer).
 *
 * Locking. Python objects are guarded by the GIL; libpool handles by one
 * reader-writer lock per Pool (struct py_pool.rw), shared by every child
 * of the pool. A call releases the GIL, takes rw for reading, checks that
 * neither the pool nor the child is closed, calls libpool, drops rw and
 * takes the GIL back: blocking calls never hold the GIL, and any number
 * of threads run them at once. Closing takes rw for writing, so a handle
 * is never freed under a call in flight, and every later call raises
 * ClosedError instead of touching freed memory. No thread ever waits
 * for rw while holding the GIL (pool_rdlock, pool_wrlock, POOL_CALL):
 * a closer holds rw while it takes the GIL back, so that is what keeps
 * the two locks from deadlocking.
 *
 * Invariants:
 *  - A child (Region, Mapping, KV, GPU) holds a strong reference to its
 *    Pool, so the Pool object and its rw outlive every child.
 *  - Pool.close() closes its GPU engines (before pool_close, as
 *    pool_gpu.h asks), KV handles and regions; pool_close() itself waits
 *    until no Mapping is left, because the memory of a mapping may still
 *    be a live tensor's storage (close_pending).
 *  - An asynchronous KV op keeps every buffer it was given (Py_buffer
 *    views and references) until libpool has completed it.
 *  - fork(): every object records the pid that created it; in another
 *    process every call raises ForkError and deallocation frees nothing
 *    of libpool's (its threads do not exist there).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <tidepool/kv.h>
#include <tidepool/pool.h>
#include <tidepool/pool_gpu.h>
#include <tidepool/pool_map.h>

/* ------------------------------------------------------------------ */
/* exceptions                                                          */

static PyObject *PoolError, *PoolConnectionError, *PoolPermissionError,
	*PoolCapacityError, *PoolTimeoutError, *PoolFileNotFoundError,
	*ClosedError, *ForkError;

static PyObject *exc_class(int err)
{
	switch (err) {
	case ENOTCONN:
	case ECONNREFUSED:
	case ECONNRESET:
	case ECONNABORTED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EPIPE:
		return PoolConnectionError;
	case EACCES:
	case EPERM:
		return PoolPermissionError;
	case EDQUOT:
	case ENOSPC:
		return PoolCapacityError;
	case ETIMEDOUT:
	case ETIME:
		return PoolTimeoutError;
	case ENOENT:
		return PoolFileNotFoundError;
	default:
		return PoolError;
	}
}

/* Raises the exception for -err (negative errno from libpool), with
 * strerror "what: pool_strerror(err)". Returns NULL. */
static PyObject *raise_pool(int err, const char *what)
{
	char text[512];
	PyObject *args;

	if (err >= 0)
		err = -EIO;
	snprintf(text, sizeof(text), "%s%s%s", what ? what : "",
		 what ? ": " : "", pool_strerror(err));
	args = Py_BuildValue("(is)", -err, text);
	if (args) {
		PyErr_SetObject(exc_class(-err), args);
		Py_DECREF(args);
	}
	return NULL;
}

static PyObject *raise_closed(const char *what)
{
	PyErr_Format(ClosedError, "tidepool: %s is closed", what);
	return NULL;
}

/*
 * A failed call on a handle: -EBADF is the lock check (or libpool)
 * finding `handle` closed, anything else libpool's error doing `what`.
 * Returns NULL.
 */
static PyObject *raise_call(int err, const char *handle, const char *what)
{
	if (err == -EBADF)
		return raise_closed(handle);
	return raise_pool(err, what);
}

static PyObject *raise_forked(const char *what, pid_t pid)
{
	PyErr_Format(ForkError,
		     "tidepool: this %s was opened in process %d; a fork()ed "
		     "child cannot use it (open a new one in the child)",
		     what, (int)pid);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* buffers                                                              */

/*
 * A buffer taken from a Python object for the length of a call or an
 * asynchronous op: a Py_buffer view (buffer protocol), or a torch
 * tensor's memory.
 *
 * A view is safe to hand to libpool as it is: while it is exported its
 * owner cannot resize or free it (numpy, bytearray and memoryview
 * refuse). A tensor gives no such guarantee: set_() moves it to another
 * storage (freeing the old one when nothing else holds it) and a
 * growing resize_() reallocates its storage's memory in place, both
 * from Python code running while libpool writes (an async op, or any
 * thread while a sync call has the GIL released). So a tensor's storage
 * object is held for the call's life (set_() and del cannot free the
 * memory), and a CPU tensor's bytes go through a bounce buffer that
 * libpool alone owns: a source is copied in when the call starts, a
 * destination is copied out into the held storage, at the same offset,
 * once the call has completed (bufref_commit, GIL held). A CPU tensor
 * whose storage cannot be resized (storage_is_fixed: on torch 2
 * from_numpy, frombuffer, shared memory, memory torch did not allocate;
 * on torch 1.x shared memory only) needs no bounce: holding the storage keeps its memory where it is, so libpool
 * reads and writes the tensor's bytes in place. The GPU path
 * does not bounce: its device copies run on a stream the caller
 * synchronizes, as torch's own non_blocking copies do.
 */
struct bufref {
	void *ptr; /* what libpool reads or writes (bounce when set) */
	size_t len;
	bool is_view;
	bool is_cuda;
	int cuda_device;
	Py_buffer view;
	PyObject *keep;	    /* the tensor, for non-views */
	PyObject *storage;  /* its storage, held for the call (or NULL) */
	size_t storage_off; /* the tensor's bytes' offset in storage */
	void *bounce;	    /* CPU tensors: libpool's copy (or NULL) */
	bool want_bounce;   /* bufref_take: a bounce buffer is due */
	void *blk;	    /* the bounce block this bufref returns */
	size_t blk_cap;
};

/*
 * Bounce blocks. A call's bounce buffers share one block (bufs_bounce),
 * taken from a small cache of blocks that earlier calls gave back: a
 * fresh allocation per call cost more than the copy itself (every page
 * of a new mapping faulted in, and glibc hands blocks this size back to
 * the kernel on free). A block is taken out of the cache for its call's
 * whole life and returned when the call's buffers are released, so two
 * calls in flight never share one. The cache keeps at most
 * BOUNCE_CACHE_SLOTS blocks and bounce_cache_max bytes (256 MiB, or
 * TIDEPOOL_BOUNCE_CACHE at import; 0 caches nothing); a block given
 * back displaces smaller ones to stay within both, or is unmapped.
 * Blocks are anonymous mappings,
 * prefaulted when made; the cache is emptied at module teardown.
 */
#define BOUNCE_CACHE_SLOTS 8
#define BOUNCE_CACHE_DEFAULT ((size_t)256 << 20)
#define BOUNCE_GRAIN ((size_t)64 << 10)

static pthread_mutex_t bounce_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	void *p;
	size_t cap;
} bounce_slot[BOUNCE_CACHE_SLOTS];
static size_t bounce_cache_max = BOUNCE_CACHE_DEFAULT;
static size_t bounce_cached;		    /* bytes in bounce_slot */
static uint64_t bounce_made, bounce_reused; /* blocks mapped, reused */

/* A block of at least need bytes (> 0): a cached one (the smallest that
 * fits) or a new mapping. NULL when out of memory. */
static void *bounce_take(size_t need, size_t *cap)
{
	size_t best = BOUNCE_CACHE_SLOTS, c;
	void *p;

	pthread_mutex_lock(&bounce_mu);
	for (size_t i = 0; i < BOUNCE_CACHE_SLOTS; i++)
		if (bounce_slot[i].p && bounce_slot[i].cap >= need &&
		    (best == BOUNCE_CACHE_SLOTS ||
		     bounce_slot[i].cap < bounce_slot[best].cap))
			best = i;
	if (best < BOUNCE_CACHE_SLOTS) {
		p = bounce_slot[best].p;
		*cap = bounce_slot[best].cap;
		bounce_slot[best].p = NULL;
		bounce_cached -= *cap;
		bounce_reused++;
		pthread_mutex_unlock(&bounce_mu);
		return p;
	}
	pthread_mutex_unlock(&bounce_mu);
	c = (need + BOUNCE_GRAIN - 1) & ~(BOUNCE_GRAIN - 1);
	p = mmap(NULL, c, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	pthread_mutex_lock(&bounce_mu);
	bounce_made++;
	pthread_mutex_unlock(&bounce_mu);
	*cap = c;
	return p;
}

/* Gives block p (cap bytes) back: to the cache while it has room,
 * displacing smaller cached blocks when it has not (a process's large
 * calls keep their block), else to the kernel. */
static void bounce_give(void *p, size_t cap)
{
	struct {
		void *p;
		size_t cap;
	} out[BOUNCE_CACHE_SLOTS + 1];
	size_t nout = 0;

	pthread_mutex_lock(&bounce_mu);
	for (;;) {
		size_t free_i = BOUNCE_CACHE_SLOTS, small = BOUNCE_CACHE_SLOTS;

		for (size_t i = 0; i < BOUNCE_CACHE_SLOTS; i++) {
			if (!bounce_slot[i].p)
				free_i = i;
			else if (small == BOUNCE_CACHE_SLOTS ||
				 bounce_slot[i].cap < bounce_slot[small].cap)
				small = i;
		}
		if (free_i < BOUNCE_CACHE_SLOTS &&
		    bounce_cached + cap <= bounce_cache_max) {
			bounce_slot[free_i].p = p;
			bounce_slot[free_i].cap = cap;
			bounce_cached += cap;
			break;
		}
		if (cap > bounce_cache_max || small == BOUNCE_CACHE_SLOTS ||
		    bounce_slot[small].cap >= cap) {
			out[nout].p = p;
			out[nout++].cap = cap;
			break;
		}
		out[nout].p = bounce_slot[small].p;
		out[nout++].cap = bounce_slot[small].cap;
		bounce_cached -= bounce_slot[small].cap;
		bounce_slot[small].p = NULL;
	}
	pthread_mutex_unlock(&bounce_mu);
	for (size_t i = 0; i < nout; i++)
		munmap(out[i].p, out[i].cap);
}

/* bounce_cache_max from TIDEPOOL_BOUNCE_CACHE (bytes, or with a K, M
 * or G suffix). -1 with ValueError when it is not such a size. */
static int bounce_cache_env(void)
{
	const char *v = getenv("TIDEPOOL_BOUNCE_CACHE");
	unsigned long long n;
	char *end;
	int shift = 0;

	if (!v)
		return 0;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (*end == 'K' || *end == 'k')
		shift = 10, end++;
	else if (*end == 'M' || *end == 'm')
		shift = 20, end++;
	else if (*end == 'G' || *end == 'g')
		shift = 30, end++;
	if (errno || end == v || *end || !isdigit((unsigned char)*v) ||
	    n > (SIZE_MAX >> 1) >> shift) {
		PyErr_Format(PyExc_ValueError,
			     "tidepool: TIDEPOOL_BOUNCE_CACHE='%s' is not a "
			     "size (bytes, or a number with K, M or G)",
			     v);
		return -1;
	}
	bounce_cache_max = (size_t)n << shift;
	return 0;
}

/* Unmaps every cached block (module teardown). */
static void bounce_drain(void)
{
	pthread_mutex_lock(&bounce_mu);
	for (size_t i = 0; i < BOUNCE_CACHE_SLOTS; i++) {
		if (bounce_slot[i].p)
			munmap(bounce_slot[i].p, bounce_slot[i].cap);
		bounce_slot[i].p = NULL;
	}
	bounce_cached = 0;
	pthread_mutex_unlock(&bounce_mu);
}

/*
 * The uint64_t counters of a stats struct, in the order the dict gives
 * them: { "name", offsetof(struct ..., name) }, ended by { NULL }.
 */
struct u64_field {
	const char *name;
	size_t off;
};
#define U64_FIELD(type, f)                                                     \
	{                                                                      \
		.name = #f, .off = offsetof(type, f)                           \
	}

/* Adds st's counters named by f to the new dict d and returns it, or
 * NULL with an exception (d released); d NULL (its constructor failed,
 * an exception set) gives NULL. */
static PyObject *u64_dict(PyObject *d, const void *st,
			  const struct u64_field *f)
{
	for (; d && f->name; f++) {
		uint64_t v;
		PyObject *o;

		memcpy(&v, (const char *)st + f->off, sizeof(v));
		o = PyLong_FromUnsignedLongLong(v);
		if (!o || PyDict_SetItemString(d, f->name, o) < 0)
			Py_CLEAR(d);
		Py_XDECREF(o);
	}
	return d;
}

static PyObject *str_data_ptr, *str_is_contiguous, *str_is_cuda, *str_numel,
	*str_element_size, *str_device, *str_index, *str_cuda_stream,
	*str_untyped_storage, *str__storage, *str_storage, *str_nbytes,
	*str_resizable, *str_is_shared;

static void bufref_release(struct bufref *b)
{
	if (b->is_view)
		PyBuffer_Release(&b->view);
	Py_CLEAR(b->keep);
	Py_CLEAR(b->storage);
	if (b->blk)
		bounce_give(b->blk, b->blk_cap);
	b->blk = NULL;
	b->bounce = NULL;
	b->want_bounce = false;
	b->is_view = false;
	b->ptr = NULL;
	b->len = 0;
}

/* A size_t from a Python int attribute/method result; -1 with error. */
static int pyobj_size(PyObject *o, size_t *out)
{
	unsigned long long v;

	if (!o)
		return -1;
	v = PyLong_AsUnsignedLongLong(o);
	Py_DECREF(o);
	if (v == (unsigned long long)-1 && PyErr_Occurred())
		return -1;
	*out = (size_t)v;
	return 0;
}

/* A tensor's bytes as it describes them now: data_ptr() and numel() *
 * element_size(). -1 with error. */
static int tensor_mem(PyObject *obj, uintptr_t *ptr, size_t *len)
{
	size_t p, numel, esize;

	if (pyobj_size(PyObject_CallMethodNoArgs(obj, str_data_ptr), &p) < 0 ||
	    pyobj_size(PyObject_CallMethodNoArgs(obj, str_numel), &numel) < 0 ||
	    pyobj_size(PyObject_CallMethodNoArgs(obj, str_element_size),
		       &esize) < 0)
		return -1;
	*ptr = (uintptr_t)p;
	*len = numel * esize;
	return 0;
}

/* A storage's bytes as they are now: data_ptr(), nbytes(). -1 with
 * error. */
static int storage_mem(PyObject *st, uintptr_t *ptr, size_t *len)
{
	size_t p;

	if (pyobj_size(PyObject_CallMethodNoArgs(st, str_data_ptr), &p) < 0 ||
	    pyobj_size(PyObject_CallMethodNoArgs(st, str_nbytes), len) < 0)
		return -1;
	*ptr = (uintptr_t)p;
	return 0;
}

/*
 * The storage object behind a tensor: untyped_storage() (torch 2),
 * _storage() or storage() (torch 1.x); *out NULL when obj has none (a
 * duck-typed object that is not a torch tensor). -1 with error.
 */
static int tensor_storage(PyObject *obj, PyObject **out)
{
	PyObject *names[] = { str_untyped_storage, str__storage, str_storage };

	*out = NULL;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!PyObject_HasAttr(obj, names[i]))
			continue;
		*out = PyObject_CallMethodNoArgs(obj, names[i]);
		return *out ? 0 : -1;
	}
	return 0;
}

/*
 * Whether storage st can never be resized, so that holding it keeps its
 * memory in place for a call: resizable() is False (torch 2), or, on a
 * torch whose storages lack resizable(), is_shared() is True (a shared
 * memory storage: torch 1.x refuses to resize those). Anything else,
 * errors included (cleared), counts as resizable: the tensor bounces.
 */
static bool storage_is_fixed(PyObject *st)
{
	PyObject *r;
	bool fixed = false;
	int t;

	if (!st)
		return false;
	if (PyObject_HasAttr(st, str_resizable)) {
		r = PyObject_CallMethodNoArgs(st, str_resizable);
		t = r ? PyObject_IsTrue(r) : -1;
		fixed = t == 0;
	} else if (PyObject_HasAttr(st, str_is_shared)) {
		r = PyObject_CallMethodNoArgs(st, str_is_shared);
		t = r ? PyObject_IsTrue(r) : -1;
		fixed = t == 1;
	} else {
		return false;
	}
	Py_XDECREF(r);
	if (t < 0)
		PyErr_Clear();
	return fixed;
}

/*
 * Where b's tensor's first nbytes are now, GIL held: in the storage b
 * holds, at the tensor's offset in it (after a growing resize_(), where
 * the storage keeps them now), or, for an object without a storage,
 * where it says its bytes are. Any exception already set is kept.
 * Returns 0 with *p, or -1, no exception set, when the storage no
 * longer holds those bytes (it was shrunk meanwhile).
 */
static int bufref_where(struct bufref *b, size_t nbytes, char **p)
{
	PyObject *et, *ev, *tb;
	size_t off = b->storage ? b->storage_off : 0, n = 0;
	uintptr_t sp = 0;
	int r;

	PyErr_Fetch(&et, &ev, &tb);
	r = b->storage ? storage_mem(b->storage, &sp, &n)
		       : tensor_mem(b->keep, &sp, &n);
	if (r == 0 && sp && off <= n && nbytes <= n - off)
		*p = (char *)sp + off;
	else
		r = -1;
	PyErr_Clear();
	PyErr_Restore(et, ev, tb);
	return r;
}

/*
 * The copy of a completed read out of its bounce buffer into the
 * tensor's memory. From BOUNCE_STREAM_MIN bytes on, with non-temporal
 * stores where the CPU has SSE2: the destination is written whole and
 * not read here, so its cache lines need not be fetched first (109 x 1
 * MiB: 4.2-5.1 ms against glibc memcpy's 5.7-6.1 on this project's VM,
 * docs/bench/python.md). The fence orders the streamed stores before
 * anything this thread writes next (the GIL's release among them).
 */
#define BOUNCE_STREAM_MIN ((size_t)256 << 10)

static void bounce_copy_out(char *dst, const char *src, size_t n)
{
#ifdef __SSE2__
	if (n >= BOUNCE_STREAM_MIN) {
		size_t head = (16 - ((uintptr_t)dst & 15)) & 15;

		memcpy(dst, src, head);
		dst += head;
		src += head;
		n -= head;
		for (; n >= 64; n -= 64, dst += 64, src += 64) {
			__m128i a = _mm_loadu_si128((const __m128i *)src);
			__m128i b =
				_mm_loadu_si128((const __m128i *)(src + 16));
			__m128i c =
				_mm_loadu_si128((const __m128i *)(src + 32));
			__m128i d =
				_mm_loadu_si128((const __m128i *)(src + 48));

			_mm_stream_si128((__m128i *)dst, a);
			_mm_stream_si128((__m128i *)(dst + 16), b);
			_mm_stream_si128((__m128i *)(dst + 32), c);
			_mm_stream_si128((__m128i *)(dst + 48), d);
		}
		_mm_sfence();
	}
#endif
	memcpy(dst, src, n);
}

/*
 * Delivers the first nbytes of b's bounce buffer (a completed read into
 * a CPU tensor) to where the tensor's bytes are now (bufref_where). GIL
 * held. Returns 0 (also when b has no bounce buffer), or -1, no
 * exception set, when the storage no longer holds those bytes: nothing
 * was written.
 */
static int bufref_commit(struct bufref *b, size_t nbytes)
{
	char *p;

	if (!b->bounce || nbytes == 0)
		return 0;
	if (nbytes > b->len)
		nbytes = b->len;
	if (bufref_where(b, nbytes, &p) < 0)
		return -1;
	bounce_copy_out(p, b->bounce, nbytes);
	return 0;
}

/*
 * Gives the bufrefs of bs[0..n) that want one (bufref_take) their
 * bounce buffers, all in one block (owned by the first of them), and
 * fills a source's (!writable) with its tensor's bytes, re-read from
 * its storage: Python code that ran since bufref_take (another item's
 * data_ptr()) may have moved them. GIL held. Returns 0, or -1 with
 * MemoryError/BufferError set (the caller releases bs).
 */
static int bufs_bounce(struct bufref *bs, size_t n, bool writable)
{
	size_t need = 0, off = 0, cap;
	struct bufref *owner = NULL;
	char *blk;

	for (size_t i = 0; i < n; i++)
		if (bs[i].want_bounce)
			need += (bs[i].len + 63) & ~(size_t)63;
	if (need == 0)
		return 0;
	blk = bounce_take(need, &cap);
	if (!blk) {
		PyErr_NoMemory();
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		struct bufref *b = &bs[i];

		if (!b->want_bounce)
			continue;
		if (!owner) {
			owner = b;
			b->blk = blk;
			b->blk_cap = cap;
		}
		b->want_bounce = false;
		b->bounce = blk + off;
		off += (b->len + 63) & ~(size_t)63;
		if (!writable) {
			char *src;

			if (bufref_where(b, b->len, &src) < 0) {
				PyErr_Format(PyExc_BufferError,
					     "tidepool: item %zu's storage "
					     "was shrunk while the call was "
					     "set up",
					     i);
				return -1;
			}
			memcpy(b->bounce, src, b->len);
		}
		b->ptr = b->bounce;
	}
	return 0;
}

/*
 * Takes obj's memory: a C-contiguous buffer (writable when asked), or a
 * contiguous torch tensor (duck-typed: data_ptr(), is_contiguous(),
 * numel(), element_size(), is_cuda), whose storage is held. With bounce,
 * a CPU tensor is marked for a bounce buffer (struct bufref), which
 * bufs_bounce gives it. idx names the item in errors (-1: none).
 * Returns 0, or -1 with TypeError/ValueError set and nothing held.
 */
static int bufref_take(PyObject *obj, bool writable, bool bounce,
		       Py_ssize_t idx, const char *what, struct bufref *b)
{
	uintptr_t tp;
	PyObject *r;
	int t;

	memset(b, 0, sizeof(*b));
	b->cuda_device = -1;
	if (PyObject_CheckBuffer(obj)) {
		int flags =
			PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);

		if (PyObject_GetBuffer(obj, &b->view, flags) < 0) {
			PyObject *et, *ev, *tb;

			PyErr_Fetch(&et, &ev, &tb);
			if (writable &&
			    PyObject_GetBuffer(obj, &b->view,
					       PyBUF_C_CONTIGUOUS) == 0) {
				PyBuffer_Release(&b->view);
				PyErr_Format(PyExc_TypeError,
					     "tidepool: %s[%zd] is read-only "
					     "(%s); it must be writable",
					     what, idx, Py_TYPE(obj)->tp_name);
			} else {
				PyErr_Format(PyExc_ValueError,
					     "tidepool: %s[%zd] (%s) is not a "
					     "C-contiguous buffer",
					     what, idx, Py_TYPE(obj)->tp_name);
			}
			Py_XDECREF(et);
			Py_XDECREF(ev);
			Py_XDECREF(tb);
			return -1;
		}
		b->is_view = true;
		b->ptr = b->view.buf;
		b->len = (size_t)b->view.len;
		return 0;
	}
	if (!PyObject_HasAttr(obj, str_data_ptr)) {
		PyErr_Format(PyExc_TypeError,
			     "tidepool: %s[%zd] is a %s: expected a torch "
			     "tensor, a numpy array or another object of the "
			     "buffer protocol",
			     what, idx, Py_TYPE(obj)->tp_name);
		return -1;
	}
	r = PyObject_CallMethodNoArgs(obj, str_is_contiguous);
	if (!r)
		return -1;
	t = PyObject_IsTrue(r);
	Py_DECREF(r);
	if (t < 0)
		return -1;
	if (!t) {
		PyErr_Format(PyExc_ValueError,
			     "tidepool: %s[%zd] is not contiguous "
			     "(call .contiguous() first)",
			     what, idx);
		return -1;
	}
	r = PyObject_GetAttr(obj, str_is_cuda);
	if (!r)
		return -1;
	t = PyObject_IsTrue(r);
	Py_DECREF(r);
	if (t < 0)
		return -1;
	b->is_cuda = t;
	if (b->is_cuda) {
		PyObject *dev = PyObject_GetAttr(obj, str_device);
		size_t di;

		if (!dev)
			return -1;
		r = PyObject_GetAttr(dev, str_index);
		Py_DECREF(dev);
		if (!r)
			return -1;
		if (r == Py_None) {
			Py_DECREF(r);
			b->cuda_device = 0;
		} else {
			if (pyobj_size(r, &di) < 0)
				return -1;
			b->cuda_device = (int)di;
		}
	}
	if (tensor_mem(obj, &tp, &b->len) < 0)
		return -1;
	b->ptr = (void *)tp;
	if (tensor_storage(obj, &b->storage) < 0)
		return -1;
	if (b->storage && b->len) {
		uintptr_t sp;
		size_t sn;

		if (storage_mem(b->storage, &sp, &sn) < 0)
			goto fail;
		if (tp < sp || tp - sp > sn || b->len > sn - (tp - sp)) {
			PyErr_Format(PyExc_ValueError,
				     "tidepool: %s[%zd]'s %zu bytes are not "
				     "inside its storage",
				     what, idx, b->len);
			goto fail;
		}
		b->storage_off = tp - sp;
	}
	b->want_bounce = bounce && !b->is_cuda && b->len &&
			 !storage_is_fixed(b->storage);
	Py_INCREF(obj);
	b->keep = obj;
	return 0;
fail:
	Py_CLEAR(b->storage);
	return -1;
}

/* bufref_take and, with bounce, a CPU tensor's bounce buffer: b->ptr
 * is then the bounce buffer, filled with the tensor's bytes unless
 * writable (a destination, delivered by bufref_commit). -1 with error
 * and nothing held. */
static int bufref_get(PyObject *obj, bool writable, bool bounce, Py_ssize_t idx,
		      const char *what, struct bufref *b)
{
	if (bufref_take(obj, writable, bounce, idx, what, b) < 0)
		return -1;
	if (bufs_bounce(b, 1, writable) < 0) {
		bufref_release(b);
		return -1;
	}
	return 0;
}

/* A sequence of buffers: fills bs[0..n) or releases what it took and
 * returns -1. */
static int bufs_get(PyObject *seq, size_t n, bool writable, bool bounce,
		    const char *what, struct bufref *bs)
{
	PyObject *fast = PySequence_Fast(seq, "tidepool: values must be a "
					      "sequence of buffers");
	size_t i;

	if (!fast)
		return -1;
	if ((size_t)PySequence_Fast_GET_SIZE(fast) != n) {
		PyErr_Format(PyExc_ValueError, "tidepool: %zu keys but %zd %s",
			     n, PySequence_Fast_GET_SIZE(fast), what);
		Py_DECREF(fast);
		return -1;
	}
	for (i = 0; i < n; i++) {
		PyObject *o = PySequence_Fast_GET_ITEM(fast, i);

		if (bufref_take(o, writable, bounce, (Py_ssize_t)i, what,
				&bs[i]) < 0)
			goto fail;
		if (bs[i].len == 0) {
			PyErr_Format(PyExc_ValueError,
				     "tidepool: %s[%zu] is empty", what, i);
			bufref_release(&bs[i]);
			goto fail;
		}
	}
	if (bufs_bounce(bs, n, writable) < 0)
		goto fail;
	Py_DECREF(fast);
	return 0;
fail:
	while (i-- > 0)
		bufref_release(&bs[i]);
	Py_DECREF(fast);
	return -1;
}

static void bufs_release(struct bufref *bs, size_t n)
{
	for (size_t i = 0; bs && i < n; i++)
		bufref_release(&bs[i]);
}

/*
 * Keys: a sequence of 32-byte bytes-like objects, or one buffer of
 * n * 32 bytes. Returns a PyMem_Malloc'ed array and *n, or NULL with an
 * exception.
 */
static struct pool_kv_key *keys_get(PyObject *obj, size_t *n)
{
	struct pool_kv_key *keys;
	PyObject *fast;
	Py_ssize_t cnt;

	if (PyObject_CheckBuffer(obj) && !PyList_Check(obj) &&
	    !PyTuple_Check(obj)) {
		Py_buffer v;

		if (PyObject_GetBuffer(obj, &v, PyBUF_C_CONTIGUOUS) < 0)
			return NULL;
		if (v.len == 0 || v.len % POOL_KV_KEY_BYTES ||
		    (size_t)v.len / POOL_KV_KEY_BYTES > POOL_KV_BATCH_MAX) {
			PyErr_Format(PyExc_ValueError,
				     "tidepool: keys as one buffer must hold "
				     "1 to %u keys of %d bytes (got %zd bytes)",
				     POOL_KV_BATCH_MAX, POOL_KV_KEY_BYTES,
				     v.len);
			PyBuffer_Release(&v);
			return NULL;
		}
		keys = PyMem_Malloc((size_t)v.len);
		if (!keys) {
			PyBuffer_Release(&v);
			return (struct pool_kv_key *)PyErr_NoMemory();
		}
		memcpy(keys, v.buf, (size_t)v.len);
		*n = (size_t)v.len / POOL_KV_KEY_BYTES;
		PyBuffer_Release(&v);
		return keys;
	}
	fast = PySequence_Fast(obj, "tidepool: keys must be a sequence of "
				    "32-byte keys or one buffer of them");
	if (!fast)
		return NULL;
	cnt = PySequence_Fast_GET_SIZE(fast);
	if (cnt == 0 || (size_t)cnt > POOL_KV_BATCH_MAX) {
		PyErr_Format(PyExc_ValueError,
			     "tidepool: a call takes 1 to %u keys (got %zd)",
			     POOL_KV_BATCH_MAX, cnt);
		Py_DECREF(fast);
		return NULL;
	}
	keys = PyMem_Malloc((size_t)cnt * sizeof(*keys));
	if (!keys) {
		Py_DECREF(fast);
		return (struct pool_kv_key *)PyErr_NoMemory();
	}
	for (Py_ssize_t i = 0; i < cnt; i++) {
		PyObject *k = PySequence_Fast_GET_ITEM(fast, i);

		if (PyBytes_Check(k) &&
		    PyBytes_GET_SIZE(k) == POOL_KV_KEY_BYTES) {
			memcpy(keys[i].b, PyBytes_AS_STRING(k),
			       POOL_KV_KEY_BYTES);
			continue;
		}
		Py_buffer v;

		if (PyObject_GetBuffer(k, &v, PyBUF_C_CONTIGUOUS) < 0) {
			PyErr_Clear();
			PyErr_Format(PyExc_TypeError,
				     "tidepool: keys[%zd] is a %s, not a "
				     "bytes-like key",
				     i, Py_TYPE(k)->tp_name);
			goto fail;
		}
		if (v.len != POOL_KV_KEY_BYTES) {
			PyErr_Format(PyExc_ValueError,
				     "tidepool: keys[%zd] has %zd bytes; a key "
				     "has %d",
				     i, v.len, POOL_KV_KEY_BYTES);
			PyBuffer_Release(&v);
			goto fail;
		}
		memcpy(keys[i].b, v.buf, POOL_KV_KEY_BYTES);
		PyBuffer_Release(&v);
	}
	Py_DECREF(fast);
	*n = (size_t)cnt;
	return keys;
fail:
	PyMem_Free(keys);
	Py_DECREF(fast);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Pool                                                                 */

struct py_pool {
	PyObject_HEAD struct pool *p;
	pid_t pid;
	pthread_rwlock_t rw;
	bool closed;	    /* no new calls (Python view) */
	bool close_pending; /* pool_close once the last Mapping goes */
	Py_ssize_t nmaps;
	PyObject *children; /* list of weakrefs: KV, GPU, Region */
	PyObject *weakrefs;
	char addr[128];
};

/*
 * Runs a libpool call on po's session without the GIL, under rw for
 * reading. CALL is an expression evaluated with `p` the session; the
 * result goes to `r`; a closed session gives -EBADF. child_closed is an
 * lvalue checked under the lock too.
 */
#define POOL_CALL(po, child_closed, r, CALL)                                   \
	do {                                                                   \
		Py_BEGIN_ALLOW_THREADS pthread_rwlock_rdlock(&(po)->rw);       \
		if (!(po)->p || (po)->closed || (child_closed)) {              \
			(r) = -EBADF;                                          \
		} else {                                                       \
			struct pool *p = (po)->p;                              \
			(r) = (CALL);                                          \
			(void)p;                                               \
		}                                                              \
		pthread_rwlock_unlock(&(po)->rw);                              \
		Py_END_ALLOW_THREADS                                           \
	} while (0)

static PyTypeObject PoolType, RegionType, MapType, KVType, KVOpType, GPUType,
	GPUStreamType;

/* Checks, with the GIL, that po may be used from this process. */
static int pool_usable(struct py_pool *po, const char *what)
{
	if (po->pid != getpid()) {
		raise_forked(what, po->pid);
		return -1;
	}
	if (po->closed) {
		raise_closed(what);
		return -1;
	}
	return 0;
}

/*
 * rw for reading, for a call that does not block, from a thread holding
 * the GIL. The rule that keeps the GIL and rw from deadlocking: no thread
 * ever waits for rw while it holds the GIL (a closer holds rw while it
 * takes the GIL back), so when rw is not free at once, wait without it.
 */
static void pool_rdlock(struct py_pool *po)
{
	if (pthread_rwlock_tryrdlock(&po->rw) == 0)
		return;
	Py_BEGIN_ALLOW_THREADS pthread_rwlock_rdlock(&po->rw);
	Py_END_ALLOW_THREADS
}

/* rw for writing (closing), waited for without the GIL. */
static void pool_wrlock(struct py_pool *po)
{
	Py_BEGIN_ALLOW_THREADS pthread_rwlock_wrlock(&po->rw);
	Py_END_ALLOW_THREADS
}

/* The real pool_close; with the GIL, not holding rw. */
static void pool_do_close(struct py_pool *po)
{
	struct pool *p;

	pool_wrlock(po);
	p = po->p;
	po->p = NULL;
	pthread_rwlock_unlock(&po->rw);
	if (p) {
		Py_BEGIN_ALLOW_THREADS pool_close(p);
		Py_END_ALLOW_THREADS
	}
}

static int pool_add_child(struct py_pool *po, PyObject *child)
{
	PyObject *ref = PyWeakref_NewRef(child, NULL);
	Py_ssize_t n;
	int r;

	if (!ref)
		return -1;
	/* drop dead references now and then */
	n = PyList_GET_SIZE(po->children);
	if (n >= 64 && (n & (n - 1)) == 0) {
		PyObject *live = PyList_New(0);

		if (!live) {
			Py_DECREF(ref);
			return -1;
		}
		for (Py_ssize_t i = 0; i < n; i++) {
			PyObject *w = PyList_GET_ITEM(po->children, i);

			if (PyWeakref_GetObject(w) != Py_None &&
			    PyList_Append(live, w) < 0) {
				Py_DECREF(live);
				Py_DECREF(ref);
				return -1;
			}
		}
		Py_SETREF(po->children, live);
	}
	r = PyList_Append(po->children, ref);
	Py_DECREF(ref);
	return r;
}

static int pool_init(struct py_pool *po, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "addr",	"tenant",      "secret_file",
				  "timeout_ms", "client_name", "max_inflight",
				  NULL };
	const char *addr = NULL, *tenant = NULL, *secret = NULL, *client = NULL;
	PyObject *secret_obj = Py_None, *secret_bytes = NULL;
	int timeout_ms = 0;
	unsigned max_inflight = 0;
	struct pool_opts o;
	struct pool *p = NULL;
	int r;

	if (po->p || po->children) {
		PyErr_SetString(PyExc_RuntimeError,
				"tidepool: Pool.__init__ called twice");
		return -1;
	}
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zzO$izI", kwlist, &addr,
					 &tenant, &secret_obj, &timeout_ms,
					 &client, &max_inflight))
		return -1;
	if (secret_obj != Py_None) {
		if (!PyUnicode_FSConverter(secret_obj, &secret_bytes))
			return -1;
		secret = PyBytes_AS_STRING(secret_bytes);
	}
	if (timeout_ms < 0) {
		PyErr_SetString(PyExc_ValueError,
				"tidepool: timeout_ms must be >= 0");
		Py_XDECREF(secret_bytes);
		return -1;
	}
	memset(&o, 0, sizeof(o));
	o.addr = addr;
	o.tenant = tenant;
	o.secret_file = secret;
	o.client_name = client;
	o.timeout_ms = timeout_ms;
	o.max_inflight = max_inflight;
	Py_BEGIN_ALLOW_THREADS r = pool_connect(&o, &p);
	Py_END_ALLOW_THREADS if (r)
	{
		char what[300];
		const char *a = addr ? addr : getenv("LIBPOOL_ADDR");

		snprintf(what, sizeof(what), "cannot connect to %s%s%s",
			 a ? a : "127.0.0.1:7470", tenant ? " as tenant " : "",
			 tenant ? tenant : "");
		Py_XDECREF(secret_bytes);
		raise_pool(r, what);
		return -1;
	}
	Py_XDECREF(secret_bytes);
	po->children = PyList_New(0);
	if (!po->children) {
		pool_close(p);
		return -1;
	}
	po->p = p;
	po->pid = getpid();
	snprintf(po->addr, sizeof(po->addr), "%s",
		 addr ? addr
		      : (getenv("LIBPOOL_ADDR") ? getenv("LIBPOOL_ADDR")
						: "127.0.0.1:7470"));
	return 0;
}

static PyObject *pool_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	struct py_pool *po = (struct py_pool *)type->tp_alloc(type, 0);
	pthread_rwlockattr_t a;

	if (!po)
		return NULL;
	pthread_rwlockattr_init(&a);
	/* a waiting close must not starve behind a stream of calls */
	pthread_rwlockattr_setkind_np(
		&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&po->rw, &a);
	pthread_rwlockattr_destroy(&a);
	po->pid = getpid();
	return (PyObject *)po;
}

static void child_close(PyObject *child);

/* Pool.close(): children first, then the session (unless mapped). */
static PyObject *pool_close_py(struct py_pool *po, PyObject *unused)
{
	if (po->pid != getpid())
		return raise_forked("Pool", po->pid);
	if (po->closed)
		Py_RETURN_NONE;
	po->closed = true;
	if (po->children) {
		/* GPU engines before the KV handles and regions */
		for (int pass = 0; pass < 2; pass++) {
			Py_ssize_t n = PyList_GET_SIZE(po->children);

			for (Py_ssize_t i = 0; i < n; i++) {
				PyObject *c = PyWeakref_GetObject(
					PyList_GET_ITEM(po->children, i));

				if (c == Py_None)
					continue;
				if ((pass == 0) == (Py_TYPE(c) == &GPUType)) {
					Py_INCREF(c);
					child_close(c);
					Py_DECREF(c);
				}
			}
		}
	}
	if (po->nmaps > 0)
		po->close_pending = true;
	else
		pool_do_close(po);
	Py_RETURN_NONE;
}

static void pool_dealloc(struct py_pool *po)
{
	PyObject_GC_UnTrack(po);
	if (po->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)po);
	/* Children hold references to po: none is left. */
	if (po->p && po->pid == getpid()) {
		struct pool *p = po->p;

		po->p = NULL;
		Py_BEGIN_ALLOW_THREADS pool_close(p);
		Py_END_ALLOW_THREADS
	}
	Py_CLEAR(po->children);
	pthread_rwlock_destroy(&po->rw);
	Py_TYPE(po)->tp_free((PyObject *)po);
}

static int pool_traverse(struct py_pool *po, visitproc visit, void *arg)
{
	Py_VISIT(po->children);
	return 0;
}

static PyObject *pool_closed_get(struct py_pool *po, void *unused)
{
	return PyBool_FromLong(po->closed);
}

static PyObject *pool_alloc_py(struct py_pool *po, PyObject *args,
			       PyObject *kw);
static PyObject *pool_map_py(struct py_pool *po, PyObject *args, PyObject *kw);
static PyObject *pool_kv_py(struct py_pool *po, PyObject *args, PyObject *kw);
static PyObject *pool_gpu_py(struct py_pool *po, PyObject *args, PyObject *kw);

static const struct u64_field pool_stats_fields[] = {
	U64_FIELD(struct pool_stats, slabs_held),
	U64_FIELD(struct pool_stats, slab_bytes),
	U64_FIELD(struct pool_stats, regions),
	U64_FIELD(struct pool_stats, bytes_read),
	U64_FIELD(struct pool_stats, bytes_written),
	U64_FIELD(struct pool_stats, ops),
	U64_FIELD(struct pool_stats, errors),
	U64_FIELD(struct pool_stats, heartbeats),
	U64_FIELD(struct pool_stats, epoch),
	{ NULL, 0 },
};

static PyObject *pool_stats_py(struct py_pool *po, PyObject *unused)
{
	struct pool_stats st;
	int r;

	if (pool_usable(po, "Pool") < 0)
		return NULL;
	pool_rdlock(po); /* pool_get_stats does not block */
	r = po->p ? pool_get_stats(po->p, &st) : -EBADF;
	pthread_rwlock_unlock(&po->rw);
	if (r)
		return raise_call(r, "Pool", "stats");
	return u64_dict(PyDict_New(), &st, pool_stats_fields);
}

/* Pool.memds(): pool_get_status as a list of dicts. */
static PyObject *pool_memds_py(struct py_pool *po, PyObject *unused)
{
	struct pool_memd_status *st;
	size_t max = 64;
	PyObject *out;
	ssize_t n;

	if (pool_usable(po, "Pool") < 0)
		return NULL;
	st = PyMem_Calloc(max, sizeof(*st));
	if (!st)
		return PyErr_NoMemory();
	POOL_CALL(po, false, n, pool_get_status(p, st, max));
	if (n < 0) {
		PyMem_Free(st);
		return raise_call((int)n, "Pool", "status");
	}
	out = PyList_New(0);
	for (size_t i = 0; out && i < (size_t)n && i < max; i++) {
		const struct pool_memd_status *m = &st[i];
		PyObject *d;

		if (m->err)
			d = Py_BuildValue("{sssssiss}", "name", m->name, "addr",
					  m->addr, "err", -m->err, "error",
					  pool_strerror(m->err));
		else
			d = Py_BuildValue(
				"{sssssisKsKsKsKsIsIsIsIsIsOsO}", "name",
				m->name, "addr", m->addr, "err", 0, "epoch",
				(unsigned long long)m->epoch, "uptime_ms",
				(unsigned long long)m->uptime_ms,
				"donated_bytes",
				(unsigned long long)m->donated_bytes,
				"slab_bytes", (unsigned long long)m->slab_bytes,
				"slabs_total", m->slabs_total, "slabs_free",
				m->slabs_free, "slabs_leased", m->slabs_leased,
				"slabs_reclaiming", m->slabs_reclaiming,
				"sessions", m->sessions, "draining",
				m->draining ? Py_True : Py_False, "hugepages",
				m->hugepages ? Py_True : Py_False);
		if (!d || PyList_Append(out, d) < 0)
			Py_CLEAR(out);
		Py_XDECREF(d);
	}
	PyMem_Free(st);
	return out;
}

static PyObject *pool_addr_get(struct py_pool *po, void *unused)
{
	return PyUnicode_FromString(po->addr);
}

static PyMethodDef pool_methods[] = {
	{ "close", (PyCFunction)pool_close_py, METH_NOARGS,
	  "Closes the session: GPU engines, KV handles and regions first; the "
	  "session itself once no mapping is left. Idempotent." },
	{ "alloc", (PyCFunction)(void (*)(void))pool_alloc_py,
	  METH_VARARGS | METH_KEYWORDS,
	  "alloc(nbytes, *, node=-1, replica=False) -> Region" },
	{ "map", (PyCFunction)(void (*)(void))pool_map_py,
	  METH_VARARGS | METH_KEYWORDS,
	  "map(region, local_bytes=0, *, existing=False, huge=None) -> "
	  "Mapping" },
	{ "kv", (PyCFunction)(void (*)(void))pool_kv_py,
	  METH_VARARGS | METH_KEYWORDS,
	  "kv(replicas=1, *, nthreads=0, refresh_ms=0, lease_ms=0, "
	  "prefill_tokens_per_s=0, bytes_per_token=0) -> KV" },
	{ "gpu", (PyCFunction)(void (*)(void))pool_gpu_py,
	  METH_VARARGS | METH_KEYWORDS,
	  "gpu(backend='auto', device=0, *, staging_bytes=0, "
	  "staging_count=0) -> GPU" },
	{ "stats", (PyCFunction)pool_stats_py, METH_NOARGS,
	  "The session's counters (pool_get_stats) as a dict." },
	{ "memds", (PyCFunction)pool_memds_py, METH_NOARGS,
	  "Every memd of the pool as this session sees it "
	  "(pool_get_status): a list of dicts; one that could not be asked "
	  "has err and error." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef pool_getset[] = {
	{ "closed", (getter)pool_closed_get, NULL, "True once closed", NULL },
	{ "addr", (getter)pool_addr_get, NULL, "the address connected to",
	  NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject PoolType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tidepool._tidepool.Pool",
	.tp_basicsize = sizeof(struct py_pool),
	.tp_flags =
		Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "A libpool session (pool_connect).",
	.tp_new = pool_new,
	.tp_init = (initproc)pool_init,
	.tp_dealloc = (destructor)pool_dealloc,
	.tp_traverse = (traverseproc)pool_traverse,
	.tp_weaklistoffset = offsetof(struct py_pool, weakrefs),
	.tp_methods = pool_methods,
	.tp_getset = pool_getset,
};

/* ------------------------------------------------------------------ */
/* Region                                                               */

struct py_region {
	PyObject_HEAD struct py_pool *po;
	struct pool_region *r;
	size_t size;
	int node;
	bool freed;
	Py_ssize_t mapped; /* live Mappings of it */
	PyObject *weakrefs;
};

static int region_usable(struct py_region *rg)
{
	if (pool_usable(rg->po, "Region's Pool") < 0)
		return -1;
	if (rg->freed) {
		raise_closed("Region (freed)");
		return -1;
	}
	return 0;
}

static PyObject *pool_alloc_py(struct py_pool *po, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "nbytes", "node", "replica", NULL };
	unsigned long long nbytes;
	int node = -1, replica = 0, r;
	struct pool_region *reg = NULL;
	struct py_region *rg;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "K|$ip", kwlist, &nbytes,
					 &node, &replica))
		return NULL;
	if (pool_usable(po, "Pool") < 0)
		return NULL;
	if (nbytes == 0 || nbytes > (unsigned long long)SIZE_MAX / 2) {
		PyErr_Format(PyExc_ValueError,
			     "tidepool: alloc of %llu bytes: the size must be "
			     "at least 1",
			     nbytes);
		return NULL;
	}
	POOL_CALL(po, false, r,
		  pool_alloc_ex(p, (size_t)nbytes, node,
				replica ? POOL_ALLOC_REPLICA : 0, &reg));
	if (r) {
		char what[96];

		snprintf(what, sizeof(what), "alloc of %llu bytes", nbytes);
		return raise_call(r, "Pool", what);
	}
	rg = PyObject_New(struct py_region, &RegionType);
	if (!rg) {
		POOL_CALL(po, false, r, pool_free(p, reg));
		return NULL;
	}
	Py_INCREF(po);
	rg->po = po;
	rg->r = reg;
	rg->size = pool_region_size(reg);
	rg->node = pool_region_node(reg);
	rg->freed = false;
	rg->mapped = 0;
	rg->weakrefs = NULL;
	if (pool_add_child(po, (PyObject *)rg) < 0) {
		Py_DECREF(rg);
		return NULL;
	}
	return (PyObject *)rg;
}

/* Frees rg's region (with the GIL). */
static void region_do_free(struct py_region *rg)
{
	struct py_pool *po = rg->po;
	int r;

	if (rg->freed)
		return;
	rg->freed = true;
	if (po->pid != getpid())
		return;
	pool_wrlock(po);
	r = 0;
	if (po->p && !po->closed)
		r = pool_free(po->p, rg->r);
	pthread_rwlock_unlock(&po->rw);
	(void)r; /* the region is freed regardless (pool.h) */
	rg->r = NULL;
}

static PyObject *region_free_py(struct py_region *rg, PyObject *unused)
{
	if (rg->po->pid != getpid())
		return raise_forked("Region", rg->po->pid);
	if (rg->mapped) {
		PyErr_SetString(PyExc_BufferError,
				"tidepool: the region is mapped (a Mapping or "
				"a pooled tensor uses it); it is freed with "
				"the mapping");
		return NULL;
	}
	region_do_free(rg);
	Py_RETURN_NONE;
}

static void region_dealloc(struct py_region *rg)
{
	if (rg->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)rg);
	if (!rg->freed && rg->po->p && !rg->po->closed)
		region_do_free(rg);
	Py_DECREF(rg->po);
	PyObject_Free(rg);
}

/* read_into / write */
static PyObject *region_io(struct py_region *rg, PyObject *args, bool write)
{
	unsigned long long off;
	PyObject *obj;
	struct bufref b;
	int r;

	if (!PyArg_ParseTuple(args, "KO", &off, &obj))
		return NULL;
	if (region_usable(rg) < 0)
		return NULL;
	if (bufref_get(obj, !write, true, 0, "buf", &b) < 0)
		return NULL;
	if (b.is_cuda) {
		bufref_release(&b);
		PyErr_SetString(PyExc_TypeError,
				"tidepool: a CUDA tensor: use GPU.fetch / "
				"GPU.store for device memory");
		return NULL;
	}
	if (off > rg->size || b.len > rg->size - off) {
		PyErr_Format(PyExc_ValueError,
			     "tidepool: [%llu, %llu) is outside the region "
			     "of %zu bytes",
			     off, off + b.len, rg->size);
		bufref_release(&b);
		return NULL;
	}
	if (write)
		POOL_CALL(rg->po, rg->freed, r,
			  pool_write(p, rg->r, off, b.ptr, b.len));
	else
		POOL_CALL(rg->po, rg->freed, r,
			  pool_read(p, rg->r, off, b.ptr, b.len));
	if (!write && !r && bufref_commit(&b, b.len) < 0) {
		bufref_release(&b);
		PyErr_SetString(PyExc_BufferError,
				"tidepool: buf's storage was shrunk during "
				"the read; nothing was delivered");
		return NULL;
	}
	bufref_release(&b);
	if (r)
		return raise_call(r, "Region",
				  write ? "region write" : "region read");
	Py_RETURN_NONE;
}

static PyObject *region_read_into_py(struct py_region *rg, PyObject *args)
{
	return region_io(rg, args, false);
}

static PyObject *region_write_py(struct py_region *rg, PyObject *args)
{
	return region_io(rg, args, true);
}

static PyObject *region_read_py(struct py_region *rg, PyObject *args)
{
	unsigned long long off, n;
	PyObject *out;
	int r;

	if (!PyArg_ParseTuple(args, "KK", &off, &n))
		return NULL;
	if (region_usable(rg) < 0)
		return NULL;
	if (off > rg->size || n > rg->size - off) {
		PyErr_Format(PyExc_ValueError,
			     "tidepool: [%llu, %llu) is outside the region "
			     "of %zu bytes",
			     off, off + n, rg->size);
		return NULL;
	}
	out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
	if (!out)
		return NULL;
	{
		char *buf = PyBytes_AS_STRING(out);

		POOL_CALL(rg->po, rg->freed, r,
			  pool_read(p, rg->r, off, buf, (size_t)n));
	}
	if (r) {
		Py_DECREF(out);
		return raise_call(r, "Region", "region read");
	}
	return out;
}

static PyObject *region_closed_get(struct py_region *rg, void *unused)
{
	return PyBool_FromLong(rg->freed || rg->po->closed);
}

static PyObject *region_size_get(struct py_region *rg, void *unused)
{
	return PyLong_FromSize_t(rg->size);
}

static PyObject *region_node_get(struct py_region *rg, void *unused)
{
	return PyLong_FromLong(rg->node);
}

static PyMethodDef region_methods[] = {
	{ "read_into", (PyCFunction)region_read_into_py, METH_VARARGS,
	  "read_into(offset, buf): fills the writable buffer buf from the "
	  "region at offset." },
	{ "write", (PyCFunction)region_write_py, METH_VARARGS,
	  "write(offset, buf): writes buf into the region at offset." },
	{ "read", (PyCFunction)region_read_py, METH_VARARGS,
	  "read(offset, nbytes) -> bytes" },
	{ "free", (PyCFunction)region_free_py, METH_NOARGS,
	  "Frees the region (idempotent)." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef region_getset[] = {
	{ "closed", (getter)region_closed_get, NULL, "True once freed", NULL },
	{ "size", (getter)region_size_get, NULL, "bytes", NULL },
	{ "node", (getter)region_node_get, NULL,
	  "donor NUMA node of all of its memory, or -1", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject RegionType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tidepool._tidepool.Region",
	.tp_basicsize = sizeof(struct py_region),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A region of the pool (pool_alloc).",
	.tp_dealloc = (destructor)region_dealloc,
	.tp_weaklistoffset = offsetof(struct py_region, weakrefs),
	.tp_methods = region_methods,
	.tp_getset = region_getset,
};

/* ------------------------------------------------------------------ */
/* Mapping: pool_map() memory through the buffer protocol               */

struct py_map {
	PyObject_HEAD struct py_pool *po;
	struct py_region *rg; /* freed with the mapping when owned */
	bool owns_region;
	void *addr;
	size_t len;
	Py_ssize_t exports;
};

static PyObject *pool_map_py(struct py_pool *po, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "region", "local_bytes", "existing",
				  "huge",   "owns_region", NULL };
	struct py_region *rg;
	unsigned long long local = 0;
	int existing = 0, owns = 0, r;
	PyObject *huge = Py_None;
	unsigned flags = 0;
	void *addr = NULL;
	struct py_map *m;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|K$pOp", kwlist,
					 &RegionType, &rg, &local, &existing,
					 &huge, &owns))
		return NULL;
	if (pool_usable(po, "Pool") < 0 || region_usable(rg) < 0)
		return NULL;
	if (rg->po != po) {
		PyErr_SetString(PyExc_ValueError,
				"tidepool: the region belongs to another Pool");
		return NULL;
	}
	if (existing)
		flags |= POOL_MAP_EXISTING;
	if (huge != Py_None) {
		int h = PyObject_IsTrue(huge);

		if (h < 0)
			return NULL;
		flags |= h ? POOL_MAP_HUGE : POOL_MAP_SMALL;
	}
	POOL_CALL(po, rg->freed, r,
		  pool_map(p, rg->r, (size_t)local, flags, &addr));
	if (r)
		return raise_call(r, "Pool", "map");
	m = PyObject_New(struct py_map, &MapType);
	if (!m) {
		POOL_CALL(po, false, r,
			  pool_unmap(p, addr, POOL_UNMAP_DISCARD));
		return NULL;
	}
	Py_INCREF(po);
	Py_INCREF(rg);
	m->po = po;
	m->rg = rg;
	m->owns_region = owns;
	m->addr = addr;
	m->len = rg->size;
	m->exports = 0;
	rg->mapped++;
	po->nmaps++;
	return (PyObject *)m;
}

static void map_dealloc(struct py_map *m)
{
	struct py_pool *po = m->po;
	int r;

	if (po->pid == getpid() && po->p) {
		Py_BEGIN_ALLOW_THREADS pthread_rwlock_rdlock(&po->rw);
		r = po->p ? pool_unmap(po->p, m->addr, POOL_UNMAP_DISCARD)
			  : -EBADF;
		pthread_rwlock_unlock(&po->rw);
		Py_END_ALLOW_THREADS(void)
			r; /* the mapping is gone either way */
	}
	m->rg->mapped--;
	if (m->owns_region && !m->rg->mapped)
		region_do_free(m->rg);
	Py_DECREF(m->rg);
	if (--po->nmaps == 0 && po->close_pending) {
		po->close_pending = false;
		pool_do_close(po);
	}
	Py_DECREF(po);
	PyObject_Free(m);
}

static int map_getbuffer(struct py_map *m, Py_buffer *view, int flags)
{
	if (m->po->pid != getpid()) {
		raise_forked("Mapping", m->po->pid);
		view->obj = NULL;
		return -1;
	}
	if (PyBuffer_FillInfo(view, (PyObject *)m, m->addr, (Py_ssize_t)m->len,
			      0, flags) < 0)
		return -1;
	m->exports++;
	return 0;
}

static void map_releasebuffer(struct py_map *m, Py_buffer *view)
{
	m->exports--;
}

static PyBufferProcs map_as_buffer = {
	.bf_getbuffer = (getbufferproc)map_getbuffer,
	.bf_releasebuffer = (releasebufferproc)map_releasebuffer,
};

static PyObject *map_addr_get(struct py_map *m, void *unused)
{
	return PyLong_FromVoidPtr(m->addr);
}

static PyObject *map_len_get(struct py_map *m, void *unused)
{
	return PyLong_FromSize_t(m->len);
}

static PyGetSetDef map_getset[] = {
	{ "address", (getter)map_addr_get, NULL, "local address", NULL },
	{ "nbytes", (getter)map_len_get, NULL, "bytes mapped", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject MapType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tidepool._tidepool.Mapping",
	.tp_basicsize = sizeof(struct py_map),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A pool_map() range: writable memory of the buffer "
		  "protocol, unmapped (and its region freed when owned) when "
		  "the last reference goes.",
	.tp_dealloc = (destructor)map_dealloc,
	.tp_as_buffer = &map_as_buffer,
	.tp_getset = map_getset,
};

/* ------------------------------------------------------------------ */
/* GPU engine (declared here: the KV GPU path uses its staging)         */

/* A pinned staging block, reused once its device copies are done. */
struct stage {
	void *ptr;
	size_t len;
	atomic_int busy;
};

#define GPU_STAGES_MAX 64

struct py_gstream;

struct py_gpu {
	PyObject_HEAD struct py_pool *po;
	struct pool_gpu *g;
	bool closed;
	int backend;
	int device;
	pthread_mutex_t stage_lock;
	struct stage stages[GPU_STAGES_MAX];
	unsigned nstages;
	struct py_gstream *streams; /* live GPUStreams (borrowed) */
	PyObject *weakrefs;
};

struct py_gstream {
	PyObject_HEAD struct py_gpu *gpu;
	void *s;
	struct py_gstream *next, *prev;
};

static void stage_done(void *arg)
{
	struct stage *st = arg;

	atomic_store(&st->busy, 0);
}

/*
 * A free staging block of at least len bytes (no GIL; caller holds the
 * pool's rw for reading). Waits up to timeout_ms for one to come free
 * when all are busy. Returns 0 and *out, or -errno.
 */
static int stage_get(struct py_gpu *gp, size_t len, int timeout_ms,
		     struct stage **out)
{
	struct timespec t0, now;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct stage *free_small = NULL;
		int r;

		pthread_mutex_lock(&gp->stage_lock);
		for (unsigned i = 0; i < gp->nstages; i++) {
			struct stage *st = &gp->stages[i];

			if (atomic_load(&st->busy))
				continue;
			if (st->len >= len) {
				atomic_store(&st->busy, 1);
				pthread_mutex_unlock(&gp->stage_lock);
				*out = st;
				return 0;
			}
			free_small = st;
		}
		if (gp->nstages < GPU_STAGES_MAX || free_small) {
			struct stage *st = free_small
						   ? free_small
						   : &gp->stages[gp->nstages];
			size_t want = len < (4u << 20) ? (4u << 20) : len;
			void *ptr = NULL;

			if (st->ptr)
				pool_gpu_pinned_free(gp->g, st->ptr);
			st->ptr = NULL;
			st->len = 0;
			r = pool_gpu_pinned_alloc(gp->g, want, &ptr);
			if (r == 0) {
				st->ptr = ptr;
				st->len = want;
				atomic_store(&st->busy, 1);
				if (st == &gp->stages[gp->nstages])
					gp->nstages++;
				*out = st;
			}
			pthread_mutex_unlock(&gp->stage_lock);
			return r;
		}
		pthread_mutex_unlock(&gp->stage_lock);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (timeout_ms >= 0 &&
		    (now.tv_sec - t0.tv_sec) * 1000 +
				    (now.tv_nsec - t0.tv_nsec) / 1000000 >
			    timeout_ms)
			return -ETIMEDOUT;
		usleep(200);
	}
}

/* ------------------------------------------------------------------ */
/* KV                                                                   */

struct py_kvop;

struct py_kv {
	PyObject_HEAD struct py_pool *po;
	struct pool_kv *kv;
	bool closed;
	struct py_kvop *pending; /* ops not yet complete (borrowed) */
	struct py_gpu *gpu;	 /* default engine of the GPU path */
	PyObject *weakrefs;
};

enum kvop_kind {
	KVOP_PUT,
	KVOP_GET,
	KVOP_EXISTS,
	KVOP_DELETE,
	KVOP_PIN,
	KVOP_UNPIN,
};

static const char *const kvop_name[] = { "put",	   "get", "exists",
					 "delete", "pin", "unpin" };

/* What one KV call holds: its arrays and buffers. */
struct kvcall {
	enum kvop_kind kind;
	size_t n;
	struct pool_kv_key *keys;
	struct bufref *bufs; /* put, get */
	void **ptrs;
	size_t *lens, *caps;
	int *status;
	bool exact; /* get: a hit must fill its buffer exactly */
};

static void kvcall_free(struct kvcall *c)
{
	bufs_release(c->bufs, c->bufs ? c->n : 0);
	PyMem_Free(c->bufs);
	PyMem_Free(c->keys);
	PyMem_Free(c->ptrs);
	PyMem_Free(c->lens);
	PyMem_Free(c->caps);
	PyMem_Free(c->status);
	memset(c, 0, sizeof(*c));
}

/* Parses keys (and values/bufs for put/get) into c; bounce: CPU tensors
 * go through bounce buffers (struct bufref). -1 with error. */
static int kvcall_prepare(struct kvcall *c, enum kvop_kind kind, PyObject *keys,
			  PyObject *vals, bool bounce)
{
	memset(c, 0, sizeof(*c));
	c->kind = kind;
	c->keys = keys_get(keys, &c->n);
	if (!c->keys)
		return -1;
	c->status = PyMem_Calloc(c->n, sizeof(int));
	if (!c->status)
		goto nomem;
	if (kind != KVOP_PUT && kind != KVOP_GET)
		return 0;
	c->bufs = PyMem_Calloc(c->n, sizeof(*c->bufs));
	c->ptrs = PyMem_Calloc(c->n, sizeof(void *));
	c->lens = PyMem_Calloc(c->n, sizeof(size_t));
	if (kind == KVOP_GET)
		c->caps = PyMem_Calloc(c->n, sizeof(size_t));
	if (!c->bufs || !c->ptrs || !c->lens || (kind == KVOP_GET && !c->caps))
		goto nomem;
	if (bufs_get(vals, c->n, kind == KVOP_GET, bounce,
		     kind == KVOP_GET ? "bufs" : "values", c->bufs) < 0) {
		PyMem_Free(c->bufs);
		c->bufs = NULL;
		kvcall_free(c);
		return -1;
	}
	for (size_t i = 0; i < c->n; i++) {
		if (kind == KVOP_PUT && c->bufs[i].len > POOL_KV_VALUE_MAX) {
			PyErr_Format(PyExc_ValueError,
				     "tidepool: values[%zu] has %zu bytes; "
				     "the most a value may have is %u",
				     i, c->bufs[i].len, POOL_KV_VALUE_MAX);
			kvcall_free(c);
			return -1;
		}
		c->ptrs[i] = c->bufs[i].ptr;
		if (kind == KVOP_PUT)
			c->lens[i] = c->bufs[i].len;
		else
			c->caps[i] = c->bufs[i].len;
	}
	return 0;
nomem:
	kvcall_free(c);
	PyErr_NoMemory();
	return -1;
}

/*
 * A completed get (result r): delivers each hit held in a bounce buffer
 * to its tensor (GIL held). A hit whose tensor's storage was shrunk
 * under the call cannot be delivered and becomes a miss (-ESTALE).
 */
static void kvcall_commit(struct kvcall *c, ssize_t r)
{
	if (r < 0 || c->kind != KVOP_GET || !c->bufs)
		return;
	for (size_t i = 0; i < c->n; i++) {
		if (c->status[i] != 0 || c->lens[i] > c->caps[i])
			continue;
		if (bufref_commit(&c->bufs[i], c->lens[i]) < 0)
			c->status[i] = -ESTALE;
	}
}

/* Runs c on kv synchronously (no GIL, under rw). */
static ssize_t kvcall_run(struct pool_kv *kv, struct kvcall *c)
{
	switch (c->kind) {
	case KVOP_PUT:
		return pool_kv_put(kv, c->n, c->keys,
				   (const void *const *)c->ptrs, c->lens,
				   c->status);
	case KVOP_GET:
		return pool_kv_get(kv, c->n, c->keys, c->ptrs, c->caps, c->lens,
				   c->status);
	case KVOP_EXISTS:
		return pool_kv_exists(kv, c->n, c->keys);
	case KVOP_DELETE:
		return pool_kv_delete(kv, c->n, c->keys, c->status);
	case KVOP_PIN:
		return pool_kv_pin(kv, c->n, c->keys, c->status);
	case KVOP_UNPIN:
		return pool_kv_unpin(kv, c->n, c->keys, c->status);
	}
	return -EINVAL;
}

static int kvcall_start(struct pool_kv *kv, struct kvcall *c,
			struct pool_kv_op **op)
{
	switch (c->kind) {
	case KVOP_PUT:
		return pool_kv_put_async(kv, c->n, c->keys,
					 (const void *const *)c->ptrs, c->lens,
					 c->status, op);
	case KVOP_GET:
		return pool_kv_get_async(kv, c->n, c->keys, c->ptrs, c->caps,
					 c->lens, c->status, op);
	case KVOP_EXISTS:
		return pool_kv_exists_async(kv, c->n, c->keys, op);
	case KVOP_DELETE:
		return pool_kv_delete_async(kv, c->n, c->keys, c->status, op);
	case KVOP_PIN:
		return pool_kv_pin_async(kv, c->n, c->keys, c->status, op);
	case KVOP_UNPIN:
		return pool_kv_unpin_async(kv, c->n, c->keys, c->status, op);
	}
	return -EINVAL;
}

/*
 * The Python result of a completed call: put -> list of per-key errno
 * (0 stored, EEXIST present, else why not); get -> list of hit flags
 * (ValueError when a hit's length is not its buffer's); exists -> int;
 * delete/pin/unpin -> list of bools. Call-level errors raise.
 */
static PyObject *kvcall_result(struct kvcall *c, ssize_t r)
{
	PyObject *out;

	if (r < 0) {
		char what[32];

		snprintf(what, sizeof(what), "kv %s", kvop_name[c->kind]);
		return raise_call((int)r, "KV", what);
	}
	if (c->kind == KVOP_EXISTS)
		return PyLong_FromSsize_t(r);
	if (c->kind == KVOP_GET && c->exact) {
		for (size_t i = 0; i < c->n; i++) {
			if (c->status[i] == -ENOBUFS ||
			    (c->status[i] == 0 && c->lens[i] != c->caps[i])) {
				PyErr_Format(PyExc_ValueError,
					     "tidepool: key %zu holds a value "
					     "of %zu bytes but bufs[%zu] has "
					     "%zu",
					     i, c->lens[i], i, c->caps[i]);
				return NULL;
			}
		}
	}
	out = PyList_New((Py_ssize_t)c->n);
	if (!out)
		return NULL;
	for (size_t i = 0; i < c->n; i++) {
		PyObject *v;
		int s = c->status[i];

		if (c->kind == KVOP_PUT)
			v = PyLong_FromLong(s == 0 ? 0 : -s);
		else if (c->kind == KVOP_GET && !c->exact)
			v = s == 0 || s == -ENOBUFS
				    ? PyLong_FromSize_t(c->lens[i])
				    : PyLong_FromLong(-1);
		else if (c->kind == KVOP_GET)
			v = PyBool_FromLong(s == 0);
		else
			v = PyBool_FromLong(s == 0);
		if (!v) {
			Py_DECREF(out);
			return NULL;
		}
		PyList_SET_ITEM(out, (Py_ssize_t)i, v);
	}
	return out;
}

static int kv_usable(struct py_kv *k)
{
	if (pool_usable(k->po, "KV's Pool") < 0)
		return -1;
	if (k->closed) {
		raise_closed("KV");
		return -1;
	}
	return 0;
}

static PyObject *pool_kv_py(struct py_pool *po, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "replicas",
				  "nthreads",
				  "refresh_ms",
				  "lease_ms",
				  "prefill_tokens_per_s",
				  "bytes_per_token",
				  NULL };
	struct pool_kv_opts o;
	struct pool_kv *kv = NULL;
	unsigned long long bpt = 0;
	struct py_kv *k;
	int r;

	memset(&o, 0, sizeof(o));
	o.replicas = 1;
	if (!PyArg_ParseTupleAndKeywords(
		    args, kw, "|I$IIIIK", kwlist, &o.replicas, &o.nthreads,
		    &o.refresh_ms, &o.lease_ms, &o.prefill_tokens_per_s, &bpt))
		return NULL;
	o.bytes_per_token = bpt;
	if (pool_usable(po, "Pool") < 0)
		return NULL;
	if (o.replicas < 1 || o.replicas > 2) {
		PyErr_Format(PyExc_ValueError,
			     "tidepool: replicas must be 1 or 2 (got %u)",
			     o.replicas);
		return NULL;
	}
	if (o.nthreads > 64) {
		PyErr_Format(PyExc_ValueError,
			     "tidepool: nthreads must be 0 .. 64 (got %u)",
			     o.nthreads);
		return NULL;
	}
	/* the model hint: both or neither, within memd's bounds */
	if ((o.prefill_tokens_per_s || o.bytes_per_token) &&
	    (!o.prefill_tokens_per_s || !o.bytes_per_token ||
	     o.prefill_tokens_per_s > POOL_KV_PREFILL_TOKENS_PER_S_MAX ||
	     o.bytes_per_token > POOL_KV_BYTES_PER_TOKEN_MAX)) {
		PyErr_Format(PyExc_ValueError,
			     "tidepool: give both prefill_tokens_per_s (1 .. "
			     "%u) and bytes_per_token (1 .. %llu), or neither "
			     "(got %u and %llu)",
			     POOL_KV_PREFILL_TOKENS_PER_S_MAX,
			     POOL_KV_BYTES_PER_TOKEN_MAX,
			     o.prefill_tokens_per_s, bpt);
		return NULL;
	}
	POOL_CALL(po, false, r, pool_kv_open(p, &o, &kv));
	if (r)
		return raise_call(r, "Pool", "kv open");
	k = PyObject_New(struct py_kv, &KVType);
	if (!k) {
		POOL_CALL(po, false, r, (pool_kv_close(kv), 0));
		return NULL;
	}
	Py_INCREF(po);
	k->po = po;
	k->kv = kv;
	k->closed = false;
	k->pending = NULL;
	k->gpu = NULL;
	k->weakrefs = NULL;
	if (pool_add_child(po, (PyObject *)k) < 0) {
		Py_DECREF(k);
		return NULL;
	}
	return (PyObject *)k;
}

/* ---- KVOp ---- */

struct py_kvop {
	PyObject_HEAD struct py_kv *k;
	struct pool_kv_op *op; /* NULL once complete */
	struct kvcall c;
	ssize_t result;
	bool done;
	bool waiting; /* a thread is in pool_kv_op_wait */
	struct py_kvop *next, *prev;
};

static void kvop_unlink(struct py_kvop *o)
{
	struct py_kv *k = o->k;

	if (o->prev)
		o->prev->next = o->next;
	else if (k->pending == o)
		k->pending = o->next;
	if (o->next)
		o->next->prev = o->prev;
	o->next = o->prev = NULL;
}

/* o completed with result r (GIL held): keep what the result needs,
 * drop the buffers. */
static void kvop_complete(struct py_kvop *o, ssize_t r)
{
	o->done = true;
	o->op = NULL;
	o->result = r;
	kvop_unlink(o);
	kvcall_commit(&o->c, r);
	bufs_release(o->c.bufs, o->c.bufs ? o->c.n : 0);
}

/* The KV handle closed under o: libpool has settled and freed its op. */
static void kvop_orphan(struct py_kvop *o)
{
	kvop_complete(o, -EBADF);
}

static PyObject *kv_start(struct py_kv *k, enum kvop_kind kind, PyObject *keys,
			  PyObject *vals, bool exact)
{
	struct py_kvop *o;
	int r;

	if (kv_usable(k) < 0)
		return NULL;
	o = PyObject_New(struct py_kvop, &KVOpType);
	if (!o)
		return NULL;
	Py_INCREF(k);
	o->k = k;
	o->op = NULL;
	o->done = false;
	o->waiting = false;
	o->result = 0;
	o->next = o->prev = NULL;
	if (kvcall_prepare(&o->c, kind, keys, vals, true) < 0) {
		o->done = true;
		Py_DECREF(o);
		return NULL;
	}
	o->c.exact = exact;
	{
		struct pool_kv_op *op = NULL;
		struct kvcall *c = &o->c;

		POOL_CALL(k->po, k->closed, r, kvcall_start(k->kv, c, &op));
		o->op = op;
	}
	if (r) {
		o->done = true;
		Py_DECREF(o);
		return raise_call(r, "KV", kvop_name[kind]);
	}
	o->next = k->pending;
	if (k->pending)
		k->pending->prev = o;
	k->pending = o;
	return (PyObject *)o;
}

/*
 * Waits up to timeout_ms (-1: until done) for o with the GIL released.
 * Returns 1 done, 0 still running, -1 error set.
 */
static int kvop_wait_ms(struct py_kvop *o, int timeout_ms)
{
	struct py_kv *k = o->k;
	ssize_t r;

	if (o->done)
		return 1;
	if (k->po->pid != getpid()) {
		raise_forked("KV operation", k->po->pid);
		return -1;
	}
	if (o->waiting) {
		/* another thread waits in libpool: poll its outcome */
		struct timespec t0, now;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (!o->done) {
			Py_BEGIN_ALLOW_THREADS usleep(500);
			Py_END_ALLOW_THREADS clock_gettime(CLOCK_MONOTONIC,
							   &now);
			if (timeout_ms >= 0 &&
			    (now.tv_sec - t0.tv_sec) * 1000 +
					    (now.tv_nsec - t0.tv_nsec) /
						    1000000 >=
				    timeout_ms)
				return 0;
		}
		return 1;
	}
	o->waiting = true;
	{
		struct pool_kv_op *op = o->op;

		POOL_CALL(k->po, k->closed, r,
			  pool_kv_op_wait(k->kv, op, timeout_ms));
	}
	o->waiting = false;
	if (o->done) /* the handle was closed meanwhile */
		return 1;
	if (r == -ETIMEDOUT)
		return 0;
	if (r == -EBADF && (k->closed || k->po->closed || !k->po->p))
		kvop_orphan(o);
	else
		kvop_complete(o, r);
	return 1;
}

static PyObject *kvop_wait_py(struct py_kvop *o, PyObject *args)
{
	int timeout_ms = -1, r;

	if (!PyArg_ParseTuple(args, "|i", &timeout_ms))
		return NULL;
	r = kvop_wait_ms(o, timeout_ms);
	if (r < 0)
		return NULL;
	return PyBool_FromLong(r);
}

static PyObject *kvop_test_py(struct py_kvop *o, PyObject *unused)
{
	int r;

	if (o->done)
		Py_RETURN_TRUE;
	if (o->waiting)
		Py_RETURN_FALSE;
	if (o->k->po->pid != getpid())
		return raise_forked("KV operation", o->k->po->pid);
	/* pool_kv_op_test never blocks: no need to drop the GIL, but rw
	 * must be held (close may run in another thread) */
	pool_rdlock(o->k->po);
	if (!o->k->po->p || o->k->closed)
		r = -EBADF;
	else
		r = pool_kv_op_test(o->k->kv, o->op);
	pthread_rwlock_unlock(&o->k->po->rw);
	if (r == 1) {
		if (kvop_wait_ms(o, 0) < 0)
			return NULL;
		return PyBool_FromLong(o->done);
	}
	if (r == -EBADF) {
		if (!o->done)
			kvop_orphan(o);
		Py_RETURN_TRUE;
	}
	if (r < 0)
		return raise_pool(r, "kv op test");
	Py_RETURN_FALSE;
}

static PyObject *kvop_result_py(struct py_kvop *o, PyObject *unused)
{
	if (!o->done) {
		PyErr_SetString(PyExc_RuntimeError,
				"tidepool: the KV operation is still running");
		return NULL;
	}
	return kvcall_result(&o->c, o->result);
}

static void kvop_dealloc(struct py_kvop *o)
{
	if (!o->done && o->op && o->k->po->pid == getpid()) {
		/* libpool may still write into the buffers: wait */
		if (kvop_wait_ms(o, -1) < 0)
			PyErr_Clear();
	}
	if (!o->done)
		kvop_unlink(o);
	kvcall_free(&o->c);
	Py_DECREF(o->k);
	PyObject_Free(o);
}

static PyObject *kvop_done_get(struct py_kvop *o, void *unused)
{
	return PyBool_FromLong(o->done);
}

static PyObject *kvop_kind_get(struct py_kvop *o, void *unused)
{
	return PyUnicode_FromString(kvop_name[o->c.kind]);
}

static PyMethodDef kvop_methods[] = {
	{ "wait", (PyCFunction)kvop_wait_py, METH_VARARGS,
	  "wait(timeout_ms=-1) -> bool: True once complete (GIL released)." },
	{ "test", (PyCFunction)kvop_test_py, METH_NOARGS,
	  "test() -> bool: True once complete; never blocks." },
	{ "result", (PyCFunction)kvop_result_py, METH_NOARGS,
	  "The result of a completed op, or its exception." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef kvop_getset[] = {
	{ "done", (getter)kvop_done_get, NULL, "complete", NULL },
	{ "kind", (getter)kvop_kind_get, NULL, "put, get, exists, ...", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject KVOpType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tidepool._tidepool.KVOp",
	.tp_basicsize = sizeof(struct py_kvop),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "One asynchronous KV operation (pool_kv_*_async).",
	.tp_dealloc = (destructor)kvop_dealloc,
	.tp_methods = kvop_methods,
	.tp_getset = kvop_getset,
};

/* ---- KV sync calls ---- */

static PyObject *kv_sync(struct py_kv *k, enum kvop_kind kind, PyObject *keys,
			 PyObject *vals, bool exact)
{
	struct kvcall c;
	PyObject *out;
	ssize_t r;

	if (kv_usable(k) < 0)
		return NULL;
	if (kvcall_prepare(&c, kind, keys, vals, true) < 0)
		return NULL;
	c.exact = exact;
	{
		struct kvcall *cp = &c;

		POOL_CALL(k->po, k->closed, r, kvcall_run(k->kv, cp));
	}
	kvcall_commit(&c, r);
	out = kvcall_result(&c, r);
	kvcall_free(&c);
	return out;
}

/* Whether the GPU path applies: a stream or engine given, or a CUDA
 * tensor among vals. -1 with error. */
static int kv_wants_gpu(PyObject *vals, PyObject *stream, PyObject *gpu)
{
	PyObject *fast;
	int any = 0;

	if (stream != Py_None || gpu != Py_None)
		return 1;
	fast = PySequence_Fast(vals, "tidepool: expected a sequence of "
				     "buffers");
	if (!fast)
		return -1;
	for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
		PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
		PyObject *c;
		int t;

		if (PyObject_CheckBuffer(o) ||
		    !PyObject_HasAttr(o, str_is_cuda))
			continue;
		c = PyObject_GetAttr(o, str_is_cuda);
		if (!c) {
			Py_DECREF(fast);
			return -1;
		}
		t = PyObject_IsTrue(c);
		Py_DECREF(c);
		if (t) {
			any = 1;
			break;
		}
	}
	Py_DECREF(fast);
	return any;
}

static PyObject *kv_gpu_call(struct py_kv *k, enum kvop_kind kind,
			     PyObject *keys, PyObject *vals, PyObject *stream,
			     PyObject *gpu, bool exact);

static PyObject *kv_put_py(struct py_kv *k, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "values", "stream", "gpu", NULL };
	PyObject *keys, *vals, *stream = Py_None, *gpu = Py_None;
	int g;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$OO", kwlist, &keys,
					 &vals, &stream, &gpu))
		return NULL;
	g = kv_wants_gpu(vals, stream, gpu);
	if (g < 0)
		return NULL;
	if (g)
		return kv_gpu_call(k, KVOP_PUT, keys, vals, stream, gpu, true);
	return kv_sync(k, KVOP_PUT, keys, vals, true);
}

static PyObject *kv_get_into_py(struct py_kv *k, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {
		"keys", "bufs", "stream", "gpu", "exact", NULL
	};
	PyObject *keys, *vals, *stream = Py_None, *gpu = Py_None;
	int g, exact = 1;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$OOp", kwlist, &keys,
					 &vals, &stream, &gpu, &exact))
		return NULL;
	g = kv_wants_gpu(vals, stream, gpu);
	if (g < 0)
		return NULL;
	if (g)
		return kv_gpu_call(k, KVOP_GET, keys, vals, stream, gpu, exact);
	return kv_sync(k, KVOP_GET, keys, vals, exact);
}

#define KV_KEYS_ONLY(name, kind)                                               \
	static PyObject *kv_##name##_py(struct py_kv *k, PyObject *keys)       \
	{                                                                      \
		return kv_sync(k, kind, keys, NULL, true);                     \
	}                                                                      \
	static PyObject *kv_##name##_async_py(struct py_kv *k, PyObject *keys) \
	{                                                                      \
		return kv_start(k, kind, keys, NULL, true);                    \
	}
KV_KEYS_ONLY(exists, KVOP_EXISTS)
KV_KEYS_ONLY(delete, KVOP_DELETE)
KV_KEYS_ONLY(pin, KVOP_PIN)
KV_KEYS_ONLY(unpin, KVOP_UNPIN)

static PyObject *kv_put_async_py(struct py_kv *k, PyObject *args)
{
	PyObject *keys, *vals;

	if (!PyArg_ParseTuple(args, "OO", &keys, &vals))
		return NULL;
	return kv_start(k, KVOP_PUT, keys, vals, true);
}

static PyObject *kv_get_into_async_py(struct py_kv *k, PyObject *args,
				      PyObject *kw)
{
	static char *kwlist[] = { "keys", "bufs", "exact", NULL };
	PyObject *keys, *vals;
	int exact = 1;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$p", kwlist, &keys,
					 &vals, &exact))
		return NULL;
	return kv_start(k, KVOP_GET, keys, vals, exact);
}

static PyObject *kv_eventfd_py(struct py_kv *k, PyObject *unused)
{
	int fd;

	if (kv_usable(k) < 0)
		return NULL;
	pool_rdlock(k->po);
	fd = k->po->p && !k->closed ? pool_kv_eventfd(k->kv) : -EBADF;
	pthread_rwlock_unlock(&k->po->rw);
	if (fd < 0)
		return raise_call(fd, "KV", "kv eventfd");
	return PyLong_FromLong(fd);
}

static const struct u64_field kv_stats_fields[] = {
	U64_FIELD(struct pool_kv_stats, puts),
	U64_FIELD(struct pool_kv_stats, put_bytes),
	U64_FIELD(struct pool_kv_stats, gets),
	U64_FIELD(struct pool_kv_stats, hits),
	U64_FIELD(struct pool_kv_stats, get_bytes),
	U64_FIELD(struct pool_kv_stats, bad_reads),
	U64_FIELD(struct pool_kv_stats, donor_refreshes),
	U64_FIELD(struct pool_kv_stats, ndonors),
	U64_FIELD(struct pool_kv_stats, replica_hits),
	{ NULL, 0 },
};

static PyObject *kv_stats_py(struct py_kv *k, PyObject *unused)
{
	struct pool_kv_stats st;
	int r;

	if (kv_usable(k) < 0)
		return NULL;
	pool_rdlock(k->po);
	r = k->po->p && !k->closed ? pool_kv_get_stats(k->kv, &st) : -EBADF;
	pthread_rwlock_unlock(&k->po->rw);
	if (r)
		return raise_call(r, "KV", "kv stats");
	return u64_dict(PyDict_New(), &st, kv_stats_fields);
}

/* KV.clear(): pool_kv_clear without the GIL. */
static PyObject *kv_clear_py(struct py_kv *k, PyObject *unused)
{
	int r;

	if (kv_usable(k) < 0)
		return NULL;
	POOL_CALL(k->po, k->closed, r, pool_kv_clear(k->kv));
	if (r)
		return raise_call(r, "KV", "kv clear");
	Py_RETURN_NONE;
}

static void gpu_do_close(struct py_gpu *gp);

/* Closes k (GIL held): libpool waits for its ops, then the pending op
 * objects learn they are over. */
static void kv_do_close(struct py_kv *k)
{
	struct pool_kv *kv = k->kv;
	struct py_pool *po = k->po;

	if (k->closed)
		return;
	k->closed = true;
	if (k->gpu) {
		gpu_do_close(k->gpu);
		Py_CLEAR(k->gpu);
	}
	if (po->pid != getpid())
		return;
	pool_wrlock(po);
	if (po->p)
		pool_kv_close(kv);
	pthread_rwlock_unlock(&po->rw);
	while (k->pending)
		kvop_orphan(k->pending);
}

static PyObject *kv_close_py(struct py_kv *k, PyObject *unused)
{
	if (k->po->pid != getpid())
		return raise_forked("KV", k->po->pid);
	kv_do_close(k);
	Py_RETURN_NONE;
}

static void kv_dealloc(struct py_kv *k)
{
	/* pending ops hold references to k: none is left */
	if (k->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)k);
	if (!k->closed && k->po->pid == getpid())
		kv_do_close(k);
	Py_XDECREF(k->gpu);
	Py_DECREF(k->po);
	PyObject_Free(k);
}

static PyObject *kv_closed_get(struct py_kv *k, void *unused)
{
	return PyBool_FromLong(k->closed || k->po->closed);
}

static PyObject *kv_npending_get(struct py_kv *k, void *unused)
{
	Py_ssize_t n = 0;

	for (struct py_kvop *o = k->pending; o; o = o->next)
		n++;
	return PyLong_FromSsize_t(n);
}

static PyMethodDef kv_methods[] = {
	{ "put", (PyCFunction)(void (*)(void))kv_put_py,
	  METH_VARARGS | METH_KEYWORDS,
	  "put(keys, values, *, stream=None, gpu=None) -> list of errno "
	  "(0 stored, EEXIST present)" },
	{ "get_into", (PyCFunction)(void (*)(void))kv_get_into_py,
	  METH_VARARGS | METH_KEYWORDS,
	  "get_into(keys, bufs, *, stream=None, gpu=None, exact=True) -> "
	  "list of hits (exact=False: list of value lengths, -1 for a "
	  "miss)" },
	{ "exists", (PyCFunction)kv_exists_py, METH_O,
	  "exists(keys) -> length of the longest present prefix" },
	{ "delete", (PyCFunction)kv_delete_py, METH_O,
	  "delete(keys) -> list of bools" },
	{ "pin", (PyCFunction)kv_pin_py, METH_O, "pin(keys) -> list of bools" },
	{ "unpin", (PyCFunction)kv_unpin_py, METH_O,
	  "unpin(keys) -> list of bools" },
	{ "put_async", (PyCFunction)kv_put_async_py, METH_VARARGS,
	  "put_async(keys, values) -> KVOp" },
	{ "get_into_async", (PyCFunction)(void (*)(void))kv_get_into_async_py,
	  METH_VARARGS | METH_KEYWORDS,
	  "get_into_async(keys, bufs, *, exact=True) -> KVOp" },
	{ "exists_async", (PyCFunction)kv_exists_async_py, METH_O,
	  "exists_async(keys) -> KVOp" },
	{ "delete_async", (PyCFunction)kv_delete_async_py, METH_O,
	  "delete_async(keys) -> KVOp" },
	{ "pin_async", (PyCFunction)kv_pin_async_py, METH_O,
	  "pin_async(keys) -> KVOp" },
	{ "unpin_async", (PyCFunction)kv_unpin_async_py, METH_O,
	  "unpin_async(keys) -> KVOp" },
	{ "eventfd", (PyCFunction)kv_eventfd_py, METH_NOARGS,
	  "The completion eventfd (owned by the handle)." },
	{ "clear", (PyCFunction)kv_clear_py, METH_NOARGS,
	  "clear() -> None: empties the tenant's store on every donor" },
	{ "stats", (PyCFunction)kv_stats_py, METH_NOARGS,
	  "The handle's counters as a dict." },
	{ "close", (PyCFunction)kv_close_py, METH_NOARGS,
	  "Closes the handle (waits for its operations). Idempotent." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef kv_getset[] = {
	{ "closed", (getter)kv_closed_get, NULL, "True once closed", NULL },
	{ "npending", (getter)kv_npending_get, NULL,
	  "asynchronous ops not yet complete", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject KVType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tidepool._tidepool.KV",
	.tp_basicsize = sizeof(struct py_kv),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A KV handle (pool_kv_open).",
	.tp_dealloc = (destructor)kv_dealloc,
	.tp_weaklistoffset = offsetof(struct py_kv, weakrefs),
	.tp_methods = kv_methods,
	.tp_getset = kv_getset,
};

/* ------------------------------------------------------------------ */
/* GPU                                                                  */

static int gpu_usable(struct py_gpu *gp)
{
	if (pool_usable(gp->po, "GPU's Pool") < 0)
		return -1;
	if (gp->closed) {
		raise_closed("GPU engine");
		return -1;
	}
	return 0;
}

static PyObject *pool_gpu_py(struct py_pool *po, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "backend",	   "device",	"staging_bytes",
				  "staging_count", "numa_node", NULL };
	const char *backend = "auto";
	struct pool_gpu_opts o;
	unsigned long long staging = 0;
	unsigned count = 0;
	int device = 0, node = POOL_GPU_NUMA_AUTO, r;
	struct pool_gpu *g = NULL;
	struct pool_gpu_stats st;
	struct py_gpu *gp;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|si$KIi", kwlist, &backend,
					 &device, &staging, &count, &node))
		return NULL;
	if (pool_usable(po, "Pool") < 0)
		return NULL;
	pool_gpu_opts_init(&o);
	if (!strcmp(backend, "auto"))
		o.backend = POOL_GPU_AUTO;
	else if (!strcmp(backend, "cuda"))
		o.backend = POOL_GPU_CUDA;
	else if (!strcmp(backend, "host"))
		o.backend = POOL_GPU_HOST;
	else {
		PyErr_Format(PyExc_ValueError,
			     "tidepool: backend must be 'auto', 'cuda' or "
			     "'host' (got '%s')",
			     backend);
		return NULL;
	}
	if (device < 0) {
		PyErr_SetString(PyExc_ValueError,
				"tidepool: device must be >= 0");
		return NULL;
	}
	o.device = device;
	o.staging_bytes = (size_t)staging;
	o.staging_count = count;
	o.numa_node = node;
	POOL_CALL(po, false, r, pool_gpu_open(p, &o, &g));
	if (r)
		return raise_call(r, "Pool", "gpu open");
	gp = PyObject_New(struct py_gpu, &GPUType);
	if (!gp) {
		pool_gpu_close(g);
		return NULL;
	}
	Py_INCREF(po);
	gp->po = po;
	gp->g = g;
	gp->closed = false;
	pool_gpu_get_stats(g, &st);
	gp->backend = st.backend;
	gp->device = device;
	pthread_mutex_init(&gp->stage_lock, NULL);
	memset(gp->stages, 0, sizeof(gp->stages));
	gp->nstages = 0;
	gp->streams = NULL;
	gp->weakrefs = NULL;
	if (pool_add_child(po, (PyObject *)gp) < 0) {
		Py_DECREF(gp);
		return NULL;
	}
	return (PyObject *)gp;
}

static void gstream_unlink(struct py_gstream *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else if (s->gpu->streams == s)
		s->gpu->streams = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->next = s->prev = NULL;
}

/* Closes gp (GIL held): streams, staging, then the engine. */
static void gpu_do_close(struct py_gpu *gp)
{
	struct pool_gpu *g = gp->g;

	if (gp->closed)
		return;
	gp->closed = true;
	if (gp->po->pid != getpid())
		return;
	pool_wrlock(gp->po);
	Py_BEGIN_ALLOW_THREADS for (struct py_gstream *s = gp->streams; s;
				    s = s->next)
	{
		pool_gpu_stream_sync(g, s->s, 10000);
		pool_gpu_stream_destroy(g, s->s);
		s->s = NULL;
	}
	for (unsigned i = 0; i < gp->nstages; i++) {
		/* copies out of a block end with its stream's work */
		for (int t = 0; t < 20000 && atomic_load(&gp->stages[i].busy);
		     t++)
			usleep(500);
		if (!atomic_load(&gp->stages[i].busy))
			pool_gpu_pinned_free(g, gp->stages[i].ptr);
		gp->stages[i].ptr = NULL;
	}
	gp->nstages = 0;
	pool_gpu_close(g);
	Py_END_ALLOW_THREADS pthread_rwlock_unlock(&gp->po->rw);
	while (gp->streams)
		gstream_unlink(gp->streams);
	gp->g = NULL;
}

static PyObject *gpu_close_py(struct py_gpu *gp, PyObject *unused)
{
	if (gp->po->pid != getpid())
		return raise_forked("GPU engine", gp->po->pid);
	gpu_do_close(gp);
	Py_RETURN_NONE;
}

static void gpu_dealloc(struct py_gpu *gp)
{
	if (gp->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)gp);
	if (!gp->closed && gp->po->pid == getpid())
		gpu_do_close(gp);
	pthread_mutex_destroy(&gp->stage_lock);
	Py_DECREF(gp->po);
	PyObject_Free(gp);
}

static PyObject *gpu_stream_py(struct py_gpu *gp, PyObject *unused)
{
	struct py_gstream *s;
	void *stream = NULL;
	int r;

	if (gpu_usable(gp) < 0)
		return NULL;
	POOL_CALL(gp->po, gp->closed, r,
		  pool_gpu_stream_create(gp->g, &stream));
	if (r)
		return raise_call(r, "GPU engine", "gpu stream");
	s = PyObject_New(struct py_gstream, &GPUStreamType);
	if (!s) {
		pool_gpu_stream_destroy(gp->g, stream);
		return NULL;
	}
	Py_INCREF(gp);
	s->gpu = gp;
	s->s = stream;
	s->prev = NULL;
	s->next = gp->streams;
	if (gp->streams)
		gp->streams->prev = s;
	gp->streams = s;
	return (PyObject *)s;
}

/* After the engine's description, its counters. */
static const struct u64_field gpu_stats_fields[] = {
	U64_FIELD(struct pool_gpu_stats, xfers),
	U64_FIELD(struct pool_gpu_stats, errors),
	U64_FIELD(struct pool_gpu_stats, cancelled),
	U64_FIELD(struct pool_gpu_stats, bytes_fetched),
	U64_FIELD(struct pool_gpu_stats, bytes_stored),
	U64_FIELD(struct pool_gpu_stats, chunks),
	U64_FIELD(struct pool_gpu_stats, direct_xfers),
	U64_FIELD(struct pool_gpu_stats, overlapped),
	{ NULL, 0 },
};

static PyObject *gpu_stats_py(struct py_gpu *gp, PyObject *unused)
{
	struct pool_gpu_stats st;
	int r;

	if (gpu_usable(gp) < 0)
		return NULL;
	pool_rdlock(gp->po);
	r = gp->closed ? -EBADF : pool_gpu_get_stats(gp->g, &st);
	pthread_rwlock_unlock(&gp->po->rw);
	if (r)
		return raise_call(r, "GPU engine", "gpu stats");
	return u64_dict(
		Py_BuildValue("{sssisssnsIsisisi}", "backend",
			      st.backend == POOL_GPU_CUDA ? "cuda" : "host",
			      "device", st.device, "pci_bus_id", st.pci_bus_id,
			      "staging_bytes", (Py_ssize_t)st.staging_bytes,
			      "staging_count", st.staging_count, "numa_node",
			      st.numa_node, "numa_applied", st.numa_applied,
			      "direct", st.direct),
		&st, gpu_stats_fields);
}

/*
 * A stream argument: None (the default stream), a GPUStream of gp, an
 * int (a cudaStream_t), or an object with .cuda_stream (torch). -1 with
 * error.
 */
static int stream_arg(struct py_gpu *gp, PyObject *obj, void **out)
{
	PyObject *v;

	*out = NULL;
	if (obj == Py_None)
		return 0;
	if (Py_TYPE(obj) == &GPUStreamType) {
		struct py_gstream *s = (struct py_gstream *)obj;

		if (s->gpu != gp || !s->s) {
			PyErr_SetString(PyExc_ValueError,
					"tidepool: the stream belongs to "
					"another GPU engine or is closed");
			return -1;
		}
		*out = s->s;
		return 0;
	}
	if (gp->backend == POOL_GPU_HOST) {
		PyErr_SetString(PyExc_TypeError,
				"tidepool: the host backend takes its own "
				"GPUStream objects (GPU.stream()) or None");
		return -1;
	}
	if (PyLong_Check(obj)) {
		*out = PyLong_AsVoidPtr(obj);
		return PyErr_Occurred() ? -1 : 0;
	}
	v = PyObject_GetAttr(obj, str_cuda_stream);
	if (!v) {
		PyErr_Clear();
		PyErr_Format(PyExc_TypeError,
			     "tidepool: stream must be None, a GPUStream, a "
			     "torch.cuda.Stream or an int (got %s)",
			     Py_TYPE(obj)->tp_name);
		return -1;
	}
	*out = PyLong_AsVoidPtr(v);
	Py_DECREF(v);
	return PyErr_Occurred() ? -1 : 0;
}

/* The GPU path of KV get/put, all without the GIL. */
static ssize_t kv_gpu_run(struct pool_kv *kv, struct py_gpu *gp,
			  struct kvcall *c, void *stream, int timeout_ms)
{
	size_t total = 0, *offs;
	struct stage *st;
	ssize_t r;
	bool async_release = false;

	offs = malloc(c->n * sizeof(*offs));
	if (!offs)
		return -ENOMEM;
	for (size_t i = 0; i < c->n; i++) {
		offs[i] = total;
		/* 256-byte alignment for the copy engines */
		total += (c->bufs[i].len + 255) & ~(size_t)255;
	}
	r = stage_get(gp, total, timeout_ms, &st);
	if (r) {
		free(offs);
		return r;
	}
	for (size_t i = 0; i < c->n; i++)
		c->ptrs[i] = (char *)st->ptr + offs[i];
	if (c->kind == KVOP_PUT) {
		for (size_t i = 0; i < c->n && !r; i++)
			r = pool_gpu_memcpy_async(gp->g, c->ptrs[i],
						  c->bufs[i].ptr, c->lens[i],
						  stream);
		if (!r)
			r = pool_gpu_stream_sync(gp->g, stream, timeout_ms);
		if (!r)
			r = pool_kv_put(kv, c->n, c->keys,
					(const void *const *)c->ptrs, c->lens,
					c->status);
	} else {
		ssize_t hits = pool_kv_get(kv, c->n, c->keys, c->ptrs, c->caps,
					   c->lens, c->status);
		int cr = 0;

		r = hits;
		for (size_t i = 0; hits > 0 && i < c->n && !cr; i++) {
			if (c->status[i] ||
			    (c->exact && c->lens[i] != c->caps[i]))
				continue;
			cr = pool_gpu_memcpy_async(gp->g, c->bufs[i].ptr,
						   c->ptrs[i], c->lens[i],
						   stream);
			async_release = true;
		}
		if (async_release)
			cr = cr ? cr
				: pool_gpu_stream_host_fn(gp->g, stream,
							  stage_done, st);
		if (cr) {
			/* copies may be queued: keep the block until the
			 * stream is drained */
			pool_gpu_stream_sync(gp->g, stream, timeout_ms);
			async_release = false;
			r = cr;
		}
	}
	if (!async_release)
		atomic_store(&st->busy, 0);
	free(offs);
	return r;
}

static PyObject *kv_gpu_call(struct py_kv *k, enum kvop_kind kind,
			     PyObject *keys, PyObject *vals, PyObject *stream,
			     PyObject *gpu, bool exact)
{
	struct py_gpu *gp;
	struct kvcall c;
	void *s = NULL;
	PyObject *out;
	ssize_t r;

	if (kv_usable(k) < 0)
		return NULL;
	if (kvcall_prepare(&c, kind, keys, vals, false) < 0)
		return NULL;
	c.exact = exact;
	if (gpu != Py_None) {
		if (Py_TYPE(gpu) != &GPUType) {
			kvcall_free(&c);
			PyErr_Format(PyExc_TypeError,
				     "tidepool: gpu must be a GPU engine "
				     "(Pool.gpu()), not %s",
				     Py_TYPE(gpu)->tp_name);
			return NULL;
		}
		gp = (struct py_gpu *)gpu;
		if (gp->po != k->po) {
			kvcall_free(&c);
			PyErr_SetString(PyExc_ValueError,
					"tidepool: the GPU engine belongs to "
					"another Pool");
			return NULL;
		}
	} else {
		if (!k->gpu) {
			int dev = 0;
			PyObject *a, *kw, *g;

			for (size_t i = 0; i < c.n; i++)
				if (c.bufs[i].is_cuda) {
					dev = c.bufs[i].cuda_device;
					break;
				}
			a = Py_BuildValue("(si)", "auto", dev);
			kw = NULL;
			g = a ? pool_gpu_py(k->po, a, kw) : NULL;
			Py_XDECREF(a);
			if (!g) {
				kvcall_free(&c);
				return NULL;
			}
			k->gpu = (struct py_gpu *)g;
		}
		gp = k->gpu;
	}
	if (gpu_usable(gp) < 0 || stream_arg(gp, stream, &s) < 0) {
		kvcall_free(&c);
		return NULL;
	}
	if (gp->backend == POOL_GPU_CUDA) {
		for (size_t i = 0; i < c.n; i++)
			if (!c.bufs[i].is_cuda) {
				kvcall_free(&c);
				PyErr_Format(PyExc_ValueError,
					     "tidepool: %s[%zu] is not a CUDA "
					     "tensor; the GPU path moves "
					     "device memory",
					     kind == KVOP_PUT ? "values"
							      : "bufs",
					     i);
				return NULL;
			}
	} else {
		for (size_t i = 0; i < c.n; i++)
			if (c.bufs[i].is_cuda) {
				kvcall_free(&c);
				PyErr_SetString(
					PyExc_ValueError,
					"tidepool: CUDA tensors need a CUDA "
					"engine, not the host backend");
				return NULL;
			}
	}
	{
		struct kvcall *cp = &c;

		POOL_CALL(k->po, k->closed || gp->closed, r,
			  kv_gpu_run(k->kv, gp, cp, s, 10000));
	}
	out = kvcall_result(&c, r);
	kvcall_free(&c);
	return out;
}

/* ---- region <-> device transfers ---- */

struct py_gxfer {
	PyObject_HEAD struct py_gpu *gp;
	struct py_region *rg;
	struct pool_gpu_xfer *x; /* NULL once waited */
	struct bufref dev;
	int result;
};

static PyTypeObject GPUXferType;

static PyObject *gpu_xfer_start(struct py_gpu *gp, PyObject *args, bool fetch)
{
	struct py_region *rg;
	unsigned long long off;
	PyObject *dev, *stream = Py_None;
	struct pool_gpu_xfer *x = NULL;
	struct py_gxfer *gx;
	void *s;
	int r;

	if (!PyArg_ParseTuple(args, "O!KO|O", &RegionType, &rg, &off, &dev,
			      &stream))
		return NULL;
	if (gpu_usable(gp) < 0 || region_usable(rg) < 0)
		return NULL;
	if (stream_arg(gp, stream, &s) < 0)
		return NULL;
	gx = PyObject_New(struct py_gxfer, &GPUXferType);
	if (!gx)
		return NULL;
	gx->x = NULL;
	gx->result = 0;
	Py_INCREF(gp);
	Py_INCREF(rg);
	gx->gp = gp;
	gx->rg = rg;
	if (bufref_get(dev, fetch, false, 0, fetch ? "dst" : "src", &gx->dev) <
	    0) {
		memset(&gx->dev, 0, sizeof(gx->dev));
		Py_DECREF(gx);
		return NULL;
	}
	if ((gp->backend == POOL_GPU_CUDA) != gx->dev.is_cuda) {
		PyErr_SetString(PyExc_ValueError,
				"tidepool: the CUDA backend moves CUDA "
				"tensors, the host backend host buffers");
		Py_DECREF(gx);
		return NULL;
	}
	{
		void *ptr = gx->dev.ptr;
		size_t len = gx->dev.len;
		struct pool_region *reg = rg->r;

		if (fetch)
			POOL_CALL(gp->po, gp->closed || rg->freed, r,
				  pool_gpu_fetch(gp->g, reg, off, ptr, len, s,
						 &x));
		else
			POOL_CALL(gp->po, gp->closed || rg->freed, r,
				  pool_gpu_store(gp->g, reg, off, ptr, len, s,
						 &x));
	}
	if (r) {
		Py_DECREF(gx);
		return raise_call(r, "GPU engine",
				  fetch ? "gpu fetch" : "gpu store");
	}
	gx->x = x;
	return (PyObject *)gx;
}

static PyObject *gpu_fetch_py(struct py_gpu *gp, PyObject *args)
{
	return gpu_xfer_start(gp, args, true);
}

static PyObject *gpu_store_py(struct py_gpu *gp, PyObject *args)
{
	return gpu_xfer_start(gp, args, false);
}

static PyObject *gxfer_wait_py(struct py_gxfer *gx, PyObject *args)
{
	int timeout_ms = -1, r;

	if (!PyArg_ParseTuple(args, "|i", &timeout_ms))
		return NULL;
	if (gx->x) {
		struct pool_gpu_xfer *x = gx->x;

		if (gx->gp->po->pid != getpid())
			return raise_forked("GPU transfer", gx->gp->po->pid);
		POOL_CALL(gx->gp->po, gx->gp->closed, r,
			  pool_gpu_xfer_wait(x, timeout_ms));
		if (r == -ETIMEDOUT)
			Py_RETURN_FALSE;
		gx->x = NULL;
		gx->result = r == -EBADF ? -ECANCELED : r;
		bufref_release(&gx->dev);
	}
	if (gx->result)
		return raise_pool(gx->result, "gpu transfer");
	Py_RETURN_TRUE;
}

static void gxfer_dealloc(struct py_gxfer *gx)
{
	if (gx->x && gx->gp->po->pid == getpid()) {
		struct pool_gpu_xfer *x = gx->x;
		int r;

		POOL_CALL(gx->gp->po, gx->gp->closed, r,
			  pool_gpu_xfer_wait(x, -1));
		(void)r;
	}
	bufref_release(&gx->dev);
	Py_DECREF(gx->rg);
	Py_DECREF(gx->gp);
	PyObject_Free(gx);
}

static PyMethodDef gxfer_methods[] = {
	{ "wait", (PyCFunction)gxfer_wait_py, METH_VARARGS,
	  "wait(timeout_ms=-1) -> True once complete, False on timeout; "
	  "raises the transfer's error." },
	{ NULL, NULL, 0, NULL },
};

static PyTypeObject GPUXferType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tidepool._tidepool.GPUXfer",
	.tp_basicsize = sizeof(struct py_gxfer),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A pool <-> device transfer (pool_gpu_fetch/store).",
	.tp_dealloc = (destructor)gxfer_dealloc,
	.tp_methods = gxfer_methods,
};

static PyObject *gpu_backend_get(struct py_gpu *gp, void *unused)
{
	return PyUnicode_FromString(gp->backend == POOL_GPU_CUDA ? "cuda"
								 : "host");
}

static PyObject *gpu_device_get(struct py_gpu *gp, void *unused)
{
	return PyLong_FromLong(gp->device);
}

static PyObject *gpu_closed_get(struct py_gpu *gp, void *unused)
{
	return PyBool_FromLong(gp->closed || gp->po->closed);
}

static PyMethodDef gpu_methods[] = {
	{ "stream", (PyCFunction)gpu_stream_py, METH_NOARGS,
	  "A new stream of the engine's backend." },
	{ "fetch", (PyCFunction)gpu_fetch_py, METH_VARARGS,
	  "fetch(region, offset, dst, stream=None) -> GPUXfer: pool -> "
	  "device, stream-ordered (pool_gpu_fetch)." },
	{ "store", (PyCFunction)gpu_store_py, METH_VARARGS,
	  "store(region, offset, src, stream=None) -> GPUXfer: device -> "
	  "pool (pool_gpu_store)." },
	{ "stats", (PyCFunction)gpu_stats_py, METH_NOARGS, "pool_gpu_stats" },
	{ "close", (PyCFunction)gpu_close_py, METH_NOARGS,
	  "Closes the engine (idempotent)." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef gpu_getset[] = {
	{ "backend", (getter)gpu_backend_get, NULL, "'cuda' or 'host'", NULL },
	{ "device", (getter)gpu_device_get, NULL, "device ordinal", NULL },
	{ "closed", (getter)gpu_closed_get, NULL, "True once closed", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject GPUType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tidepool._tidepool.GPU",
	.tp_basicsize = sizeof(struct py_gpu),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A GPU prefetch engine (pool_gpu_open).",
	.tp_dealloc = (destructor)gpu_dealloc,
	.tp_weaklistoffset = offsetof(struct py_gpu, weakrefs),
	.tp_methods = gpu_methods,
	.tp_getset = gpu_getset,
};

static PyObject *gstream_sync_py(struct py_gstream *s, PyObject *args)
{
	int timeout_ms = -1, r;
	struct py_gpu *gp = s->gpu;

	if (!PyArg_ParseTuple(args, "|i", &timeout_ms))
		return NULL;
	if (gpu_usable(gp) < 0)
		return NULL;
	if (!s->s)
		return raise_closed("GPUStream");
	{
		void *st = s->s;

		POOL_CALL(gp->po, gp->closed, r,
			  pool_gpu_stream_sync(gp->g, st, timeout_ms));
	}
	if (r)
		return raise_call(r, "GPU engine", "stream synchronize");
	Py_RETURN_NONE;
}

static void gstream_do_close(struct py_gstream *s)
{
	struct py_gpu *gp = s->gpu;

	if (!s->s)
		return;
	if (gp->po->pid == getpid() && !gp->closed) {
		void *st = s->s;

		pool_wrlock(gp->po);
		if (!gp->closed) {
			Py_BEGIN_ALLOW_THREADS pool_gpu_stream_sync(gp->g, st,
								    10000);
			pool_gpu_stream_destroy(gp->g, st);
			Py_END_ALLOW_THREADS
		}
		pthread_rwlock_unlock(&gp->po->rw);
	}
	s->s = NULL;
	gstream_unlink(s);
}

static PyObject *gstream_close_py(struct py_gstream *s, PyObject *unused)
{
	gstream_do_close(s);
	Py_RETURN_NONE;
}

static void gstream_dealloc(struct py_gstream *s)
{
	gstream_do_close(s);
	Py_DECREF(s->gpu);
	PyObject_Free(s);
}

static PyMethodDef gstream_methods[] = {
	{ "synchronize", (PyCFunction)gstream_sync_py, METH_VARARGS,
	  "synchronize(timeout_ms=-1): waits for the stream's work." },
	{ "close", (PyCFunction)gstream_close_py, METH_NOARGS,
	  "Destroys the stream (idempotent)." },
	{ NULL, NULL, 0, NULL },
};

static PyTypeObject GPUStreamType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tidepool._tidepool.GPUStream",
	.tp_basicsize = sizeof(struct py_gstream),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A stream of a GPU engine's backend.",
	.tp_dealloc = (destructor)gstream_dealloc,
	.tp_methods = gstream_methods,
};

/* ------------------------------------------------------------------ */
/* closing children of a Pool                                           */

static void child_close(PyObject *c)
{
	if (Py_TYPE(c) == &GPUType)
		gpu_do_close((struct py_gpu *)c);
	else if (Py_TYPE(c) == &KVType)
		kv_do_close((struct py_kv *)c);
	else if (Py_TYPE(c) == &RegionType) {
		struct py_region *rg = (struct py_region *)c;

		if (!rg->mapped)
			region_do_free(rg);
	}
}

/* ------------------------------------------------------------------ */
/* module functions                                                     */

/*
 * Tokens as uint32: a list/tuple of ints, or a 1-D buffer of 1-, 2-, 4-
 * or 8-byte integers (numpy); values must be 0 .. 2^32-1.
 */
static uint32_t *tokens_get(PyObject *obj, size_t *n)
{
	uint32_t *t;

	if (PyObject_CheckBuffer(obj)) {
		Py_buffer v;
		char f;

		if (PyObject_GetBuffer(obj, &v,
				       PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
			return NULL;
		f = v.format ? v.format[strlen(v.format) - 1] : 'B';
		if (!strchr("bBhHiIlLqQ", f)) {
			PyErr_Format(PyExc_TypeError,
				     "tidepool: tokens must be integers "
				     "(buffer format '%s')",
				     v.format ? v.format : "B");
			PyBuffer_Release(&v);
			return NULL;
		}
		*n = (size_t)(v.len / v.itemsize);
		t = PyMem_Malloc((*n ? *n : 1) * sizeof(*t));
		if (!t) {
			PyBuffer_Release(&v);
			return (uint32_t *)PyErr_NoMemory();
		}
		for (size_t i = 0; i < *n; i++) {
			const char *p = (const char *)v.buf + i * v.itemsize;
			long long s = 0;
			unsigned long long u = 0;
			bool is_signed = islower((unsigned char)f);

			switch (v.itemsize) {
			case 1:
				s = *(const int8_t *)p;
				u = *(const uint8_t *)p;
				break;
			case 2:
				s = *(const int16_t *)p;
				u = *(const uint16_t *)p;
				break;
			case 4:
				s = *(const int32_t *)p;
				u = *(const uint32_t *)p;
				break;
			default:
				s = *(const int64_t *)p;
				u = *(const uint64_t *)p;
				break;
			}
			if ((is_signed && (s < 0 || s > UINT32_MAX)) ||
			    (!is_signed && u > UINT32_MAX)) {
				PyErr_Format(PyExc_ValueError,
					     "tidepool: tokens[%zu] is out of "
					     "range 0 .. 2**32-1",
					     i);
				PyMem_Free(t);
				PyBuffer_Release(&v);
				return NULL;
			}
			t[i] = (uint32_t)(is_signed ? (unsigned long long)s
						    : u);
		}
		PyBuffer_Release(&v);
		return t;
	}
	{
		PyObject *fast = PySequence_Fast(
			obj, "tidepool: tokens must be a sequence of ints or "
			     "an integer array");

		if (!fast)
			return NULL;
		*n = (size_t)PySequence_Fast_GET_SIZE(fast);
		t = PyMem_Malloc((*n ? *n : 1) * sizeof(*t));
		if (!t) {
			Py_DECREF(fast);
			return (uint32_t *)PyErr_NoMemory();
		}
		for (size_t i = 0; i < *n; i++) {
			unsigned long long u = PyLong_AsUnsignedLongLong(
				PySequence_Fast_GET_ITEM(fast, i));

			if ((u == (unsigned long long)-1 && PyErr_Occurred()) ||
			    u > UINT32_MAX) {
				PyErr_Clear();
				PyErr_Format(PyExc_ValueError,
					     "tidepool: tokens[%zu] is not an "
					     "int in 0 .. 2**32-1",
					     i);
				PyMem_Free(t);
				Py_DECREF(fast);
				return NULL;
			}
			t[i] = (uint32_t)u;
		}
		Py_DECREF(fast);
		return t;
	}
}

static PyObject *mod_prefix_keys(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "tokens", "tenant", "model", "chunk_tokens",
				  NULL };
	PyObject *tokens, *out;
	const char *tenant, *model;
	Py_ssize_t chunk = POOL_KV_CHUNK_TOKENS;
	struct pool_kv_key *keys;
	uint32_t *t;
	size_t n, max;
	ssize_t r;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "Oss|n", kwlist, &tokens,
					 &tenant, &model, &chunk))
		return NULL;
	if (chunk <= 0 || chunk > (1 << 24)) {
		PyErr_Format(PyExc_ValueError,
			     "tidepool: chunk_tokens must be 1 .. %d (got %zd)",
			     1 << 24, chunk);
		return NULL;
	}
	t = tokens_get(tokens, &n);
	if (!t)
		return NULL;
	max = n / (size_t)chunk;
	keys = PyMem_Malloc((max ? max : 1) * sizeof(*keys));
	if (!keys) {
		PyMem_Free(t);
		return PyErr_NoMemory();
	}
	Py_BEGIN_ALLOW_THREADS r = pool_kv_prefix_keys(
		tenant, model, t, n, (size_t)chunk, keys, max);
	Py_END_ALLOW_THREADS PyMem_Free(t);
	if (r < 0) {
		PyMem_Free(keys);
		return raise_pool((int)r, "prefix keys");
	}
	out = PyList_New(r);
	for (ssize_t i = 0; out && i < r; i++) {
		PyObject *b = PyBytes_FromStringAndSize((const char *)keys[i].b,
							POOL_KV_KEY_BYTES);

		if (!b) {
			Py_CLEAR(out);
			break;
		}
		PyList_SET_ITEM(out, i, b);
	}
	PyMem_Free(keys);
	return out;
}

static PyObject *mod_strerror(PyObject *self, PyObject *arg)
{
	long e = PyLong_AsLong(arg);

	if (e == -1 && PyErr_Occurred())
		return NULL;
	if (e > 0)
		e = -e;
	return PyUnicode_FromString(pool_strerror((int)e));
}

static PyObject *mod_gpu_probe(PyObject *self, PyObject *arg)
{
	const char *b = PyUnicode_AsUTF8(arg);
	int r;

	if (!b)
		return NULL;
	if (!strcmp(b, "cuda"))
		r = pool_gpu_probe(POOL_GPU_CUDA);
	else if (!strcmp(b, "host"))
		r = pool_gpu_probe(POOL_GPU_HOST);
	else if (!strcmp(b, "auto"))
		r = pool_gpu_probe(POOL_GPU_AUTO);
	else {
		PyErr_Format(PyExc_ValueError,
			     "tidepool: backend must be 'auto', 'cuda' or "
			     "'host' (got '%s')",
			     b);
		return NULL;
	}
	return PyLong_FromLong(r);
}

/* _bounce_stats() -> dict: the bounce block cache, for tests. */
static PyObject *mod_bounce_stats(PyObject *self, PyObject *unused)
{
	size_t cached, blocks = 0;
	uint64_t made, reused;

	(void)self;
	(void)unused;
	pthread_mutex_lock(&bounce_mu);
	cached = bounce_cached;
	for (size_t i = 0; i < BOUNCE_CACHE_SLOTS; i++)
		blocks += bounce_slot[i].p != NULL;
	made = bounce_made;
	reused = bounce_reused;
	pthread_mutex_unlock(&bounce_mu);
	return Py_BuildValue(
		"{s:n,s:n,s:K,s:K,s:n,s:n}", "cached_bytes", (Py_ssize_t)cached,
		"cached_blocks", (Py_ssize_t)blocks, "made",
		(unsigned long long)made, "reused", (unsigned long long)reused,
		"cache_max", (Py_ssize_t)bounce_cache_max, "cache_slots",
		(Py_ssize_t)BOUNCE_CACHE_SLOTS);
}

static void mod_free(void *m)
{
	(void)m;
	bounce_drain();
}

static PyMethodDef mod_methods[] = {
	{ "prefix_keys", (PyCFunction)(void (*)(void))mod_prefix_keys,
	  METH_VARARGS | METH_KEYWORDS,
	  "prefix_keys(tokens, tenant, model, chunk_tokens=256) -> list of "
	  "32-byte keys (pool_kv_prefix_keys)" },
	{ "strerror", mod_strerror, METH_O,
	  "strerror(errno) -> pool_strerror's text" },
	{ "gpu_probe", mod_gpu_probe, METH_O,
	  "gpu_probe(backend) -> devices (>= 1) or a negative errno" },
	{ "_bounce_stats", mod_bounce_stats, METH_NOARGS,
	  "_bounce_stats() -> the tensor bounce block cache's counters" },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef moddef = {
	PyModuleDef_HEAD_INIT,
	.m_name = "tidepool._tidepool",
	.m_doc = "libpool bindings (use the tidepool package).",
	.m_size = -1,
	.m_methods = mod_methods,
	.m_free = mod_free,
};

static PyObject *new_exc(PyObject *m, const char *name, PyObject *bases,
			 const char *doc)
{
	char full[96];
	PyObject *e;

	snprintf(full, sizeof(full), "tidepool.%s", name);
	e = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
	Py_DECREF(bases);
	if (!e)
		return NULL;
	if (PyModule_AddObjectRef(m, name, e) < 0) {
		Py_DECREF(e);
		return NULL;
	}
	return e;
}

PyMODINIT_FUNC PyInit__tidepool(void);
PyMODINIT_FUNC PyInit__tidepool(void)
{
	PyObject *m;
	PyTypeObject *types[] = { &PoolType,	  &RegionType, &MapType,
				  &KVType,	  &KVOpType,   &GPUType,
				  &GPUStreamType, &GPUXferType };

	str_data_ptr = PyUnicode_InternFromString("data_ptr");
	str_untyped_storage = PyUnicode_InternFromString("untyped_storage");
	str__storage = PyUnicode_InternFromString("_storage");
	str_storage = PyUnicode_InternFromString("storage");
	str_nbytes = PyUnicode_InternFromString("nbytes");
	str_resizable = PyUnicode_InternFromString("resizable");
	str_is_shared = PyUnicode_InternFromString("is_shared");
	str_is_contiguous = PyUnicode_InternFromString("is_contiguous");
	str_is_cuda = PyUnicode_InternFromString("is_cuda");
	str_numel = PyUnicode_InternFromString("numel");
	str_element_size = PyUnicode_InternFromString("element_size");
	str_device = PyUnicode_InternFromString("device");
	str_index = PyUnicode_InternFromString("index");
	str_cuda_stream = PyUnicode_InternFromString("cuda_stream");
	if (!str_data_ptr || !str_untyped_storage || !str__storage ||
	    !str_storage || !str_nbytes || !str_is_contiguous || !str_is_cuda ||
	    !str_numel || !str_element_size || !str_device || !str_index ||
	    !str_cuda_stream || !str_resizable || !str_is_shared)
		return NULL;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (PyType_Ready(types[i]) < 0)
			return NULL;
	if (bounce_cache_env() < 0)
		return NULL;
	m = PyModule_Create(&moddef);
	if (!m)
		return NULL;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		const char *dot = strrchr(types[i]->tp_name, '.');

		if (PyModule_AddObjectRef(m, dot + 1, (PyObject *)types[i]) < 0)
			goto fail;
	}
	PoolError = new_exc(m, "PoolError", Py_BuildValue("(O)", PyExc_OSError),
			    "A libpool failure: errno and pool_strerror text.");
	if (!PoolError)
		goto fail;
	PoolConnectionError =
		new_exc(m, "PoolConnectionError",
			Py_BuildValue("(OO)", PoolError, PyExc_ConnectionError),
			"The pool (memd, a donor, the session) is unreachable "
			"or lost.");
	PoolPermissionError = new_exc(
		m, "PoolPermissionError",
		Py_BuildValue("(OO)", PoolError, PyExc_PermissionError),
		"Authentication failed or not allowed (EACCES, EPERM).");
	PoolCapacityError = new_exc(
		m, "PoolCapacityError",
		Py_BuildValue("(OO)", PoolError, PyExc_MemoryError),
		"The pool or the tenant's quota is full (ENOSPC, EDQUOT).");
	PoolTimeoutError =
		new_exc(m, "PoolTimeoutError",
			Py_BuildValue("(OO)", PoolError, PyExc_TimeoutError),
			"memd or a transfer did not answer in time.");
	PoolFileNotFoundError = new_exc(
		m, "PoolFileNotFoundError",
		Py_BuildValue("(OO)", PoolError, PyExc_FileNotFoundError),
		"A file (the tenant's secret) does not exist.");
	ClosedError = new_exc(m, "ClosedError",
			      Py_BuildValue("(O)", PyExc_ValueError),
			      "An operation on a closed handle.");
	ForkError = new_exc(m, "ForkError",
			    Py_BuildValue("(O)", PyExc_RuntimeError),
			    "A handle of another process (before fork()).");
	if (!PoolConnectionError || !PoolPermissionError ||
	    !PoolCapacityError || !PoolTimeoutError || !PoolFileNotFoundError ||
	    !ClosedError || !ForkError)
		goto fail;
	if (PyModule_AddIntConstant(m, "KEY_BYTES", POOL_KV_KEY_BYTES) < 0 ||
	    PyModule_AddIntConstant(m, "VALUE_MAX", POOL_KV_VALUE_MAX) < 0 ||
	    PyModule_AddIntConstant(m, "BATCH_MAX", POOL_KV_BATCH_MAX) < 0 ||
	    PyModule_AddIntConstant(m, "CHUNK_TOKENS", POOL_KV_CHUNK_TOKENS) <
		    0)
		goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
