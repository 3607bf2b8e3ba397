// SPDX-License-Identifier: MIT
/*
 * fabric/rpc.c - the blocking client end of a control connection (rpc.h):
 * libpool's sessions, memd's link to its registry, poolctl. rpc_hello and
 * rpc_auth are the handshake every one of them does (docs/cluster.md);
 * rpc_handshake does both for a client that needs nothing in between.
 *
 * Threads: any thread may call; calls are serialized by c->lock, so at
 * most one request is outstanding and a reply is matched by seq alone.
 * rpc_call is rpc_send + rpc_recv: rpc_send returns with c->lock held
 * (the request outstanding) and rpc_recv releases it, so one thread can
 * have requests out on several connections at once (taking their locks
 * in one global order, rpc.h).
 * A timeout or a garbled stream leaves the byte stream in an unknown
 * state, so either marks the connection broken: memd then sees it close
 * and the session's leases run out their TTL, which is the safe outcome.
 */
#include "fabric/rpc.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fabric/auth.h"
#include "fabric/hostport.h"
#include "fabric/locked.h"

struct rpc {
	pthread_mutex_t lock;
	int fd;
	bool broken;
	uint32_t seq;
	/* the request outstanding between rpc_send and rpc_recv */
	uint32_t pend_seq;
	uint8_t pend_type;
	uint64_t pend_deadline;
	uint64_t pushes; /* DONOR_NEWS frames read (rpc_pushes) */
	rpc_log_fn log;	 /* may be NULL */
	void *log_arg;
	uint8_t buf[WIRE_MAX_FRAME];
};

void rpc_set_log(struct rpc *c, rpc_log_fn fn, void *arg)
{
	pthread_mutex_lock(&c->lock);
	c->log = fn;
	c->log_arg = arg;
	pthread_mutex_unlock(&c->lock);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Waits for fd to become ready for events until deadline. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	for (;;) {
		uint64_t now = mono_ms();
		struct pollfd p = { .fd = fd, .events = events };
		int r;

		if (now >= deadline)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)(deadline - now));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

int rpc_connect(const char *addr, int timeout_ms, struct rpc **out,
		char *local_host, size_t hostlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV };
	struct addrinfo *ai = NULL, *a;
	uint64_t deadline = mono_ms() + (uint64_t)timeout_ms;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[256], port[8];
	struct rpc *c;
	uint16_t p;
	int fd = -1, r, one = 1;

	*out = NULL;
	if (wire_split_hostport(addr, host, sizeof(host), &p) || p == 0)
		return -EINVAL;
	snprintf(port, sizeof(port), "%u", p);
	r = getaddrinfo(host, port, &hints, &ai);
	if (r)
		return r == EAI_NONAME ? -EHOSTUNREACH : -EINVAL;
	r = -ECONNREFUSED;
	for (a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family,
			    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			r = -errno;
			continue;
		}
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
			break;
		if (errno == EINPROGRESS) {
			int soerr = 0;
			socklen_t el = sizeof(soerr);

			r = wait_fd(fd, POLLOUT, deadline);
			if (!r &&
			    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &el) ==
				    0 &&
			    soerr == 0)
				break;
			if (!r)
				r = -soerr;
		} else {
			r = -errno;
		}
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0)
		return r;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (local_host && (getsockname(fd, (struct sockaddr *)&ss, &sl) ||
			   getnameinfo((struct sockaddr *)&ss, sl, local_host,
				       hostlen, NULL, 0, NI_NUMERICHOST))) {
		close(fd);
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	pthread_mutex_init(&c->lock, NULL);
	c->fd = fd;
	*out = c;
	return 0;
}

void rpc_close(struct rpc *c)
{
	if (!c)
		return;
	close(c->fd);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

bool rpc_is_broken(struct rpc *c)
{
	return TP_LOCKED_READ(&c->lock, c->broken);
}

static int send_all(struct rpc *c, const uint8_t *p, size_t n,
		    uint64_t deadline)
{
	while (n) {
		ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);

		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int r = wait_fd(c->fd, POLLOUT, deadline);

			if (r)
				return r;
			continue;
		}
		return -ENOTCONN;
	}
	return 0;
}

