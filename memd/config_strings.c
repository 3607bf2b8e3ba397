// SPDX-License-Identifier: MIT
/*
 * memd/config_strings.c - the syntaxes of memd.conf's string keys (each
 * row's parse_str): hosts and HOST:PORT (listen, advertise, the cluster
 * and metrics addresses, lists of them), absolute paths and the etcd
 * prefix, provider and donor names, NUMA node lists. Each checks its
 * input without resolving or touching anything, writes the canonical
 * form, or says what is wrong in a sentence that quotes the value.
 *
 * Threads: none. Pure and reentrant.
 */
#include "memd/config_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "fabric/hostport.h"
#include "memd/log.h"
#include "numa/place.h"

/* "a.b-c_d": labels of letters, digits, '-' and '_', no empty label. */
static bool memd_conf_is_hostname(const char *s)
{
	size_t label = 0, n = 0;

	for (; *s; s++, n++) {
		if (*s == '.') {
			if (!label)
				return false;
			label = 0;
		} else if (memd_conf_is_alnum(*s) || *s == '-' || *s == '_') {
			if (++label > 63)
				return false;
		} else {
			return false;
		}
	}
	return label && n <= 253;
}

/* "fe80::1" or "fe80::1%eth0" (a zone, for link-local addresses). */
static bool memd_conf_is_ipv6(const char *s, size_t len)
{
	char addr[INET6_ADDRSTRLEN + 1];
	struct in6_addr a6;
	const char *zone = memchr(s, '%', len);
	size_t alen = zone ? (size_t)(zone - s) : len;

	if (alen >= sizeof(addr))
		return false;
	memcpy(addr, s, alen);
	addr[alen] = '\0';
	if (inet_pton(AF_INET6, addr, &a6) != 1)
		return false;
	if (zone) {
		const char *z;

		/* IF_NAMESIZE is 16 with the NUL */
		if (len - alen < 2 || len - alen - 1 > 15)
			return false;
		for (z = zone + 1; z < s + len; z++)
			if (!memd_conf_is_alnum(*z) && !strchr("-_.", *z))
				return false;
	}
	return true;
}

/*
 * A host without a port: a name, an IPv4 address or an IPv6 address (in
 * brackets or not). Writes it without brackets to out.
 */
static int memd_conf_check_host(const char *s, size_t len, char *out,
				size_t outlen, char *what, size_t whatlen)
{
	char shown[MEMD_CONF_QUOTE_MAX], host[MEMD_CONF_STR_MAX];
	struct in_addr a4;
	bool bracket = len >= 2 && s[0] == '[' && s[len - 1] == ']';
	size_t i;

	if (bracket) {
		s++;
		len -= 2;
	}
	if (len >= sizeof(host) || len >= outlen) {
		memd_errf(what, whatlen, "host is too long");
		return -EINVAL;
	}
	memcpy(host, s, len);
	host[len] = '\0';
	memd_conf_quote(host, shown, sizeof(shown));
	if (!len) {
		memd_errf(what, whatlen, "the host is missing");
		return -EINVAL;
	}
	if (bracket || memchr(host, ':', len)) {
		const char *last = strrchr(host, ':');

		/* "node:7470" where only a host belongs */
		if (!bracket && last == strchr(host, ':') && last[1] &&
		    strspn(last + 1, "0123456789") == strlen(last + 1)) {
			memd_errf(what, whatlen,
				  "'%s' has a port; give the host only", shown);
			return -EINVAL;
		}
		if (!memd_conf_is_ipv6(host, len)) {
			memd_errf(what, whatlen, "'%s' is not an IPv6 address",
				  shown);
			return -EINVAL;
		}
	} else {
		for (i = 0; i < len; i++)
			if (!memd_conf_is_digit(host[i]) && host[i] != '.')
				break;
		/* all digits and dots: an IPv4 address, not a name */
		if (i == len ? inet_pton(AF_INET, host, &a4) != 1
			     : !memd_conf_is_hostname(host)) {
			memd_errf(what, whatlen,
				  "'%s' is not a host name or address", shown);
			return -EINVAL;
		}
	}
	memcpy(out, host, len + 1);
	return 0;
}

/*
 * HOST:PORT. The host must be in brackets when it has colons of its own,
 * so that "::1:7470" is never guessed at. Pure: nothing is resolved.
 */
