// SPDX-License-Identifier: MIT
/*
 * memd/etcd.c - etcd v3 through its JSON gateway (see etcd.h).
 *
 * Every request is a POST of a JSON body to /v3/<service>/<method>; keys
 * and values are base64 (libsodium's codec), 64-bit integers come back as
 * JSON strings. Why the gateway and not gRPC: Debian 12 ships no C etcd
 * client nor a gRPC C library fit to link into memd, while libcurl is in
 * every distribution and the gateway is part of every etcd 3.x server.
 *
 * Threads: none of its own; one mutex serializes requests on a handle.
 * The endpoint that answered last is tried first next time. A watch
 * (memd_etcd_watch) streams on a connection of its own, in its caller's
 * thread, without that mutex.
 */
#include "memd/etcd.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "memd/log.h"

#define MAX_ENDPOINTS 16
#define REPLY_MAX (8u << 20) /* a bigger reply is refused */

struct memd_etcd {
	pthread_mutex_t lock;
	CURL *curl;
	char *url[MAX_ENDPOINTS]; /* "http://host:port" */
	int nurl, cur;
	uint32_t timeout_ms;
	char *cacert, *cert, *key;
	/* etcd authentication: user and password (NULL: none), and the
	 * token they got (NULL: none yet, or it expired); under lock */
	char *user, *password, *token;
};

struct buf {
	char *p;
	size_t n, cap;
	bool too_big;
};

/* memd_errf() (memd/log.h), by the name this file's callers use */
#define set_err memd_errf