/* Reads exactly one frame into c->buf. */
static ssize_t recv_frame(struct rpc *c, uint64_t deadline)
{
	size_t have = 0;
	ssize_t need = WIRE_HDR_LEN;

	for (;;) {
		ssize_t n;

		if (have >= (size_t)need) {
			ssize_t fl = wire_frame_len(c->buf, have);

			if (fl < 0 && fl != -EAGAIN)
				return -EPROTO;
			if (fl > 0 && have >= (size_t)fl)
				return fl;
			if (fl > 0)
				need = fl;
		}
		n = recv(c->fd, c->buf + have, (size_t)need - have, 0);
		if (n > 0) {
			have += (size_t)n;
			continue;
		}
		if (n == 0)
			return -ENOTCONN;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			int r = wait_fd(c->fd, POLLIN, deadline);

			if (r)
				return r;
			continue;
		}
		return -ENOTCONN;
	}
}

/* A failure that leaves the stream in an unknown state: drop it. c->lock
 * held. The error to return. */
static int rpc_drop_locked(struct rpc *c, uint8_t type, int r)
{
	if (c->log)
		c->log(c->log_arg, LOG_WARNING,
		       "rpc: %s failed err=%s; connection dropped",
		       wire_type_name(type), strerror(-r));
	c->broken = true;
	return r != -ETIMEDOUT && r != -EPROTO ? -ENOTCONN : r;
}

int rpc_send(struct rpc *c, struct wire_msg *req, int timeout_ms)
{
	uint64_t deadline = mono_ms() + (uint64_t)timeout_ms;
	ssize_t n;
	int r;

	pthread_mutex_lock(&c->lock);
	if (c->broken) {
		r = -ENOTCONN;
		goto out;
	}
	req->seq = ++c->seq;
	n = wire_encode(req, c->buf, sizeof(c->buf));
	if (n < 0) {
		r = (int)n; /* our bug: a request out of bounds */
		goto out;
	}
	r = send_all(c, c->buf, (size_t)n, deadline);
	if (r) {
		r = rpc_drop_locked(c, req->type, r);
		goto out;
	}
	c->pend_seq = req->seq;
	c->pend_type = req->type;
	c->pend_deadline = deadline;
	return 0; /* c->lock stays held until rpc_recv */
out:
	pthread_mutex_unlock(&c->lock);
	return r;
}

int rpc_recv(struct rpc *c, struct wire_msg *rep, int expect, char *errtext,
	     size_t errlen)
{
	ssize_t n;
	int r;

	if (errtext && errlen)
		errtext[0] = '\0';
	for (;;) {
		n = recv_frame(c, c->pend_deadline);
		if (n < 0) {
			r = (int)n;
			goto broken;
		}
		if (wire_decode(c->buf, (size_t)n, rep) != n) {
			r = -EPROTO;
			goto broken;
		}
		/* a registry's news on a donor's link (protocol 6): no
		 * reply to anything; counted for rpc_pushes */
		if (rep->type != WIRE_DONOR_NEWS || rep->seq != 0)
			break;
		c->pushes++;
	}
	if (rep->type == WIRE_ERROR) {
		r = rep->u.error.err > 0 ? -rep->u.error.err : -EPROTO;
		if (errtext)
			snprintf(errtext, errlen, "%s", rep->u.error.msg);
		if (c->log)
			c->log(c->log_arg, LOG_INFO,
			       "rpc: %s refused err=%d msg=%s",
			       wire_type_name(c->pend_type), rep->u.error.err,
			       rep->u.error.msg);
		/* An ERROR with seq 0 is memd closing on us. */
		if (rep->seq != c->pend_seq)
			c->broken = true;
		goto out;
	}
	if (rep->seq != c->pend_seq || rep->type != expect) {
		r = -EPROTO;
		goto broken;
	}
	r = 0;
	goto out;
broken:
	r = rpc_drop_locked(c, c->pend_type, r);
out:
	pthread_mutex_unlock(&c->lock);
	return r;
}

