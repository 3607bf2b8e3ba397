// SPDX-License-Identifier: MIT
/*
 * numa/place.c - NUMA placement (place.h): topology from hwloc, memory
 * binding from libnuma.
 *
 * DESIGN. place_topo_open() loads an hwloc topology (host, XML or
 * synthetic) and takes a snapshot of what placement needs: the NUMA nodes
 * sorted by OS number, the NUMA latency matrix re-indexed by those nodes,
 * and one record per GPU and per NIC with its names and the node hwloc
 * places it on. Queries read the snapshot (and the hwloc tree, read-only),
 * so they are lock-free and safe from any thread; the override table is
 * written only while the handle is being configured. This is the one file
 * that includes <hwloc.h> and <numa.h>: every hwloc or libnuma -1 + errno
 * becomes -errno on the line that called it.
 *
 * Threads: none of its own. Binding functions act on the calling thread
 * (CPU affinity) or on a caller-owned address range (memory policy).
 *
 * Invariants:
 *   - nodes[] holds every NUMA node of the topology in increasing OS
 *     number, each < PLACE_NODE_MAX; nnodes >= 1.
 *   - dist is NULL or nnodes * nnodes values, dist[i * nnodes + j] the
 *     latency from nodes[i] to nodes[j]; 0 = not in the matrix.
 *   - A device's hwloc_node is a node of nodes[] or -1; effective nodes
 *     (overrides applied) are computed on each query, never stored.
 *   - Override keys are canonical: "*", a canonical PCI bus id, or a NIC
 *     name without an EFA "-rdm"/"-dgrm" suffix.
 *
 * libnuma's convenience allocators print through its numa_error()/
 * numa_warn() hooks; a library must not print nor override those hooks, so
 * memory binding uses libnuma's plain system-call wrappers (mbind,
 * get_mempolicy, move_pages) and numa_available().
 */
#include "numa/place.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <hwloc.h>
#include <numa.h>
#include <numaif.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define PLACE_MASK_WORDS (PLACE_NODE_MAX / 64)
#define PLACE_ALIASES_LEN (2 * PLACE_NAMES_LEN)
#define PLACE_SPEC_MAX 4096 /* longest override specification */

struct place_node {
	int id;
	hwloc_obj_t obj;
};

struct place_nic {
	struct place_nic_info info;	 /* info.node is filled on query */
	hwloc_obj_t anc;		 /* closest CPU-side ancestor */
	bool rdma;			 /* has an OpenFabrics device */
	char aliases[PLACE_ALIASES_LEN]; /* every name, comma-separated */
};

struct place_override {
	bool gpu;
	int node;
	char key[PLACE_NAME_LEN];
};

struct place_topo {
	hwloc_topology_t topo;
	bool is_host;
	int nnodes;
	struct place_node *nodes;
	uint64_t *dist;
	int ngpus;
	struct place_gpu_info *gpus;
	int nnics;
	struct place_nic *nics;
	int nov;
	struct place_override ov[PLACE_OVERRIDE_MAX];
};

/* errno of a failed hwloc/libnuma/libc call as a negative value. */
static int place_errno(void)
{
	return errno > 0 ? -errno : -EIO;
}

/* --- small pure helpers ---------------------------------------------- */

static bool place_is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static const char *place_skip_blanks(const char *p)
{
	while (place_is_blank(*p))
		p++;
	return p;
}

static int place_hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Reads 1..maxdigits hex digits at *p; returns the count read, 0 if none. */
static int place_read_hex(const char **p, int maxdigits, uint32_t *out)
{
	uint32_t v = 0;
	int n = 0;

	while (n < maxdigits && place_hex((*p)[0]) >= 0) {
		v = v << 4 | (uint32_t)place_hex((*p)[0]);
		(*p)++;
		n++;
	}
	*out = v;
	return place_hex((*p)[0]) >= 0 ? 0 : n; /* too many digits */
}

/*
 * Reads a decimal node number at *p. Returns 0, -EINVAL (no digit) or
 * -ERANGE (>= PLACE_NODE_MAX); *p moves past every digit.
 */
static int place_read_node(const char **p, int *out)
{
	long v = 0;
	bool big = false;

	if (**p < '0' || **p > '9')
		return -EINVAL;
	while (**p >= '0' && **p <= '9') {
		if (!big)
			v = v * 10 + (**p - '0');
		if (v >= PLACE_NODE_MAX)
			big = true;
		(*p)++;
	}
	if (big)
		return -ERANGE;
	*out = (int)v;
	return 0;
}

int place_pci_parse(const char *s, struct place_pci_addr *out)
{
	uint32_t a, b, c, d;
	const char *p = s;
	int na, nb;

	if (!s || !out)
		return -EINVAL;
	na = place_read_hex(&p, 8, &a);
	if (!na || *p++ != ':')
		return -EINVAL;
	nb = place_read_hex(&p, 8, &b);
	if (!nb || nb > 2)
		return -EINVAL;
	if (*p == ':') {
		/* domain:bus:dev.func */
		p++;
		if (!place_read_hex(&p, 2, &c) || *p++ != '.')
			return -EINVAL;
		if (place_read_hex(&p, 1, &d) != 1 || *p)
			return -EINVAL;
		if (c > 0x1f || d > 7)
			return -EINVAL;
		out->domain = a;
		out->bus = (uint8_t)b;
		out->dev = (uint8_t)c;
		out->func = (uint8_t)d;
		return 0;
	}
	/* bus:dev.func */
	if (na > 2 || a > 0xff || *p++ != '.')
		return -EINVAL;
	if (place_read_hex(&p, 1, &c) != 1 || *p)
		return -EINVAL;
	if (b > 0x1f || c > 7)
		return -EINVAL;
	out->domain = 0;
	out->bus = (uint8_t)a;
	out->dev = (uint8_t)b;
	out->func = (uint8_t)c;
	return 0;
}