static size_t on_body(char *p, size_t sz, size_t n, void *arg)
{
	struct buf *b = arg;
	size_t len = sz * n;

	if (b->n + len + 1 > REPLY_MAX) {
		b->too_big = true;
		return 0;
	}
	if (b->n + len + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *q;

		while (cap < b->n + len + 1)
			cap *= 2;
		q = realloc(b->p, cap);
		if (!q)
			return 0;
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->n, p, len);
	b->n += len;
	b->p[b->n] = '\0';
	return len;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

void memd_etcd_close(struct memd_etcd *e)
{
	if (!e)
		return;
	if (e->curl)
		curl_easy_cleanup(e->curl);
	for (int i = 0; i < e->nurl; i++)
		free(e->url[i]);
	free(e->cacert);
	free(e->cert);
	free(e->key);
	free(e->user);
	if (e->password)
		sodium_memzero(e->password, strlen(e->password));
	free(e->password);
	if (e->token)
		sodium_memzero(e->token, strlen(e->token));
	free(e->token);
	pthread_mutex_destroy(&e->lock);
	free(e);
}

static char *dup_or_null(const char *s)
{
	return s && s[0] ? strdup(s) : NULL;
}

/* The password: the first line of path, which only its owner may read.
 * 0 and *out (malloc'ed), or -errno with err. */
static int password_read(const char *path, char **out, char *err, size_t errlen)
{
	char buf[256];
	struct stat st;
	size_t n;
	FILE *f;

	*out = NULL;
	f = fopen(path, "re");
	if (!f) {
		int rc = -errno;

		set_err(err, errlen, "etcd: etcd_password_file %s: %s", path,
			strerror(-rc));
		return rc;
	}
	if (fstat(fileno(f), &st) || (st.st_mode & 077)) {
		fclose(f);
		set_err(err, errlen,
			"etcd: etcd_password_file %s: group or others may "
			"access it (chmod 600)",
			path);
		return -EPERM;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	if (!buf[0] || n == sizeof(buf) - 1) {
		sodium_memzero(buf, sizeof(buf));
		set_err(err, errlen, "etcd: etcd_password_file %s: %s", path,
			buf[0] ? "longer than 254 bytes" : "empty first line");
		return -EINVAL;
	}
	*out = strdup(buf);
	sodium_memzero(buf, sizeof(buf));
	if (!*out) {
		set_err(err, errlen, "etcd: out of memory");
		return -ENOMEM;
	}
	return 0;
}

int memd_etcd_open(const struct memd_etcd_opts *o, struct memd_etcd **out,
		   char *err, size_t errlen)
{
	struct memd_etcd *e;
	const char *p;
	bool tls;

	*out = NULL;
	if (!o || !o->endpoints || !o->endpoints[0]) {
		set_err(err, errlen, "etcd: no endpoints");
		return -EINVAL;
	}
	if (!(o->user && o->user[0]) !=
	    !(o->password_file && o->password_file[0])) {
		set_err(err, errlen,
			"etcd: authentication needs both a user and a password "
			"file");
		return -EINVAL;
	}
	if (!o->cert != !o->key || (o->cert && !o->cert[0] != !o->key[0])) {
		set_err(err, errlen,
			"etcd: a client certificate needs both cert and key");
		return -EINVAL;
	}
	pthread_once(&curl_once, curl_init_once);
	e = calloc(1, sizeof(*e));
	if (!e)
		goto nomem;
	pthread_mutex_init(&e->lock, NULL);
	e->timeout_ms = o->timeout_ms ? o->timeout_ms : 2000;
	tls = o->cacert && o->cacert[0];
	for (p = o->endpoints; *p;) {
		size_t n = strcspn(p, ",");

		if (!n || n > 255 || memchr(p, ' ', n) || !memchr(p, ':', n)) {
			set_err(err, errlen,
				"etcd: endpoint '%.*s' is not HOST:PORT",
				(int)(n > 64 ? 64 : n), p);
			memd_etcd_close(e);
			return -EINVAL;
		}
		if (e->nurl == MAX_ENDPOINTS) {
			set_err(err, errlen, "etcd: more than %d endpoints",
				MAX_ENDPOINTS);
			memd_etcd_close(e);
			return -EINVAL;
		}
		if (asprintf(&e->url[e->nurl], "%s://%.*s",
			     tls ? "https" : "http", (int)n, p) < 0) {
			e->url[e->nurl] = NULL;
			goto nomem;
		}
		e->nurl++;
		p += n;
		if (*p == ',')
			p++;
	}
	e->cacert = dup_or_null(o->cacert);
	e->cert = dup_or_null(o->cert);
	e->key = dup_or_null(o->key);
	if (o->user && o->user[0]) {
		int rc = password_read(o->password_file, &e->password, err,
				       errlen);

		if (rc) {
			memd_etcd_close(e);
			return rc;
		}
		e->user = strdup(o->user);
		if (!e->user)
			goto nomem;
	}
	e->curl = curl_easy_init();
	if (!e->curl)
		goto nomem;
	*out = e;
	return 0;
nomem:
	memd_etcd_close(e);
	set_err(err, errlen, "etcd: out of memory");
	return -ENOMEM;
}

/*
 * POSTs body to path at the endpoints, the last good one first. 0 and
 * *reply (parsed), or -EIO with err (every endpoint failed; err names
 * the last failure). An HTTP 4xx is etcd refusing the request: -EPROTO
 * with its message, not tried elsewhere. Caller holds e->lock.
 */
static int post_text_locked(struct memd_etcd *e, const char *path,
			    const char *text, json_t **reply, char *err,
			    size_t errlen, long *http)
{
	struct curl_slist *hdr = NULL;
	int rc = -EIO;

	*reply = NULL;
	*http = 0;
	hdr = curl_slist_append(hdr, "Content-Type: application/json");
	if (e->token) {
		char *auth = NULL;

		if (asprintf(&auth, "Authorization: %s", e->token) < 0) {
			curl_slist_free_all(hdr);
			set_err(err, errlen, "etcd: out of memory");
			return -ENOMEM;
		}
		hdr = curl_slist_append(hdr, auth);
		sodium_memzero(auth, strlen(auth));
		free(auth);
	}
	for (int k = 0; k < e->nurl; k++) {
		int i = (e->cur + k) % e->nurl;
		struct buf b = { 0 };
		char url[300];
		long code = 0;
		json_error_t je;
		CURLcode cc;

		snprintf(url, sizeof(url), "%s%s", e->url[i], path);
		curl_easy_reset(e->curl);
		curl_easy_setopt(e->curl, CURLOPT_URL, url);
		curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, text);
		curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, hdr);
		curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, &b);
		curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS,
				 (long)e->timeout_ms);
		curl_easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS,
				 (long)e->timeout_ms);
		curl_easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L);
		if (e->cacert)
			curl_easy_setopt(e->curl, CURLOPT_CAINFO, e->cacert);
		if (e->cert) {
			curl_easy_setopt(e->curl, CURLOPT_SSLCERT, e->cert);
			curl_easy_setopt(e->curl, CURLOPT_SSLKEY, e->key);
		}
		cc = curl_easy_perform(e->curl);
		if (cc == CURLE_OK)
			curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE,
					  &code);
		if (cc != CURLE_OK || code >= 500 || !b.p) {
			set_err(err, errlen, "etcd %s: %s", e->url[i],
				b.too_big	 ? "reply too large"
				: cc != CURLE_OK ? curl_easy_strerror(cc)
						 : "server error");
			free(b.p);
			continue;
		}
		*reply = json_loadb(b.p, b.n, 0, &je);
		if (!*reply || code != 200) {
			json_t *m = *reply ? json_object_get(*reply, "error")
					   : NULL;

			set_err(err, errlen, "etcd %s: HTTP %ld: %.200s",
				e->url[i], code,
				json_is_string(m) ? json_string_value(m)
						  : "not JSON");
			json_decref(*reply);
			*reply = NULL;
			free(b.p);
			*http = code;
			rc = -EPROTO;
			break;
		}
		sodium_memzero(b.p, b.n);
		free(b.p);
		e->cur = i;
		rc = 0;
		break;
	}
	curl_slist_free_all(hdr);
	return rc;
}

