/* SPDX-License-Identifier: MIT */
/*
 * memd/metrics.h - memd's HTTP endpoint for Prometheus: GET /metrics
 * answers the text exposition format (version 0.0.4) that a caller's
 * function writes. Only this module includes <microhttpd.h>.
 *
 * Threads: one, memd-metrics (libmicrohttpd's internal polling thread),
 * which accepts, reads requests and calls the caller's write function,
 * one request at a time.
 */
#ifndef TP_MEMD_METRICS_H
#define TP_MEMD_METRICS_H

#include <stddef.h>

struct memd_metrics;
/* Where the write function puts the exposition; owned by the module. */
struct memd_metrics_buf;

/*
 * Writes the whole exposition to b with memd_metrics_printf(). Called on
 * memd-metrics for every GET /metrics, never for two requests at once;
 * whatever it reads must be safe to read from that thread.
 */
typedef void (*memd_metrics_write_fn)(struct memd_metrics_buf *b, void *arg);

/* Most bytes an exposition may take; a longer one is answered 500. */
#define MEMD_METRICS_MAX_BYTES (4u << 20)

/*
 * Appends printf-formatted text to b. Never fails: running out of memory
 * or past MEMD_METRICS_MAX_BYTES marks b failed, the request is answered
 * 500 and later calls are ignored.
 */
void memd_metrics_printf(struct memd_metrics_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * Binds hostport ("HOST:PORT", "[v6]:PORT"; port 0 picks a free one) and
 * starts the HTTP server on its own thread: GET (or HEAD) /metrics gets
 * 200 with Content-Type "text/plain; version=0.0.4" and what write puts
 * in its buffer; another path gets 404, another method 405. At most 16
 * connections at once, each closed after 10 s idle, request headers held
 * to 16 KiB. The calling thread's signal mask is the thread's.
 * Returns 0 and *out, or -errno with err explaining:
 *   -EINVAL       hostport is not HOST:PORT or its host does not resolve
 *   -EADDRINUSE   and the other errors of socket(2), bind(2), listen(2)
 *   -ENOMEM       out of memory
 *   -EIO          libmicrohttpd could not start its thread
 * Not thread-safe against memd_metrics_stop() on the same object.
 */
int memd_metrics_start(const char *hostport, memd_metrics_write_fn write,
		       void *arg, struct memd_metrics **out, char *err,
		       size_t errlen);

/* "HOST:PORT" the server is bound to (port 0 resolved). Never NULL. */
const char *memd_metrics_addr(const struct memd_metrics *m);

/*
 * Stops the thread (waiting for a request being answered), closes every
 * connection and the listening socket, frees m. After it returns, write
 * is no longer called. NULL is a no-op.
 */
void memd_metrics_stop(struct memd_metrics *m);

#endif
