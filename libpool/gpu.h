/* SPDX-License-Identifier: MIT */
/*
 * libpool/gpu.h - the device backends behind GPU prefetch (libpool/gpu.c).
 *
 * A backend is a table of operations modelled on the CUDA runtime: device
 * and pinned memory, streams (in-order queues of work), events (markers
 * recorded on a stream that complete when the work before them has) and
 * asynchronous copies. gpu_pipeline.c drives nothing else, so the same
 * pipeline runs on the CUDA backend (gpu_cuda.c, the only file that
 * includes CUDA headers) and on the host backend (gpu_host.c: host memory,
 * one thread per stream), which is what CI tests.
 *
 * Streams and events are void *: cudaStream_t / cudaEvent_t, or the host
 * backend's own objects. A NULL stream is the backend's default stream.
 * Every operation returns 0 or -errno and may be called from any thread;
 * the backend makes its device current where it needs to.
 *
 * Project-internal: not installed, not exported from libpool.so.
 */
#ifndef TP_LIBPOOL_GPU_H
#define TP_LIBPOOL_GPU_H

#include <stddef.h>
#include <stdint.h>

struct gpu_dev;

struct gpu_backend {
	const char *name;
	/* Number of devices (>= 1), or -ENOENT (runtime library missing),
	 * -ENODEV (no device, or no usable driver), -errno. */
	int (*probe)(void);
	int (*open)(int device, struct gpu_dev **out);
	void (*close)(struct gpu_dev *d);
	/* Makes d current for the calling thread for good (the worker). */
	int (*bind_thread)(struct gpu_dev *d);
	/* "0000:3b:00.0" or "" when the backend has no PCI device. */
	void (*pci_bus_id)(struct gpu_dev *d, char *buf, size_t len);

	int (*pinned_alloc)(struct gpu_dev *d, size_t len, void **out);
	void (*pinned_free)(struct gpu_dev *d, void *p);
	/* Pins memory the caller allocated (cudaHostRegister portable; host:
	 * mlock, best effort) / undoes it before the caller frees it. */
	int (*host_register)(struct gpu_dev *d, void *p, size_t len);
	void (*host_unregister)(struct gpu_dev *d, void *p, size_t len);
	int (*dev_alloc)(struct gpu_dev *d, size_t len, void **out);
	void (*dev_free)(struct gpu_dev *d, void *p);

	/* A stream that does not synchronise with the default stream. */
	int (*stream_create)(struct gpu_dev *d, void **out);
	/* Returns at once; work already enqueued still runs. */
	void (*stream_destroy)(struct gpu_dev *d, void *s);
	int (*stream_wait_event)(struct gpu_dev *d, void *s, void *ev);
	int (*host_fn)(struct gpu_dev *d, void *s, void (*fn)(void *),
		       void *arg);
	int (*memcpy_async)(struct gpu_dev *d, void *dst, const void *src,
			    size_t len, void *s);

	int (*event_create)(struct gpu_dev *d, void **out);
	void (*event_destroy)(struct gpu_dev *d, void *ev);
	int (*event_record)(struct gpu_dev *d, void *ev, void *s);
	/* 0: complete (or never recorded); -EAGAIN: not yet; other -errno:
	 * the device failed work before it. */
	int (*event_query)(struct gpu_dev *d, void *ev);
	/* As event_query, waiting up to timeout_us for completion:
	 * -ETIMEDOUT when still pending. */
	int (*event_wait)(struct gpu_dev *d, void *ev, int64_t timeout_us);
};

/*
 * Test hooks (tp_pool_internal; libpool.so does not export them).
 * gpu_test_force_hmem(true): engines opened afterwards behave as if the
 * session's provider reported FI_HMEM, so the direct path runs on tcp
 * with the host backend (its "device" memory is host memory). Not
 * thread-safe against pool_gpu_open().
 * gpu_test_staging_buf(): staging buffer i of g (NULL past the ring).
 */
struct pool_gpu;
void gpu_test_force_hmem(int on);
void *gpu_test_staging_buf(struct pool_gpu *g, unsigned i);

/* The host backend (gpu_host.c), always built. */
extern const struct gpu_backend gpu_host_backend;

/* The CUDA backend (gpu_cuda.c), compiled when CMake found the toolkit. */
#ifdef TP_HAVE_CUDA
extern const struct gpu_backend gpu_cuda_backend;
#endif

#endif