int rpc_call(struct rpc *c, struct wire_msg *req, struct wire_msg *rep,
	     int expect, int timeout_ms, char *errtext, size_t errlen)
{
	int r;

	if (errtext && errlen)
		errtext[0] = '\0';
	r = rpc_send(c, req, timeout_ms);
	if (r)
		return r;
	return rpc_recv(c, rep, expect, errtext, errlen);
}

int rpc_hello(struct rpc *c, const char *client, uint16_t proto_min,
	      int timeout_ms, struct wire_hello_ok *ok, char *errtext,
	      size_t errlen)
{
	const uint16_t proto_max = WIRE_PROTO_MAX;
	struct wire_msg *req, *rep;
	int r;

	if (proto_min < WIRE_PROTO_MIN || proto_min > proto_max)
		return -EINVAL;
	req = calloc(1, sizeof(*req));
	rep = malloc(sizeof(*rep));
	if (!req || !rep) {
		free(req);
		free(rep);
		return -ENOMEM;
	}
	req->type = WIRE_HELLO;
	req->u.hello.proto_min = proto_min;
	req->u.hello.proto_max = proto_max;
	snprintf(req->u.hello.client, sizeof(req->u.hello.client), "%s",
		 client ? client : "");
	/* Printable bytes only: the name ends up in memd's log lines. */
	for (char *p = req->u.hello.client; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			*p = '?';
	r = rpc_call(c, req, rep, WIRE_HELLO_OK, timeout_ms, errtext, errlen);
	if (!r && (rep->u.hello_ok.proto < proto_min ||
		   rep->u.hello_ok.proto > proto_max)) {
		if (errtext)
			snprintf(errtext, errlen,
				 "memd chose protocol %u outside %u..%u",
				 rep->u.hello_ok.proto, proto_min, proto_max);
		r = -EPROTONOSUPPORT;
	}
	if (!r)
		*ok = rep->u.hello_ok;
	free(req);
	free(rep);
	return r;
}

int rpc_auth(struct rpc *c, const struct wire_hello_ok *hello_ok,
	     const char *principal, const uint8_t key[AUTH_KEY_LEN],
	     const uint8_t *pass, size_t pass_len, int timeout_ms,
	     struct wire_auth_ok *ok, uint8_t session_key[AUTH_KEY_LEN],
	     char *errtext, size_t errlen)
{
	uint8_t cnonce[WIRE_NONCE_LEN], snonce[WIRE_NONCE_LEN];
	uint8_t want[WIRE_MAC_LEN];
	struct wire_msg *req, *rep;
	size_t plen = principal ? strlen(principal) : 0;
	int r;

	if (errtext && errlen)
		errtext[0] = '\0';
	if (plen == 0 || plen >= WIRE_NAME_MAX || pass_len > WIRE_PASS_MAX ||
	    (pass_len && !pass))
		return -EINVAL;
	if (hello_ok->proto < 2)
		return -EPROTONOSUPPORT;
	r = auth_init();
	if (r)
		return r;
	req = calloc(1, sizeof(*req));
	rep = malloc(sizeof(*rep));
	if (!req || !rep) {
		r = -ENOMEM;
		goto out;
	}
	auth_random(cnonce, sizeof(cnonce));
	req->type = WIRE_AUTH;
	memcpy(req->u.auth.principal, principal, plen);
	memcpy(req->u.auth.cnonce, cnonce, sizeof(cnonce));
	req->u.auth.pass_len = (uint16_t)pass_len;
	if (pass_len)
		memcpy(req->u.auth.pass, pass, pass_len);
	r = rpc_call(c, req, rep, WIRE_AUTH_CHALLENGE, timeout_ms, errtext,
		     errlen);
	if (r)
		goto out;
	memcpy(snonce, rep->u.auth_challenge.snonce, sizeof(snonce));

	memset(req, 0, sizeof(*req));
	req->type = WIRE_AUTH_PROOF;
	auth_client_proof(key, principal, hello_ok->session_id, hello_ok->epoch,
			  cnonce, snonce, req->u.auth_proof.mac);
	r = rpc_call(c, req, rep, WIRE_AUTH_OK, timeout_ms, errtext, errlen);
	if (r)
		goto out;
	auth_server_proof(key, principal, hello_ok->session_id, hello_ok->epoch,
			  cnonce, snonce, want);
	if (!auth_mac_equal(want, rep->u.auth_ok.mac)) {
		/* memd does not hold the key: it may be anyone. */
		if (errtext)
			snprintf(errtext, errlen,
				 "memd's proof is wrong: it does not hold the "
				 "key of %s",
				 principal);
		pthread_mutex_lock(&c->lock);
		c->broken = true;
		pthread_mutex_unlock(&c->lock);
		r = -EACCES;
		goto out;
	}
	if (rep->u.auth_ok.role < WIRE_ROLE_TENANT ||
	    rep->u.auth_ok.role > WIRE_ROLE_DONOR ||
	    (rep->u.auth_ok.flags & ~WIRE_AUTH_KNOWN)) {
		if (errtext)
			snprintf(errtext, errlen,
				 "AUTH_OK with role %u flags %#x",
				 rep->u.auth_ok.role, rep->u.auth_ok.flags);
		r = -EPROTO;
		goto out;
	}
	auth_session_key(key, principal, cnonce, snonce, session_key);
	*ok = rep->u.auth_ok;
out:
	if (req)
		memset(req, 0, sizeof(*req)); /* the proof */
	free(req);
	free(rep);
	return r;
}

static const char *role_name(unsigned role)
{
	switch (role) {
	case WIRE_ROLE_TENANT:
		return "tenant";
	case WIRE_ROLE_ADMIN:
		return "admin";
	case WIRE_ROLE_DONOR:
		return "donor";
	default:
		return "unknown";
	}
}

int rpc_handshake(struct rpc *c, const char *client, uint16_t proto_min,
		  const char *principal, const uint8_t key[AUTH_KEY_LEN],
		  uint8_t role, int timeout_ms, struct wire_hello_ok *hello,
		  struct wire_auth_ok *ok, uint8_t session_key[AUTH_KEY_LEN],
		  char *errtext, size_t errlen)
{
	struct wire_hello_ok h;
	struct wire_auth_ok a;
	int r;

	if (!ok)
		ok = &a;
	r = rpc_hello(c, client, proto_min, timeout_ms, &h, errtext, errlen);
	if (r)
		return r;
	if (hello)
		*hello = h;
	if (h.proto < 2)
		return 0; /* only when proto_min allowed it */
	r = rpc_auth(c, &h, principal, key, NULL, 0, timeout_ms, ok,
		     session_key, errtext, errlen);
	if (!r && role && ok->role != role) {
		if (errtext)
			snprintf(errtext, errlen,
				 "memd gave %s the role %s, not %s", principal,
				 role_name(ok->role), role_name(role));
		r = -EPROTO;
	}
	return r;
}

int rpc_fd(struct rpc *c)
{
	return c->fd;
}

uint64_t rpc_pushes(struct rpc *c)
{
	uint64_t n;

	pthread_mutex_lock(&c->lock);
	n = c->pushes;
	pthread_mutex_unlock(&c->lock);
	return n;
}

int rpc_read_pushes(struct rpc *c)
{
	struct wire_msg *m;
	int r = 0;

	pthread_mutex_lock(&c->lock);
	if (c->broken) {
		pthread_mutex_unlock(&c->lock);
		return -ENOTCONN;
	}
	m = malloc(sizeof(*m));
	if (!m) {
		pthread_mutex_unlock(&c->lock);
		return -ENOMEM;
	}
	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 0) <= 0)
			break;
		n = recv_frame(c, mono_ms() + 1000);
		if (n < 0) {
			r = rpc_drop_locked(c, WIRE_DONOR_NEWS, (int)n);
			break;
		}
		if (wire_decode(c->buf, (size_t)n, m) != n ||
		    m->type != WIRE_DONOR_NEWS || m->seq != 0) {
			r = rpc_drop_locked(c, WIRE_DONOR_NEWS, -EPROTO);
			break;
		}
		c->pushes++;
	}
	pthread_mutex_unlock(&c->lock);
	free(m);
	return r;
}
