/* SPDX-License-Identifier: MIT */
/*
 * memd/etcd.h - a small client of etcd's v3 JSON gateway (libcurl +
 * jansson), what the registry's etcd backend needs and nothing more: one
 * key read, a put or delete guarded by a revision compare (one etcd
 * transaction), leases (grant, keepalive, revoke), and a watch of the
 * keys under a prefix (a streaming response). docs/cluster.md,
 * "The etcd backend".
 *
 * Endpoints are a list; a request that cannot reach one (connect error,
 * timeout, an HTTP 5xx) is tried on the next, each at most once per call,
 * so a call fails with -EIO only when no endpoint answered. etcd itself
 * answers a write only with quorum, so -EIO is also what a cluster that
 * lost quorum gives (after timeout_ms per endpoint).
 *
 * Thread-safe: one mutex serializes calls on a handle (one libcurl easy
 * handle, its connections reused). The only module that includes
 * <curl/curl.h>.
 */
#ifndef TP_MEMD_ETCD_H
#define TP_MEMD_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct memd_etcd;

struct memd_etcd_opts {
	const char *endpoints; /* "host:port,host:port,..." (1 to 16) */
	/* TLS: with cacert set, endpoints are https://; cert and key are a
	 * client certificate (both or neither). Passed to libcurl as is. */
	const char *cacert, *cert, *key;
	uint32_t timeout_ms; /* per endpoint and request */
	/* etcd user/password authentication (both or neither): the
	 * password is the first line of password_file (mode 0600 or
	 * stricter), read at open. A token is asked for (POST
	 * /v3/auth/authenticate) before the first request and again when
	 * etcd refuses an expired one; every request carries it. */
	const char *user, *password_file;
};

/* 0 and *out, or -EINVAL (err: a bad endpoint list, a user without a
 * password file), -EPERM/-ENOENT... (the password file), -ENOMEM. A
 * wrong password shows at the first request: -EACCES with err. */
int memd_etcd_open(const struct memd_etcd_opts *o, struct memd_etcd **out,
		   char *err, size_t errlen);
void memd_etcd_close(struct memd_etcd *e);

/*
 * Reads key (linearizable). 0 with *val (malloc'ed, NUL-terminated, the
 * caller frees it and may wipe it), *len, *mod_rev and *create_rev of the
 * key; -ENOENT when there is no such key (*mod_rev = 0); -EIO with err
 * when no endpoint answered; -EPROTO for a reply that makes no sense.
 */
int memd_etcd_get(struct memd_etcd *e, const char *key, char **val, size_t *len,
		  int64_t *mod_rev, int64_t *create_rev, char *err,
		  size_t errlen);

/*
 * One transaction: if key's mod_revision is mod_rev (0: the key does not
 * exist), put val (lease: 0 or a lease id) - or, with val NULL, delete
 * the key. 0 with *rev (may be NULL) the revision of the write;
 * -ECANCELED when the compare failed (someone else wrote the key: read
 * it again); -EIO, -EPROTO as memd_etcd_get.
 */
int memd_etcd_put_if(struct memd_etcd *e, const char *key, const void *val,
		     size_t len, int64_t mod_rev, int64_t lease, int64_t *rev,
		     char *err, size_t errlen);

/* Grants a lease of ttl_s seconds: 0 and *id, *granted_s; -EIO... */
int memd_etcd_lease_grant(struct memd_etcd *e, int64_t ttl_s, int64_t *id,
			  int64_t *granted_s, char *err, size_t errlen);
/* Renews lease id once: 0 and *ttl_s left; -ENOENT: it has expired. */
int memd_etcd_lease_keepalive(struct memd_etcd *e, int64_t id, int64_t *ttl_s,
			      char *err, size_t errlen);
/* Revokes lease id (the keys under it go): 0, -EIO... */
int memd_etcd_lease_revoke(struct memd_etcd *e, int64_t id, char *err,
			   size_t errlen);

/*
 * Watches every key under prefix (a byte-wise prefix, e.g. "/tidepool/")
 * through the gateway's streaming POST /v3/watch, on a connection of its
 * own (the handle's lock is not held meanwhile: other calls go on), from
 * revision *rev + 1 (*rev 0: from now). Calls fn for each event, in the
 * caller's thread: key, deleted (false: a put), the key's mod_revision;
 * keeps *rev at the last revision the stream covered, so a caller that
 * watches again misses nothing (unless etcd compacted it: *rev is reset
 * to 0). Returns after max_ms, or within 100 ms of *stop becoming non-zero:
 * 0; when the stream broke or none could be opened: -EIO with err (watch
 * again; the caller backs off). One endpoint at a time, the last good one
 * first.
 */
typedef void (*memd_etcd_watch_fn)(void *arg, const char *key, bool deleted,
				   int64_t mod_rev);
int memd_etcd_watch(struct memd_etcd *e, const char *prefix, int64_t *rev,
		    uint32_t max_ms, memd_etcd_watch_fn fn, void *arg,
		    const volatile int *stop, char *err, size_t errlen);

#endif
