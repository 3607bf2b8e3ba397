// SPDX-License-Identifier: MIT
/*
 * memd/metrics.c - the /metrics HTTP endpoint over libmicrohttpd.
 *
 * DESIGN
 * We bind the listening socket ourselves (getaddrinfo, so names, IPv4 and
 * IPv6 all work, and getsockname tells which port 0 became) and hand it to
 * libmicrohttpd with MHD_OPTION_LISTEN_SOCKET; MHD_stop_daemon closes it.
 * libmicrohttpd runs one internal polling thread (no thread per
 * connection), so the caller's write function is never called twice at
 * once. Everything is bounded: connections (16), per-connection memory
 * (16 KiB of request), idle time (10 s), and the exposition itself
 * (MEMD_METRICS_MAX_BYTES). An exposition that cannot be built whole is
 * answered 500, never cut short, so a scraper never reads half a sample
 * set as the whole.
 *
 * The thread's name: libmicrohttpd offers no hook to name its thread, and
 * Linux copies a thread's name to the threads it creates, so the caller's
 * thread is renamed memd-metrics around MHD_start_daemon and then gets its
 * own name back.
 *
 * Threads: memd-metrics runs access() and the write function; start and
 * stop run on the caller's thread.
 */
#include "memd/metrics.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "fabric/hostport.h"
#include "memd/log.h"

#define METRICS_CONN_LIMIT 16
#define METRICS_IDLE_S 10
#define METRICS_CONN_MEMORY (16u << 10)
#define METRICS_INITIAL_BYTES 8192
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct memd_metrics_buf {
	char *data;
	size_t len, cap;
	bool failed;
};

struct memd_metrics {
	struct MHD_Daemon *mhd;
	memd_metrics_write_fn write;
	void *arg;
	char addr[300];
};

void memd_metrics_printf(struct memd_metrics_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->failed)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->failed = true;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		/* does not fit: grow and format again */
		size_t cap = b->cap * 2;
		char *p;

		while (cap - b->len <= (size_t)n)
			cap *= 2;
		if (cap > MEMD_METRICS_MAX_BYTES) {
			b->failed = true;
			return;
		}
		p = realloc(b->data, cap);
		if (!p) {
			b->failed = true;
			return;
		}
		b->data = p;
		b->cap = cap;
	}
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned int status,
			     const char *text, const char *allow)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(strlen(text), (void *)text,
					    MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; charset=utf-8");
	if (allow)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result serve_metrics(struct memd_metrics *m,
				     struct MHD_Connection *conn)
{
	struct memd_metrics_buf b = { .cap = METRICS_INITIAL_BYTES };
	struct MHD_Response *r;
	enum MHD_Result ret;

	b.data = malloc(b.cap);
	if (!b.data)
		return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR,
			     "out of memory\n", NULL);
	b.data[0] = '\0';
	m->write(&b, m->arg);
	if (b.failed) {
		free(b.data);
		memd_log(LOG_WARNING,
			 "metrics: exposition failed (out of memory or over "
			 "%u bytes)",
			 MEMD_METRICS_MAX_BYTES);
		return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR,
			     "cannot build the exposition\n", NULL);
	}
	r = MHD_create_response_from_buffer(b.len, b.data,
					    MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(b.data);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				METRICS_CONTENT_TYPE);
	ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

/*
 * Called once the request's headers are in (and again for each piece of
 * a body, which we never read: the reply is queued on the first call and
 * libmicrohttpd discards the rest).
 */
static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn,
				 const char *url, const char *method,
				 const char *version, const char *upload_data,
				 size_t *upload_data_size, void **con_cls)
{
	struct memd_metrics *m = cls;

	(void)version;
	(void)upload_data;
	(void)upload_data_size;
	(void)con_cls;
	if (strcmp(method, MHD_HTTP_METHOD_GET) &&
	    strcmp(method, MHD_HTTP_METHOD_HEAD))
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
			     "only GET and HEAD\n", "GET, HEAD");
	if (strcmp(url, "/metrics"))
		return reply(conn, MHD_HTTP_NOT_FOUND,
			     "not found; metrics are at /metrics\n", NULL);
	return serve_metrics(m, conn);
}

