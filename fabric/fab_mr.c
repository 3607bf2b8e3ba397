// SPDX-License-Identifier: MIT
/*
 * fabric/fab_mr.c - memory registrations: host buffers (fab_mr_reg) and
 * device memory (FI_HMEM, fab_mr_reg_hmem), the keys asked of the
 * provider, and TP_TEST_FAIL_MR_CLOSE. The design notes and invariants
 * are fabric/fab.c's top comment.
 */
#include "fabric/fab_int.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

static uint64_t key_mask(size_t key_size);

/* The key a registration on d asks the provider for. */
static uint64_t reg_key(struct fab_domain *d, uint64_t requested_key)
{
	if (d->fake_prov_key)
		return __atomic_add_fetch(&d->next_fake_key, 1,
					  __ATOMIC_RELAXED) &
		       key_mask(d->key_size);
	if (d->mr_mode & FAB_MR_PROV_KEY)
		return 0;
	return requested_key & key_mask(d->key_size);
}

/* ---- memory registration ------------------------------------------ */

uint64_t fab_mr_base_for_mode(unsigned mr_mode, const void *vaddr)
{
	return (mr_mode & FAB_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)vaddr : 0;
}

static uint64_t key_mask(size_t key_size)
{
	return key_size >= sizeof(uint64_t) ? UINT64_MAX
					    : (1ull << (8 * key_size)) - 1;
}

/*
 * The checks of a registration's arguments, iface 0 (host memory) or
 * FAB_HMEM_CUDA on device: 0, with the FI_* access bits in *fi_access;
 * -EINVAL, or -EOPNOTSUPP (d cannot register iface's memory).
 */
static int mr_args(const struct fab_domain *d, const struct fab_ep *ep,
		   const void *buf, size_t len, unsigned access, unsigned iface,
		   int device, uint64_t *fi_access)
{
	if (!d || !buf || !len || !access ||
	    (access & ~(FAB_ACCESS_LOCAL | FAB_ACCESS_REMOTE |
			FAB_ACCESS_REMOTE_READ)) ||
	    (iface != 0 && iface != FAB_HMEM_CUDA) || device < 0)
		return -EINVAL;
	if (!fab_domain_has_hmem(d, iface))
		return -EOPNOTSUPP;
	if ((d->mr_mode & FAB_MR_ENDPOINT) && !ep)
		return -EINVAL;
	if (ep && ep->d != d)
		return -EINVAL;
	*fi_access = 0;
	if (access & FAB_ACCESS_LOCAL)
		*fi_access |= FI_READ | FI_WRITE;
	if (access & FAB_ACCESS_REMOTE)
		*fi_access |= FI_REMOTE_READ | FI_REMOTE_WRITE;
	if (access & FAB_ACCESS_REMOTE_READ)
		*fi_access |= FI_REMOTE_READ;
	return 0;
}

/*
 * Finishes a registration m->mr of buf that the provider made: under
 * FAB_MR_ENDPOINT binds it to ep and enables it before any peer can use
 * its key; reads the key and the remote base. 0 with *out = m, or -errno
 * with m->mr closed and m freed.
 */
static int mr_finish(struct fab_domain *d, struct fab_ep *ep, struct fab_mr *m,
		     const void *buf, struct fab_mr **out)
{
	int ret = 0;

	if (d->mr_mode & FAB_MR_ENDPOINT) {
		ret = fab_errno(fi_mr_bind(m->mr, &ep->ep->fid, 0));
		if (!ret)
			ret = fab_errno(fi_mr_enable(m->mr));
		if (ret)
			goto close_mr;
	}
	m->key = fi_mr_key(m->mr);
	if (m->key == FI_KEY_NOTAVAIL) {
		/* Only providers with FI_MR_RAW do this; we do not ask
		 * for raw keys, so this is a provider we cannot use. */
		ret = -EOPNOTSUPP;
		goto close_mr;
	}
	m->remote_base = fab_mr_base_for_mode(d->mr_mode, buf);
	*out = m;
	return 0;

close_mr:
	fi_close(&m->mr->fid);
	free(m);
	return ret;
}

