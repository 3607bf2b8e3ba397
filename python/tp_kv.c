/* SPDX-License-Identifier: MIT */
/*
 * python/tp_kv.c - the KV type (a KV handle) and KVOp (one asynchronous KV
 * operation). What the files share: python/tp_int.h.
 */
#include "tp_int.h"

static const char *const kvop_name[] = { "put",	   "get", "exists",
					 "delete", "pin", "unpin" };

void tpy_kvcall_free(struct kvcall *c)
{
	tpy_bufs_release(c->bufs, c->bufs ? c->n : 0);
	PyMem_Free(c->bufs);
	PyMem_Free(c->keys);
	PyMem_Free(c->ptrs);
	PyMem_Free(c->lens);
	PyMem_Free(c->caps);
	PyMem_Free(c->status);
	memset(c, 0, sizeof(*c));
}

/* Parses keys (and values/bufs for put/get) into c; bounce: whether and
 * when CPU tensors get bounce buffers (struct bufref, enum tpy_bounce;
 * TPY_BOUNCE_LATER: kvcall_bounce or kv_get_pipelined gives them). -1
 * with error. */
int tpy_kvcall_prepare(struct kvcall *c, enum kvop_kind kind, PyObject *keys,
		       PyObject *vals, enum tpy_bounce bounce)
{
	memset(c, 0, sizeof(*c));
	c->kind = kind;
	c->keys = tpy_keys_get(keys, &c->n);
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
	if (tpy_bufs_get(vals, c->n, kind == KVOP_GET, bounce,
			 kind == KVOP_GET ? "bufs" : "values", c->bufs) < 0) {
		PyMem_Free(c->bufs);
		c->bufs = NULL;
		tpy_kvcall_free(c);
		return -1;
	}
	for (size_t i = 0; i < c->n; i++) {
		if (kind == KVOP_PUT && c->bufs[i].len > POOL_KV_VALUE_MAX) {
			PyErr_Format(PyExc_ValueError,
				     "tidepool: values[%zu] has %zu bytes; "
				     "the most a value may have is %u",
				     i, c->bufs[i].len, POOL_KV_VALUE_MAX);
			tpy_kvcall_free(c);
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
	tpy_kvcall_free(c);
	PyErr_NoMemory();
	return -1;
}

/* A call prepared with TPY_BOUNCE_LATER: its CPU tensors' bounce
 * buffers now, in one block. -1 with MemoryError/BufferError (the
 * caller frees c). */
static int kvcall_bounce(struct kvcall *c)
{
	if (!c->bufs || tpy_bufs_bounce(c->bufs, c->n, c->kind == KVOP_GET) < 0)
		return c->bufs ? -1 : 0;
	for (size_t i = 0; i < c->n; i++)
		c->ptrs[i] = c->bufs[i].ptr;
	return 0;
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
		if (tpy_bufref_commit(&c->bufs[i], c->lens[i]) < 0)
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
 * Waits for op, one of k's, with the GIL released, under rw. Returns its
 * result, or -EBADF once the handle is closed: only after pool_kv_close
 * has run, which settles every op in flight, so that their buffers are
 * libpool's no more. (POOL_CALL's check would answer -EBADF as soon as
 * the Pool or KV is marked closed, before that.)
 */
static ssize_t kv_op_wait_settled(struct py_kv *k, struct pool_kv_op *op)
{
	struct py_pool *po = k->po;
	ssize_t r;

	Py_BEGIN_ALLOW_THREADS pthread_rwlock_rdlock(&po->rw);
	r = !po->p || k->lib_closed ? -EBADF : pool_kv_op_wait(k->kv, op, -1);
	pthread_rwlock_unlock(&po->rw);
	Py_END_ALLOW_THREADS return r;
}

/*
 * Pipelined gets. A get into CPU tensors that bounce (struct bufref)
 * reads every value into one bounce block with the GIL released, then
 * copies the block out with the GIL held: for 109 x 1 MiB, ~5 ms of copy
 * after an 8 ms get, the block read back from memory. Instead,
 * kv_get_pipelined cuts the call into chunks of consecutive keys with
 * about pipe_chunk bounced bytes each; up to pipe_depth chunks are in
 * flight as asynchronous gets on the handle's workers, each into a slot
 * (a block from the bounce cache, kept for the call), while this
 * thread, with the GIL, copies each completed chunk's hits out of its
 * slot into their tensors. A slot stays in the caches between the get
 * that fills it and the copy that empties it, so the copy costs the
 * tensor's writes only (streamed, bounce_copy_out).
 *
 * Safety is the bounce's: libpool writes only slots; a slot's bytes
 * reach a tensor through tpy_bufref_deliver with the GIL held, which
 * looks up where the tensor's storage keeps its bytes right before the
 * copy (no Python code runs between the look-up and the copy): after
 * set_() they land in the storage the call holds, after a growing
 * resize_() in the storage's new memory; a storage shrunk below them
 * makes the key a miss (-ESTALE). (torch's Tensor.resize_() and set_()
 * drop the GIL while they run: one running in another thread during the
 * copy itself races with it, as with any torch op writing that tensor;
 * docs/python.md.) Buffers
 * that need no bounce (views, fixed storages) are read in place within
 * their chunk. Each chunk is a pool_kv_get of its own, every value
 * checked as in one call. A chunk's call-level error ends the call with
 * that error, once every chunk in flight has completed (a slot is
 * libpool's until then). pipe_chunk 0 turns pipelining off.
 *
 * pipe_chunk and pipe_depth are module state (GIL), set by
 * _get_pipeline() for tests and benchmarks.
 */
#define PIPE_DEPTH_MAX 8
static size_t pipe_chunk = (size_t)4 << 20;
static unsigned pipe_depth = 2;
uint64_t tpy_pipe_calls, tpy_pipe_chunks;

static size_t bounced_bytes(const struct bufref *b)
{
	return b->want_bounce ? (b->len + 63) & ~(size_t)63 : 0;
}

/* Whether get c (prepared with TPY_BOUNCE_LATER) is pipelined: its
 * bounced bytes fill more than one chunk. */
static bool kv_get_pipelines(const struct kvcall *c)
{
	size_t need = 0;

	if (c->kind != KVOP_GET || !c->bufs || !pipe_chunk || c->n < 2)
		return false;
	for (size_t i = 0; i < c->n; i++)
		need += bounced_bytes(&c->bufs[i]);
	return need > pipe_chunk;
}

struct pipe_slot {
	void *blk; /* from the bounce cache; NULL: none yet */
	size_t cap;
	struct pool_kv_op *op; /* in flight, or NULL */
	size_t a, b;	       /* its keys: [a, b) */
};

/* Delivers the hits of completed chunk sl out of its slot (GIL held).
 * Returns how many hits could not be delivered (now -ESTALE). */
static ssize_t pipe_deliver(struct kvcall *c, const struct pipe_slot *sl)
{
	ssize_t lost = 0;

	for (size_t i = sl->a; i < sl->b; i++) {
		struct bufref *b = &c->bufs[i];

		if (!b->want_bounce || c->status[i] != 0 ||
		    c->lens[i] > c->caps[i])
			continue;
		if (tpy_bufref_deliver(b, c->ptrs[i], c->lens[i]) < 0) {
			c->status[i] = -ESTALE;
			lost++;
		}
	}
	return lost;
}

/*
 * Starts the get of c's keys from *next into slot sl (GIL held): as
 * many keys as fit pipe_chunk bounced bytes (one at least), the bounced
 * ones read into sl's block. pool_kv_get_async only queues the op, so
 * it runs with the GIL, under rw taken as tpy_pool_rdlock does. 0 or
 * -errno (nothing started).
 */
static int pipe_start(struct py_kv *k, struct kvcall *c, size_t *next,
		      struct pipe_slot *sl)
{
	size_t need = 0, a = *next, end = a, off = 0;
	struct pool_kv_op *op = NULL;
	int r;

	do
		need += bounced_bytes(&c->bufs[end++]);
	while (end < c->n && need + bounced_bytes(&c->bufs[end]) <= pipe_chunk);
	if (need > sl->cap) {
		if (sl->blk)
			tpy_bounce_give(sl->blk, sl->cap);
		sl->cap = 0;
		sl->blk = tpy_bounce_take(need, &sl->cap);
		if (!sl->blk)
			return -ENOMEM;
	}
	for (size_t i = a; i < end; i++) {
		if (!c->bufs[i].want_bounce)
			continue;
		c->ptrs[i] = (char *)sl->blk + off;
		off += bounced_bytes(&c->bufs[i]);
	}
	tpy_pool_rdlock(k->po);
	if (!k->po->p || k->po->closed || k->closed)
		r = -EBADF;
	else
		r = pool_kv_get_async(k->kv, end - a, c->keys + a, c->ptrs + a,
				      c->caps + a, c->lens + a, c->status + a,
				      &op);
	pthread_rwlock_unlock(&k->po->rw);
	if (r)
		return r;
	sl->op = op;
	sl->a = a;
	sl->b = end;
	*next = end;
	tpy_pipe_chunks++;
	return 0;
}

/* Runs get c pipelined (above) on k. GIL held on entry and return; the
 * result as pool_kv_get's. Slots form a ring of depth + 1: the oldest
 * chunk's slot is copied out of while depth later chunks are read. */
static ssize_t kv_get_pipelined(struct py_kv *k, struct kvcall *c)
{
	struct pipe_slot s[PIPE_DEPTH_MAX + 1];
	unsigned depth = pipe_depth, nslots = depth + 1, head = 0, nfly = 0;
	size_t next = 0;
	ssize_t hits = 0, err = 0, r;

	memset(s, 0, sizeof(s));
	tpy_pipe_calls++;
	for (;;) {
		/* refill: the slots after the last in flight are free */
		while (!err && next < c->n && nfly < depth) {
			err = pipe_start(k, c, &next,
					 &s[(head + nfly) % nslots]);
			if (!err)
				nfly++;
		}
		if (!nfly)
			break;
		/* the oldest chunk: wait, then copy its hits out while
		 * the next ones are read */
		struct pipe_slot *sl = &s[head];

		r = kv_op_wait_settled(k, sl->op);
		sl->op = NULL;
		head = (head + 1) % nslots;
		nfly--;
		if (r < 0) {
			if (!err)
				err = r;
			continue;
		}
		hits += r;
		while (!err && next < c->n && nfly < depth) {
			err = pipe_start(k, c, &next,
					 &s[(head + nfly) % nslots]);
			if (!err)
				nfly++;
		}
		if (!err)
			hits -= pipe_deliver(c, sl);
	}
	for (unsigned d = 0; d < nslots; d++)
		if (s[d].blk)
			tpy_bounce_give(s[d].blk, s[d].cap);
	return err ? err : hits;
}

/*
 * Gets straight into tensors that bounce (pool_kv_get_to). A sync get
 * whose bounced tensors' storages can say where their bytes are without
 * running Python code (torch's: tpy_bufref_where_is_native) gives
 * libpool a sink: for each value, begin takes the GIL and looks up where
 * the tensor's storage keeps its bytes at that moment; libpool copies the
 * value there (on the same host straight from memd's slab, hashed as it
 * goes; over the fabric out of its own memory, once checked); end gives
 * the GIL back. One copy instead of the bounce's two, and the same
 * guarantee as the bounce's delivery (tpy_bufref_deliver): no Python code
 * runs between the look-up and the copy, a storage shrunk below the
 * value makes it a miss (-ESTALE), set_() and resize_() between two
 * values are seen by the next look-up. Buffers that need no bounce
 * (views, fixed storages) are handed out in place without the GIL.
 *
 * Locks: begin takes the GIL while this thread holds rw for reading
 * (POOL_CALL), which the rule in tp_int.h ("Locking") allows only
 * because no thread waits for rw while holding the GIL, and because
 * nothing run under the GIL here can wait for rw: the look-up calls the
 * storage's C methods with the garbage collector off (no finalizer can
 * run a close), and no Python code runs (but the test hook below).
 *
 * Over the fabric libpool reads each value into its own memory first
 * and counts it in the sink's staged: there the pipeline (two gets in
 * flight while this thread copies) does better, so a handle whose sink
 * get staged most of its hits sends its next SINK_RETRY sync tensor gets
 * to the pipeline, then tries the sink again (a cluster's donors may be
 * local or not, and homes move).
 *
 * sink_on (module state, GIL) is set by _get_sink() for tests and
 * benchmarks; sink_hook, a callable run in begin before the look-up of
 * key sink_hook_at (one shot), is for tests only.
 */
#define SINK_RETRY 32
static bool sink_on = true;
static PyObject *sink_hook;
static size_t sink_hook_at;
uint64_t tpy_sink_calls;

struct sink_call {
	struct kvcall *c;
	PyGILState_STATE g;
	bool held; /* between a begin that took the GIL and its end */
};

static bool kv_get_sinks(const struct kvcall *c)
{
	bool any = false;

	if (c->kind != KVOP_GET || !c->bufs || !sink_on)
		return false;
	for (size_t i = 0; i < c->n; i++) {
		if (!c->bufs[i].want_bounce)
			continue;
		if (!tpy_bufref_where_is_native(&c->bufs[i]))
			return false;
		any = true;
	}
	return any;
}

#if PY_VERSION_HEX >= 0x030A0000
static void *sink_begin(void *arg, size_t i, size_t len)
{
	struct sink_call *s = arg;
	struct bufref *b = &s->c->bufs[i];
	char *p;

	if (!b->want_bounce)
		return s->c->ptrs[i]; /* in place, as pool_kv_get */
	s->g = PyGILState_Ensure();
	if (sink_hook && i == sink_hook_at) {
		PyObject *h = sink_hook, *r;

		sink_hook = NULL;
		r = PyObject_CallNoArgs(h);
		if (!r)
			PyErr_WriteUnraisable(h);
		Py_XDECREF(r);
		Py_DECREF(h);
	}
	if (tpy_bufref_where_native(b, len, &p) < 0) {
		PyGILState_Release(s->g);
		return NULL;
	}
	s->held = true;
	return p;
}

static void sink_end(void *arg, size_t i)
{
	struct sink_call *s = arg;

	(void)i;
	if (s->held) {
		s->held = false;
		PyGILState_Release(s->g);
	}
}

/* Runs get c (kv_get_sinks) through a sink (above). GIL held on entry
 * and return; the result as pool_kv_get's. */
static ssize_t kv_get_sink(struct py_kv *k, struct kvcall *c)
{
	struct sink_call s = { .c = c };
	struct pool_kv_sink sk = { sink_begin, sink_end, &s };
	ssize_t r;

	tpy_sink_calls++;
	POOL_CALL(k->po, k->closed, r,
		  pool_kv_get_to(k->kv, c->n, c->keys, &sk, c->caps, c->lens,
				 c->status));
	for (size_t i = 0; r >= 0 && i < c->n; i++)
		if (c->status[i] == -ECANCELED)
			c->status[i] = -ESTALE; /* shrunk: not delivered */
	if (r > 0 && sk.staged * 2 > (size_t)r)
		k->sink_skip = SINK_RETRY;
	return r;
}
#else
static ssize_t kv_get_sink(struct py_kv *k, struct kvcall *c)
{
	(void)k;
	(void)c;
	return -ENOSYS; /* kv_get_sinks said no: tpy_bufref_where_is_native */
}
#endif

/*
 * _get_sink(enabled=None, hook=None, at=0) -> enabled: whether sync gets
 * into tensors go through a sink (above), set when given; hook: a
 * callable run once, in the sink's begin of key `at` of the next such
 * get, before the look-up (tests). For tests and benchmarks.
 */
PyObject *tpy_mod_get_sink(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "enabled", "hook", "at", NULL };
	PyObject *en = Py_None, *hook = Py_None;
	Py_ssize_t at = 0;

	(void)self;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOn", kwlist, &en, &hook,
					 &at))
		return NULL;
	if (at < 0) {
		PyErr_SetString(PyExc_ValueError, "tidepool: at must be >= 0");
		return NULL;
	}
	if (hook != Py_None && !PyCallable_Check(hook)) {
		PyErr_SetString(PyExc_TypeError,
				"tidepool: hook must be callable");
		return NULL;
	}
	if (en != Py_None) {
		int t = PyObject_IsTrue(en);

		if (t < 0)
			return NULL;
		sink_on = t;
	}
	if (hook != Py_None) {
		Py_INCREF(hook);
		Py_XSETREF(sink_hook, hook);
		sink_hook_at = (size_t)at;
	}
	return PyBool_FromLong(sink_on);
}