int memd_conf_parse_listen(const char *in, char *out, size_t outlen, char *what,
			   size_t whatlen)
{
	char shown[MEMD_CONF_QUOTE_MAX], host[MEMD_CONF_STR_MAX];
	const char *colon = strrchr(in, ':'), *p;
	uint64_t port = 0;
	size_t hlen;

	memd_conf_quote(in, shown, sizeof(shown));
	if (!colon) {
		memd_errf(what, whatlen, "'%s' has no port", shown);
		return -EINVAL;
	}
	hlen = (size_t)(colon - in);
	if (in[0] != '[' && memchr(in, ':', hlen)) {
		memd_errf(what, whatlen,
			  "'%s': write an IPv6 address in brackets", shown);
		return -EINVAL;
	}
	if (in[0] == '[' && (hlen < 2 || in[hlen - 1] != ']')) {
		memd_errf(what, whatlen, "'%s' has no ']' before the port",
			  shown);
		return -EINVAL;
	}
	for (p = colon + 1; memd_conf_is_digit(*p) && p - colon <= 5; p++)
		port = port * 10 + (uint64_t)(*p - '0');
	if (p == colon + 1 || *p || port > 65535) {
		memd_errf(what, whatlen, "'%s' has a bad port", shown);
		return -EINVAL;
	}
	if (memd_conf_check_host(in, hlen, host, sizeof(host), what, whatlen))
		return -EINVAL;
	snprintf(out, outlen, "%s", in);
	return 0;
}

int memd_conf_parse_node(const char *in, char *out, size_t outlen, char *what,
			 size_t whatlen)
{
	return memd_conf_check_host(in, strlen(in), out, outlen, what, whatlen);
}

/*
 * A name of letters, digits and the characters of extra ("tcp",
 * "verbs;ofi_rxm", "donor-1.a"), else "'IN' is not a NOUN".
 */
static int memd_conf_parse_word(const char *in, const char *extra,
				const char *noun, char *out, size_t outlen,
				char *what, size_t whatlen)
{
	char shown[MEMD_CONF_QUOTE_MAX];
	const char *p;

	for (p = in; *p; p++) {
		if (!memd_conf_is_alnum(*p) && !strchr(extra, *p)) {
			memd_errf(what, whatlen, "'%s' is not a %s",
				  memd_conf_quote(in, shown, sizeof(shown)),
				  noun);
			return -EINVAL;
		}
	}
	snprintf(out, outlen, "%s", in);
	return 0;
}

/* libfabric names are letters, digits and _-; ("verbs;ofi_rxm"). */
int memd_conf_parse_provider(const char *in, char *out, size_t outlen,
			     char *what, size_t whatlen)
{
	return memd_conf_parse_word(in, "_-;", "provider name", out, outlen,
				    what, whatlen);
}

/*
 * "all", or a node list in place_parse_nodelist()'s grammar (blanks
 * around items allowed). Written back canonical (increasing, no blanks,
 * runs of three or more as a range: "2,0,1" is "0-2"), so that
 * --print-config writes a value without blanks that loads back equal.
 * Which nodes exist is the host's business, checked at start-up.
 */
int memd_conf_parse_numa_nodes(const char *in, char *out, size_t outlen,
			       char *what, size_t whatlen)
{
	char shown[MEMD_CONF_QUOTE_MAX];
	int nodes[PLACE_NODE_MAX];
	size_t used = 0;
	bool all;
	ssize_t n, i, j;

	memd_conf_quote(in, shown, sizeof(shown));
	n = place_parse_nodelist(in, &all, nodes, ARRAY_SIZE(nodes));
	if (n == -ERANGE) {
		memd_errf(what, whatlen, "'%s' names a node above %d", shown,
			  PLACE_NODE_MAX - 1);
		return -EINVAL;
	}
	if (n < 0) {
		memd_errf(what, whatlen, "'%s' is not a node list", shown);
		return -EINVAL;
	}
	if (all) {
		snprintf(out, outlen, "all");
		return 0;
	}
	if (n > MEMD_NUMA_NODES_MAX) {
		memd_errf(what, whatlen,
			  "'%s' names %zd nodes; memd serves at most %d "
			  "(one fabric endpoint each)",
			  shown, n, MEMD_NUMA_NODES_MAX);
		return -EINVAL;
	}
	for (i = 0; i < n; i = j) {
		for (j = i + 1; j < n && nodes[j] == nodes[j - 1] + 1; j++)
			;
		if (j - i >= 3)
			used += (size_t)snprintf(out + used, outlen - used,
						 "%s%d-%d", i ? "," : "",
						 nodes[i], nodes[j - 1]);
		else
			for (ssize_t k = i; k < j; k++)
				used += (size_t)snprintf(
					out + used, outlen - used, "%s%d",
					k ? "," : "", nodes[k]);
	}
	return 0;
}

/* An address the host of HOST:PORT names no one host by. */
static bool memd_conf_is_wildcard(const char *host)
{
	struct in6_addr a6;
	struct in_addr a4;

	if (inet_pton(AF_INET, host, &a4) == 1)
		return a4.s_addr == htonl(INADDR_ANY);
	return inet_pton(AF_INET6, host, &a6) == 1 &&
	       IN6_IS_ADDR_UNSPECIFIED(&a6);
}

/*
 * HOST:PORT for the cluster keys, split by wire_split_hostport() (what
 * the code that connects will use), with the host checked like listen's
 * and the port made of digits only. Writes it unchanged to out.
 */