/* Registers a host buffer (fabric/fab.h). */
int fab_mr_reg(struct fab_domain *d, struct fab_ep *ep, void *buf, size_t len,
	       unsigned access, uint64_t requested_key, struct fab_mr **out)
{
	struct fab_mr *m;
	uint64_t fi_access, key;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	ret = mr_args(d, ep, buf, len, access, 0, 0, &fi_access);
	if (ret)
		return ret;
	key = reg_key(d, requested_key);
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	ret = fab_errno(fi_mr_reg(d->domain, buf, len, fi_access, 0, key, 0,
				  &m->mr, NULL));
	if (ret) {
		free(m);
		return ret;
	}
	return mr_finish(d, ep, m, buf, out);
}

/*
 * Test-only fault injection: TP_TEST_FAIL_MR_CLOSE=N makes the first N
 * fab_mr_close() calls of the process report -EIO (the registration is
 * closed all the same), so tests can drive what memd does when a close
 * fails (docs/reliability.md). Read once; unset, it costs one relaxed
 * load per close. Never set it in production.
 */
static int mr_close_fail_left = -1; /* -1: environment not read yet */
static pthread_once_t mr_close_fail_once = PTHREAD_ONCE_INIT;

static void mr_close_fail_init(void)
{
	const char *v = getenv("TP_TEST_FAIL_MR_CLOSE");
	long n = v ? strtol(v, NULL, 10) : 0;

	__atomic_store_n(&mr_close_fail_left, n > 0 && n < INT_MAX ? (int)n : 0,
			 __ATOMIC_RELAXED);
}

static bool mr_close_fail_injected(void)
{
	int left;

	pthread_once(&mr_close_fail_once, mr_close_fail_init);
	left = __atomic_load_n(&mr_close_fail_left, __ATOMIC_RELAXED);
	while (left > 0)
		if (__atomic_compare_exchange_n(
			    &mr_close_fail_left, &left, left - 1, false,
			    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			return true;
	return false;
}

int fab_mr_close(struct fab_mr *mr)
{
	int ret;

	if (!mr)
		return 0;
	ret = fab_errno(fi_close(&mr->mr->fid));
	free(mr);
	if (!ret && mr_close_fail_injected())
		ret = -EIO;
	return ret;
}

uint64_t fab_mr_key(const struct fab_mr *mr)
{
	return mr->key;
}

void *fab_mr_desc(const struct fab_mr *mr)
{
	return fi_mr_desc(mr->mr);
}

uint64_t fab_mr_remote_base(const struct fab_mr *mr)
{
	return mr->remote_base;
}

/* ---- device memory (FI_HMEM) -------------------------------------- */

bool fab_domain_has_hmem(const struct fab_domain *d, unsigned iface)
{
	return d && (iface == 0 || (iface & ~d->hmem) == 0);
}

int fab_mr_reg_hmem(struct fab_domain *d, struct fab_ep *ep, void *buf,
		    size_t len, unsigned access, unsigned iface, int device,
		    uint64_t requested_key, struct fab_mr **out)
{
	struct fi_mr_attr attr = { 0 };
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct fab_mr *m;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	ret = mr_args(d, ep, buf, len, access, iface, device, &attr.access);
	if (ret)
		return ret;
	attr.mr_iov = &iov;
	attr.iov_count = 1;
	attr.requested_key = reg_key(d, requested_key);
	attr.iface = iface == FAB_HMEM_CUDA ? FI_HMEM_CUDA : FI_HMEM_SYSTEM;
	attr.device.cuda = device;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	ret = fab_errno(fi_mr_regattr(d->domain, &attr, 0, &m->mr));
	if (ret) {
		free(m);
		return ret;
	}
	return mr_finish(d, ep, m, buf, out);
}
