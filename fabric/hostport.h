/* SPDX-License-Identifier: MIT */
/*
 * fabric/hostport.h - control-plane addresses, "host:port" or
 * "[v6addr]:port", shared by memd (listen) and libpool (connect). Pure.
 */
#ifndef TP_FABRIC_HOSTPORT_H
#define TP_FABRIC_HOSTPORT_H

#include <stddef.h>
#include <stdint.h>

/*
 * Splits s into host (without brackets, NUL-terminated) and port.
 * Returns 0, or -EINVAL for: no port, an empty host, a bare IPv6 address
 * without brackets, a port that is not a number in 0..65535, a host that
 * does not fit hostlen.
 */
int wire_split_hostport(const char *s, char *host, size_t hostlen,
			uint16_t *port);

#endif