static int memd_conf_hostport(const char *in, char *out, size_t outlen,
			      bool port0_ok, bool wildcard_ok, char *what,
			      size_t whatlen)
{
	char shown[MEMD_CONF_QUOTE_MAX], host[MEMD_CONF_STR_MAX];
	char canon[MEMD_CONF_STR_MAX];
	const char *digits = strrchr(in, ':');
	uint16_t port;

	memd_conf_quote(in, shown, sizeof(shown));
	if (wire_split_hostport(in, host, sizeof(host), &port) || !digits ||
	    strspn(digits + 1, "0123456789") != strlen(digits + 1)) {
		memd_errf(what, whatlen,
			  "'%s' is not HOST:PORT (an IPv6 address goes in "
			  "brackets)",
			  shown);
		return -EINVAL;
	}
	if (memd_conf_check_host(host, strlen(host), canon, sizeof(canon), what,
				 whatlen))
		return -EINVAL;
	if (!port && !port0_ok) {
		memd_errf(what, whatlen, "'%s': port 0 names no port", shown);
		return -EINVAL;
	}
	if (!wildcard_ok && memd_conf_is_wildcard(canon)) {
		memd_errf(what, whatlen,
			  "'%s' is a wildcard address; give one that "
			  "others can reach",
			  shown);
		return -EINVAL;
	}
	snprintf(out, outlen, "%s", in);
	return 0;
}

/* HOST:PORT[,HOST:PORT...], each as memd_conf_hostport wants it (no
 * wildcard, no port 0), at most 8. */
int memd_conf_parse_hostport_list(const char *in, char *out, size_t outlen,
				  char *what, size_t whatlen)
{
	char one[MEMD_CONF_STR_MAX], canon[MEMD_CONF_STR_MAX];
	const char *p = in;
	int n = 0;

	for (;;) {
		size_t len = strcspn(p, ",");

		if (++n > 8) {
			memd_errf(what, whatlen,
				  "more than 8 addresses in the list");
			return -EINVAL;
		}
		snprintf(one, sizeof(one), "%.*s", (int)len, p);
		if (memd_conf_hostport(one, canon, sizeof(canon), false, false,
				       what, whatlen))
			return -EINVAL;
		p += len;
		if (!*p)
			break;
		p++;
	}
	snprintf(out, outlen, "%s", in);
	return 0;
}

int memd_conf_parse_registry(const char *in, char *out, size_t outlen,
			     char *what, size_t whatlen)
{
	if (!*in || !strcmp(in, "yes") || !strcmp(in, "etcd")) {
		snprintf(out, outlen, "%s", in);
		return 0;
	}
	return memd_conf_parse_hostport_list(in, out, outlen, what, whatlen);
}

int memd_conf_parse_advertise(const char *in, char *out, size_t outlen,
			      char *what, size_t whatlen)
{
	return memd_conf_hostport(in, out, outlen, false, false, what, whatlen);
}

int memd_conf_parse_metrics_listen(const char *in, char *out, size_t outlen,
				   char *what, size_t whatlen)
{
	return memd_conf_hostport(in, out, outlen, true, true, what, whatlen);
}

/*
 * An absolute path; blanks and comment characters are refused so that
 * --print-config writes a value that loads back equal.
 */
int memd_conf_parse_path(const char *in, char *out, size_t outlen, char *what,
			 size_t whatlen)
{
	char shown[MEMD_CONF_QUOTE_MAX];
	const char *p;

	memd_conf_quote(in, shown, sizeof(shown));
	if (*in && *in != '/') {
		memd_errf(what, whatlen, "'%s' is not an absolute path", shown);
		return -EINVAL;
	}
	for (p = in; *p; p++) {
		unsigned char ch = (unsigned char)*p;

		if (ch <= ' ' || ch == 0x7f || ch == ';' || ch == '#') {
			memd_errf(what, whatlen,
				  "'%s' holds a blank, control character, "
				  "';' or '#'",
				  shown);
			return -EINVAL;
		}
	}
	snprintf(out, outlen, "%s", in);
	return 0;
}

/* "/tidepool": PREFIX/state and PREFIX/leader are its keys. */
int memd_conf_parse_etcd_prefix(const char *in, char *out, size_t outlen,
				char *what, size_t whatlen)
{
	char shown[MEMD_CONF_QUOTE_MAX];

	if (memd_conf_parse_path(in, out, outlen, what, whatlen))
		return -EINVAL;
	if (!in[0] || in[strlen(in) - 1] == '/') {
		memd_errf(what, whatlen,
			  "'%s' is not a prefix like /tidepool (it must "
			  "not end with '/')",
			  memd_conf_quote(in, shown, sizeof(shown)));
		return -EINVAL;
	}
	return 0;
}

/* The same alphabet as tenant names (docs/cluster.md). */
int memd_conf_parse_donor_name(const char *in, char *out, size_t outlen,
			       char *what, size_t whatlen)
{
	return memd_conf_parse_word(in, "_.-", "donor name", out, outlen, what,
				    whatlen);
}
