// SPDX-License-Identifier: MIT
/*
 * libpool/gpu_cuda.c - the CUDA backend of GPU prefetch (libpool/gpu.h).
 *
 * DESIGN
 * The only file of tidepool that includes CUDA headers, and it takes
 * types and constants from them, nothing else: the runtime is loaded with
 * dlopen on first use (the file named by LIBPOOL_CUDART, else
 * libcudart.so.13, else libcudart.so) and each function is resolved with
 * dlsym. libpool.so therefore has no link-time CUDA dependency, loads on
 * hosts without CUDA, and answers -ENOENT (no runtime) or -ENODEV (no
 * device or driver) when asked for CUDA there.
 *
 * Threads: none of its own. The engine's worker ("pool-gpu") calls
 * bind_thread once and then never changes device. Calls from callers'
 * threads (recording the start event on the caller's stream, memory and
 * stream helpers) make the engine's device current for the call and put
 * the caller's current device back afterwards: a library must not change
 * a thread's device behind its back.
 *
 * Invariants: the runtime is loaded at most once per process
 * (pthread_once) and the table of functions is read-only afterwards; the
 * library handle is never closed (the runtime cannot be unloaded safely
 * while other code in the process may use it).
 *
 * Streams and events are driver objects of the device's primary context,
 * which every CUDA runtime in the process shares, so the application's
 * streams (even from a statically linked runtime) work here. Special
 * stream handles (0, cudaStreamLegacy, cudaStreamPerThread) are read by
 * this runtime: 0 is the legacy default stream.
 */
#include <cuda_runtime_api.h>
#include <driver_types.h>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libpool/gpu.h"
#include "libpool/log.h"

#define RT_SONAME "libcudart.so.13"
#define RT_FALLBACK "libcudart.so"

/* One entry per runtime function we use: X(name). */
#define CUDA_FUNCS(X)                                                          \
	X(cudaGetDeviceCount)                                                  \
	X(cudaGetDevice)                                                       \
	X(cudaSetDevice)                                                       \
	X(cudaFree)                                                            \
	X(cudaMalloc)                                                          \
	X(cudaHostAlloc)                                                       \
	X(cudaFreeHost)                                                        \
	X(cudaHostRegister)                                                    \
	X(cudaHostUnregister)                                                  \
	X(cudaDeviceGetPCIBusId)                                               \
	X(cudaStreamCreateWithFlags)                                           \
	X(cudaStreamDestroy)                                                   \
	X(cudaStreamWaitEvent)                                                 \
	X(cudaLaunchHostFunc)                                                  \
	X(cudaMemcpyAsync)                                                     \
	X(cudaEventCreateWithFlags)                                            \
	X(cudaEventDestroy)                                                    \
	X(cudaEventRecord)                                                     \
	X(cudaEventQuery)                                                      \
	X(cudaGetErrorString)

static struct {
#define X(f) __typeof__(f) *f;
	CUDA_FUNCS(X)
#undef X
} rt;

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;
static int rt_err; /* 0, or why the runtime is unusable; set once */

struct gpu_dev {
	int device;
	char bus_id[20];
};

static void rt_load(void)
{
	const char *env = getenv("LIBPOOL_CUDART");
	const char *name = env && *env ? env : RT_SONAME;
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);

	if (!h && !(env && *env))
		h = dlopen(name = RT_FALLBACK, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		pool_log(LOG_INFO, "gpu: CUDA runtime not loaded lib=%s err=%s",
			 name, dlerror());
		rt_err = -ENOENT;
		return;
	}
#define X(f)                                                                   \
	*(void **)&rt.f = dlsym(h, #f);                                        \
	if (!rt.f) {                                                           \
		pool_log(LOG_WARNING,                                          \
			 "gpu: CUDA runtime lacks a function lib=%s fn=%s",    \
			 name, #f);                                            \
		rt_err = -ENOENT;                                              \
		goto fail;                                                     \
	}
	CUDA_FUNCS(X)
#undef X
	pool_log(LOG_DEBUG, "gpu: CUDA runtime loaded lib=%s", name);
	return;
fail:
	memset(&rt, 0, sizeof(rt));
	dlclose(h);
}

static int rt_ready(void)
{
	pthread_once(&rt_once, rt_load);
	return rt_err;
}

/* Maps a cudaError_t to -errno, logging anything unexpected. */
static int cu_errno(cudaError_t e, const char *what)
{
	int r;

	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorNotReady:
		return -EAGAIN;
	case cudaErrorNoDevice:
	case cudaErrorInvalidDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorCallRequiresNewerDriver:
	case cudaErrorStubLibrary:
	case cudaErrorDevicesUnavailable:
	case cudaErrorSystemNotReady:
	case cudaErrorSystemDriverMismatch:
	case cudaErrorCompatNotSupportedOnDevice:
		r = -ENODEV;
		break;
	case cudaErrorMemoryAllocation:
		r = -ENOMEM;
		break;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidDevicePointer:
	case cudaErrorInvalidResourceHandle:
		r = -EINVAL;
		break;
	case cudaErrorNotSupported:
		r = -EOPNOTSUPP;
		break;
	default:
		r = -EIO;
		break;
	}
	pool_log(r == -ENODEV ? LOG_INFO : LOG_WARNING,
		 "gpu: cuda %s failed code=%d err=%s", what, (int)e,
		 rt.cudaGetErrorString ? rt.cudaGetErrorString(e) : "?");
	return r;
}