/* Gets a token for e->user (POST /v3/auth/authenticate). Caller holds
 * e->lock. */
static int authenticate_locked(struct memd_etcd *e, char *err, size_t errlen)
{
	json_t *body = json_pack("{s:s, s:s}", "name", e->user, "password",
				 e->password),
	       *reply = NULL, *t;
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	long http;
	int rc;

	json_decref(body);
	if (!text) {
		set_err(err, errlen, "etcd: out of memory");
		return -ENOMEM;
	}
	rc = post_text_locked(e, "/v3/auth/authenticate", text, &reply, err,
			      errlen, &http);
	sodium_memzero(text, strlen(text));
	free(text);
	if (rc == -EPROTO) {
		char why[200];

		snprintf(why, sizeof(why), "%s", err);
		set_err(err, errlen, "etcd: authentication as '%s' failed: %s",
			e->user, why);
		return -EACCES;
	}
	if (rc)
		return rc;
	t = json_object_get(reply, "token");
	if (!json_is_string(t) || !json_string_value(t)[0]) {
		json_decref(reply);
		set_err(err, errlen,
			"etcd: authentication as '%s' gave no token (is auth "
			"enabled in etcd?)",
			e->user);
		return -EPROTO;
	}
	e->token = strdup(json_string_value(t));
	json_decref(reply);
	if (!e->token) {
		set_err(err, errlen, "etcd: out of memory");
		return -ENOMEM;
	}
	return 0;
}

static void token_drop_locked(struct memd_etcd *e)
{
	if (e->token)
		sodium_memzero(e->token, strlen(e->token));
	free(e->token);
	e->token = NULL;
}

/* An etcd refusal that a fresh token may cure (simple tokens expire
 * after --auth-token-ttl, 5 min by default, without use). */
