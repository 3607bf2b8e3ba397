// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_config.c - libFuzzer harness for memd.conf's parser
 * (memd/config.c through libinih) and the table's parsers. Built by
 * tests/fuzz/CMakeLists.txt, run by .ci/fuzz.sh.
 *
 * Each input is a memd.conf: written to a file on tmpfs (memd reads a
 * path), loaded over the defaults. Properties: no crash, leak or UB; a
 * refused file leaves the config untouched and says why; an accepted
 * one that validates prints (memd --print-config) to text that loads back
 * to the same config, printing the same text, and reloads (SIGHUP) over
 * the defaults into a config that still validates. Each line
 * is also given to memd_config_set as KEY=VALUE (the --set flag).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memd/config.h"
#include "tests/fuzz/fuzzutil.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[200], path[256], path2[300];

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_config: %s: %s\n", what, detail);
	abort();
}

static void put(const char *p, const void *buf, size_t len)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0 || (len && write(fd, buf, len) != (ssize_t)len) || close(fd))
		die("write", p);
}

/* memd_config_print into a malloc'ed string; *len its length. */
static char *print(const struct memd_config *c, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	if (!f)
		die("open_memstream", strerror(errno));
	memd_config_print(c, f);
	if (fclose(f))
		die("fclose", strerror(errno));
	return buf;
}

/* Gives every line "KEY=VALUE" (or "KEY = VALUE") to memd_config_set. */
static void set_lines(const uint8_t *data, size_t size)
{
	static struct memd_config c;
	char line[512], err[512];
	size_t i = 0;

	memd_config_defaults(&c);
	while (i < size) {
		size_t n = 0;
		char *eq, *k, *v, *e;

		while (i < size && data[i] != '\n' && n < sizeof(line) - 1)
			line[n++] = (char)data[i++];
		while (i < size && data[i] != '\n')
			i++;
		i++;
		line[n] = '\0';
		eq = strchr(line, '=');
		if (!eq)
			continue;
		*eq = '\0';
		k = line;
		v = eq + 1;
		while (*k == ' ')
			k++;
		for (e = eq; e > k && e[-1] == ' ';)
			*--e = '\0';
		while (*v == ' ')
			v++;
		err[0] = '\0';
		if (memd_config_set(&c, k, v, err, sizeof(err)) && !err[0])
			die("memd_config_set refused without saying why", k);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct memd_config c, d, back;
	char err[512], err2[512];
	char *text, *text2;
	size_t len, len2;
	int r;

	put(path, data, size);
	memd_config_defaults(&c);
	memd_config_defaults(&d);
	err[0] = '\0';
	r = memd_config_load(&c, path, err, sizeof(err));
	if (r) {
		if (!err[0])
			die("refused without saying why", "");
		text = print(&c, &len);
		text2 = print(&d, &len2);
		if (len != len2 || memcmp(text, text2, len))
			die("a refused file changed the config", err);
		free(text);
		free(text2);
		set_lines(data, size);
		return 0;
	}
	set_lines(data, size);
	if (memd_config_validate(&c, err, sizeof(err)))
		return 0;
	text = print(&c, &len);
	put(path2, text, len);
	memd_config_defaults(&back);
	if (memd_config_load(&back, path2, err2, sizeof(err2)))
		die("printed config does not load back", err2);
	text2 = print(&back, &len2);
	if (len != len2 || memcmp(text, text2, len))
		die("printed config loads back to another", "");
	/* SIGHUP from the defaults to this file */
	memd_config_reload(&d, &c, NULL, NULL);
	if (memd_config_validate(&d, err, sizeof(err)))
		die("a reload left an invalid config", err);
	free(text);
	free(text2);
	return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (fuzz_scratch_dir("config", dir, sizeof(dir)))
		die("mkdtemp", dir);
	snprintf(path, sizeof(path), "%s/memd.conf", dir);
	snprintf(path2, sizeof(path2), "%s/printed.conf", dir);
	return 0;
}