static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	size_t n;

	(void)cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	memd_log(LOG_WARNING, "metrics: libmicrohttpd: %s", line);
}

/* Binds and listens on hostport; 0 and *fd, or -errno with err. */
static int bind_listen(struct memd_metrics *m, const char *hostport, int *fd,
		       char *err, size_t errlen)
{
	char host[256], port[8], hbuf[NI_MAXHOST], pbuf[NI_MAXSERV];
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	uint16_t p;
	int s, one = 1, r;

	if (!hostport ||
	    wire_split_hostport(hostport, host, sizeof(host), &p)) {
		snprintf(err, errlen, "metrics_listen '%s' is not HOST:PORT",
			 hostport ? hostport : "(null)");
		return -EINVAL;
	}
	snprintf(port, sizeof(port), "%u", p);
	r = getaddrinfo(host, port, &hints, &ai);
	if (r) {
		snprintf(err, errlen, "metrics_listen '%s': %s", hostport,
			 gai_strerror(r));
		return -EINVAL;
	}
	s = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		   0);
	if (s < 0 ||
	    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(s, ai->ai_addr, ai->ai_addrlen) || listen(s, 64) ||
	    getsockname(s, (struct sockaddr *)&ss, &sl)) {
		r = -errno;
		snprintf(err, errlen, "metrics_listen %s: %s", hostport,
			 strerror(-r));
		if (s >= 0)
			close(s);
		freeaddrinfo(ai);
		return r;
	}
	freeaddrinfo(ai);
	if (getnameinfo((struct sockaddr *)&ss, sl, hbuf, sizeof(hbuf), pbuf,
			sizeof(pbuf), NI_NUMERICHOST | NI_NUMERICSERV)) {
		snprintf(hbuf, sizeof(hbuf), "%s", host);
		snprintf(pbuf, sizeof(pbuf), "%s", port);
	}
	snprintf(m->addr, sizeof(m->addr),
		 ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", hbuf, pbuf);
	*fd = s;
	return 0;
}

int memd_metrics_start(const char *hostport, memd_metrics_write_fn write,
		       void *arg, struct memd_metrics **out, char *err,
		       size_t errlen)
{
	struct memd_metrics *m;
	char name[16] = "";
	int fd = -1, r;
	bool renamed;

	*out = NULL;
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	m->write = write;
	m->arg = arg;
	r = bind_listen(m, hostport, &fd, err, errlen);
	if (r) {
		free(m);
		return r;
	}
	/* the new thread takes the name its creator has (see DESIGN) */
	renamed = !pthread_getname_np(pthread_self(), name, sizeof(name)) &&
		  !pthread_setname_np(pthread_self(), "memd-metrics");
	/* the logger first, so that no message goes to stderr unformatted */
	m->mhd = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
			MHD_USE_ERROR_LOG,
		0, NULL, NULL, access_cb, m, MHD_OPTION_EXTERNAL_LOGGER,
		mhd_logger, NULL, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned int)METRICS_CONN_LIMIT,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)METRICS_IDLE_S,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)METRICS_CONN_MEMORY,
		MHD_OPTION_END);
	if (renamed)
		pthread_setname_np(pthread_self(), name);
	if (!m->mhd) {
		snprintf(err, errlen,
			 "metrics_listen %s: libmicrohttpd did not start "
			 "(see the log)",
			 m->addr);
		/* Not closed: some libmicrohttpd versions close a given
		 * listening socket when they fail, and closing a number
		 * another thread reused would be worse than one leaked fd
		 * at a start-up that is failing anyway. */
		free(m);
		return -EIO;
	}
	*out = m;
	return 0;
}

const char *memd_metrics_addr(const struct memd_metrics *m)
{
	return m->addr;
}

void memd_metrics_stop(struct memd_metrics *m)
{
	if (!m)
		return;
	/* joins memd-metrics and closes the listening socket too */
	MHD_stop_daemon(m->mhd);
	free(m);
}
