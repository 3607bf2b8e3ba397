// SPDX-License-Identifier: MIT
/*
 * tests/test_log.c - memd/log: memd_log_quote, the one way memd writes a
 * name a peer chose (client, tenant, donor) as a key=value value.
 * Pure: no I/O. The log line memd writes with it is checked by
 * tests/test_memd.c (hello_line_quotes_client_name). Also the sizes
 * memd's messages give (memd_log_bytes) and memd_arena_plan's refusals,
 * which name sizes, not byte counts (issue 17: "cannot donate
 * 966367641600 bytes").
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memd/arena.h"
#include "memd/log.h"
#include "tests/testutil.h"

/* memd_log_quote() of in, into a buffer sized for a 63-byte name, is
 * want. */
static void quote_is(const char *in, const char *want)
{
	char buf[MEMD_LOG_QUOTE_MAX(64)];

	ck_assert_str_eq(memd_log_quote(in, buf, sizeof(buf)), want);
}

START_TEST(quote_leaves_plain_values)
{
	quote_is("kvbench", "kvbench");
	quote_is("tenant-a.01:x/y", "tenant-a.01:x/y");
	/* UTF-8 is text, not a separator */
	quote_is("h\xc3\xa9", "h\xc3\xa9");
}
END_TEST

START_TEST(quote_values_that_would_split)
{
	quote_is("kvbench pid 13498", "\"kvbench pid 13498\"");
	quote_is("", "\"\"");
	/* a value may not fake another key */
	quote_is("a why=ok", "\"a why=ok\"");
	quote_is("x=1", "\"x=1\"");
	quote_is("tab\there", "\"tab\\x09here\"");
}
END_TEST

START_TEST(quote_escapes_quote_and_backslash)
{
	quote_is("say \"hi\"", "\"say \\\"hi\\\"\"");
	quote_is("C:\\tmp", "\"C:\\\\tmp\"");
	quote_is("\"", "\"\\\"\"");
	/* a newline or escape sequence can neither split nor paint a line */
	quote_is("a\nb\x1b[0m\x7f", "\"a\\x0ab\\x1b[0m\\x7f\"");
}
END_TEST

/* The worst case, every byte a control byte, fits MEMD_LOG_QUOTE_MAX. */
START_TEST(quote_max_holds_any_name)
{
	char name[64], buf[MEMD_LOG_QUOTE_MAX(sizeof(name))];
	char want[sizeof(buf)];
	size_t n = 0;

	for (size_t i = 0; i < sizeof(name) - 1; i++)
		name[i] = (char)(1 + i % 31);
	name[sizeof(name) - 1] = '\0';
	want[n++] = '"';
	for (size_t i = 0; i < sizeof(name) - 1; i++)
		n += (size_t)snprintf(want + n, sizeof(want) - n, "\\x%02x",
				      (unsigned char)name[i]);
	want[n++] = '"';
	want[n] = '\0';
	ck_assert_str_eq(memd_log_quote(name, buf, sizeof(buf)), want);
}
END_TEST

/* A short buffer cuts the value, never an escape, and closes the quote. */
START_TEST(quote_cuts_to_the_buffer)
{
	char buf[8];

	ck_assert_str_eq(memd_log_quote("abc def ghi", buf, sizeof(buf)),
			 "\"abc d\"");
	ck_assert_str_eq(memd_log_quote("ab\"cdef", buf, 7), "\"ab\\\"\"");
	ck_assert_str_eq(memd_log_quote("ab\"cdef", buf, 6), "\"ab\"");
	ck_assert_str_eq(memd_log_quote("abcdefghij", buf, sizeof(buf)),
			 "abcdefg");
	ck_assert_str_eq(memd_log_quote("a b", buf, 3), "\"\"");
	buf[0] = 'x';
	ck_assert_str_eq(memd_log_quote("a b", buf, 2), "");
	memd_log_quote("a b", NULL, 0); /* writes nothing */
}
END_TEST

START_TEST(bytes_reads_at_a_glance)
{
	char b[MEMD_LOG_BYTES_MAX];

	ck_assert_str_eq(memd_log_bytes(0, b, sizeof(b)), "0 B");
	ck_assert_str_eq(memd_log_bytes(1023, b, sizeof(b)), "1023 B");
	ck_assert_str_eq(memd_log_bytes(1024, b, sizeof(b)), "1.0 KiB");
	ck_assert_str_eq(memd_log_bytes(512ull << 20, b, sizeof(b)), "512 MiB");
	ck_assert_str_eq(memd_log_bytes(3ull << 29, b, sizeof(b)), "1.5 GiB");
	ck_assert_str_eq(memd_log_bytes(900ull << 30, b, sizeof(b)), "900 GiB");
	ck_assert_str_eq(memd_log_bytes(23981801472ull, b, sizeof(b)),
			 "22 GiB");
	ck_assert_str_eq(memd_log_bytes(UINT64_MAX, b, sizeof(b)), "16 EiB");
}
END_TEST

/* Each refusal of memd_arena_plan says sizes, and no raw byte count. */
START_TEST(arena_plan_refusals_name_sizes)
{
	struct memd_host_mem h = {
		.mem_available = 23981801472ull,
		.huge_page_bytes = 2ull << 20,
		.memlock_limit = 8ull << 20,
	};
	char err[512];
	bool huge;

	ck_assert_int_eq(memd_arena_plan(&h, 900ull << 30, MEMD_HUGEPAGES_NO,
					 &huge, err, sizeof(err)),
			 -ENOMEM);
	ck_assert_str_eq(err, "cannot donate 900 GiB: the host has only "
			      "22 GiB available (MemAvailable); lower donate");
	ck_assert_int_eq(memd_arena_plan(&h, 1ull << 30, MEMD_HUGEPAGES_YES,
					 &huge, err, sizeof(err)),
			 -ENOMEM);
	ck_assert_ptr_nonnull(strstr(err, "has 0 B of free huge pages "
					  "(page size 2.0 MiB) for a donation "
					  "of 1.0 GiB"));
	ck_assert_int_eq(memd_arena_plan(&h, 1ull << 30, MEMD_HUGEPAGES_AUTO,
					 &huge, err, sizeof(err)),
			 -EPERM);
	ck_assert_ptr_nonnull(
		strstr(err, "cannot lock 1.0 GiB: RLIMIT_MEMLOCK is 8.0 MiB;"));
	/* no byte count of 4 digits or more anywhere */
	for (const char *p = err; *p; p++)
		ck_assert_msg(!(p[0] >= '0' && p[0] <= '9' && p[1] >= '0' &&
				p[1] <= '9' && p[2] >= '0' && p[2] <= '9' &&
				p[3] >= '0' && p[3] <= '9'),
			      "a raw count in: %s", err);
	h.can_lock_any = true;
	ck_assert_int_eq(memd_arena_plan(&h, 1ull << 30, MEMD_HUGEPAGES_AUTO,
					 &huge, err, sizeof(err)),
			 0);
	ck_assert(!huge);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tu_tcase(s, "quote", 0);

	TU_ADD_TESTS(tc, quote_leaves_plain_values,
		     quote_values_that_would_split,
		     quote_escapes_quote_and_backslash,
		     quote_max_holds_any_name, quote_cuts_to_the_buffer,
		     bytes_reads_at_a_glance, arena_plan_refusals_name_sizes);
	return tu_run_suite(s);
}
