// SPDX-License-Identifier: MIT
/*
 * memd/config_validate.c - memd_config_validate(): a whole config, as
 * memd would run it. Each key again (a struct may have been filled by
 * code), then the rules that couple keys (donate against slab_size and
 * numa_nodes, what registry needs, the etcd credentials, timeouts
 * against each other). An error names the file and line (or the flag)
 * that set the key at fault, or the other key of the rule.
 *
 * Invariant: no rule couples a reloadable key to one that is not (see
 * memd_config_reload() in config.c).
 *
 * Threads: none. Pure and reentrant.
 */
#include "memd/config_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "memd/log.h"

/*
 * "FILE:LINE: " for the line that set key a (or, when a kept its
 * default, key b: the other side of the rule), "command line: " for a
 * flag, "FILE: " when neither came from a line, "" without a source.
 */
static const char *memd_conf_where(const struct memd_conf_src *src,
				   const char *a, const char *b, char *buf,
				   size_t len)
{
	int line;

	buf[0] = '\0';
	if (!src)
		return buf;
	line = src->line[memd_conf_find(a) - memd_conf_keys];
	if (line == MEMD_CONF_SRC_DEFAULT && b)
		line = src->line[memd_conf_find(b) - memd_conf_keys];
	if (line == MEMD_CONF_SRC_FLAG)
		snprintf(buf, len, "command line: ");
	else if (src->path && line > 0)
		snprintf(buf, len, "%s:%d: ", src->path, line);
	else if (src->path)
		snprintf(buf, len, "%s: ", src->path);
	return buf;
}

int memd_config_validate(const struct memd_config *c, char *err, size_t errlen)
{
	return memd_config_validate_src(c, NULL, err, errlen);
}

/*
 * Writes "WHERE key 'a': WHAT" to err, WHERE naming what set key a (or
 * b, the rule's other key, when a kept its default). Returns -EINVAL.
 */