static bool token_refused(long http, const char *err)
{
	return http == 401 || strstr(err, "invalid auth token") ||
	       strstr(err, "user name is empty");
}

static int post_locked(struct memd_etcd *e, const char *path, json_t *body,
		       json_t **reply, char *err, size_t errlen)
{
	char *text = json_dumps(body, JSON_COMPACT);
	long http = 0;
	int rc;

	*reply = NULL;
	if (!text) {
		set_err(err, errlen, "etcd: out of memory");
		return -ENOMEM;
	}
	for (int tries = 0;; tries++) {
		if (e->user && !e->token) {
			rc = authenticate_locked(e, err, errlen);
			if (rc)
				break;
		}
		rc = post_text_locked(e, path, text, reply, err, errlen, &http);
		if (rc != -EPROTO || !e->user || tries ||
		    !token_refused(http, err))
			break;
		token_drop_locked(e); /* expired: once more with a new one */
	}
	sodium_memzero(text, strlen(text));
	free(text);
	return rc;
}

static int post(struct memd_etcd *e, const char *path, json_t *body,
		json_t **reply, char *err, size_t errlen)
{
	int rc;

	if (!body) {
		set_err(err, errlen, "etcd: out of memory");
		return -ENOMEM;
	}
	pthread_mutex_lock(&e->lock);
	rc = post_locked(e, path, body, reply, err, errlen);
	pthread_mutex_unlock(&e->lock);
	json_decref(body);
	return rc;
}

static json_t *b64(const void *p, size_t n)
{
	size_t cap =
		sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
	char *s = malloc(cap);
	json_t *j;

	if (!s)
		return NULL;
	sodium_bin2base64(s, cap, p, n, sodium_base64_VARIANT_ORIGINAL);
	j = json_string(s);
	sodium_memzero(s, cap);
	free(s);
	return j;
}

/* An int64 etcd sends as a string (or a number); absent: 0. */
static int64_t i64(json_t *o, const char *k)
{
	json_t *x = json_object_get(o, k);

	if (json_is_integer(x))
		return json_integer_value(x);
	if (json_is_string(x))
		return strtoll(json_string_value(x), NULL, 10);
	return 0;
}

int memd_etcd_get(struct memd_etcd *e, const char *key, char **val, size_t *len,
		  int64_t *mod_rev, int64_t *create_rev, char *err,
		  size_t errlen)
{
	json_t *reply, *kv, *v;
	const char *s;
	size_t cap;
	int rc;

	*val = NULL;
	*len = 0;
	*mod_rev = 0;
	if (create_rev)
		*create_rev = 0;
	rc = post(e, "/v3/kv/range",
		  json_pack("{s:o}", "key", b64(key, strlen(key))), &reply, err,
		  errlen);
	if (rc)
		return rc;
	kv = json_array_get(json_object_get(reply, "kvs"), 0);
	if (!kv) {
		json_decref(reply);
		return -ENOENT;
	}
	v = json_object_get(kv, "value");
	s = json_is_string(v) ? json_string_value(v) : "";
	cap = strlen(s) + 1;
	*val = malloc(cap);
	if (!*val) {
		json_decref(reply);
		set_err(err, errlen, "etcd: out of memory");
		return -ENOMEM;
	}
	if (sodium_base642bin((unsigned char *)*val, cap, s, strlen(s), NULL,
			      len, NULL, sodium_base64_VARIANT_ORIGINAL)) {
		free(*val);
		*val = NULL;
		json_decref(reply);
		set_err(err, errlen, "etcd: value of '%s' is not base64", key);
		return -EPROTO;
	}
	(*val)[*len] = '\0';
	*mod_rev = i64(kv, "mod_revision");
	if (create_rev)
		*create_rev = i64(kv, "create_revision");
	json_decref(reply);
	return 0;
}

