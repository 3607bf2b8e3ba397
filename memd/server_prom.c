// SPDX-License-Identifier: MIT
/*
 * memd/server_prom.c - the Prometheus text format helpers every writer of
 * memd's GET /metrics shares (server_metrics.c, server_kv.c,
 * server_cluster.c): a label value, a metric's HELP and TYPE lines, a
 * gauge. They call nothing else in the server.
 */
#include "memd/server_int.h"

/* A Prometheus label value: backslash, quote and newline escaped. */
void srv_put_label(struct memd_metrics_buf *b, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			memd_metrics_printf(b, "\\%c", *v);
		else if (*v == '\n')
			memd_metrics_printf(b, "\\n");
		else
			memd_metrics_printf(b, "%c", *v);
	}
}

void srv_put_head(struct memd_metrics_buf *b, const char *name,
		  const char *type, const char *help)
{
	memd_metrics_printf(b, "# HELP tidepool_memd_%s %s\n", name, help);
	memd_metrics_printf(b, "# TYPE tidepool_memd_%s %s\n", name, type);
}

void srv_put_gauge(struct memd_metrics_buf *b, const char *name,
		   const char *help, uint64_t v)
{
	srv_put_head(b, name, "gauge", help);
	memd_metrics_printf(b, "tidepool_memd_%s %" PRIu64 "\n", name, v);
}
