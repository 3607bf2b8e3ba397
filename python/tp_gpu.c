/* SPDX-License-Identifier: MIT */
/*
 * python/tp_gpu.c - the GPU type (a pool_gpu engine), its pinned staging,
 * the KV GPU path, GPUXfer (a region <-> device transfer) and GPUStream.
 * What the files share: python/tp_int.h.
 */
#include "tp_int.h"

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
/* GPU                                                                  */

static int gpu_usable(struct py_gpu *gp)
{
	if (tpy_pool_usable(gp->po, "GPU's Pool") < 0)
		return -1;
	if (gp->closed) {
		tpy_raise_closed("GPU engine");
		return -1;
	}
	return 0;
}

PyObject *tpy_pool_gpu_py(struct py_pool *po, PyObject *args, PyObject *kw)
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
	if (tpy_pool_usable(po, "Pool") < 0)
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
		return tpy_raise_call(r, "Pool", "gpu open");
	gp = TPY_NEW(struct py_gpu, tpy_GPUType);
	if (!gp) {
		pool_gpu_close(g);
		return NULL;
	}
	Py_INCREF(po);
	gp->po = po;
	gp->g = g;
	pool_gpu_get_stats(g, &st);
	gp->backend = st.backend;
	gp->device = device;
	pthread_mutex_init(&gp->stage_lock, NULL);
	if (tpy_pool_add_child(po, (PyObject *)gp) < 0) {
		Py_DECREF(gp);
		return NULL;
	}
	return (PyObject *)gp;
}

/* Closes gp (GIL held): streams, staging, then the engine. */
void tpy_gpu_do_close(struct py_gpu *gp)
{
	struct pool_gpu *g = gp->g;

	if (gp->closed)
		return;
	gp->closed = true;
	if (gp->po->pid != getpid())
		return;
	tpy_pool_wrlock(gp->po);
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
	while (gp->streams) {
		struct py_gstream *s = gp->streams;

		TPY_LIST_REMOVE(gp->streams, s);
	}
	gp->g = NULL;
}

static PyObject *gpu_close_py(struct py_gpu *gp, PyObject *unused)
{
	if (gp->po->pid != getpid())
		return tpy_raise_forked("GPU engine", gp->po->pid);
	tpy_gpu_do_close(gp);
	Py_RETURN_NONE;
}