int memd_etcd_put_if(struct memd_etcd *e, const char *key, const void *val,
		     size_t len, int64_t mod_rev, int64_t lease, int64_t *rev,
		     char *err, size_t errlen)
{
	json_t *op, *reply;
	char mr[24], ls[24];
	int rc;

	snprintf(mr, sizeof(mr), "%" PRId64, mod_rev);
	snprintf(ls, sizeof(ls), "%" PRId64, lease);
	if (val)
		op = json_pack("{s:{s:o, s:o, s:s}}", "request_put", "key",
			       b64(key, strlen(key)), "value", b64(val, len),
			       "lease", ls);
	else
		op = json_pack("{s:{s:o}}", "request_delete_range", "key",
			       b64(key, strlen(key)));
	rc = post(e, "/v3/kv/txn",
		  op ? json_pack("{s:[{s:s, s:s, s:o, s:s}], s:[o]}", "compare",
				 "result", "EQUAL", "target", "MOD", "key",
				 b64(key, strlen(key)), "mod_revision", mr,
				 "success", op)
		     : NULL,
		  &reply, err, errlen);
	if (rc)
		return rc;
	if (!json_is_true(json_object_get(reply, "succeeded"))) {
		json_decref(reply);
		set_err(err, errlen,
			"etcd: '%s' changed since revision %" PRId64, key,
			mod_rev);
		return -ECANCELED;
	}
	if (rev)
		*rev = i64(json_object_get(reply, "header"), "revision");
	json_decref(reply);
	return 0;
}

int memd_etcd_lease_grant(struct memd_etcd *e, int64_t ttl_s, int64_t *id,
			  int64_t *granted_s, char *err, size_t errlen)
{
	json_t *reply;
	int rc;

	rc = post(e, "/v3/lease/grant",
		  json_pack("{s:I, s:I}", "TTL", (json_int_t)ttl_s, "ID",
			    (json_int_t)0),
		  &reply, err, errlen);
	if (rc)
		return rc;
	*id = i64(reply, "ID");
	*granted_s = i64(reply, "TTL");
	json_decref(reply);
	if (!*id || *granted_s <= 0) {
		set_err(err, errlen, "etcd: lease grant without an id or TTL");
		return -EPROTO;
	}
	return 0;
}

/* POSTs {"ID": "id"}, a lease's id as etcd's gateway takes it, to path. */
static int post_lease_id(struct memd_etcd *e, const char *path, int64_t id,
			 json_t **reply, char *err, size_t errlen)
{
	char s[24];

	snprintf(s, sizeof(s), "%" PRId64, id);
	return post(e, path, json_pack("{s:s}", "ID", s), reply, err, errlen);
}

int memd_etcd_lease_keepalive(struct memd_etcd *e, int64_t id, int64_t *ttl_s,
			      char *err, size_t errlen)
{
	json_t *reply;
	int rc;

	rc = post_lease_id(e, "/v3/lease/keepalive", id, &reply, err, errlen);
	if (rc)
		return rc;
	*ttl_s = i64(json_object_get(reply, "result"), "TTL");
	json_decref(reply);
	if (*ttl_s <= 0) {
		set_err(err, errlen, "etcd: lease %" PRIx64 " has expired",
			(uint64_t)id);
		return -ENOENT;
	}
	return 0;
}

int memd_etcd_lease_revoke(struct memd_etcd *e, int64_t id, char *err,
			   size_t errlen)
{
	json_t *reply;
	int rc;

	rc = post_lease_id(e, "/v3/lease/revoke", id, &reply, err, errlen);
	json_decref(reply);
	return rc;
}

/* ---- watch ------------------------------------------------------------- */

struct watch {
	struct buf b;
	memd_etcd_watch_fn fn;
	void *arg;
	int64_t *rev;
	bool created, bad;
	char why[160];
};

