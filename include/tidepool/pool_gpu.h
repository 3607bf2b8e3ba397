/* SPDX-License-Identifier: MIT */
/*
 * tidepool/pool_gpu.h - GPU prefetch: moving pooled bytes into device
 * memory (fetch) and back (store), asynchronously, with CUDA streams and
 * events.
 *
 * A struct pool_gpu (an "engine") binds one pool session to one device.
 * It owns a ring of pinned host staging buffers, a copy stream and one
 * worker thread ("pool-gpu") that runs the pipeline:
 *
 *   fetch:  RMA read of chunk k into staging buffer k % N  (the fabric)
 *           then copy of that buffer to the device         (PCIe, H2D)
 *   store:  copy of chunk k from the device into a buffer  (PCIe, D2H)
 *           then RMA write of that buffer into the pool    (the fabric)
 *
 * A buffer is reused only after its copy has completed, so with N >= 2
 * buffers the fabric moves chunk k+1 while PCIe moves chunk k.
 *
 * Direct path: when the session's fabric provider reports FI_HMEM (it
 * can read and write device memory itself: GPUDirect RDMA), a transfer
 * skips the staging buffers: one RMA per chunk straight between the pool
 * and dev_ptr (pool_gpu_opts.direct, stats.direct).
 *
 * NUMA: the staging buffers are allocated on the NUMA node of the
 * device's PCI bus id and the worker thread runs on that node's CPUs
 * (pool_gpu_opts.numa_node; TIDEPOOL_GPU_NODE overrides the node hwloc
 * reports).
 *
 * Backends: POOL_GPU_CUDA uses the CUDA runtime, which libpool loads at
 * run time (dlopen of libcudart.so.13, else libcudart.so; LIBPOOL_CUDART
 * names another file): libpool has no link-time CUDA dependency and runs
 * on hosts without CUDA. POOL_GPU_HOST runs the same pipeline with
 * ordinary host memory standing in for device memory and a thread per
 * "host stream" standing in for the GPU's copy engines; it is what CI
 * tests, and must be asked for by name. POOL_GPU_AUTO picks CUDA when a
 * device is usable and fails with -ENODEV otherwise.
 *
 * Streams and events are passed as void *: a cudaStream_t / cudaEvent_t
 * for the CUDA backend, an opaque host stream / host event for the host
 * backend. NULL as a stream means the CUDA legacy default stream, or the
 * host backend's default stream.
 *
 * STREAM SEMANTICS (both backends; see libpool(3), GPU PREFETCH):
 *  - pool_gpu_fetch() and pool_gpu_store() record an event on `stream`
 *    in the calling thread before they return. The transfer's first device
 *    copy starts only after every piece of work enqueued on `stream`
 *    before the call has completed: a fetch never overwrites dev_ptr
 *    under earlier kernels that still read it, and a store copies what
 *    earlier work on `stream` wrote. The fabric side starts at once
 *    (direct path: after that work too).
 *  - Nothing else is enqueued on `stream`. The copies run on the engine's
 *    own copy stream, in chunk order; the transfers of one engine are
 *    started in the order they were submitted.
 *  - Work enqueued on `stream` (or any stream) after the call is not
 *    ordered after the transfer. To order it, take the transfer's event
 *    with pool_gpu_xfer_event() and make the stream wait on it
 *    (cudaStreamWaitEvent or pool_gpu_stream_wait_event), or wait on the
 *    host with pool_gpu_xfer_wait().
 *  - dev_ptr holds the fetched bytes once the event has completed (on the
 *    device), or once pool_gpu_xfer_wait() / pool_gpu_xfer_test() report
 *    completion with 0 (on the host). A store's event completes when the
 *    device bytes have been copied out (dev_ptr may then be overwritten);
 *    the bytes are in the pool when the transfer completes with 0.
 *
 * Errors: negative errno values (pool_strerror() has text for them).
 * Every stage of a chunk (one RMA, one device copy) is bounded by the
 * engine's timeout (a stage past it fails the transfer with -ETIME); a
 * lost session turns into -ENOTCONN. The only wait without a bound is the
 * wait for work the caller enqueued on `stream` before the call.
 *
 * Threads: an engine may be used from any number of threads at once,
 * except pool_gpu_close(). A struct pool_gpu_xfer is used by one thread
 * at a time. The session must stay open while an engine is open on it.
 */
#ifndef TIDEPOOL_POOL_GPU_H
#define TIDEPOOL_POOL_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "tidepool/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

struct pool_gpu;
struct pool_gpu_xfer;

