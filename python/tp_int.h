/* SPDX-License-Identifier: MIT */
/*
 * python/tp_int.h - what the files of the CPython extension _tidepool
 * share: the types' structs, the locking macro and the functions one file
 * calls in another. Private to the files below.
 *
 * python/_tidepool.c  exceptions, module functions, PyInit__tidepool
 * python/tp_buffer.c  buffers, tensors, the bounce cache, stats dicts, keys
 * python/tp_pool.c    Pool, and closing a Pool's children
 * python/tp_region.c  Region
 * python/tp_map.c     Mapping
 * python/tp_kv.c      KV and KVOp
 * python/tp_gpu.c     GPU (and the KV GPU path), GPUXfer, GPUStream
 *
 * _tidepool is the CPython extension of the tidepool package: libpool's
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
 * for rw while holding the GIL (tpy_pool_rdlock, tpy_pool_wrlock, POOL_CALL):
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
#ifndef TP_PYTHON_TP_INT_H
#define TP_PYTHON_TP_INT_H

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

/* header-only, no symbol of libpool's internals */
#include "fabric/dlist.h"

/* Only PyInit__tidepool leaves the module (PyMODINIT_FUNC), whatever
 * the build's default visibility (setup.py does not set one). */
#pragma GCC visibility push(hidden)

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
 * once the call has completed (tpy_bufref_commit, GIL held); a
 * synchronous get of more bounced bytes than a chunk reads through
 * slots instead, copied out chunk by chunk (tpy_bufref_deliver; tp_kv.c
 * kv_get_pipelined). A CPU tensor
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

/*
 * A new object of one of the module's types, every field after the
 * object header zeroed (PyType_GenericAlloc): a constructor sets only the
 * fields that do not start as 0, NULL or false. Freed by PyObject_Free,
 * as PyObject_New's objects are.
 */
#define TPY_NEW(type, typeobj) ((type *)PyType_GenericAlloc(&(typeobj), 0))

/*
 * The doubly linked lists of the extension's objects (a KV's pending
 * ops, a GPU engine's streams): x has next and prev, head (an lvalue)
 * points at the first; the references are borrowed. GIL held. Both are
 * fabric/dlist.h's lists kept by their head, and evaluate their arguments
 * more than once: x must not be head itself. TPY_LIST_REMOVE leaves x
 * unlinked; on an x that is on no list it does nothing.
 */
#define TPY_LIST_PUSH(head, x) TP_DLIST_PUSH(head, x, prev, next)
#define TPY_LIST_REMOVE(head, x)                                               \
	do {                                                                   \
		if ((x)->prev || (head) == (x))                                \
			TP_DLIST_REMOVE(head, x, prev, next);                  \
	} while (0)

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

/* ------------------------------------------------------------------ */
/* KV                                                                   */

struct py_gpu;
struct py_kvop;

struct py_kv {
	PyObject_HEAD struct py_pool *po;
	struct pool_kv *kv;
	bool closed;
	bool lib_closed;	 /* pool_kv_close has run (set under rw) */
	struct py_kvop *pending; /* ops not yet complete (borrowed) */
	struct py_gpu *gpu;	 /* default engine of the GPU path */
	PyObject *weakrefs;
	/* sync tensor gets left to take the pipeline before the sink is
	 * tried again (tp_kv.c, kv_get_sink; GIL) */
	unsigned sink_skip;
};

enum kvop_kind {
	KVOP_PUT,
	KVOP_GET,
	KVOP_EXISTS,
	KVOP_DELETE,
	KVOP_PIN,
	KVOP_UNPIN,
};

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

/* python/_tidepool.c */
PyObject *tpy_raise_pool(int err, const char *what);
PyObject *tpy_raise_closed(const char *what);
PyObject *tpy_raise_call(int err, const char *handle, const char *what);
PyObject *tpy_raise_forked(const char *what, pid_t pid);

/* How a call's CPU tensors get their bounce buffers (tpy_bufs_get):
 * none (the GPU path), one block now, or later (a get that may be
 * pipelined: tp_kv.c kv_get_pipelined). */
enum tpy_bounce {
	TPY_BOUNCE_NONE,
	TPY_BOUNCE_NOW,
	TPY_BOUNCE_LATER,
};