/* One WatchResponse (a line of the gateway's stream). */
static void watch_line(struct watch *w, const char *p, size_t n)
{
	json_error_t je;
	json_t *j = json_loadb(p, n, 0, &je), *res, *evs, *ev;
	size_t i;

	if (!j) {
		snprintf(w->why, sizeof(w->why), "watch: not JSON: %.100s",
			 je.text);
		w->bad = true;
		return;
	}
	res = json_object_get(j, "result");
	if (!json_is_object(res)) {
		json_t *m =
			json_object_get(json_object_get(j, "error"), "message");

		snprintf(w->why, sizeof(w->why), "watch: %.140s",
			 json_is_string(m) ? json_string_value(m)
					   : "no result");
		w->bad = true;
		json_decref(j);
		return;
	}
	if (json_is_true(json_object_get(res, "created")))
		w->created = true;
	if (json_is_true(json_object_get(res, "canceled")) ||
	    i64(res, "compact_revision")) {
		/* compacted past *rev: start again from now */
		snprintf(w->why, sizeof(w->why),
			 "watch canceled (compact revision %" PRId64 ")",
			 i64(res, "compact_revision"));
		*w->rev = 0;
		w->bad = true;
		json_decref(j);
		return;
	}
	evs = json_object_get(res, "events");
	json_array_foreach(evs, i, ev)
	{
		json_t *kv = json_object_get(ev, "kv"), *t, *k;
		unsigned char key[512];
		size_t klen = 0;
		const char *ks;

		t = json_object_get(ev, "type");
		k = json_object_get(kv, "key");
		ks = json_is_string(k) ? json_string_value(k) : "";
		if (sodium_base642bin(key, sizeof(key) - 1, ks, strlen(ks),
				      NULL, &klen, NULL,
				      sodium_base64_VARIANT_ORIGINAL))
			continue;
		key[klen] = '\0';
		w->fn(w->arg, (const char *)key,
		      json_is_string(t) &&
			      !strcmp(json_string_value(t), "DELETE"),
		      i64(kv, "mod_revision"));
	}
	{
		int64_t r = i64(json_object_get(res, "header"), "revision");

		/* the header's revision: every event up to it was sent */
		if (r > *w->rev && (json_array_size(evs) || w->created))
			*w->rev = r;
	}
	json_decref(j);
}

static size_t on_watch(char *p, size_t sz, size_t n, void *arg)
{
	struct watch *w = arg;
	size_t len = sz * n;
	char *nl;

	if (on_body(p, sz, n, &w->b) != len)
		return 0;
	while (!w->bad && (nl = memchr(w->b.p, '\n', w->b.n))) {
		size_t line = (size_t)(nl - w->b.p) + 1;

		if (line > 1)
			watch_line(w, w->b.p, line - 1);
		memmove(w->b.p, w->b.p + line, w->b.n - line + 1);
		w->b.n -= line;
	}
	return w->bad ? 0 : len;
}

static bool stopped(const volatile int *stop)
{
	return __atomic_load_n(stop, __ATOMIC_ACQUIRE) != 0;
}