__attribute__((format(printf, 6, 7))) static int
memd_conf_refuse(const struct memd_conf_src *src, const char *a, const char *b,
		 char *err, size_t errlen, const char *fmt, ...)
{
	char at[MEMD_CONF_STR_MAX + 32], what[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	memd_errf(err, errlen, "%skey '%s': %s",
		  memd_conf_where(src, a, b, at, sizeof(at)), a, what);
	return -EINVAL;
}

int memd_config_validate_src(const struct memd_config *c,
			     const struct memd_conf_src *src, char *err,
			     size_t errlen)
{
	char what[MEMD_CONF_WHAT_MAX], shown[64], a[32], b[32], per[32];
	struct memd_config scratch; /* strings are re-parsed into it */
	const struct memd_conf_key *k;
	int nodes[MEMD_NUMA_NODES_MAX], nnodes;
	const char *longer;
	size_t i;
	uint64_t v;
	int rc;

	/* Each key on its own: a struct may have been filled by code. */
	for (i = 0; i < memd_conf_nkeys; i++) {
		k = &memd_conf_keys[i];
		if (k->type == MEMD_CONF_STRING) {
			const char *s = (const char *)c + k->off;

			if (!memchr(s, '\0', MEMD_CONF_STR_MAX))
				return memd_conf_refuse(src, k->name, NULL, err,
							errlen,
							"not terminated");
			rc = memd_conf_assign(&scratch, k, s, what,
					      sizeof(what));
		} else {
			v = memd_conf_get_num(c, k);
			memd_conf_format_num(k, v, shown, sizeof(shown));
			rc = memd_conf_check_num(k, v, shown, what,
						 sizeof(what));
			if (rc)
				memd_conf_append_expect(k, what, sizeof(what));
		}
		if (rc)
			return memd_conf_refuse(src, k->name, NULL, err, errlen,
						"%s", what);
	}

	memd_conf_format_bytes(c->donate_bytes, a, sizeof(a));
	memd_conf_format_bytes(c->slab_bytes, b, sizeof(b));
	if (c->donate_bytes < c->slab_bytes)
		return memd_conf_refuse(src, "donate", "slab_size", err, errlen,
					"%s is less than one slab "
					"(slab_size = %s)",
					a, b);
	if (c->donate_bytes % c->slab_bytes)
		return memd_conf_refuse(src, "donate", "slab_size", err, errlen,
					"%s is not a multiple of "
					"slab_size = %s",
					a, b);
	nnodes = memd_config_numa_nodes(c, nodes);
	if (nnodes > 1 &&
	    c->donate_bytes % (c->slab_bytes * (uint64_t)nnodes)) {
		memd_conf_format_bytes(c->slab_bytes * (uint64_t)nnodes, per,
				       sizeof(per));
		return memd_conf_refuse(src, "numa_nodes", "donate", err,
					errlen,
					"donate = %s does not split "
					"into whole slabs over %d nodes "
					"(slab_size = %s each); make donate "
					"a multiple of %s",
					a, nnodes, b, per);
	}
	if (c->registry[0] && !c->cluster_secret_file[0])
		return memd_conf_refuse(src, "registry", "cluster_secret_file",
					err, errlen,
					"registry = %s needs "
					"cluster_secret_file",
					c->registry);
	if (memd_config_registry_is_etcd(c) && !c->etcd_endpoints[0])
		return memd_conf_refuse(src, "registry", "etcd_endpoints", err,
					errlen,
					"registry = etcd needs "
					"etcd_endpoints");
	if (!c->etcd_user[0] != !c->etcd_password_file[0])
		return memd_conf_refuse(src, "etcd_user", "etcd_password_file",
					err, errlen,
					"etcd authentication needs both "
					"etcd_user and etcd_password_file");
	if ((c->etcd_cert[0] || c->etcd_key[0]) &&
	    (!c->etcd_cert[0] || !c->etcd_key[0] || !c->etcd_cacert[0]))
		return memd_conf_refuse(src, "etcd_cert", "etcd_key", err,
					errlen,
					"a client certificate needs "
					"etcd_cert, etcd_key and etcd_cacert");
	if (c->registry_peers[0] && !memd_config_registry_is_etcd(c))
		return memd_conf_refuse(src, "registry_peers", "registry", err,
					errlen, "only with registry = etcd");
	if (c->metrics_listen[0] && !strcmp(c->metrics_listen, c->listen) &&
	    strcmp(strrchr(c->listen, ':'), ":0"))
		return memd_conf_refuse(src, "metrics_listen", "listen", err,
					errlen,
					"%s is the control address "
					"(listen); give /metrics a port of "
					"its own",
					c->metrics_listen);
	if (c->kv_mrc_samples && c->kv_mrc_samples < 16)
		return memd_conf_refuse(src, "kv_mrc_samples", NULL, err,
					errlen,
					"%u is too few to sample (16 at "
					"least, or 0 for no curves)",
					c->kv_mrc_samples);
	if (c->kv_spill_dir[0] && !c->kv_spill_bytes)
		return memd_conf_refuse(
			src, "kv_spill_dir", "kv_spill_size", err, errlen,
			"%s needs a size cap (kv_spill_size)", c->kv_spill_dir);
	if (!c->kv_spill_dir[0] && c->kv_spill_bytes) {
		memd_conf_format_bytes(c->kv_spill_bytes, a, sizeof(a));
		return memd_conf_refuse(src, "kv_spill_size", "kv_spill_dir",
					err, errlen, "%s without kv_spill_dir",
					a);
	}
	if (c->idle_timeout_ms &&
	    (c->idle_timeout_ms <= c->lease_ttl_ms ||
	     c->idle_timeout_ms <= c->report_interval_ms)) {
		longer = c->lease_ttl_ms > c->report_interval_ms
				 ? "lease_ttl"
				 : "report_interval";
		memd_conf_format_ms(c->idle_timeout_ms, a, sizeof(a));
		memd_conf_format_ms(c->lease_ttl_ms > c->report_interval_ms
					    ? c->lease_ttl_ms
					    : c->report_interval_ms,
				    b, sizeof(b));
		return memd_conf_refuse(src, "idle_timeout", longer, err,
					errlen,
					"%s must be 0 or longer than "
					"lease_ttl and report_interval (%s), "
					"or memd would close clients that "
					"only heartbeat",
					a, b);
	}
	if (c->lease_grace_ms >= c->lease_ttl_ms) {
		memd_conf_format_ms(c->lease_grace_ms, a, sizeof(a));
		memd_conf_format_ms(c->lease_ttl_ms, b, sizeof(b));
		return memd_conf_refuse(src, "lease_grace", "lease_ttl", err,
					errlen,
					"%s must be less than "
					"lease_ttl = %s",
					a, b);
	}
	return 0;
}