static void place_pci_format(const struct place_pci_addr *a, char *buf)
{
	snprintf(buf, PLACE_BUSID_LEN, "%04x:%02x:%02x.%x", a->domain, a->bus,
		 a->dev, a->func);
}

/* Appends name to a comma-separated list if it fits whole. */
static void place_list_add(char *list, size_t len, const char *name)
{
	size_t used = strlen(list);
	size_t need = strlen(name) + (used ? 1 : 0);

	if (!*name || used + need + 1 > len)
		return;
	if (used)
		list[used++] = ',';
	memcpy(list + used, name, strlen(name) + 1);
}

static bool place_list_has(const char *list, const char *name)
{
	size_t n = strlen(name);
	const char *p = list;

	while (*p) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);

		if (l == n && !memcmp(p, name, n))
			return true;
		if (!e)
			break;
		p = e + 1;
	}
	return false;
}

/*
 * Canonical key of a NIC name: a PCI bus id in canonical form, else the
 * name without an EFA endpoint suffix. Returns 0 or -EINVAL.
 */
static int place_nic_key(const char *name, char *key)
{
	static const char *const sfx[] = { "-rdm", "-dgrm" };
	struct place_pci_addr a;
	size_t n;

	if (!name || !*name || strlen(name) >= PLACE_NAME_LEN)
		return -EINVAL;
	if (!place_pci_parse(name, &a)) {
		place_pci_format(&a, key);
		return 0;
	}
	n = strlen(name);
	memcpy(key, name, n + 1);
	for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
		size_t l = strlen(sfx[i]);

		if (n > l && !strcmp(name + n - l, sfx[i])) {
			key[n - l] = '\0';
			break;
		}
	}
	return 0;
}

ssize_t place_parse_nodelist(const char *s, bool *all, int *nodes, size_t max)
{
	uint64_t set[PLACE_MASK_WORDS] = { 0 };
	const char *p;
	size_t count = 0;
	int err;

	if (!s || !all || (!nodes && max))
		return -EINVAL;
	*all = false;
	p = place_skip_blanks(s);
	if (!strncmp(p, "all", 3) && !*place_skip_blanks(p + 3)) {
		*all = true;
		return 0;
	}
	for (;;) {
		int a, b;

		p = place_skip_blanks(p);
		err = place_read_node(&p, &a);
		if (err)
			return err;
		b = a;
		p = place_skip_blanks(p);
		if (*p == '-') {
			p = place_skip_blanks(p + 1);
			err = place_read_node(&p, &b);
			if (err)
				return err;
			if (b < a)
				return -EINVAL;
			p = place_skip_blanks(p);
		}
		for (int n = a; n <= b; n++)
			set[n / 64] |= 1ull << (n % 64);
		if (!*p)
			break;
		if (*p++ != ',')
			return -EINVAL;
	}
	for (int n = 0; n < PLACE_NODE_MAX; n++) {
		if (!(set[n / 64] & (1ull << (n % 64))))
			continue;
		if (count == max)
			return -ENOSPC;
		nodes[count++] = n;
	}
	return (ssize_t)count;
}

/* --- nodes -------------------------------------------------------------- */

static int place_node_index(const struct place_topo *t, int node)
{
	int lo = 0, hi = t->nnodes - 1;

	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;

		if (t->nodes[mid].id == node)
			return mid;
		if (t->nodes[mid].id < node)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

/* Index of node, or -EINVAL (t NULL, node < 0), -ENXIO (absent). */
static int place_node_lookup(const struct place_topo *t, int node)
{
	int i;

	if (!t || node < 0)
		return -EINVAL;
	i = place_node_index(t, node);
	return i < 0 ? -ENXIO : i;
}

/* DRAM, as opposed to HBM/MCDRAM, GPU memory, NVM or CXL expanders. */
static bool place_node_is_dram(hwloc_obj_t obj)
{
	return !obj->subtype || !strcmp(obj->subtype, "DRAM");
}

/*
 * The one node a nodeset designates: its only node, or its only DRAM node
 * when it also spans memory-only kinds (Grace Hopper GPU memory, KNL
 * MCDRAM). Returns the node or -1 when there is no single answer.
 */
static int place_nodeset_pick(const struct place_topo *t,
			      hwloc_const_nodeset_t set)
{
	int only = -1, dram = -1, n = 0, ndram = 0;

	if (!set)
		return -1;
	for (int i = 0; i < t->nnodes; i++) {
		if (!hwloc_bitmap_isset(set, (unsigned int)t->nodes[i].id))
			continue;
		only = t->nodes[i].id;
		n++;
		if (place_node_is_dram(t->nodes[i].obj)) {
			dram = t->nodes[i].id;
			ndram++;
		}
	}
	if (n == 1)
		return only;
	return ndram == 1 ? dram : -1;
}

static int place_obj_node(const struct place_topo *t, hwloc_obj_t obj)
{
	hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t->topo, obj);

	return anc ? place_nodeset_pick(t, anc->nodeset) : -1;
}