/* Makes d's device current; *saved gets the caller's. */
static int enter(struct gpu_dev *d, int *saved)
{
	int cur = -1;

	if (rt.cudaGetDevice(&cur) != cudaSuccess)
		cur = -1;
	*saved = cur;
	if (cur != d->device)
		return cu_errno(rt.cudaSetDevice(d->device), "cudaSetDevice");
	return 0;
}

static void leave(struct gpu_dev *d, int saved)
{
	if (saved >= 0 && saved != d->device)
		rt.cudaSetDevice(saved);
}

static int cuda_probe(void)
{
	int n = 0, r = rt_ready();

	if (r)
		return r;
	r = cu_errno(rt.cudaGetDeviceCount(&n), "cudaGetDeviceCount");
	if (r)
		return r == -EIO ? -ENODEV : r;
	return n > 0 ? n : -ENODEV;
}

static int cuda_open(int device, struct gpu_dev **out)
{
	struct gpu_dev *d;
	int n, r, saved;

	*out = NULL;
	n = cuda_probe();
	if (n < 0)
		return n;
	if (device < 0 || device >= n) {
		pool_log(LOG_WARNING, "gpu: no CUDA device=%d devices=%d",
			 device, n);
		return -ENODEV;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->device = device;
	r = enter(d, &saved);
	/* Creates the primary context now, so that open reports a broken
	 * device rather than the first transfer. */
	if (!r)
		r = cu_errno(rt.cudaFree(NULL), "context init");
	if (!r && rt.cudaDeviceGetPCIBusId(d->bus_id, sizeof(d->bus_id),
					   device) != cudaSuccess)
		d->bus_id[0] = '\0';
	leave(d, saved);
	if (r) {
		free(d);
		return r;
	}
	pool_log(LOG_INFO, "gpu: CUDA device=%d pci=%s", device, d->bus_id);
	*out = d;
	return 0;
}

static void cuda_close(struct gpu_dev *d)
{
	free(d);
}

static int cuda_bind_thread(struct gpu_dev *d)
{
	return cu_errno(rt.cudaSetDevice(d->device), "cudaSetDevice");
}

static void cuda_pci_bus_id(struct gpu_dev *d, char *buf, size_t len)
{
	snprintf(buf, len, "%s", d->bus_id);
}

static int cuda_pinned_alloc(struct gpu_dev *d, size_t len, void **out)
{
	int saved, r = enter(d, &saved);

	if (!r)
		r = cu_errno(rt.cudaHostAlloc(out, len, cudaHostAllocPortable),
			     "cudaHostAlloc");
	leave(d, saved);
	return r;
}

static void cuda_pinned_free(struct gpu_dev *d, void *p)
{
	int saved;

	if (!enter(d, &saved))
		cu_errno(rt.cudaFreeHost(p), "cudaFreeHost");
	leave(d, saved);
}

static int cuda_host_register(struct gpu_dev *d, void *p, size_t len)
{
	int saved, r = enter(d, &saved);

	if (!r)
		r = cu_errno(
			rt.cudaHostRegister(p, len, cudaHostRegisterPortable),
			"cudaHostRegister");
	leave(d, saved);
	return r;
}

static void cuda_host_unregister(struct gpu_dev *d, void *p, size_t len)
{
	int saved;

	if (!enter(d, &saved))
		cu_errno(rt.cudaHostUnregister(p), "cudaHostUnregister");
	leave(d, saved);
}

static int cuda_dev_alloc(struct gpu_dev *d, size_t len, void **out)
{
	int saved, r = enter(d, &saved);

	if (!r)
		r = cu_errno(rt.cudaMalloc(out, len), "cudaMalloc");
	leave(d, saved);
	return r;
}

static void cuda_dev_free(struct gpu_dev *d, void *p)
{
	int saved;

	if (!enter(d, &saved))
		cu_errno(rt.cudaFree(p), "cudaFree");
	leave(d, saved);
}

static int cuda_stream_create(struct gpu_dev *d, void **out)
{
	cudaStream_t s = NULL;
	int saved, r = enter(d, &saved);

	if (!r)
		r = cu_errno(
			rt.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
			"cudaStreamCreateWithFlags");
	leave(d, saved);
	*out = s;
	return r;
}

static void cuda_stream_destroy(struct gpu_dev *d, void *s)
{
	int saved;

	if (!enter(d, &saved))
		cu_errno(rt.cudaStreamDestroy(s), "cudaStreamDestroy");
	leave(d, saved);
}

static int cuda_stream_wait_event(struct gpu_dev *d, void *s, void *ev)
{
	int saved, r = enter(d, &saved);

	if (!r)
		r = cu_errno(rt.cudaStreamWaitEvent(s, ev, 0),
			     "cudaStreamWaitEvent");
	leave(d, saved);
	return r;
}

static int cuda_host_fn(struct gpu_dev *d, void *s, void (*fn)(void *),
			void *arg)
{
	int saved, r = enter(d, &saved);

	if (!r)
		r = cu_errno(rt.cudaLaunchHostFunc(s, fn, arg),
			     "cudaLaunchHostFunc");
	leave(d, saved);
	return r;
}

static int cuda_memcpy_async(struct gpu_dev *d, void *dst, const void *src,
			     size_t len, void *s)
{
	int saved, r = enter(d, &saved);

	if (!r)
		r = cu_errno(
			rt.cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, s),
			"cudaMemcpyAsync");
	leave(d, saved);
	return r;
}

