// SPDX-License-Identifier: MIT
/*
 * fabric/hostport.c - "host:port" parsing for the control plane. Pure.
 */
#include "fabric/hostport.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int wire_split_hostport(const char *s, char *host, size_t hostlen,
			uint16_t *port)
{
	const char *colon, *h = s;
	size_t hl;
	char *end;
	unsigned long p;

	if (!s || !*s)
		return -EINVAL;
	if (*s == '[') {
		const char *rb = strchr(s, ']');

		if (!rb || rb[1] != ':')
			return -EINVAL;
		h = s + 1;
		hl = (size_t)(rb - h);
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || memchr(s, ':', (size_t)(colon - s)))
			return -EINVAL; /* none, or bare IPv6 */
		hl = (size_t)(colon - s);
	}
	if (hl == 0 || hl >= hostlen || colon[1] == '\0')
		return -EINVAL;
	errno = 0;
	p = strtoul(colon + 1, &end, 10);
	if (errno || *end || p > 65535 || colon[1] == '-' || colon[1] == '+')
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (uint16_t)p;
	return 0;
}