/*
 * _get_pipeline(chunk_bytes=None, depth=None) -> (chunk_bytes, depth):
 * the pipelined get's settings (above), set when given; chunk_bytes 0
 * turns pipelining off. For tests and benchmarks.
 */
PyObject *tpy_mod_get_pipeline(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "chunk_bytes", "depth", NULL };
	PyObject *chunk = Py_None, *depth = Py_None;

	(void)self;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO", kwlist, &chunk,
					 &depth))
		return NULL;
	if (depth != Py_None) {
		long d = PyLong_AsLong(depth);

		if (d == -1 && PyErr_Occurred())
			return NULL;
		if (d < 1 || d > PIPE_DEPTH_MAX) {
			PyErr_Format(
				PyExc_ValueError,
				"tidepool: depth must be 1 .. %d (got %ld)",
				PIPE_DEPTH_MAX, d);
			return NULL;
		}
		pipe_depth = (unsigned)d;
	}
	if (chunk != Py_None) {
		size_t n = PyLong_AsSize_t(chunk);

		if (n == (size_t)-1 && PyErr_Occurred())
			return NULL;
		pipe_chunk = n;
	}
	return Py_BuildValue("nI", (Py_ssize_t)pipe_chunk, pipe_depth);
}

/*
 * The Python result of a completed call: put -> list of per-key errno
 * (0 stored, EEXIST present, else why not); get -> list of hit flags
 * (ValueError when a hit's length is not its buffer's); exists -> int;
 * delete/pin/unpin -> list of bools. Call-level errors raise.
 */
