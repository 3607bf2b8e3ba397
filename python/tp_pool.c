/* SPDX-License-Identifier: MIT */
/*
 * python/tp_pool.c - the Pool type (a session) and the closing of its
 * children. What the files share: python/tp_int.h.
 */
#include "tp_int.h"

/* Checks, with the GIL, that po may be used from this process. */
int tpy_pool_usable(struct py_pool *po, const char *what)
{
	if (po->pid != getpid()) {
		tpy_raise_forked(what, po->pid);
		return -1;
	}
	if (po->closed) {
		tpy_raise_closed(what);
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
void tpy_pool_rdlock(struct py_pool *po)
{
	if (pthread_rwlock_tryrdlock(&po->rw) == 0)
		return;
	Py_BEGIN_ALLOW_THREADS pthread_rwlock_rdlock(&po->rw);
	Py_END_ALLOW_THREADS
}

/* rw for writing (closing), waited for without the GIL. */
void tpy_pool_wrlock(struct py_pool *po)
{
	Py_BEGIN_ALLOW_THREADS pthread_rwlock_wrlock(&po->rw);
	Py_END_ALLOW_THREADS
}

/* The real pool_close; with the GIL, not holding rw. */
void tpy_pool_do_close(struct py_pool *po)
{
	struct pool *p;

	tpy_pool_wrlock(po);
	p = po->p;
	po->p = NULL;
	pthread_rwlock_unlock(&po->rw);
	if (p) {
		Py_BEGIN_ALLOW_THREADS pool_close(p);
		Py_END_ALLOW_THREADS
	}
}

int tpy_pool_add_child(struct py_pool *po, PyObject *child)
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
		tpy_raise_pool(r, what);
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
		return tpy_raise_forked("Pool", po->pid);
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
				if ((pass == 0) ==
				    (Py_TYPE(c) == &tpy_GPUType)) {
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
		tpy_pool_do_close(po);
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

	if (tpy_pool_usable(po, "Pool") < 0)
		return NULL;
	tpy_pool_rdlock(po); /* pool_get_stats does not block */
	r = po->p ? pool_get_stats(po->p, &st) : -EBADF;
	pthread_rwlock_unlock(&po->rw);
	if (r)
		return tpy_raise_call(r, "Pool", "stats");
	return tpy_u64_dict(PyDict_New(), &st, pool_stats_fields);
}

/* Pool.memds(): pool_get_status as a list of dicts. */
static PyObject *pool_memds_py(struct py_pool *po, PyObject *unused)
{
	struct pool_memd_status *st;
	size_t max = 64;
	PyObject *out;
	ssize_t n;

	if (tpy_pool_usable(po, "Pool") < 0)
		return NULL;
	st = PyMem_Calloc(max, sizeof(*st));
	if (!st)
		return PyErr_NoMemory();
	POOL_CALL(po, false, n, pool_get_status(p, st, max));
	if (n < 0) {
		PyMem_Free(st);
		return tpy_raise_call((int)n, "Pool", "status");
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
	{ "alloc", (PyCFunction)(void (*)(void))tpy_pool_alloc_py,
	  METH_VARARGS | METH_KEYWORDS,
	  "alloc(nbytes, *, node=-1, replica=False) -> Region" },
	{ "map", (PyCFunction)(void (*)(void))tpy_pool_map_py,
	  METH_VARARGS | METH_KEYWORDS,
	  "map(region, local_bytes=0, *, existing=False, huge=None) -> "
	  "Mapping" },
	{ "kv", (PyCFunction)(void (*)(void))tpy_pool_kv_py,
	  METH_VARARGS | METH_KEYWORDS,
	  "kv(replicas=1, *, nthreads=0, refresh_ms=0, lease_ms=0, "
	  "prefill_tokens_per_s=0, bytes_per_token=0) -> KV" },
	{ "gpu", (PyCFunction)(void (*)(void))tpy_pool_gpu_py,
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

PyTypeObject tpy_PoolType = {
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
/* closing children of a Pool                                           */

static void child_close(PyObject *c)
{
	if (Py_TYPE(c) == &tpy_GPUType)
		tpy_gpu_do_close((struct py_gpu *)c);
	else if (Py_TYPE(c) == &tpy_KVType)
		tpy_kv_do_close((struct py_kv *)c);
	else if (Py_TYPE(c) == &tpy_RegionType) {
		struct py_region *rg = (struct py_region *)c;

		if (!rg->mapped)
			tpy_region_do_free(rg);
	}
}
