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

int memd_config_validate_src(const struct memd_config *c,
			     const struct memd_conf_src *src, char *err,
			     size_t errlen)
{
	char what[MEMD_CONF_WHAT_MAX], shown[64], a[32], b[32];
	char at[MEMD_CONF_STR_MAX + 32];
	struct memd_config scratch; /* strings are re-parsed into it */
	const struct memd_conf_key *k;
	int nodes[MEMD_NUMA_NODES_MAX], nnodes;
	size_t i;
	uint64_t v;
	int rc;

	/* Each key on its own: a struct may have been filled by code. */
	for (i = 0; i < memd_conf_nkeys; i++) {
		k = &memd_conf_keys[i];
		if (k->type == MEMD_CONF_STRING) {
			const char *s = (const char *)c + k->off;

			if (!memchr(s, '\0', MEMD_CONF_STR_MAX)) {
				memd_errf(err, errlen,
					  "%skey '%s': not terminated",
					  memd_conf_where(src, k->name, NULL,
							  at, sizeof(at)),
					  k->name);
				return -EINVAL;
			}
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
		if (rc) {
			memd_errf(err, errlen, "%skey '%s': %s",
				  memd_conf_where(src, k->name, NULL, at,
						  sizeof(at)),
				  k->name, what);
			return -EINVAL;
		}
	}

	memd_conf_format_bytes(c->donate_bytes, a, sizeof(a));
	memd_conf_format_bytes(c->slab_bytes, b, sizeof(b));
	if (c->donate_bytes < c->slab_bytes) {
		memd_errf(err, errlen,
			  "%skey 'donate': %s is less than one slab "
			  "(slab_size = %s)",
			  memd_conf_where(src, "donate", "slab_size", at,
					  sizeof(at)),
			  a, b);
		return -EINVAL;
	}
	if (c->donate_bytes % c->slab_bytes) {
		memd_errf(err, errlen,
			  "%skey 'donate': %s is not a multiple of "
			  "slab_size = %s",
			  memd_conf_where(src, "donate", "slab_size", at,
					  sizeof(at)),
			  a, b);
		return -EINVAL;
	}
	nnodes = memd_config_numa_nodes(c, nodes);
	if (nnodes > 1 &&
	    c->donate_bytes % (c->slab_bytes * (uint64_t)nnodes)) {
		char per[32];

		memd_conf_format_bytes(c->slab_bytes * (uint64_t)nnodes, per,
				       sizeof(per));
		memd_errf(err, errlen,
			  "%skey 'numa_nodes': donate = %s does not split "
			  "into whole slabs over %d nodes (slab_size = "
			  "%s each); make donate a multiple of %s",
			  memd_conf_where(src, "numa_nodes", "donate", at,
					  sizeof(at)),
			  a, nnodes, b, per);
		return -EINVAL;
	}
	if (c->registry[0] && !c->cluster_secret_file[0]) {
		memd_errf(err, errlen,
			  "%skey 'registry': registry = %s needs "
			  "cluster_secret_file",
			  memd_conf_where(src, "registry",
					  "cluster_secret_file", at,
					  sizeof(at)),
			  c->registry);
		return -EINVAL;
	}
	if (memd_config_registry_is_etcd(c) && !c->etcd_endpoints[0]) {
		memd_errf(err, errlen,
			  "%skey 'registry': registry = etcd needs "
			  "etcd_endpoints",
			  memd_conf_where(src, "registry", "etcd_endpoints", at,
					  sizeof(at)));
		return -EINVAL;
	}
	if (!c->etcd_user[0] != !c->etcd_password_file[0]) {
		memd_errf(err, errlen,
			  "%skey 'etcd_user': etcd authentication needs "
			  "both etcd_user and etcd_password_file",
			  memd_conf_where(src, "etcd_user",
					  "etcd_password_file", at,
					  sizeof(at)));
		return -EINVAL;
	}
	if ((c->etcd_cert[0] || c->etcd_key[0]) &&
	    (!c->etcd_cert[0] || !c->etcd_key[0] || !c->etcd_cacert[0])) {
		memd_errf(err, errlen,
			  "%skey 'etcd_cert': a client certificate needs "
			  "etcd_cert, etcd_key and etcd_cacert",
			  memd_conf_where(src, "etcd_cert", "etcd_key", at,
					  sizeof(at)));
		return -EINVAL;
	}
	if (c->registry_peers[0] && !memd_config_registry_is_etcd(c)) {
		memd_errf(err, errlen,
			  "%skey 'registry_peers': only with registry = "
			  "etcd",
			  memd_conf_where(src, "registry_peers", "registry", at,
					  sizeof(at)));
		return -EINVAL;
	}
	if (c->metrics_listen[0] && !strcmp(c->metrics_listen, c->listen) &&
	    strcmp(strrchr(c->listen, ':'), ":0")) {
		memd_errf(err, errlen,
			  "%skey 'metrics_listen': %s is the control "
			  "address (listen); give /metrics a port of its "
			  "own",
			  memd_conf_where(src, "metrics_listen", "listen", at,
					  sizeof(at)),
			  c->metrics_listen);
		return -EINVAL;
	}
	if (c->kv_mrc_samples && c->kv_mrc_samples < 16) {
		memd_errf(err, errlen,
			  "%skey 'kv_mrc_samples': %u is too few to "
			  "sample (16 at least, or 0 for no curves)",
			  memd_conf_where(src, "kv_mrc_samples", NULL, at,
					  sizeof(at)),
			  c->kv_mrc_samples);
		return -EINVAL;
	}
	if (!c->kv_spill_dir[0] != !c->kv_spill_bytes) {
		memd_conf_format_bytes(c->kv_spill_bytes, a, sizeof(a));
		if (c->kv_spill_dir[0])
			memd_errf(err, errlen,
				  "%skey 'kv_spill_dir': %s needs a size cap "
				  "(kv_spill_size)",
				  memd_conf_where(src, "kv_spill_dir",
						  "kv_spill_size", at,
						  sizeof(at)),
				  c->kv_spill_dir);
		else
			memd_errf(err, errlen,
				  "%skey 'kv_spill_size': %s without "
				  "kv_spill_dir",
				  memd_conf_where(src, "kv_spill_size",
						  "kv_spill_dir", at,
						  sizeof(at)),
				  a);
		return -EINVAL;
	}
	if (c->idle_timeout_ms &&
	    (c->idle_timeout_ms <= c->lease_ttl_ms ||
	     c->idle_timeout_ms <= c->report_interval_ms)) {
		memd_conf_format_ms(c->idle_timeout_ms, a, sizeof(a));
		memd_conf_format_ms(c->lease_ttl_ms > c->report_interval_ms
					    ? c->lease_ttl_ms
					    : c->report_interval_ms,
				    b, sizeof(b));
		memd_errf(
			err, errlen,
			"%skey 'idle_timeout': %s must be 0 or longer "
			"than lease_ttl and report_interval (%s), or "
			"memd would close clients that only heartbeat",
			memd_conf_where(src, "idle_timeout",
					c->lease_ttl_ms > c->report_interval_ms
						? "lease_ttl"
						: "report_interval",
					at, sizeof(at)),
			a, b);
		return -EINVAL;
	}
	if (c->lease_grace_ms >= c->lease_ttl_ms) {
		memd_conf_format_ms(c->lease_grace_ms, a, sizeof(a));
		memd_conf_format_ms(c->lease_ttl_ms, b, sizeof(b));
		memd_errf(err, errlen,
			  "%skey 'lease_grace': %s must be less than "
			  "lease_ttl = %s",
			  memd_conf_where(src, "lease_grace", "lease_ttl", at,
					  sizeof(at)),
			  a, b);
		return -EINVAL;
	}
	return 0;
}