PyObject *tpy_kvcall_result(struct kvcall *c, ssize_t r)
{
	PyObject *out;

	if (r < 0) {
		char what[32];

		snprintf(what, sizeof(what), "kv %s", kvop_name[c->kind]);
		return tpy_raise_call((int)r, "KV", what);
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

int tpy_kv_usable(struct py_kv *k)
{
	if (tpy_pool_usable(k->po, "KV's Pool") < 0)
		return -1;
	if (k->closed) {
		tpy_raise_closed("KV");
		return -1;
	}
	return 0;
}

PyObject *tpy_pool_kv_py(struct py_pool *po, PyObject *args, PyObject *kw)
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
	if (tpy_pool_usable(po, "Pool") < 0)
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
		return tpy_raise_call(r, "Pool", "kv open");
	k = TPY_NEW(struct py_kv, tpy_KVType);
	if (!k) {
		POOL_CALL(po, false, r, (pool_kv_close(kv), 0));
		return NULL;
	}
	Py_INCREF(po);
	k->po = po;
	k->kv = kv;
	if (tpy_pool_add_child(po, (PyObject *)k) < 0) {
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

/* o completed with result r (GIL held): keep what the result needs,
 * drop the buffers. */
static void kvop_complete(struct py_kvop *o, ssize_t r)
{
	o->done = true;
	o->op = NULL;
	o->result = r;
	TPY_LIST_REMOVE(o->k->pending, o);
	kvcall_commit(&o->c, r);
	tpy_bufs_release(o->c.bufs, o->c.bufs ? o->c.n : 0);
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

	if (tpy_kv_usable(k) < 0)
		return NULL;
	o = TPY_NEW(struct py_kvop, tpy_KVOpType);
	if (!o)
		return NULL;
	Py_INCREF(k);
	o->k = k;
	if (tpy_kvcall_prepare(&o->c, kind, keys, vals, TPY_BOUNCE_NOW) < 0) {
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
		return tpy_raise_call(r, "KV", kvop_name[kind]);
	}
	TPY_LIST_PUSH(k->pending, o);
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
		tpy_raise_forked("KV operation", k->po->pid);
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
		return tpy_raise_forked("KV operation", o->k->po->pid);
	/* pool_kv_op_test never blocks: no need to drop the GIL, but rw
	 * must be held (close may run in another thread) */
	tpy_pool_rdlock(o->k->po);
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
		return tpy_raise_pool(r, "kv op test");
	Py_RETURN_FALSE;
}

static PyObject *kvop_result_py(struct py_kvop *o, PyObject *unused)
{
	if (!o->done) {
		PyErr_SetString(PyExc_RuntimeError,
				"tidepool: the KV operation is still running");
		return NULL;
	}
	return tpy_kvcall_result(&o->c, o->result);
}

static void kvop_dealloc(struct py_kvop *o)
{
	if (!o->done && o->op && o->k->po->pid == getpid()) {
		/* libpool may still write into the buffers: wait */
		if (kvop_wait_ms(o, -1) < 0)
			PyErr_Clear();
	}
	if (!o->done)
		TPY_LIST_REMOVE(o->k->pending, o);
	tpy_kvcall_free(&o->c);
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

PyTypeObject tpy_KVOpType = {
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
	bool sinks;
	ssize_t r;

	if (tpy_kv_usable(k) < 0)
		return NULL;
	if (tpy_kvcall_prepare(&c, kind, keys, vals,
			       kind == KVOP_GET ? TPY_BOUNCE_LATER
						: TPY_BOUNCE_NOW) < 0)
		return NULL;
	c.exact = exact;
	sinks = kv_get_sinks(&c);
	if (sinks && k->sink_skip) {
		k->sink_skip--; /* over the fabric lately: the pipeline */
		sinks = false;
	}
	if (sinks) {
		r = kv_get_sink(k, &c);
	} else if (kv_get_pipelines(&c)) {
		r = kv_get_pipelined(k, &c);
	} else {
		struct kvcall *cp = &c;

		if (kvcall_bounce(&c) < 0) {
			tpy_kvcall_free(&c);
			return NULL;
		}
		POOL_CALL(k->po, k->closed, r, kvcall_run(k->kv, cp));
		kvcall_commit(&c, r);
	}
	out = tpy_kvcall_result(&c, r);
	tpy_kvcall_free(&c);
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
		    !PyObject_HasAttr(o, tpy_str_is_cuda))
			continue;
		c = PyObject_GetAttr(o, tpy_str_is_cuda);
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

/* KV.put and KV.get_into: the GPU path when it applies, else the sync
 * call. */
static PyObject *kv_put_or_get(struct py_kv *k, enum kvop_kind kind,
			       PyObject *keys, PyObject *vals, PyObject *stream,
			       PyObject *gpu, bool exact)
{
	int g = kv_wants_gpu(vals, stream, gpu);

	if (g < 0)
		return NULL;
	if (g)
		return tpy_kv_gpu_call(k, kind, keys, vals, stream, gpu, exact);
	return kv_sync(k, kind, keys, vals, exact);
}

static PyObject *kv_put_py(struct py_kv *k, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "values", "stream", "gpu", NULL };
	PyObject *keys, *vals, *stream = Py_None, *gpu = Py_None;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$OO", kwlist, &keys,
					 &vals, &stream, &gpu))
		return NULL;
	return kv_put_or_get(k, KVOP_PUT, keys, vals, stream, gpu, true);
}

static PyObject *kv_get_into_py(struct py_kv *k, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {
		"keys", "bufs", "stream", "gpu", "exact", NULL
	};
	PyObject *keys, *vals, *stream = Py_None, *gpu = Py_None;
	int exact = 1;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$OOp", kwlist, &keys,
					 &vals, &stream, &gpu, &exact))
		return NULL;
	return kv_put_or_get(k, KVOP_GET, keys, vals, stream, gpu, exact);
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

	if (tpy_kv_usable(k) < 0)
		return NULL;
	tpy_pool_rdlock(k->po);
	fd = k->po->p && !k->closed ? pool_kv_eventfd(k->kv) : -EBADF;
	pthread_rwlock_unlock(&k->po->rw);
	if (fd < 0)
		return tpy_raise_call(fd, "KV", "kv eventfd");
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

	if (tpy_kv_usable(k) < 0)
		return NULL;
	tpy_pool_rdlock(k->po);
	r = k->po->p && !k->closed ? pool_kv_get_stats(k->kv, &st) : -EBADF;
	pthread_rwlock_unlock(&k->po->rw);
	if (r)
		return tpy_raise_call(r, "KV", "kv stats");
	return tpy_u64_dict(PyDict_New(), &st, kv_stats_fields);
}