int place_topo_nnodes(const struct place_topo *t)
{
	return t ? t->nnodes : -EINVAL;
}

int place_topo_node_id(const struct place_topo *t, int idx)
{
	if (!t || idx < 0 || idx >= t->nnodes)
		return -EINVAL;
	return t->nodes[idx].id;
}

bool place_topo_has_node(const struct place_topo *t, int node)
{
	return place_node_lookup(t, node) >= 0;
}

bool place_topo_is_host(const struct place_topo *t)
{
	return t && t->is_host;
}

ssize_t place_node_cpus(const struct place_topo *t, int node, int *cpus,
			size_t max)
{
	hwloc_const_cpuset_t set;
	ssize_t n = 0;
	int i = place_node_lookup(t, node);
	int cpu;

	if (i < 0)
		return i;
	if (!cpus && max)
		return -EINVAL;
	set = t->nodes[i].obj->cpuset;
	for (cpu = hwloc_bitmap_first(set); cpu >= 0;
	     cpu = hwloc_bitmap_next(set, cpu)) {
		if ((size_t)n < max)
			cpus[n] = cpu;
		n++;
	}
	return n;
}

int place_node_cpulist(const struct place_topo *t, int node, char *buf,
		       size_t len)
{
	int i = place_node_lookup(t, node);
	int n;

	if (i < 0)
		return i;
	if (!buf || !len)
		return -EINVAL;
	n = hwloc_bitmap_list_snprintf(buf, len, t->nodes[i].obj->cpuset);
	if (n < 0)
		return place_errno();
	return (size_t)n >= len ? -ENOSPC : n;
}

uint64_t place_node_mem_bytes(const struct place_topo *t, int node)
{
	int i = place_node_lookup(t, node);

	return i < 0 ? 0 : t->nodes[i].obj->attr->numanode.local_memory;
}

int place_node_distance(const struct place_topo *t, int from, int to)
{
	int i = place_node_lookup(t, from);
	int j = place_node_lookup(t, to);
	uint64_t d;

	if (i < 0)
		return i;
	if (j < 0)
		return j;
	if (!t->dist)
		return -ENODATA;
	d = t->dist[(size_t)i * (size_t)t->nnodes + (size_t)j];
	if (!d)
		return -ENODATA;
	return d > INT_MAX ? INT_MAX : (int)d;
}

int place_cpu_node(const struct place_topo *t, int cpu)
{
	hwloc_obj_t pu;
	int node;

	if (!t || cpu < 0)
		return -EINVAL;
	pu = hwloc_get_pu_obj_by_os_index(t->topo, (unsigned int)cpu);
	if (!pu)
		return -ENOENT;
	node = place_nodeset_pick(t, pu->nodeset);
	return node < 0 ? -ENODATA : node;
}

ssize_t place_topo_resolve_nodelist(const struct place_topo *t, const char *s,
				    int *nodes, size_t max)
{
	int tmp[PLACE_NODE_MAX];
	bool all;
	ssize_t n;

	if (!t || (!nodes && max))
		return -EINVAL;
	n = place_parse_nodelist(s, &all, tmp, PLACE_NODE_MAX);
	if (n < 0)
		return n;
	if (all) {
		if ((size_t)t->nnodes > max)
			return -ENOSPC;
		for (int i = 0; i < t->nnodes; i++)
			nodes[i] = t->nodes[i].id;
		return t->nnodes;
	}
	for (ssize_t i = 0; i < n; i++)
		if (place_node_index(t, tmp[i]) < 0)
			return -ENXIO;
	if ((size_t)n > max)
		return -ENOSPC;
	memcpy(nodes, tmp, (size_t)n * sizeof(*nodes));
	return n;
}

/* --- overrides --------------------------------------------------------- */

static const struct place_override *place_ov_find(const struct place_topo *t,
						  bool gpu, const char *key)
{
	for (int i = 0; i < t->nov; i++)
		if (t->ov[i].gpu == gpu && !strcmp(t->ov[i].key, key))
			return &t->ov[i];
	return NULL;
}

/* Sets, replaces or (node -1) removes the override for a canonical key. */
static int place_ov_set(struct place_topo *t, bool gpu, const char *key,
			int node)
{
	int i;

	if (node < -1)
		return -EINVAL;
	if (node >= 0 && place_node_index(t, node) < 0)
		return -ENXIO;
	for (i = 0; i < t->nov; i++)
		if (t->ov[i].gpu == gpu && !strcmp(t->ov[i].key, key))
			break;
	if (node == -1) {
		if (i < t->nov) {
			t->ov[i] = t->ov[t->nov - 1];
			t->nov--;
		}
		return 0;
	}
	if (i == t->nov) {
		if (t->nov == PLACE_OVERRIDE_MAX)
			return -ENOSPC;
		t->nov++;
		t->ov[i].gpu = gpu;
		snprintf(t->ov[i].key, sizeof(t->ov[i].key), "%s", key);
	}
	t->ov[i].node = node;
	return 0;
}