enum pool_gpu_backend {
	POOL_GPU_AUTO = 0, /* CUDA when a device is usable, else -ENODEV */
	POOL_GPU_CUDA = 1, /* the CUDA runtime, loaded at run time */
	POOL_GPU_HOST = 2, /* host memory as "device" memory (tests, CI) */
};

/* Limits of struct pool_gpu_opts. */
#define POOL_GPU_STAGING_MIN 4096u
#define POOL_GPU_STAGING_MAX (1u << 30)
#define POOL_GPU_COUNT_MIN 2u
#define POOL_GPU_COUNT_MAX 64u

/* pool_gpu_opts.numa_node, besides a node number >= 0 */
#define POOL_GPU_NUMA_AUTO (-1) /* the device's node (the default) */
#define POOL_GPU_NUMA_OFF (-2)	/* no placement: the OS decides */

/* pool_gpu_opts.direct */
#define POOL_GPU_DIRECT_AUTO 0 /* direct when the provider has FI_HMEM */
#define POOL_GPU_DIRECT_OFF 1  /* always through the staging ring */
#define POOL_GPU_DIRECT_ON 2   /* direct, or pool_gpu_open() fails */

struct pool_gpu_opts {
	enum pool_gpu_backend backend; /* default POOL_GPU_AUTO */
	int device; /* device ordinal (cudaSetDevice); default 0 */
	/* Bytes per staging buffer, POOL_GPU_STAGING_MIN ..
	 * POOL_GPU_STAGING_MAX; 0: 4 MiB. One chunk fills one buffer. */
	size_t staging_bytes;
	/* Staging buffers, POOL_GPU_COUNT_MIN .. POOL_GPU_COUNT_MAX; 0: 4. */
	unsigned staging_count;
	/* NUMA node of the staging buffers and the worker thread.
	 * POOL_GPU_NUMA_AUTO (pool_gpu_opts_init()): the node of the
	 * device's PCI bus id in this host's hwloc topology, or what
	 * TIDEPOOL_GPU_NODE says for it; when that is unknown, or the host
	 * has one node, nothing is placed (logged at LIBPOOL_LOG=info).
	 * POOL_GPU_NUMA_OFF: nothing is placed. A node >= 0: that node, for
	 * machines that misreport locality (-ENXIO if it does not exist). */
	int numa_node;
	/* Bound on each stage of a chunk (one RMA, one device copy), ms;
	 * 0: 5000 (libpool's default session timeout). */
	int timeout_ms;
	/* PCI bus id to place by ("0000:3b:00.0"); "" (default): the
	 * device's own (CUDA: cudaDeviceGetPCIBusId; the host backend has
	 * none). For a runtime that reports a wrong id, or to give the host
	 * backend a position in a topology. */
	char pci_bus_id[20];
	/* hwloc XML export to place by instead of this host (NULL, the
	 * default: this host, or $HWLOC_XMLFILE). The placement is then
	 * computed and reported (stats) but not applied: nothing binds to
	 * another machine's nodes. For tests and what-if. */
	const char *topology_xml;
	/* POOL_GPU_DIRECT_*: RMA straight into device memory, no staging,
	 * when the session's provider reports FI_HMEM. Default AUTO. */
	int direct;
};

/* Fills *o with the defaults (numa_node = POOL_GPU_NUMA_AUTO, everything
 * else 0). Use it rather than zeroing: a zeroed numa_node means node 0. */
POOL_API void pool_gpu_opts_init(struct pool_gpu_opts *o);

/*
 * Says whether a backend can run here. Returns the number of devices
 * (>= 1), or
 *   -EOPNOTSUPP  POOL_GPU_CUDA: this libpool was built without CUDA
 *   -ENOENT      POOL_GPU_CUDA: the CUDA runtime library is not found
 *   -ENODEV      no usable device (none, or no/too old a driver)
 *   -EINVAL      not a backend
 * POOL_GPU_HOST always has 1 device; POOL_GPU_AUTO answers for CUDA but
 * returns -ENODEV for every failure. Thread-safe.
 */
POOL_API int pool_gpu_probe(enum pool_gpu_backend backend);