int memd_etcd_watch(struct memd_etcd *e, const char *prefix, int64_t *rev,
		    uint32_t max_ms, memd_etcd_watch_fn fn, void *arg,
		    const volatile int *stop, char *err, size_t errlen)
{
	size_t plen = strlen(prefix);
	char *end = malloc(plen + 1), url[300], srev[24];
	json_t *body;
	char *text;
	int rc = -EIO, first;

	if (!end || !plen) {
		free(end);
		set_err(err, errlen, "etcd: watch: bad prefix");
		return -EINVAL;
	}
	/* [prefix, prefix with its last byte + 1): every key under it */
	memcpy(end, prefix, plen);
	end[plen - 1]++;
	snprintf(srev, sizeof(srev), "%" PRId64, *rev ? *rev + 1 : 0);
	body = json_pack("{s:{s:o, s:o, s:s}}", "create_request", "key",
			 b64(prefix, plen), "range_end", b64(end, plen),
			 "start_revision", srev);
	free(end);
	text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!text) {
		set_err(err, errlen, "etcd: out of memory");
		return -ENOMEM;
	}
	pthread_mutex_lock(&e->lock);
	first = e->cur;
	pthread_mutex_unlock(&e->lock);
	for (int k = 0; k < e->nurl && !stopped(stop); k++) {
		int i = (first + k) % e->nurl, still = 1;
		struct watch w = { .fn = fn, .arg = arg, .rev = rev };
		struct curl_slist *hdr = NULL;
		CURLM *m = curl_multi_init();
		CURL *c = curl_easy_init();
		uint64_t t0 = 0;
		struct timespec ts;
		CURLMsg *msg;
		int left;
		CURLcode cc = CURLE_OK;

		if (!m || !c) {
			curl_multi_cleanup(m);
			curl_easy_cleanup(c);
			rc = -ENOMEM;
			set_err(err, errlen, "etcd: out of memory");
			break;
		}
		hdr = curl_slist_append(hdr, "Content-Type: application/json");
		if (e->user) {
			char *auth = NULL;
			int ar;

			pthread_mutex_lock(&e->lock);
			ar = e->token ? 0 : authenticate_locked(e, err, errlen);
			if (!ar &&
			    asprintf(&auth, "Authorization: %s", e->token) < 0)
				auth = NULL;
			pthread_mutex_unlock(&e->lock);
			if (auth) {
				hdr = curl_slist_append(hdr, auth);
				sodium_memzero(auth, strlen(auth));
				free(auth);
			}
		}
		snprintf(url, sizeof(url), "%s/v3/watch", e->url[i]);
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_watch);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &w);
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
				 (long)e->timeout_ms);
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		if (e->cacert)
			curl_easy_setopt(c, CURLOPT_CAINFO, e->cacert);
		if (e->cert) {
			curl_easy_setopt(c, CURLOPT_SSLCERT, e->cert);
			curl_easy_setopt(c, CURLOPT_SSLKEY, e->key);
		}
		curl_multi_add_handle(m, c);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		t0 = (uint64_t)ts.tv_sec * 1000 +
		     (uint64_t)ts.tv_nsec / 1000000;
		while (still && !stopped(stop)) {
			uint64_t now;

			if (curl_multi_perform(m, &still) != CURLM_OK)
				break;
			if (!still)
				break;
			curl_multi_poll(m, NULL, 0, 100, NULL);
			clock_gettime(CLOCK_MONOTONIC, &ts);
			now = (uint64_t)ts.tv_sec * 1000 +
			      (uint64_t)ts.tv_nsec / 1000000;
			if (now - t0 >= max_ms)
				break;
		}
		while ((msg = curl_multi_info_read(m, &left)))
			if (msg->msg == CURLMSG_DONE)
				cc = msg->data.result;
		curl_multi_remove_handle(m, c);
		curl_easy_cleanup(c);
		curl_multi_cleanup(m);
		curl_slist_free_all(hdr);
		free(w.b.p);
		if (w.created) {
			/* it ran: stopped, timed out, or broke after a while */
			pthread_mutex_lock(&e->lock);
			e->cur = i;
			pthread_mutex_unlock(&e->lock);
			rc = still || stopped(stop) ? 0 : -EIO;
			if (rc)
				set_err(err, errlen, "etcd %s: watch ended: %s",
					e->url[i],
					w.bad ? w.why : curl_easy_strerror(cc));
			break;
		}
		set_err(err, errlen, "etcd %s: watch: %s", e->url[i],
			w.bad		 ? w.why
			: cc != CURLE_OK ? curl_easy_strerror(cc)
					 : "no stream");
		if (e->user) {
			/* perhaps an expired token: the next try asks for a
			 * new one */
			pthread_mutex_lock(&e->lock);
			token_drop_locked(e);
			pthread_mutex_unlock(&e->lock);
		}
		if (stopped(stop))
			rc = 0;
	}
	free(text);
	return rc;
}
