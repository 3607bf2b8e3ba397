/* SPDX-License-Identifier: MIT */
/*
 * python/tp_region.c - the Region type (pool_alloc) and its reads and
 * writes. What the files share: python/tp_int.h.
 */
#include "tp_int.h"

int tpy_region_usable(struct py_region *rg)
{
	if (tpy_pool_usable(rg->po, "Region's Pool") < 0)
		return -1;
	if (rg->freed) {
		tpy_raise_closed("Region (freed)");
		return -1;
	}
	return 0;
}

PyObject *tpy_pool_alloc_py(struct py_pool *po, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "nbytes", "node", "replica", NULL };
	unsigned long long nbytes;
	int node = -1, replica = 0, r;
	struct pool_region *reg = NULL;
	struct py_region *rg;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "K|$ip", kwlist, &nbytes,
					 &node, &replica))
		return NULL;
	if (tpy_pool_usable(po, "Pool") < 0)
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
		return tpy_raise_call(r, "Pool", what);
	}
	rg = TPY_NEW(struct py_region, tpy_RegionType);
	if (!rg) {
		POOL_CALL(po, false, r, pool_free(p, reg));
		return NULL;
	}
	Py_INCREF(po);
	rg->po = po;
	rg->r = reg;
	rg->size = pool_region_size(reg);
	rg->node = pool_region_node(reg);
	if (tpy_pool_add_child(po, (PyObject *)rg) < 0) {
		Py_DECREF(rg);
		return NULL;
	}
	return (PyObject *)rg;
}

/* Frees rg's region (with the GIL). */
void tpy_region_do_free(struct py_region *rg)
{
	struct py_pool *po = rg->po;
	int r;

	if (rg->freed)
		return;
	rg->freed = true;
	if (po->pid != getpid())
		return;
	tpy_pool_wrlock(po);
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
		return tpy_raise_forked("Region", rg->po->pid);
	if (rg->mapped) {
		PyErr_SetString(PyExc_BufferError,
				"tidepool: the region is mapped (a Mapping or "
				"a pooled tensor uses it); it is freed with "
				"the mapping");
		return NULL;
	}
	tpy_region_do_free(rg);
	Py_RETURN_NONE;
}

static void region_dealloc(struct py_region *rg)
{
	if (rg->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)rg);
	if (!rg->freed && rg->po->p && !rg->po->closed)
		tpy_region_do_free(rg);
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
	if (tpy_region_usable(rg) < 0)
		return NULL;
	if (tpy_bufref_get(obj, !write, true, 0, "buf", &b) < 0)
		return NULL;
	if (b.is_cuda) {
		tpy_bufref_release(&b);
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
		tpy_bufref_release(&b);
		return NULL;
	}
	if (write)
		POOL_CALL(rg->po, rg->freed, r,
			  pool_write(p, rg->r, off, b.ptr, b.len));
	else
		POOL_CALL(rg->po, rg->freed, r,
			  pool_read(p, rg->r, off, b.ptr, b.len));
	if (!write && !r && tpy_bufref_commit(&b, b.len) < 0) {
		tpy_bufref_release(&b);
		PyErr_SetString(PyExc_BufferError,
				"tidepool: buf's storage was shrunk during "
				"the read; nothing was delivered");
		return NULL;
	}
	tpy_bufref_release(&b);
	if (r)
		return tpy_raise_call(r, "Region",
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
	if (tpy_region_usable(rg) < 0)
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
		return tpy_raise_call(r, "Region", "region read");
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

PyTypeObject tpy_RegionType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tidepool._tidepool.Region",
	.tp_basicsize = sizeof(struct py_region),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A region of the pool (pool_alloc).",
	.tp_dealloc = (destructor)region_dealloc,
	.tp_weaklistoffset = offsetof(struct py_region, weakrefs),
	.tp_methods = region_methods,
	.tp_getset = region_getset,
};
