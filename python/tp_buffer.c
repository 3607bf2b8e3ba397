/* SPDX-License-Identifier: MIT */
/*
 * python/tp_buffer.c - buffers taken from Python objects (buffer protocol,
 * torch tensors and their storages), the bounce block cache, stats dicts and
 * KV keys. What the files share: python/tp_int.h.
 */
#include "tp_int.h"

/*
 * Bounce blocks. A call's bounce buffers share one block (tpy_bufs_bounce),
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
 * fits) or a new mapping. NULL when out of memory. Any thread. */
void *tpy_bounce_take(size_t need, size_t *cap)
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
void tpy_bounce_give(void *p, size_t cap)
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
int tpy_bounce_cache_env(void)
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
void tpy_bounce_drain(void)
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

/* Adds st's counters named by f to the new dict d and returns it, or
 * NULL with an exception (d released); d NULL (its constructor failed,
 * an exception set) gives NULL. */
PyObject *tpy_u64_dict(PyObject *d, const void *st, const struct u64_field *f)
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

PyObject *tpy_str_data_ptr, *tpy_str_is_contiguous, *tpy_str_is_cuda,
	*tpy_str_numel, *tpy_str_element_size, *tpy_str_device, *tpy_str_index,
	*tpy_str_cuda_stream, *tpy_str_untyped_storage, *tpy_str__storage,
	*tpy_str_storage, *tpy_str_nbytes, *tpy_str_resizable,
	*tpy_str_is_shared;

void tpy_bufref_release(struct bufref *b)
{
	if (b->is_view)
		PyBuffer_Release(&b->view);
	Py_CLEAR(b->keep);
	Py_CLEAR(b->storage);
	if (b->blk)
		tpy_bounce_give(b->blk, b->blk_cap);
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

	if (pyobj_size(PyObject_CallMethodNoArgs(obj, tpy_str_data_ptr), &p) <
		    0 ||
	    pyobj_size(PyObject_CallMethodNoArgs(obj, tpy_str_numel), &numel) <
		    0 ||
	    pyobj_size(PyObject_CallMethodNoArgs(obj, tpy_str_element_size),
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

	if (pyobj_size(PyObject_CallMethodNoArgs(st, tpy_str_data_ptr), &p) <
		    0 ||
	    pyobj_size(PyObject_CallMethodNoArgs(st, tpy_str_nbytes), len) < 0)
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
	PyObject *names[] = { tpy_str_untyped_storage, tpy_str__storage,
			      tpy_str_storage };

	*out = NULL;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!PyObject_HasAttr(obj, names[i]))
			continue;
		*out = PyObject_CallMethodNoArgs(obj, names[i]);
		return *out ? 0 : -1;
	}
	return 0;
}

/* The truth of r, a new reference (consumed) or NULL for an error that
 * is raised: 1, 0, or -1 (raised). */