static int place_gpu_key(const char *bus_id, char *key)
{
	struct place_pci_addr a;

	if (bus_id && !strcmp(bus_id, "*")) {
		strcpy(key, "*");
		return 0;
	}
	if (place_pci_parse(bus_id, &a))
		return -EINVAL;
	place_pci_format(&a, key);
	return 0;
}

int place_topo_set_gpu_node(struct place_topo *t, const char *bus_id, int node)
{
	char key[PLACE_NAME_LEN];

	if (!t || place_gpu_key(bus_id, key))
		return -EINVAL;
	return place_ov_set(t, true, key, node);
}

int place_topo_set_nic_node(struct place_topo *t, const char *name, int node)
{
	char key[PLACE_NAME_LEN];

	if (!t || place_nic_key(name, key))
		return -EINVAL;
	return place_ov_set(t, false, key, node);
}

/* Applies one "NODE" or "KEY=NODE[,KEY=NODE...]" specification in place. */
static int place_apply_spec_locked(struct place_topo *t, bool gpu, char *spec)
{
	char *save = NULL, *item;
	int err = 0;

	if (!strchr(spec, '=')) {
		const char *p = place_skip_blanks(spec);
		int node;

		err = place_read_node(&p, &node);
		if (err || *place_skip_blanks(p))
			return -EINVAL;
		return place_ov_set(t, gpu, "*", node);
	}
	if (spec[strlen(spec) - 1] == ',')
		return -EINVAL; /* strtok_r would drop the empty last item */
	for (item = strtok_r(spec, ",", &save); item;
	     item = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(item, '=');
		char *k, *end;
		const char *p;
		int node;

		if (!eq)
			return -EINVAL;
		*eq = '\0';
		k = (char *)place_skip_blanks(item);
		end = k + strlen(k);
		while (end > k && place_is_blank(end[-1]))
			*--end = '\0';
		p = place_skip_blanks(eq + 1);
		err = place_read_node(&p, &node);
		if (err || *place_skip_blanks(p))
			return -EINVAL;
		err = gpu ? place_topo_set_gpu_node(t, k, node)
			  : place_topo_set_nic_node(t, k, node);
		if (err)
			return err;
	}
	return 0;
}

static int place_apply_spec(struct place_topo *t, bool gpu, const char *spec)
{
	struct place_override saved[PLACE_OVERRIDE_MAX];
	int nsaved = t->nov;
	char *copy;
	int err;

	if (strlen(spec) > PLACE_SPEC_MAX || strstr(spec, ",,") ||
	    spec[0] == ',')
		return -EINVAL;
	copy = strdup(spec);
	if (!copy)
		return -ENOMEM;
	memcpy(saved, t->ov, sizeof(saved));
	err = place_apply_spec_locked(t, gpu, copy);
	if (err) {
		memcpy(t->ov, saved, sizeof(saved));
		t->nov = nsaved;
	}
	free(copy);
	return err;
}

int place_topo_apply_env(struct place_topo *t, const char **bad_var)
{
	static const char *const vars[] = { "TIDEPOOL_GPU_NODE",
					    "TIDEPOOL_NIC_NODE" };

	if (bad_var)
		*bad_var = NULL;
	if (!t)
		return -EINVAL;
	for (int i = 0; i < 2; i++) {
		const char *v = getenv(vars[i]);
		int err;

		if (!v || !*v)
			continue;
		err = place_apply_spec(t, i == 0, v);
		if (err) {
			if (bad_var)
				*bad_var = vars[i];
			return err;
		}
	}
	return 0;
}

/* --- GPUs -------------------------------------------------------------- */

static bool place_osdev_is_compute(hwloc_obj_t o)
{
	if (o->type != HWLOC_OBJ_OS_DEVICE)
		return false;
	if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC)
		return true;
	/* NVML, RSMI and Level Zero GPUs have a subtype; DRM "card0" not. */
	return o->attr->osdev.type == HWLOC_OBJ_OSDEV_GPU && o->subtype;
}

static bool place_pci_is_gpu(hwloc_obj_t pci)
{
	unsigned int cls = pci->attr->pcidev.class_id;

	if (cls >> 8 != 0x03)
		return false;
	if (cls == 0x0302 || cls == 0x0380 ||
	    pci->attr->pcidev.vendor_id == 0x10de)
		return true;
	for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
		if (place_osdev_is_compute(c))
			return true;
	return false;
}

static void place_pci_ids(hwloc_obj_t pci, char *bus_id, unsigned int *vendor,
			  unsigned int *device, unsigned int *cls)
{
	struct place_pci_addr a = {
		.domain = pci->attr->pcidev.domain,
		.bus = pci->attr->pcidev.bus,
		.dev = pci->attr->pcidev.dev,
		.func = pci->attr->pcidev.func,
	};

	place_pci_format(&a, bus_id);
	*vendor = pci->attr->pcidev.vendor_id;
	*device = pci->attr->pcidev.device_id;
	*cls = pci->attr->pcidev.class_id;
}

