// SPDX-License-Identifier: MIT
/*
 * fabric/fab_dl.c - libfabric loaded on first use, for libpool-preload.so
 * only.
 *
 * DESIGN
 * An LD_PRELOAD library's dependencies load into every process it enters,
 * before main(). Debian's libfabric 1.17 brings libpsm_infinipath, whose
 * libinfinipath constructor measures the CPU clock by sleeping in 125 us
 * steps for 0.1-0.2 s, and libpsm2, libibverbs, libnl and others: a
 * program under the shim paid that even when it never pooled a byte
 * (a shell, /usr/bin/time, a program whose allocations are all under
 * LIBPOOL_MIN_BYTES). So the shim does not link libfabric: fab.c calls
 * the five functions libfabric exports that it uses (fi_getinfo,
 * fi_freeinfo, fi_dupinfo, fi_fabric, fi_version; everything else is
 * reached through the objects these return), and this file defines
 * them, hidden, as calls into libfabric.so.1 opened with dlopen() the
 * first time one is called, which in the shim is in the session's
 * heartbeat thread while the program runs (pool_set_fabric_background()).
 *
 * The psm libraries' constructors catch SIGSEGV, SIGBUS, SIGILL, SIGFPE
 * and SIGABRT (to print a backtrace and exit(1)); preload.c used to reset
 * them at load. Now they run inside dlopen(): the handlers in place
 * before it are put back where a handler in those libraries replaced
 * them (a program that changes one of these handlers during the dlopen
 * itself, a fraction of a second, keeps psm's; see docs/paging.md).
 *
 * Built into libpool-preload.so only (libpool/CMakeLists.txt); hidden
 * like everything there but the malloc family. Threads: any; the load
 * happens once (pthread_once). Without
 * libfabric.so.1, fi_getinfo returns -FI_ENODATA and the session is not
 * set up (one warning line from preload.c).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "fabric/fab_int.h"

static pthread_once_t dl_once = PTHREAD_ONCE_INIT;
static int (*dl_getinfo)(uint32_t, const char *, const char *, uint64_t,
			 const struct fi_info *, struct fi_info **);
static void (*dl_freeinfo)(struct fi_info *);
static struct fi_info *(*dl_dupinfo)(const struct fi_info *);
static int (*dl_fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
static uint32_t (*dl_version)(void);

/* The versions fab.c was built against (libfabric 1.x: FABRIC_1.3 for
 * the info calls, FABRIC_1.1 for fi_fabric); the default one otherwise. */
static void *sym(void *lib, const char *name, const char *version)
{
	void *f = dlvsym(lib, name, version);

	return f ? f : dlsym(lib, name);
}

static void dl_load(void)
{
	struct sigaction before[FAB_CRASH_NSIGS];
	bool have[FAB_CRASH_NSIGS];
	void *lib;

	for (size_t i = 0; i < FAB_CRASH_NSIGS; i++)
		have[i] = sigaction(fab_crash_sigs[i], NULL, &before[i]) == 0;
	lib = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
	for (size_t i = 0; i < FAB_CRASH_NSIGS; i++) {
		struct sigaction now;

		if (!have[i] || sigaction(fab_crash_sigs[i], NULL, &now) ||
		    !fab_handler_is_psm(&now))
			continue;
		if (fab_handler_is_psm(&before[i]))
			signal(fab_crash_sigs[i], SIG_DFL);
		else
			sigaction(fab_crash_sigs[i], &before[i], NULL);
	}
	if (!lib)
		return;
	dl_freeinfo = (void (*)(struct fi_info *))sym(lib, "fi_freeinfo",
						      "FABRIC_1.3");
	dl_dupinfo = (struct fi_info * (*)(const struct fi_info *))
		sym(lib, "fi_dupinfo", "FABRIC_1.3");
	dl_fabric = (int (*)(struct fi_fabric_attr *, struct fid_fabric **,
			     void *))sym(lib, "fi_fabric", "FABRIC_1.1");
	dl_version = (uint32_t(*)(void))sym(lib, "fi_version", "FABRIC_1.0");
	/* Last: fi_getinfo is what the others are reached through. */
	if (dl_freeinfo && dl_dupinfo && dl_fabric)
		dl_getinfo = (int (*)(uint32_t, const char *, const char *,
				      uint64_t, const struct fi_info *,
				      struct fi_info **))sym(lib, "fi_getinfo",
							     "FABRIC_1.3");
}

int fi_getinfo(uint32_t version, const char *node, const char *service,
	       uint64_t flags, const struct fi_info *hints,
	       struct fi_info **info)
{
	pthread_once(&dl_once, dl_load);
	if (!dl_getinfo)
		return -FI_ENODATA;
	return dl_getinfo(version, node, service, flags, hints, info);
}

/* The three below are only reached with what fi_getinfo returned (or,
 * for fi_dupinfo(NULL), fi_allocinfo() before it): libfabric is loaded
 * by then; NULL-safe all the same. */
void fi_freeinfo(struct fi_info *info)
{
	pthread_once(&dl_once, dl_load);
	if (dl_freeinfo)
		dl_freeinfo(info);
}

struct fi_info *fi_dupinfo(const struct fi_info *info)
{
	pthread_once(&dl_once, dl_load);
	return dl_dupinfo ? dl_dupinfo(info) : NULL;
}

int fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric,
	      void *context)
{
	pthread_once(&dl_once, dl_load);
	if (!dl_fabric)
		return -FI_ENODATA;
	return dl_fabric(attr, fabric, context);
}

/* fab.c asks after fi_getinfo() succeeded (libfabric is loaded); 0, the
 * oldest version, where it could not be found: fab.c then takes every
 * workaround for old releases. Any direct reference to a libfabric
 * symbol would put libfabric.so.1 back into DT_NEEDED (and its psm
 * constructors into every process under the shim: tests/test_preload.c,
 * shim_does_not_load_libfabric). */
uint32_t fi_version(void)
{
	pthread_once(&dl_once, dl_load);
	return dl_version ? dl_version() : 0;
}

/* fabric/fab.h: the load alone, so that a caller can stop before any
 * libfabric call (libpool's fabric set-up at exit). */
void fab_load(void)
{
	pthread_once(&dl_once, dl_load);
}