/*
 * Opens an engine on session p with opts (NULL: pool_gpu_opts_init()
 * defaults): the backend, device, staging ring, copy stream and worker
 * thread. Returns 0 and *out, or
 *   -EINVAL     p or out is NULL, an option is out of range or
 *               malformed (pci_bus_id), or TIDEPOOL_GPU_NODE is malformed
 *   -ENXIO      numa_node (or TIDEPOOL_GPU_NODE) names no node here
 *   -ENOENT     topology_xml does not exist (other -errno: not loadable)
 *   -EOPNOTSUPP direct is POOL_GPU_DIRECT_ON and the provider lacks
 *               FI_HMEM
 *   -ENODEV     no such device, or no usable device (AUTO, CUDA)
 *   -ENOENT     POOL_GPU_CUDA: the CUDA runtime library is not found
 *   -EOPNOTSUPP POOL_GPU_CUDA: built without CUDA
 *   -ENOMEM     staging buffers or bookkeeping could not be allocated
 *   -EAGAIN     a thread could not be created
 *   -EIO        the CUDA runtime failed otherwise
 * An explicit numa_node that cannot be applied on this host (memory not
 * bindable there, no usable CPU of it) fails too, with that -errno;
 * placement by POOL_GPU_NUMA_AUTO that fails is logged and skipped.
 * On failure *out is NULL.
 */
POOL_API int pool_gpu_open(struct pool *p, const struct pool_gpu_opts *opts,
			   struct pool_gpu **out);

/*
 * Closes the engine: transfers not yet complete are cancelled and
 * settled (no copy or RMA of theirs runs after this returns), the worker
 * is joined, and everything is freed. Handles not yet waited for are
 * freed too and must not be used afterwards. Must not run concurrently
 * with other calls on g; close it before pool_close() of its session.
 * NULL is a no-op.
 */
POOL_API void pool_gpu_close(struct pool_gpu *g);

/*
 * Starts a transfer of len bytes between [off, off+len) of region r and
 * device memory at dev_ptr: pool_gpu_fetch() pool -> device,
 * pool_gpu_store() device -> pool. See STREAM SEMANTICS above for stream.
 * Returns 0 and *x (wait for it with pool_gpu_xfer_wait()), or
 *   -EINVAL   g, r or x is NULL, dev_ptr is NULL with len > 0, or
 *             dev_ptr + len wraps around
 *   -ERANGE   [off, off+len) is outside the region
 *   -ENOMEM   out of memory
 *   -EIO / -errno  recording the start event on stream failed
 * Errors of the transfer itself (-ENOTCONN, -EIO, -ETIME, ...) come
 * from pool_gpu_xfer_wait(). On failure *x is NULL. len may be 0.
 * dev_ptr, r and the session must stay valid until the transfer is
 * complete. Thread-safe.
 */
POOL_API int pool_gpu_fetch(struct pool_gpu *g, struct pool_region *r,
			    uint64_t off, void *dev_ptr, size_t len,
			    void *stream, struct pool_gpu_xfer **x);
POOL_API int pool_gpu_store(struct pool_gpu *g, struct pool_region *r,
			    uint64_t off, const void *dev_ptr, size_t len,
			    void *stream, struct pool_gpu_xfer **x);

/*
 * Waits up to timeout_ms (-1: as long as it takes; 0: do not wait) for
 * x. Returns its result and frees x, or -ETIMEDOUT when x is still
 * running (x stays valid: wait again), or -EINVAL for NULL. Results:
 *   0          every byte is at its destination
 *   -ECANCELED pool_gpu_xfer_cancel() took effect, or the engine closed
 *   -ENOTCONN  the session is lost
 *   -ETIME     a stage (RMA or device copy) outlived the engine timeout,
 *              or the fabric reported a timeout (-ETIMEDOUT is never a
 *              result: it always means "still running")
 *   -EIO / -errno  the fabric or the device failed the transfer
 * After an error the destination range holds unspecified bytes, but no
 * RMA or copy of x touches it after this returns.
 */
POOL_API int pool_gpu_xfer_wait(struct pool_gpu_xfer *x, int timeout_ms);

/* 1 when x is complete (pool_gpu_xfer_wait() then returns at once), 0
 * while it runs, -EINVAL for NULL. Does not free x. */
POOL_API int pool_gpu_xfer_test(struct pool_gpu_xfer *x);

/*
 * Asks the engine to stop x: no new chunk and no new stage of a chunk is
 * started; stages in flight finish; then x completes with -ECANCELED.
 * Does not wait (pool_gpu_xfer_wait() does). Returns
 *   0          the cancellation took effect
 *   -EALREADY  too late: x is complete, or every chunk has entered its
 *              last stage; x completes with its own result
 *   -EINVAL    x is NULL
 */
POOL_API int pool_gpu_xfer_cancel(struct pool_gpu_xfer *x);