static void place_gpu_fill(const struct place_topo *t, hwloc_obj_t pci,
			   struct place_gpu_info *g)
{
	const char *model = NULL;

	memset(g, 0, sizeof(*g));
	place_pci_ids(pci, g->bus_id, &g->vendor_id, &g->device_id,
		      &g->class_id);
	for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
		if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name)
			continue;
		place_list_add(g->osdevs, sizeof(g->osdevs), c->name);
		if (!model && place_osdev_is_compute(c))
			model = hwloc_obj_get_info_by_name(c, "GPUModel");
	}
	if (!model)
		model = hwloc_obj_get_info_by_name(pci, "PCIDevice");
	snprintf(g->model, sizeof(g->model), "%s", model ? model : "");
	g->hwloc_node = place_obj_node(t, pci);
	g->node = g->hwloc_node;
}

int place_topo_ngpus(const struct place_topo *t)
{
	return t ? t->ngpus : -EINVAL;
}

/* Effective node of a GPU: override by key, "*", then discovery. */
static int place_gpu_effective(const struct place_topo *t, const char *key,
			       int found)
{
	const struct place_override *o = place_ov_find(t, true, key);

	if (!o)
		o = place_ov_find(t, true, "*");
	return o ? o->node : found;
}

int place_gpu_get(const struct place_topo *t, int idx,
		  struct place_gpu_info *out)
{
	int node;

	if (!t || !out || idx < 0 || idx >= t->ngpus)
		return -EINVAL;
	*out = t->gpus[idx];
	node = place_gpu_effective(t, out->bus_id, out->hwloc_node);
	out->node = node < 0 ? -1 : node;
	return 0;
}

/* Node of a PCI object: its node, or -ENODATA when not on exactly one. */
static int place_pci_found(const struct place_topo *t, hwloc_obj_t pci)
{
	int node;

	if (!pci)
		return -ENOENT;
	node = place_obj_node(t, pci);
	return node < 0 ? -ENODATA : node;
}

int place_gpu_node(const struct place_topo *t, const char *bus_id)
{
	struct place_pci_addr a;
	char key[PLACE_BUSID_LEN];
	hwloc_obj_t pci = NULL;

	if (!t || place_pci_parse(bus_id, &a))
		return -EINVAL;
	place_pci_format(&a, key);
	/* hwloc keeps 16-bit domains unless built for 32. */
	if (a.domain <= 0xffff)
		pci = hwloc_get_pcidev_by_busid(t->topo, a.domain, a.bus, a.dev,
						a.func);
	return place_gpu_effective(t, key, place_pci_found(t, pci));
}

int place_gpu_node_by_name(const struct place_topo *t, const char *osdev)
{
	hwloc_obj_t o = NULL;

	if (!t || !osdev || !*osdev || strlen(osdev) >= PLACE_NAME_LEN)
		return -EINVAL;
	while ((o = hwloc_get_next_osdev(t->topo, o))) {
		hwloc_obj_t pci = o->parent;
		char key[PLACE_BUSID_LEN];
		unsigned int v, d, c;

		if (!o->name || strcmp(o->name, osdev))
			continue;
		if (!pci || pci->type != HWLOC_OBJ_PCI_DEVICE)
			break;
		place_pci_ids(pci, key, &v, &d, &c);
		return place_gpu_effective(t, key, place_pci_found(t, pci));
	}
	return place_gpu_effective(t, "", -ENOENT);
}

/* --- NICs -------------------------------------------------------------- */

static bool place_osdev_is_net(hwloc_obj_t o)
{
	return o->type == HWLOC_OBJ_OS_DEVICE &&
	       (o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ||
		o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS);
}

static bool place_pci_is_nic(hwloc_obj_t pci)
{
	unsigned int cls = pci->attr->pcidev.class_id;

	if (cls >> 8 == 0x02 || cls == 0x0c06)
		return true;
	for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
		if (place_osdev_is_net(c))
			return true;
	return false;
}

static void place_nic_add_osdev(struct place_nic *n, hwloc_obj_t o)
{
	char key[PLACE_NAME_LEN];

	if (!o->name || place_nic_key(o->name, key))
		return;
	if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
		n->rdma = true;
		if (!n->info.fabric[0])
			snprintf(n->info.fabric, sizeof(n->info.fabric), "%s",
				 o->name);
	} else {
		place_list_add(n->info.ifnames, sizeof(n->info.ifnames),
			       o->name);
	}
	place_list_add(n->aliases, sizeof(n->aliases), key);
}

/* Fills n from a PCI device (pci) or from a lone OS device (osdev). */
static void place_nic_fill(const struct place_topo *t, struct place_nic *n,
			   hwloc_obj_t pci, hwloc_obj_t osdev)
{
	struct place_nic_info *i = &n->info;

	memset(n, 0, sizeof(*n));
	if (pci) {
		place_pci_ids(pci, i->bus_id, &i->vendor_id, &i->device_id,
			      &i->class_id);
		for (hwloc_obj_t c = pci->io_first_child; c;
		     c = c->next_sibling)
			if (place_osdev_is_net(c))
				place_nic_add_osdev(n, c);
		place_list_add(n->aliases, sizeof(n->aliases), i->bus_id);
	} else {
		place_nic_add_osdev(n, osdev);
	}
	if (i->fabric[0]) {
		snprintf(i->name, sizeof(i->name), "%s", i->fabric);
	} else if (i->ifnames[0]) {
		size_t l = strcspn(i->ifnames, ",");

		memcpy(i->name, i->ifnames, l);
		i->name[l] = '\0';
	} else {
		snprintf(i->name, sizeof(i->name), "%s", i->bus_id);
	}
	n->anc = hwloc_get_non_io_ancestor_obj(t->topo, pci ? pci : osdev);
	i->hwloc_node = n->anc ? place_nodeset_pick(t, n->anc->nodeset) : -1;
	i->node = i->hwloc_node;
}