/* KV.clear(): pool_kv_clear without the GIL. */
static PyObject *kv_clear_py(struct py_kv *k, PyObject *unused)
{
	int r;

	if (tpy_kv_usable(k) < 0)
		return NULL;
	POOL_CALL(k->po, k->closed, r, pool_kv_clear(k->kv));
	if (r)
		return tpy_raise_call(r, "KV", "kv clear");
	Py_RETURN_NONE;
}

/* Closes k (GIL held): libpool waits for its ops, then the pending op
 * objects learn they are over. */
void tpy_kv_do_close(struct py_kv *k)
{
	struct pool_kv *kv = k->kv;
	struct py_pool *po = k->po;

	if (k->closed)
		return;
	k->closed = true;
	if (k->gpu) {
		tpy_gpu_do_close(k->gpu);
		Py_CLEAR(k->gpu);
	}
	if (po->pid != getpid())
		return;
	tpy_pool_wrlock(po);
	if (po->p)
		pool_kv_close(kv);
	k->lib_closed = true;
	pthread_rwlock_unlock(&po->rw);
	while (k->pending)
		kvop_orphan(k->pending);
}

static PyObject *kv_close_py(struct py_kv *k, PyObject *unused)
{
	if (k->po->pid != getpid())
		return tpy_raise_forked("KV", k->po->pid);
	tpy_kv_do_close(k);
	Py_RETURN_NONE;
}

static void kv_dealloc(struct py_kv *k)
{
	/* pending ops hold references to k: none is left */
	if (k->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)k);
	if (!k->closed && k->po->pid == getpid())
		tpy_kv_do_close(k);
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

PyTypeObject tpy_KVType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tidepool._tidepool.KV",
	.tp_basicsize = sizeof(struct py_kv),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A KV handle (pool_kv_open).",
	.tp_dealloc = (destructor)kv_dealloc,
	.tp_weaklistoffset = offsetof(struct py_kv, weakrefs),
	.tp_methods = kv_methods,
	.tp_getset = kv_getset,
};