static void gpu_dealloc(struct py_gpu *gp)
{
	if (gp->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)gp);
	if (!gp->closed && gp->po->pid == getpid())
		tpy_gpu_do_close(gp);
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
		return tpy_raise_call(r, "GPU engine", "gpu stream");
	s = TPY_NEW(struct py_gstream, tpy_GPUStreamType);
	if (!s) {
		pool_gpu_stream_destroy(gp->g, stream);
		return NULL;
	}
	Py_INCREF(gp);
	s->gpu = gp;
	s->s = stream;
	TPY_LIST_PUSH(gp->streams, s);
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
	tpy_pool_rdlock(gp->po);
	r = gp->closed ? -EBADF : pool_gpu_get_stats(gp->g, &st);
	pthread_rwlock_unlock(&gp->po->rw);
	if (r)
		return tpy_raise_call(r, "GPU engine", "gpu stats");
	return tpy_u64_dict(
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
	if (Py_TYPE(obj) == &tpy_GPUStreamType) {
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
	v = PyObject_GetAttr(obj, tpy_str_cuda_stream);
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

PyObject *tpy_kv_gpu_call(struct py_kv *k, enum kvop_kind kind, PyObject *keys,
			  PyObject *vals, PyObject *stream, PyObject *gpu,
			  bool exact)
{
	struct py_gpu *gp;
	struct kvcall c;
	void *s = NULL;
	PyObject *out;
	ssize_t r;

	if (tpy_kv_usable(k) < 0)
		return NULL;
	if (tpy_kvcall_prepare(&c, kind, keys, vals, TPY_BOUNCE_NONE) < 0)
		return NULL;
	c.exact = exact;
	if (gpu != Py_None) {
		if (Py_TYPE(gpu) != &tpy_GPUType) {
			tpy_kvcall_free(&c);
			PyErr_Format(PyExc_TypeError,
				     "tidepool: gpu must be a GPU engine "
				     "(Pool.gpu()), not %s",
				     Py_TYPE(gpu)->tp_name);
			return NULL;
		}
		gp = (struct py_gpu *)gpu;
		if (gp->po != k->po) {
			tpy_kvcall_free(&c);
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
			g = a ? tpy_pool_gpu_py(k->po, a, kw) : NULL;
			Py_XDECREF(a);
			if (!g) {
				tpy_kvcall_free(&c);
				return NULL;
			}
			k->gpu = (struct py_gpu *)g;
		}
		gp = k->gpu;
	}
	if (gpu_usable(gp) < 0 || stream_arg(gp, stream, &s) < 0) {
		tpy_kvcall_free(&c);
		return NULL;
	}
	if (gp->backend == POOL_GPU_CUDA) {
		for (size_t i = 0; i < c.n; i++)
			if (!c.bufs[i].is_cuda) {
				tpy_kvcall_free(&c);
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
				tpy_kvcall_free(&c);
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
	out = tpy_kvcall_result(&c, r);
	tpy_kvcall_free(&c);
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

static PyObject *gpu_xfer_start(struct py_gpu *gp, PyObject *args, bool fetch)
{
	struct py_region *rg;
	unsigned long long off;
	PyObject *dev, *stream = Py_None;
	struct pool_gpu_xfer *x = NULL;
	struct py_gxfer *gx;
	void *s;
	int r;

	if (!PyArg_ParseTuple(args, "O!KO|O", &tpy_RegionType, &rg, &off, &dev,
			      &stream))
		return NULL;
	if (gpu_usable(gp) < 0 || tpy_region_usable(rg) < 0)
		return NULL;
	if (stream_arg(gp, stream, &s) < 0)
		return NULL;
	gx = TPY_NEW(struct py_gxfer, tpy_GPUXferType);
	if (!gx)
		return NULL;
	Py_INCREF(gp);
	Py_INCREF(rg);
	gx->gp = gp;
	gx->rg = rg;
	if (tpy_bufref_get(dev, fetch, false, 0, fetch ? "dst" : "src",
			   &gx->dev) < 0) {
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
		return tpy_raise_call(r, "GPU engine",
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
			return tpy_raise_forked("GPU transfer",
						gx->gp->po->pid);
		POOL_CALL(gx->gp->po, gx->gp->closed, r,
			  pool_gpu_xfer_wait(x, timeout_ms));
		if (r == -ETIMEDOUT)
			Py_RETURN_FALSE;
		gx->x = NULL;
		gx->result = r == -EBADF ? -ECANCELED : r;
		tpy_bufref_release(&gx->dev);
	}
	if (gx->result)
		return tpy_raise_pool(gx->result, "gpu transfer");
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
	tpy_bufref_release(&gx->dev);
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

PyTypeObject tpy_GPUXferType = {
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

PyTypeObject tpy_GPUType = {
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
		return tpy_raise_closed("GPUStream");
	{
		void *st = s->s;

		POOL_CALL(gp->po, gp->closed, r,
			  pool_gpu_stream_sync(gp->g, st, timeout_ms));
	}
	if (r)
		return tpy_raise_call(r, "GPU engine", "stream synchronize");
	Py_RETURN_NONE;
}

static void gstream_do_close(struct py_gstream *s)
{
	struct py_gpu *gp = s->gpu;

	if (!s->s)
		return;
	if (gp->po->pid == getpid() && !gp->closed) {
		void *st = s->s;

		tpy_pool_wrlock(gp->po);
		if (!gp->closed) {
			Py_BEGIN_ALLOW_THREADS pool_gpu_stream_sync(gp->g, st,
								    10000);
			pool_gpu_stream_destroy(gp->g, st);
			Py_END_ALLOW_THREADS
		}
		pthread_rwlock_unlock(&gp->po->rw);
	}
	s->s = NULL;
	TPY_LIST_REMOVE(s->gpu->streams, s);
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

PyTypeObject tpy_GPUStreamType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tidepool._tidepool.GPUStream",
	.tp_basicsize = sizeof(struct py_gstream),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A stream of a GPU engine's backend.",
	.tp_dealloc = (destructor)gstream_dealloc,
	.tp_methods = gstream_methods,
};