/* Effective node of nics[idx]: overrides by any alias, "*", discovery. */
static int place_nic_effective(const struct place_topo *t, int idx)
{
	const struct place_nic *n = &t->nics[idx];
	const struct place_override *o = NULL;
	const char *p = n->aliases;

	while (*p && !o) {
		char key[PLACE_NAME_LEN];
		size_t l = strcspn(p, ",");

		if (l < sizeof(key)) {
			memcpy(key, p, l);
			key[l] = '\0';
			o = place_ov_find(t, false, key);
		}
		p += l;
		if (*p == ',')
			p++;
	}
	if (!o)
		o = place_ov_find(t, false, "*");
	if (o)
		return o->node;
	return n->info.hwloc_node < 0 ? -ENODATA : n->info.hwloc_node;
}

int place_topo_nnics(const struct place_topo *t)
{
	return t ? t->nnics : -EINVAL;
}

int place_nic_get(const struct place_topo *t, int idx,
		  struct place_nic_info *out)
{
	int node;

	if (!t || !out || idx < 0 || idx >= t->nnics)
		return -EINVAL;
	*out = t->nics[idx].info;
	node = place_nic_effective(t, idx);
	out->node = node < 0 ? -1 : node;
	return 0;
}

int place_nic_node(const struct place_topo *t, const char *name)
{
	const struct place_override *o;
	char key[PLACE_NAME_LEN];

	if (!t || place_nic_key(name, key))
		return -EINVAL;
	o = place_ov_find(t, false, key);
	if (o)
		return o->node;
	for (int i = 0; i < t->nnics; i++)
		if (place_list_has(t->nics[i].aliases, key))
			return place_nic_effective(t, i);
	o = place_ov_find(t, false, "*");
	return o ? o->node : -ENOENT;
}

/* Ranking key of a NIC seen from a node; smaller is nearer. */
struct place_rank {
	int remote;    /* 0: on the node itself */
	uint64_t dist; /* NUMA latency, UINT64_MAX unknown */
	int tree;      /* minus the depth of the common ancestor */
	int plain;     /* 0: RDMA-capable */
	int idx;       /* topology order */
};

static struct place_rank place_nic_rank(const struct place_topo *t, int ni,
					int node_idx, int nic_node)
{
	const struct place_node *nd = &t->nodes[node_idx];
	struct place_rank r = {
		.remote = nic_node != nd->id,
		.dist = UINT64_MAX,
		.tree = 0,
		.plain = !t->nics[ni].rdma,
		.idx = ni,
	};
	hwloc_obj_t where = t->nics[ni].anc;
	int j = nic_node >= 0 ? place_node_index(t, nic_node) : -1;

	if (j >= 0) {
		if (t->dist && t->dist[(size_t)node_idx * t->nnodes + j])
			r.dist = t->dist[(size_t)node_idx * t->nnodes + j];
		/* An overridden NIC sits where its node is. */
		where = t->nodes[j].obj->parent;
	}
	if (where && nd->obj->parent) {
		hwloc_obj_t c = hwloc_get_common_ancestor_obj(
			t->topo, nd->obj->parent, where);

		r.tree = c ? -c->depth : 0;
	}
	return r;
}

static bool place_rank_less(const struct place_rank *a,
			    const struct place_rank *b)
{
	if (a->remote != b->remote)
		return a->remote < b->remote;
	if (a->dist != b->dist)
		return a->dist < b->dist;
	if (a->tree != b->tree)
		return a->tree < b->tree;
	if (a->plain != b->plain)
		return a->plain < b->plain;
	return a->idx < b->idx;
}

int place_nearest_nic(const struct place_topo *t, int node, unsigned int flags,
		      struct place_nic_info *out)
{
	struct place_rank best = { 0 };
	int i = place_node_lookup(t, node);
	int found = -1;

	if (i < 0)
		return i;
	if (!out || (flags & ~PLACE_NIC_RDMA))
		return -EINVAL;
	for (int ni = 0; ni < t->nnics; ni++) {
		struct place_rank r;

		if ((flags & PLACE_NIC_RDMA) && !t->nics[ni].rdma)
			continue;
		r = place_nic_rank(t, ni, i, place_nic_effective(t, ni));
		if (found < 0 || place_rank_less(&r, &best)) {
			best = r;
			found = ni;
		}
	}
	if (found < 0)
		return -ENOENT;
	return place_nic_get(t, found, out);
}

/* --- opening ------------------------------------------------------------ */