static int cuda_event_create(struct gpu_dev *d, void **out)
{
	cudaEvent_t ev = NULL;
	int saved, r = enter(d, &saved);

	if (!r)
		r = cu_errno(rt.cudaEventCreateWithFlags(
				     &ev, cudaEventDisableTiming),
			     "cudaEventCreateWithFlags");
	leave(d, saved);
	*out = ev;
	return r;
}

static void cuda_event_destroy(struct gpu_dev *d, void *ev)
{
	int saved;

	if (!enter(d, &saved))
		cu_errno(rt.cudaEventDestroy(ev), "cudaEventDestroy");
	leave(d, saved);
}

static int cuda_event_record(struct gpu_dev *d, void *ev, void *s)
{
	int saved, r = enter(d, &saved);

	if (!r)
		r = cu_errno(rt.cudaEventRecord(ev, s), "cudaEventRecord");
	leave(d, saved);
	return r;
}

static int cuda_event_query(struct gpu_dev *d, void *ev)
{
	cudaError_t e = rt.cudaEventQuery(ev);

	return e == cudaErrorNotReady ? -EAGAIN : cu_errno(e, "event");
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/*
 * cudaEventSynchronize has no timeout, and a blocking-sync event would
 * change the caller's device flags; so poll, backing off from 2 us to
 * 100 us: a copy of a few MiB takes tens of microseconds.
 */
static int cuda_event_wait(struct gpu_dev *d, void *ev, int64_t timeout_us)
{
	uint64_t deadline =
		now_us() + (uint64_t)(timeout_us > 0 ? timeout_us : 0);
	long sleep_ns = 2000;

	for (;;) {
		int r = cuda_event_query(d, ev);
		struct timespec ts;

		if (r != -EAGAIN)
			return r;
		if (now_us() >= deadline)
			return -ETIMEDOUT;
		ts.tv_sec = 0;
		ts.tv_nsec = sleep_ns;
		nanosleep(&ts, NULL);
		if (sleep_ns < 100000)
			sleep_ns *= 2;
	}
}

const struct gpu_backend gpu_cuda_backend = {
	.name = "cuda",
	.probe = cuda_probe,
	.open = cuda_open,
	.close = cuda_close,
	.bind_thread = cuda_bind_thread,
	.pci_bus_id = cuda_pci_bus_id,
	.pinned_alloc = cuda_pinned_alloc,
	.pinned_free = cuda_pinned_free,
	.host_register = cuda_host_register,
	.host_unregister = cuda_host_unregister,
	.dev_alloc = cuda_dev_alloc,
	.dev_free = cuda_dev_free,
	.stream_create = cuda_stream_create,
	.stream_destroy = cuda_stream_destroy,
	.stream_wait_event = cuda_stream_wait_event,
	.host_fn = cuda_host_fn,
	.memcpy_async = cuda_memcpy_async,
	.event_create = cuda_event_create,
	.event_destroy = cuda_event_destroy,
	.event_record = cuda_event_record,
	.event_query = cuda_event_query,
	.event_wait = cuda_event_wait,
};