static int truth_of(PyObject *r)
{
	int t;

	if (!r)
		return -1;
	t = PyObject_IsTrue(r);
	Py_DECREF(r);
	return t;
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
	bool fixed = false;
	int t;

	if (!st)
		return false;
	if (PyObject_HasAttr(st, tpy_str_resizable)) {
		t = truth_of(PyObject_CallMethodNoArgs(st, tpy_str_resizable));
		fixed = t == 0;
	} else if (PyObject_HasAttr(st, tpy_str_is_shared)) {
		t = truth_of(PyObject_CallMethodNoArgs(st, tpy_str_is_shared));
		fixed = t == 1;
	} else {
		return false;
	}
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
 * Whether where b's tensor's bytes are can be asked without running any
 * Python code: b holds a storage whose type's data_ptr and nbytes are C
 * methods (torch's StorageBase). GIL held; no exception is left set.
 */
bool tpy_bufref_where_is_native(const struct bufref *b)
{
#if PY_VERSION_HEX < 0x030A0000
	(void)b;
	return false; /* no PyGC_Disable before 3.10 */
#else
	PyTypeObject *t;
	PyObject *d, *n;

	if (!b->storage)
		return false;
	t = Py_TYPE(b->storage);
	d = _PyType_Lookup(t, tpy_str_data_ptr);
	n = _PyType_Lookup(t, tpy_str_nbytes);
	return d && n && Py_IS_TYPE(d, &PyMethodDescr_Type) &&
	       Py_IS_TYPE(n, &PyMethodDescr_Type);
#endif
}

#if PY_VERSION_HEX >= 0x030A0000
/* A C method descriptor of st's type called on st: a size_t. -1 with
 * an exception. */
static int native_size(PyObject *st, PyObject *name, size_t *out)
{
	PyObject *d = _PyType_Lookup(Py_TYPE(st), name);

	if (!d || !Py_IS_TYPE(d, &PyMethodDescr_Type)) {
		PyErr_SetString(PyExc_TypeError, "tidepool: not a C method");
		return -1;
	}
	return pyobj_size(PyObject_CallOneArg(d, st), out);
}

/*
 * bufref_where for a b that tpy_bufref_where_is_native accepted, with
 * no Python code run: its storage's C methods are called directly (an
 * instance attribute cannot stand in for them) with the garbage
 * collector off, so that no finalizer runs either (pool_kv_get_to's
 * sink asks it while the call holds its Pool's lock: tp_kv.c). GIL
 * held. 0 with *p, or -1, no exception set (the storage no longer holds
 * nbytes at b's offset, or asking failed).
 */
int tpy_bufref_where_native(struct bufref *b, size_t nbytes, char **p)
{
	PyObject *et, *ev, *tb;
	size_t sp = 0, n = 0, off = b->storage_off;
	int gc = PyGC_Disable(), r;

	PyErr_Fetch(&et, &ev, &tb);
	r = native_size(b->storage, tpy_str_data_ptr, &sp) < 0 ||
			    native_size(b->storage, tpy_str_nbytes, &n) < 0
		    ? -1
		    : 0;
	if (r == 0 && sp && off <= n && nbytes <= n - off)
		*p = (char *)sp + off;
	else
		r = -1;
	PyErr_Clear();
	PyErr_Restore(et, ev, tb);
	if (gc)
		PyGC_Enable();
	return r;
}
#endif

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
	/* under ASan, memcpy: ASan checks its bytes, not the streamed
	 * stores' */
#if defined(__SSE2__) && !defined(__SANITIZE_ADDRESS__)
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
 * Delivers nbytes read into src (b's bounce buffer, or a slot of a
 * pipelined get) to where b's tensor's bytes are now (bufref_where),
 * at most b->len of them. GIL held: no Python code runs between the
 * look-up of where the bytes are and the copy (torch's Tensor.resize_()
 * in another thread can: it drops the GIL; docs/python.md). Returns 0, or
 * -1, no exception set, when the storage no longer holds those bytes
 * (it was shrunk meanwhile): nothing was written.
 */
int tpy_bufref_deliver(struct bufref *b, const void *src, size_t nbytes)
{
	char *p;

	if (nbytes == 0)
		return 0;
	if (nbytes > b->len)
		nbytes = b->len;
	if (bufref_where(b, nbytes, &p) < 0)
		return -1;
	bounce_copy_out(p, src, nbytes);
	return 0;
}

/* tpy_bufref_deliver of b's bounce buffer (a completed read into a CPU
 * tensor); 0 when b has none. */
int tpy_bufref_commit(struct bufref *b, size_t nbytes)
{
	if (!b->bounce)
		return 0;
	return tpy_bufref_deliver(b, b->bounce, nbytes);
}

/*
 * Gives the bufrefs of bs[0..n) that want one (bufref_take) their
 * bounce buffers, all in one block (owned by the first of them), and
 * fills a source's (!writable) with its tensor's bytes, re-read from
 * its storage: Python code that ran since bufref_take (another item's
 * data_ptr()) may have moved them. GIL held. Returns 0, or -1 with
 * MemoryError/BufferError set (the caller releases bs).
 */
int tpy_bufs_bounce(struct bufref *bs, size_t n, bool writable)
{
	size_t need = 0, off = 0, cap;
	struct bufref *owner = NULL;
	char *blk;

	for (size_t i = 0; i < n; i++)
		if (bs[i].want_bounce)
			need += (bs[i].len + 63) & ~(size_t)63;
	if (need == 0)
		return 0;
	blk = tpy_bounce_take(need, &cap);
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
 * tpy_bufs_bounce gives it. idx names the item in errors (-1: none).
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
	if (!PyObject_HasAttr(obj, tpy_str_data_ptr)) {
		PyErr_Format(PyExc_TypeError,
			     "tidepool: %s[%zd] is a %s: expected a torch "
			     "tensor, a numpy array or another object of the "
			     "buffer protocol",
			     what, idx, Py_TYPE(obj)->tp_name);
		return -1;
	}
	t = truth_of(PyObject_CallMethodNoArgs(obj, tpy_str_is_contiguous));
	if (t < 0)
		return -1;
	if (!t) {
		PyErr_Format(PyExc_ValueError,
			     "tidepool: %s[%zd] is not contiguous "
			     "(call .contiguous() first)",
			     what, idx);
		return -1;
	}
	t = truth_of(PyObject_GetAttr(obj, tpy_str_is_cuda));
	if (t < 0)
		return -1;
	b->is_cuda = t;
	if (b->is_cuda) {
		PyObject *dev = PyObject_GetAttr(obj, tpy_str_device);
		size_t di;

		if (!dev)
			return -1;
		r = PyObject_GetAttr(dev, tpy_str_index);
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
 * writable (a destination, delivered by tpy_bufref_commit). -1 with error
 * and nothing held. */
int tpy_bufref_get(PyObject *obj, bool writable, bool bounce, Py_ssize_t idx,
		   const char *what, struct bufref *b)
{
	if (bufref_take(obj, writable, bounce, idx, what, b) < 0)
		return -1;
	if (tpy_bufs_bounce(b, 1, writable) < 0) {
		tpy_bufref_release(b);
		return -1;
	}
	return 0;
}

/* A sequence of buffers: fills bs[0..n) or releases what it took and
 * returns -1. TPY_BOUNCE_LATER leaves the CPU tensors that need a
 * bounce buffer marked (want_bounce, ptr their memory now, which must
 * not reach libpool): the caller gives them one (tpy_bufs_bounce) or
 * reads them through a pipelined get's slots. */
int tpy_bufs_get(PyObject *seq, size_t n, bool writable, enum tpy_bounce bounce,
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

		if (bufref_take(o, writable, bounce != TPY_BOUNCE_NONE,
				(Py_ssize_t)i, what, &bs[i]) < 0)
			goto fail;
		if (bs[i].len == 0) {
			PyErr_Format(PyExc_ValueError,
				     "tidepool: %s[%zu] is empty", what, i);
			tpy_bufref_release(&bs[i]);
			goto fail;
		}
	}
	if (bounce == TPY_BOUNCE_NOW && tpy_bufs_bounce(bs, n, writable) < 0)
		goto fail;
	Py_DECREF(fast);
	return 0;
fail:
	while (i-- > 0)
		tpy_bufref_release(&bs[i]);
	Py_DECREF(fast);
	return -1;
}

void tpy_bufs_release(struct bufref *bs, size_t n)
{
	for (size_t i = 0; bs && i < n; i++)
		tpy_bufref_release(&bs[i]);
}

/*
 * Keys: a sequence of 32-byte bytes-like objects, or one buffer of
 * n * 32 bytes. Returns a PyMem_Malloc'ed array and *n, or NULL with an
 * exception.
 */
struct pool_kv_key *tpy_keys_get(PyObject *obj, size_t *n)
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

/* _bounce_stats() -> dict: the bounce block cache, for tests. */
PyObject *tpy_mod_bounce_stats(PyObject *self, PyObject *unused)
{
	size_t cached, blocks = 0;
	uint64_t made, reused;

	(void)self;
	pthread_mutex_lock(&bounce_mu);
	cached = bounce_cached;
	for (size_t i = 0; i < BOUNCE_CACHE_SLOTS; i++)
		blocks += bounce_slot[i].p != NULL;
	made = bounce_made;
	reused = bounce_reused;
	pthread_mutex_unlock(&bounce_mu);
	return Py_BuildValue(
		"{s:n,s:n,s:K,s:K,s:n,s:n,s:K,s:K,s:K}", "cached_bytes",
		(Py_ssize_t)cached, "cached_blocks", (Py_ssize_t)blocks, "made",
		(unsigned long long)made, "reused", (unsigned long long)reused,
		"cache_max", (Py_ssize_t)bounce_cache_max, "cache_slots",
		(Py_ssize_t)BOUNCE_CACHE_SLOTS, "pipelined_calls",
		(unsigned long long)tpy_pipe_calls, "pipelined_chunks",
		(unsigned long long)tpy_pipe_chunks, "sink_calls",
		(unsigned long long)tpy_sink_calls);
}