static int place_node_cmp(const void *a, const void *b)
{
	const struct place_node *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

static int place_snap_nodes(struct place_topo *t)
{
	int n = hwloc_get_nbobjs_by_type(t->topo, HWLOC_OBJ_NUMANODE);
	hwloc_obj_t o = NULL;
	int i = 0;

	if (n <= 0)
		return -ENXIO;
	t->nodes = calloc((size_t)n, sizeof(*t->nodes));
	if (!t->nodes)
		return -ENOMEM;
	while ((o = hwloc_get_next_obj_by_type(t->topo, HWLOC_OBJ_NUMANODE,
					       o)) &&
	       i < n) {
		if (o->os_index >= PLACE_NODE_MAX || !o->cpuset)
			return -EINVAL;
		t->nodes[i].id = (int)o->os_index;
		t->nodes[i].obj = o;
		i++;
	}
	t->nnodes = i;
	qsort(t->nodes, (size_t)i, sizeof(*t->nodes), place_node_cmp);
	for (i = 1; i < t->nnodes; i++)
		if (t->nodes[i].id == t->nodes[i - 1].id)
			return -EINVAL;
	return 0;
}

/* The first NUMA latency matrix hwloc has (the OS one), by node index. */
static int place_snap_distances(struct place_topo *t)
{
	struct hwloc_distances_s *d = NULL;
	size_t nn = (size_t)t->nnodes;
	unsigned int nr = 1;

	if (hwloc_distances_get_by_type(t->topo, HWLOC_OBJ_NUMANODE, &nr, &d,
					HWLOC_DISTANCES_KIND_MEANS_LATENCY,
					0) < 0)
		return place_errno();
	if (!nr || !d)
		return 0;
	t->dist = calloc(nn * nn, sizeof(*t->dist));
	if (!t->dist) {
		hwloc_distances_release(t->topo, d);
		return -ENOMEM;
	}
	for (unsigned int a = 0; a < d->nbobjs; a++) {
		int i = place_node_index(t, (int)d->objs[a]->os_index);

		for (unsigned int b = 0; b < d->nbobjs && i >= 0; b++) {
			int j = place_node_index(t, (int)d->objs[b]->os_index);

			if (j >= 0)
				t->dist[(size_t)i * nn + (size_t)j] =
					d->values[a * d->nbobjs + b];
		}
	}
	hwloc_distances_release(t->topo, d);
	return 0;
}

static int place_snap_devices(struct place_topo *t)
{
	int npci = 0, nlone = 0;
	hwloc_obj_t o = NULL;

	while ((o = hwloc_get_next_pcidev(t->topo, o)))
		npci++;
	while ((o = hwloc_get_next_osdev(t->topo, o)))
		if (place_osdev_is_net(o) &&
		    (!o->parent || o->parent->type != HWLOC_OBJ_PCI_DEVICE))
			nlone++;
	t->gpus = calloc((size_t)npci + 1, sizeof(*t->gpus));
	t->nics = calloc((size_t)(npci + nlone) + 1, sizeof(*t->nics));
	if (!t->gpus || !t->nics)
		return -ENOMEM;
	while ((o = hwloc_get_next_pcidev(t->topo, o))) {
		if (place_pci_is_gpu(o))
			place_gpu_fill(t, o, &t->gpus[t->ngpus++]);
		if (place_pci_is_nic(o))
			place_nic_fill(t, &t->nics[t->nnics++], o, NULL);
	}
	while ((o = hwloc_get_next_osdev(t->topo, o)))
		if (place_osdev_is_net(o) &&
		    (!o->parent || o->parent->type != HWLOC_OBJ_PCI_DEVICE))
			place_nic_fill(t, &t->nics[t->nnics++], NULL, o);
	return 0;
}

/* Loads from xml (a path) or syn (a description), or the host if both NULL. */
static int place_topo_load(const char *xml, const char *syn,
			   struct place_topo **out)
{
	struct place_topo *t;
	int err;

	*out = NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	if (hwloc_topology_init(&t->topo) < 0) {
		err = place_errno();
		free(t);
		return err;
	}
	/* Keep GPUs, NICs and their OS devices; bridges are not needed. */
	if (hwloc_topology_set_io_types_filter(
		    t->topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) < 0) {
		err = place_errno();
		goto fail;
	}
	if (xml && hwloc_topology_set_xml(t->topo, xml) < 0) {
		err = place_errno();
		goto fail;
	}
	if (syn && hwloc_topology_set_synthetic(t->topo, syn) < 0) {
		err = place_errno();
		goto fail;
	}
	if (hwloc_topology_load(t->topo) < 0) {
		err = place_errno();
		goto fail;
	}
	t->is_host = hwloc_topology_is_thissystem(t->topo);
	err = place_snap_nodes(t);
	if (!err)
		err = place_snap_distances(t);
	if (!err)
		err = place_snap_devices(t);
	if (err)
		goto fail;
	*out = t;
	return 0;
fail:
	place_topo_close(t);
	return err;
}

int place_topo_open(const char *xml_path, struct place_topo **out)
{
	const char *env;

	if (!out)
		return -EINVAL;
	if (!xml_path) {
		/* Load it ourselves: hwloc silently ignores a bad one. */
		env = getenv("HWLOC_XMLFILE");
		if (env && *env)
			xml_path = env;
	}
	return place_topo_load(xml_path, NULL, out);
}

int place_topo_open_synthetic(const char *desc, struct place_topo **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!desc || !*desc)
		return -EINVAL;
	return place_topo_load(NULL, desc, out);
}

