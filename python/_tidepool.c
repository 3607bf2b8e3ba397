/* SPDX-License-Identifier: MIT */
/*
 * python/_tidepool.c - the module: its exceptions, its functions
 * (prefix_keys, strerror, gpu_probe, _bounce_stats) and PyInit__tidepool.
 * What the files share: python/tp_int.h.
 */
#include "tp_int.h"

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
PyObject *tpy_raise_pool(int err, const char *what)
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

PyObject *tpy_raise_closed(const char *what)
{
	PyErr_Format(ClosedError, "tidepool: %s is closed", what);
	return NULL;
}

/*
 * A failed call on a handle: -EBADF is the lock check (or libpool)
 * finding `handle` closed, anything else libpool's error doing `what`.
 * Returns NULL.
 */
PyObject *tpy_raise_call(int err, const char *handle, const char *what)
{
	if (err == -EBADF)
		return tpy_raise_closed(handle);
	return tpy_raise_pool(err, what);
}

PyObject *tpy_raise_forked(const char *what, pid_t pid)
{
	PyErr_Format(ForkError,
		     "tidepool: this %s was opened in process %d; a fork()ed "
		     "child cannot use it (open a new one in the child)",
		     what, (int)pid);
	return NULL;
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
		return tpy_raise_pool((int)r, "prefix keys");
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

static void mod_free(void *m)
{
	(void)m;
	tpy_bounce_drain();
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
	{ "_bounce_stats", tpy_mod_bounce_stats, METH_NOARGS,
	  "_bounce_stats() -> the tensor bounce block cache's counters" },
	{ "_get_pipeline", (PyCFunction)(void (*)(void))tpy_mod_get_pipeline,
	  METH_VARARGS | METH_KEYWORDS,
	  "_get_pipeline(chunk_bytes=None, depth=None) -> (chunk_bytes, "
	  "depth): the pipelined tensor get's settings, set when given" },
	{ "_get_sink", (PyCFunction)(void (*)(void))tpy_mod_get_sink,
	  METH_VARARGS | METH_KEYWORDS,
	  "_get_sink(enabled=None, hook=None, at=0) -> enabled: whether sync "
	  "tensor gets copy straight into the tensors (tests, benchmarks)" },
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

/*
 * The module's exceptions, PoolError first: the others that are
 * PoolErrors derive from it and from the builtin that fits their errno.
 */
static const struct exc_def {
	PyObject **exc;
	const char *name; /* tidepool.<name>, and the module's attribute */
	PyObject **builtin;
	bool pool_error; /* a PoolError too */
	const char *doc;
} exc_defs[] = {
	{ &PoolError, "PoolError", &PyExc_OSError, false,
	  "A libpool failure: errno and pool_strerror text." },
	{ &PoolConnectionError, "PoolConnectionError", &PyExc_ConnectionError,
	  true,
	  "The pool (memd, a donor, the session) is unreachable or lost." },
	{ &PoolPermissionError, "PoolPermissionError", &PyExc_PermissionError,
	  true, "Authentication failed or not allowed (EACCES, EPERM)." },
	{ &PoolCapacityError, "PoolCapacityError", &PyExc_MemoryError, true,
	  "The pool or the tenant's quota is full (ENOSPC, EDQUOT)." },
	{ &PoolTimeoutError, "PoolTimeoutError", &PyExc_TimeoutError, true,
	  "memd or a transfer did not answer in time." },
	{ &PoolFileNotFoundError, "PoolFileNotFoundError",
	  &PyExc_FileNotFoundError, true,
	  "A file (the tenant's secret) does not exist." },
	{ &ClosedError, "ClosedError", &PyExc_ValueError, false,
	  "An operation on a closed handle." },
	{ &ForkError, "ForkError", &PyExc_RuntimeError, false,
	  "A handle of another process (before fork())." },
};

/* Creates exc_defs' exceptions and adds them to m: 0, or -1 (raised). */
static int add_exceptions(PyObject *m)
{
	for (size_t i = 0; i < sizeof(exc_defs) / sizeof(exc_defs[0]); i++) {
		const struct exc_def *d = &exc_defs[i];
		char full[96];
		PyObject *bases;

		bases = d->pool_error
				? Py_BuildValue("(OO)", PoolError, *d->builtin)
				: Py_BuildValue("(O)", *d->builtin);
		if (!bases)
			return -1;
		snprintf(full, sizeof(full), "tidepool.%s", d->name);
		*d->exc = PyErr_NewExceptionWithDoc(full, d->doc, bases, NULL);
		Py_DECREF(bases);
		if (!*d->exc || PyModule_AddObjectRef(m, d->name, *d->exc) < 0)
			return -1;
	}
	return 0;
}

PyMODINIT_FUNC PyInit__tidepool(void);
PyMODINIT_FUNC PyInit__tidepool(void)
{
	PyObject *m;
	PyTypeObject *types[] = { &tpy_PoolType,      &tpy_RegionType,
				  &tpy_MapType,	      &tpy_KVType,
				  &tpy_KVOpType,      &tpy_GPUType,
				  &tpy_GPUStreamType, &tpy_GPUXferType };

	tpy_str_data_ptr = PyUnicode_InternFromString("data_ptr");
	tpy_str_untyped_storage = PyUnicode_InternFromString("untyped_storage");
	tpy_str__storage = PyUnicode_InternFromString("_storage");
	tpy_str_storage = PyUnicode_InternFromString("storage");
	tpy_str_nbytes = PyUnicode_InternFromString("nbytes");
	tpy_str_resizable = PyUnicode_InternFromString("resizable");
	tpy_str_is_shared = PyUnicode_InternFromString("is_shared");
	tpy_str_is_contiguous = PyUnicode_InternFromString("is_contiguous");
	tpy_str_is_cuda = PyUnicode_InternFromString("is_cuda");
	tpy_str_numel = PyUnicode_InternFromString("numel");
	tpy_str_element_size = PyUnicode_InternFromString("element_size");
	tpy_str_device = PyUnicode_InternFromString("device");
	tpy_str_index = PyUnicode_InternFromString("index");
	tpy_str_cuda_stream = PyUnicode_InternFromString("cuda_stream");
	if (!tpy_str_data_ptr || !tpy_str_untyped_storage ||
	    !tpy_str__storage || !tpy_str_storage || !tpy_str_nbytes ||
	    !tpy_str_is_contiguous || !tpy_str_is_cuda || !tpy_str_numel ||
	    !tpy_str_element_size || !tpy_str_device || !tpy_str_index ||
	    !tpy_str_cuda_stream || !tpy_str_resizable || !tpy_str_is_shared)
		return NULL;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (PyType_Ready(types[i]) < 0)
			return NULL;
	if (tpy_bounce_cache_env() < 0)
		return NULL;
	m = PyModule_Create(&moddef);
	if (!m)
		return NULL;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		const char *dot = strrchr(types[i]->tp_name, '.');

		if (PyModule_AddObjectRef(m, dot + 1, (PyObject *)types[i]) < 0)
			goto fail;
	}
	if (add_exceptions(m) < 0)
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