/*
 * Waits up to timeout_ms (-1: as long as it takes) until every device
 * copy of x has been enqueued, then stores in *event the event recorded
 * on the copy stream after the last one (cudaEvent_t for CUDA): see
 * STREAM SEMANTICS. The event belongs to x and stays valid until
 * pool_gpu_xfer_wait() frees x. Returns 0, -ETIMEDOUT (not yet), the
 * transfer's error if it failed first, or -EINVAL.
 */
POOL_API int pool_gpu_xfer_event(struct pool_gpu_xfer *x, int timeout_ms,
				 void **event);

/*
 * The device side, through the engine's backend, so that programs (and
 * the tests and benchmarks) need no CUDA headers: device memory
 * (cudaMalloc / cudaFree), pinned host memory (cudaHostAlloc /
 * cudaFreeHost), streams (cudaStreamCreateWithFlags non-blocking /
 * cudaStreamDestroy), stream_sync (a bounded cudaStreamSynchronize:
 * -ETIMEDOUT after timeout_ms, -1: no bound), stream_wait_event
 * (cudaStreamWaitEvent), stream_host_fn (cudaLaunchHostFunc: fn runs once
 * the work before it on stream completed; it must not call the engine)
 * and memcpy_async (cudaMemcpyAsync, cudaMemcpyDefault). With the host
 * backend each host stream is a thread running its work in order, and any
 * host memory serves as device memory. Memory and streams from these must
 * be freed / destroyed before pool_gpu_close(). All return 0 or -EINVAL /
 * -ENOMEM / -ETIMEDOUT / -EIO. Thread-safe.
 */
POOL_API int pool_gpu_dev_alloc(struct pool_gpu *g, size_t len, void **dev_ptr);
POOL_API void pool_gpu_dev_free(struct pool_gpu *g, void *dev_ptr);
POOL_API int pool_gpu_pinned_alloc(struct pool_gpu *g, size_t len, void **ptr);
POOL_API void pool_gpu_pinned_free(struct pool_gpu *g, void *ptr);
POOL_API int pool_gpu_stream_create(struct pool_gpu *g, void **stream);
POOL_API void pool_gpu_stream_destroy(struct pool_gpu *g, void *stream);
POOL_API int pool_gpu_stream_sync(struct pool_gpu *g, void *stream,
				  int timeout_ms);
POOL_API int pool_gpu_stream_wait_event(struct pool_gpu *g, void *stream,
					void *event);
POOL_API int pool_gpu_stream_host_fn(struct pool_gpu *g, void *stream,
				     void (*fn)(void *arg), void *arg);
POOL_API int pool_gpu_memcpy_async(struct pool_gpu *g, void *dst,
				   const void *src, size_t len, void *stream);

struct pool_gpu_stats {
	/* configuration */
	enum pool_gpu_backend backend; /* POOL_GPU_CUDA or POOL_GPU_HOST */
	int device;
	char pci_bus_id[20]; /* CUDA: "0000:3b:00.0"; host: "" */
	size_t staging_bytes;
	unsigned staging_count;
	int numa_node;	     /* node chosen for staging and worker; -1: none */
	int numa_applied;    /* 1: staging bound to numa_node and the worker
			   * pinned to its CPUs; 0: not (see the log) */
	char numa_cpus[128]; /* numa_node's CPUs as a cpulist, "0-7,16-23";
			      * "" when no node was chosen */
	int direct;	     /* 1: direct RMA into device memory (FI_HMEM) */
	/* counters */
	uint64_t xfers;	    /* completed, any result */
	uint64_t errors;    /* completed with an error other than -ECANCELED */
	uint64_t cancelled; /* completed with -ECANCELED */
	uint64_t bytes_fetched, bytes_stored; /* of successful transfers */
	uint64_t chunks;		      /* chunks through the ring */
	uint64_t direct_xfers; /* transfers that went direct (no staging) */
	/* overlap: stage completions the worker saw while another chunk was
	 * confirmed still in the other stage (an RMA still running while a
	 * copy ended, or a copy still running while an RMA ended) */
	uint64_t overlapped;
	unsigned fabric_max; /* most chunks in the fabric stage at once */
	unsigned copy_max;   /* most chunks in the copy stage at once */
	unsigned abandoned;  /* timed-out stages still pending now */
};

/* Fills *st. Returns 0, or -EINVAL for NULL arguments. Thread-safe. */
POOL_API int pool_gpu_get_stats(struct pool_gpu *g, struct pool_gpu_stats *st);

#ifdef __cplusplus
}
#endif
#endif