void place_topo_close(struct place_topo *t)
{
	if (!t)
		return;
	free(t->nics);
	free(t->gpus);
	free(t->dist);
	free(t->nodes);
	hwloc_topology_destroy(t->topo);
	free(t);
}

/* --- binding this host ---------------------------------------------------- */

int place_bind_thread_to_node(const struct place_topo *t, int node)
{
	hwloc_bitmap_t set;
	int i = place_node_lookup(t, node);
	int err = 0;

	if (i < 0)
		return i;
	if (!t->is_host)
		return -EOPNOTSUPP;
	set = hwloc_bitmap_dup(t->nodes[i].obj->cpuset);
	if (!set)
		return -ENOMEM;
	if (hwloc_bitmap_and(set, set,
			     hwloc_topology_get_allowed_cpuset(t->topo)) < 0)
		err = place_errno();
	else if (hwloc_bitmap_iszero(set))
		err = -ENODEV;
	else if (hwloc_set_cpubind(t->topo, set, HWLOC_CPUBIND_THREAD) < 0)
		err = place_errno();
	hwloc_bitmap_free(set);
	return err;
}

/* Whether node is in this process's allowed memory nodes (cpuset cgroup). */
static int place_mems_allowed(int node)
{
	unsigned long mask[PLACE_NODE_MAX / (8 * sizeof(unsigned long))];
	const unsigned long bits = 8 * sizeof(unsigned long);

	memset(mask, 0, sizeof(mask));
	if (get_mempolicy(NULL, mask, PLACE_NODE_MAX, NULL,
			  MPOL_F_MEMS_ALLOWED) < 0)
		return place_errno();
	return mask[node / bits] & (1ul << (node % bits)) ? 0 : -ENXIO;
}

int place_membind(void *addr, size_t len_bytes, int node, unsigned int flags)
{
	unsigned long mask[PLACE_NODE_MAX / (8 * sizeof(unsigned long))];
	const unsigned long bits = 8 * sizeof(unsigned long);
	long page = sysconf(_SC_PAGESIZE);
	unsigned int mflags = 0;
	int mode, err;

	if (!addr || !len_bytes || node < 0 || node >= PLACE_NODE_MAX ||
	    (flags & ~(PLACE_MEM_PREFERRED | PLACE_MEM_MOVE)) || page <= 0 ||
	    (uintptr_t)addr % (uintptr_t)page)
		return -EINVAL;
	if (numa_available() < 0)
		return -ENOSYS;
	err = place_mems_allowed(node);
	if (err)
		return err;
	memset(mask, 0, sizeof(mask));
	mask[node / bits] = 1ul << (node % bits);
	mode = flags & PLACE_MEM_PREFERRED ? MPOL_PREFERRED : MPOL_BIND;
	if (flags & PLACE_MEM_MOVE)
		mflags = MPOL_MF_MOVE | MPOL_MF_STRICT;
	/* maxnode counts one past the last bit, as libnuma passes it. */
	if (mbind(addr, len_bytes, mode, mask, PLACE_NODE_MAX + 1, mflags) < 0)
		return place_errno();
	return 0;
}

static int place_populate(void *addr, size_t len, size_t page)
{
	if (!madvise(addr, len, MADV_POPULATE_WRITE))
		return 0;
	if (errno != EINVAL)
		return place_errno();
	/* Kernels before 5.14: write one byte per page. */
	for (size_t off = 0; off < len; off += page)
		((volatile char *)addr)[off] = 0;
	return 0;
}

int place_alloc_on_node(size_t len_bytes, int node, unsigned int flags,
			void **out)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t len;
	void *p;
	int err;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!len_bytes || page <= 0 || len_bytes > SIZE_MAX - (size_t)page ||
	    (flags & ~(PLACE_MEM_PREFERRED | PLACE_MEM_POPULATE)))
		return -EINVAL;
	len = (len_bytes + (size_t)page - 1) & ~((size_t)page - 1);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	if (p == MAP_FAILED)
		return place_errno();
	err = place_membind(p, len, node, flags & PLACE_MEM_PREFERRED);
	if (!err && (flags & PLACE_MEM_POPULATE))
		err = place_populate(p, len, (size_t)page);
	if (err) {
		munmap(p, len);
		return err;
	}
	*out = p;
	return 0;
}

int place_free(void *addr, size_t len_bytes)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t len;

	if (!addr)
		return 0;
	if (!len_bytes || page <= 0 || len_bytes > SIZE_MAX - (size_t)page)
		return -EINVAL;
	len = (len_bytes + (size_t)page - 1) & ~((size_t)page - 1);
	return munmap(addr, len) < 0 ? place_errno() : 0;
}

int place_memory_node(const void *addr)
{
	long page = sysconf(_SC_PAGESIZE);
	void *pages[1];
	int status = 0;

	if (!addr || page <= 0)
		return -EINVAL;
	pages[0] = (void *)((uintptr_t)addr & ~((uintptr_t)page - 1));
	if (move_pages(0, 1, pages, NULL, &status, 0) < 0)
		return place_errno();
	return status;
}