/* python/tp_buffer.c */
int tpy_bounce_cache_env(void);
void *tpy_bounce_take(size_t need, size_t *cap);
void tpy_bounce_give(void *p, size_t cap);
void tpy_bounce_drain(void);
PyObject *tpy_u64_dict(PyObject *d, const void *st, const struct u64_field *f);
extern PyObject *tpy_str_data_ptr, *tpy_str_is_contiguous, *tpy_str_is_cuda,
	*tpy_str_numel, *tpy_str_element_size, *tpy_str_device, *tpy_str_index,
	*tpy_str_cuda_stream, *tpy_str_untyped_storage, *tpy_str__storage,
	*tpy_str_storage, *tpy_str_nbytes, *tpy_str_resizable,
	*tpy_str_is_shared;
void tpy_bufref_release(struct bufref *b);
int tpy_bufref_deliver(struct bufref *b, const void *src, size_t nbytes);
int tpy_bufref_commit(struct bufref *b, size_t nbytes);
bool tpy_bufref_where_is_native(const struct bufref *b);
#if PY_VERSION_HEX >= 0x030A0000
int tpy_bufref_where_native(struct bufref *b, size_t nbytes, char **p);
#endif
int tpy_bufref_get(PyObject *obj, bool writable, bool bounce, Py_ssize_t idx,
		   const char *what, struct bufref *b);
int tpy_bufs_bounce(struct bufref *bs, size_t n, bool writable);
int tpy_bufs_get(PyObject *seq, size_t n, bool writable, enum tpy_bounce bounce,
		 const char *what, struct bufref *bs);
void tpy_bufs_release(struct bufref *bs, size_t n);
struct pool_kv_key *tpy_keys_get(PyObject *obj, size_t *n);
PyObject *tpy_mod_bounce_stats(PyObject *self, PyObject *unused);

/* python/tp_pool.c */
int tpy_pool_usable(struct py_pool *po, const char *what);
void tpy_pool_rdlock(struct py_pool *po);
void tpy_pool_wrlock(struct py_pool *po);
void tpy_pool_do_close(struct py_pool *po);
int tpy_pool_add_child(struct py_pool *po, PyObject *child);
extern PyTypeObject tpy_PoolType;

/* python/tp_region.c */
int tpy_region_usable(struct py_region *rg);
PyObject *tpy_pool_alloc_py(struct py_pool *po, PyObject *args, PyObject *kw);
void tpy_region_do_free(struct py_region *rg);
extern PyTypeObject tpy_RegionType;

/* python/tp_map.c */
PyObject *tpy_pool_map_py(struct py_pool *po, PyObject *args, PyObject *kw);
extern PyTypeObject tpy_MapType;

/* python/tp_kv.c */
extern uint64_t tpy_pipe_calls, tpy_pipe_chunks, tpy_sink_calls; /* GIL */
void tpy_kvcall_free(struct kvcall *c);
int tpy_kvcall_prepare(struct kvcall *c, enum kvop_kind kind, PyObject *keys,
		       PyObject *vals, enum tpy_bounce bounce);
PyObject *tpy_mod_get_pipeline(PyObject *self, PyObject *args, PyObject *kw);
PyObject *tpy_mod_get_sink(PyObject *self, PyObject *args, PyObject *kw);
PyObject *tpy_kvcall_result(struct kvcall *c, ssize_t r);
int tpy_kv_usable(struct py_kv *k);
PyObject *tpy_pool_kv_py(struct py_pool *po, PyObject *args, PyObject *kw);
extern PyTypeObject tpy_KVOpType;
void tpy_kv_do_close(struct py_kv *k);
extern PyTypeObject tpy_KVType;

/* python/tp_gpu.c */
PyObject *tpy_pool_gpu_py(struct py_pool *po, PyObject *args, PyObject *kw);
void tpy_gpu_do_close(struct py_gpu *gp);
PyObject *tpy_kv_gpu_call(struct py_kv *k, enum kvop_kind kind, PyObject *keys,
			  PyObject *vals, PyObject *stream, PyObject *gpu,
			  bool exact);
extern PyTypeObject tpy_GPUXferType;
extern PyTypeObject tpy_GPUType;
extern PyTypeObject tpy_GPUStreamType;

#pragma GCC visibility pop

#endif
