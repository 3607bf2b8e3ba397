/* SPDX-License-Identifier: MIT */
/*
 * python/tp_map.c - the Mapping type: pool_map() memory through the buffer
 * protocol. What the files share: python/tp_int.h.
 */
#include "tp_int.h"

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

PyObject *tpy_pool_map_py(struct py_pool *po, PyObject *args, PyObject *kw)
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
					 &tpy_RegionType, &rg, &local,
					 &existing, &huge, &owns))
		return NULL;
	if (tpy_pool_usable(po, "Pool") < 0 || tpy_region_usable(rg) < 0)
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
		return tpy_raise_call(r, "Pool", "map");
	m = TPY_NEW(struct py_map, tpy_MapType);
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
		tpy_region_do_free(m->rg);
	Py_DECREF(m->rg);
	if (--po->nmaps == 0 && po->close_pending) {
		po->close_pending = false;
		tpy_pool_do_close(po);
	}
	Py_DECREF(po);
	PyObject_Free(m);
}

static int map_getbuffer(struct py_map *m, Py_buffer *view, int flags)
{
	if (m->po->pid != getpid()) {
		tpy_raise_forked("Mapping", m->po->pid);
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

PyTypeObject tpy_MapType = {
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
