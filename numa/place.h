/* SPDX-License-Identifier: MIT */
/*
 * numa/place.h - NUMA placement: where the nodes, cores, GPUs and NICs of a
 * machine are (hwloc), and binding threads and memory to a node (libnuma).
 *
 * A struct place_topo is a snapshot of one machine's topology: this host,
 * a recorded hwloc XML file, or a synthetic description (for tests). It
 * answers "which NUMA node is this GPU / NIC / CPU on", "which NIC is
 * nearest to node N" and "which CPUs belong to node N". The binding
 * functions then act on this host: pin the calling thread to a node's CPUs,
 * and allocate or bind memory on a node.
 *
 * Numbering: a node is the operating system's NUMA node number (the N of
 * /sys/devices/system/node/nodeN, numactl and mbind), not a dense index;
 * a CPU is the OS processor number (sched_setaffinity, /proc/cpuinfo).
 * Use place_topo_node_id() to enumerate nodes.
 *
 * GPUs are found by PCI bus id ("0000:3b:00.0", as cudaDeviceGetPCIBusId
 * or nvidia-smi print it, any case, 4- or 8-digit domain or none), NICs by
 * interface name ("ib0", "eth0"), OpenFabrics / libfabric domain name
 * ("mlx5_0"; an EFA domain's "-rdm"/"-dgrm" suffix is ignored) or PCI bus
 * id. A device's node is that of the closest CPU-side object hwloc attaches
 * it to; a device attached above several DRAM nodes (common in VMs) has no
 * node (-ENODATA) unless an override names one.
 *
 * Overrides (for machines whose firmware reports wrong or no locality):
 * place_topo_set_gpu_node(), place_topo_set_nic_node(), or the environment
 * through place_topo_apply_env():
 *
 *   TIDEPOOL_GPU_NODE = NODE | BUSID=NODE[,BUSID=NODE...]
 *   TIDEPOOL_NIC_NODE = NODE | NAME=NODE[,NAME=NODE...]
 *
 * A bare NODE (or the key "*") applies to every GPU (NIC). An override is
 * answered before discovery, also for devices hwloc does not see.
 *
 * Errors are negative errno values; hwloc's and libnuma's -1 + errno are
 * mapped where they happen. Nothing here prints.
 *
 * Thread-safety: a place_topo is read-only after it is opened and its
 * overrides are set: every query may then run concurrently from any thread.
 * place_topo_set_*() and place_topo_apply_env() must not run concurrently
 * with anything else on the same handle (configure, then share). The
 * functions without a place_topo argument are safe from any thread.
 */
#ifndef TP_NUMA_PLACE_H
#define TP_NUMA_PLACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PLACE_NODE_MAX 1024   /* nodes are 0 .. PLACE_NODE_MAX - 1 (Linux) */
#define PLACE_BUSID_LEN 20    /* "dddddddd:bb:dd.f" + NUL */
#define PLACE_NAME_LEN 64     /* one device name, incl. NUL */
#define PLACE_NAMES_LEN 128   /* comma-separated names, incl. NUL */
#define PLACE_MODEL_LEN 96    /* model string, incl. NUL */
#define PLACE_OVERRIDE_MAX 64 /* override entries per topology */

struct place_topo;

/* A PCI address; domain may exceed 16 bits (VMD domains). */
struct place_pci_addr {
	uint32_t domain;
	uint8_t bus;
	uint8_t dev;  /* 0 .. 0x1f */
	uint8_t func; /* 0 .. 7 */
};

/* One GPU as place_gpu_get() reports it. */
struct place_gpu_info {
	char bus_id[PLACE_BUSID_LEN]; /* canonical "0000:3b:00.0" */
	unsigned int vendor_id;	      /* PCI ids, e.g. 0x10de */
	unsigned int device_id;
	unsigned int class_id;	      /* PCI class, e.g. 0x0302 (3D) */
	char model[PLACE_MODEL_LEN];  /* "Tesla V100-SXM3-32GB-H", or "" */
	char osdevs[PLACE_NAMES_LEN]; /* "cuda0,opencl0d0,nvml0", or "" */
	int node;	/* effective node (overrides applied), -1 unknown */
	int hwloc_node; /* node as discovered, -1 unknown */
};

/* One NIC as place_nic_get() and place_nearest_nic() report it. */
struct place_nic_info {
	char name[PLACE_NAME_LEN]; /* fabric, else first ifname, else bus_id */
	char fabric[PLACE_NAME_LEN];   /* OpenFabrics device "mlx5_0", or "" */
	char ifnames[PLACE_NAMES_LEN]; /* "eth2,ib0", or "" */
	char bus_id[PLACE_BUSID_LEN];  /* "" when hwloc shows no PCI device */
	unsigned int vendor_id;
	unsigned int device_id;
	unsigned int class_id; /* 0x0200 Ethernet, 0x0207/0x0c06 InfiniBand */
	int node;	/* effective node (overrides applied), -1 unknown */
	int hwloc_node; /* node as discovered, -1 unknown */
};

/* place_nearest_nic() flags */
#define PLACE_NIC_RDMA 0x1u /* only NICs with an OpenFabrics (RDMA) device */

/* place_membind() / place_alloc_on_node() flags */
#define PLACE_MEM_PREFERRED 0x1u /* MPOL_PREFERRED: fall back when full */
#define PLACE_MEM_MOVE 0x2u	 /* membind: migrate pages already present */
#define PLACE_MEM_POPULATE 0x4u	 /* alloc: fault every page in now */

/* --- opening ---------------------------------------------------------- */

/*
 * Loads a topology. xml_path names an hwloc XML export (lstopo file.xml);
 * NULL means this host, unless HWLOC_XMLFILE is set and non-empty, which is
 * then loaded as if given as xml_path (a bad HWLOC_XMLFILE is an error, not
 * a silent fallback to the host). PCI devices and their OS devices (GPUs,
 * NICs) are kept; bridges are dropped. Only the host topology is "this
 * system" (place_topo_is_host()) unless HWLOC_THISSYSTEM=1.
 * Returns 0 and *out, or -errno with *out = NULL:
 *   -EINVAL  out is NULL, the file is not a loadable hwloc XML export, or
 *            it numbers a node >= PLACE_NODE_MAX
 *   -ENOENT  the file does not exist (other open errors as -errno)
 *   -ENOMEM  out of memory
 *   -ENXIO   the topology has no NUMA node
 * Thread-safety: any thread. The caller owns *out (place_topo_close()).
 */
int place_topo_open(const char *xml_path, struct place_topo **out);

/*
 * Loads an hwloc synthetic topology, e.g. "pack:2 numa:1 core:4 pu:2" (each
 * package with one node of 1 GiB, 4 cores, 8 CPUs): nodes and CPUs only,
 * no GPUs, NICs or distances. Never this system. For tests and what-if.
 * Returns 0 and *out, or -EINVAL (desc NULL or not a valid description),
 * -ENOMEM; *out = NULL on failure. Ownership as place_topo_open().
 */
int place_topo_open_synthetic(const char *desc, struct place_topo **out);

/* Frees t and everything it owns. NULL is a no-op. Not concurrently. */
void place_topo_close(struct place_topo *t);

/* Whether t describes the machine this process runs on (binding works). */
bool place_topo_is_host(const struct place_topo *t);

/* --- nodes and CPUs --------------------------------------------------- */

/* Number of NUMA nodes (>= 1). */
int place_topo_nnodes(const struct place_topo *t);

/*
 * The OS number of the idx-th node, in increasing order (0 <= idx <
 * place_topo_nnodes()). Returns the node, or -EINVAL for idx out of range.
 */
int place_topo_node_id(const struct place_topo *t, int idx);

/* Whether node is a NUMA node of t. */
bool place_topo_has_node(const struct place_topo *t, int node);

/*
 * The CPUs local to node, in increasing order: writes up to max of them to
 * cpus (may be NULL when max is 0) and returns how many there are (may be
 * more than max, as snprintf does). For a node without CPUs of its own
 * (memory-only) these are the CPUs of the object it hangs off, as hwloc
 * reports. Returns -EINVAL (node < 0), -ENXIO (no such node).
 */
ssize_t place_node_cpus(const struct place_topo *t, int node, int *cpus,
			size_t max);

/*
 * The same CPUs as a Linux cpulist string ("0-7,16-23"), NUL-terminated.
 * Returns its length, or -EINVAL (node < 0, buf NULL), -ENXIO (no such
 * node), -ENOSPC (len too small; buf then holds a truncated string).
 */
int place_node_cpulist(const struct place_topo *t, int node, char *buf,
		       size_t len);

/* Local memory of node in bytes; 0 for no such node (or none known). */
uint64_t place_node_mem_bytes(const struct place_topo *t, int node);

/*
 * Relative latency from node `from` to node `to` as the firmware reports it
 * (SLIT: 10 = local). Returns the distance, or -EINVAL (negative node),
 * -ENXIO (no such node), -ENODATA (no NUMA latency matrix, or it lacks one
 * of the nodes).
 */
int place_node_distance(const struct place_topo *t, int from, int to);

/* The node of CPU cpu, or -EINVAL (cpu < 0), -ENOENT (no such CPU). */
int place_cpu_node(const struct place_topo *t, int cpu);

/*
 * Parses a node list from a config value: "all", or comma-separated
 * numbers and ranges, blanks allowed around items: "0", "0,1", "0-3,8".
 * Pure (no topology). "all" sets *all = true and returns 0; otherwise
 * *all = false and the distinct nodes are written in increasing order to
 * nodes (up to max) and their count returned.
 * Returns -EINVAL (NULL argument, empty list or item, non-digit, reversed
 * range), -ERANGE (a node >= PLACE_NODE_MAX), -ENOSPC (more than max).
 */
ssize_t place_parse_nodelist(const char *s, bool *all, int *nodes, size_t max);

/*
 * place_parse_nodelist() against t: "all" becomes every node of t, and
 * every listed node must exist. Returns the count as above, the errors of
 * place_parse_nodelist(), or -ENXIO (a listed node is not in t).
 */
ssize_t place_topo_resolve_nodelist(const struct place_topo *t, const char *s,
				    int *nodes, size_t max);

/* --- GPUs --------------------------------------------------------------- */

/*
 * Parses a PCI bus id: [domain:]bus:dev.func in hex, any case, domain 1-8
 * digits (default 0), bus 1-2 digits, dev <= 1f, func <= 7, nothing
 * around it. Pure. Returns 0, or -EINVAL (anything else).
 */
int place_pci_parse(const char *s, struct place_pci_addr *out);

/*
 * GPUs: PCI display-class devices (class 0x03xx) that are 3D controllers
 * (0x0302) or "other display" (0x0380, AMD Instinct), come from NVIDIA, or
 * carry a compute OS device (CUDA, OpenCL, NVML, RSMI, Level Zero); a plain
 * VGA for the BMC console is not a GPU. Listed in topology order.
 * place_topo_ngpus() returns their number; place_gpu_get() copies the
 * idx-th into *out and returns 0, or -EINVAL (idx out of range, out NULL).
 */
int place_topo_ngpus(const struct place_topo *t);
int place_gpu_get(const struct place_topo *t, int idx,
		  struct place_gpu_info *out);

/*
 * The node of the PCI device at bus_id. Any PCI device is looked up, not
 * only those listed as GPUs: the caller got the id from its GPU runtime.
 * Order: an override for this bus id, then "*", then discovery.
 * Returns the node, or -EINVAL (bus_id NULL or malformed), -ENOENT (no such
 * PCI device in t and no override), -ENODATA (hwloc attaches it above
 * several nodes and no override names one).
 */
int place_gpu_node(const struct place_topo *t, const char *bus_id);

/*
 * The node of the GPU with hwloc OS device name osdev ("cuda0", "nvml3",
 * "opencl0d1", "rsmi0"; present only where hwloc was built with that
 * backend or the XML records it), overrides applied by its bus id. Any OS
 * device of a PCI device matches (also "card0"); a name not under a PCI
 * device, or unknown, is -ENOENT unless "*" is overridden.
 * Returns as place_gpu_node(); -EINVAL for NULL, empty or over-long names.
 */
int place_gpu_node_by_name(const struct place_topo *t, const char *osdev);

/* --- NICs --------------------------------------------------------------- */

/*
 * NICs: PCI network controllers (0x02xx), InfiniBand controllers (0x0c06),
 * and any device carrying a network interface or OpenFabrics OS device,
 * in topology order. Accessors as for GPUs.
 */
int place_topo_nnics(const struct place_topo *t);
int place_nic_get(const struct place_topo *t, int idx,
		  struct place_nic_info *out);

/*
 * The node of the NIC called name: an interface ("ib0"), an OpenFabrics or
 * libfabric domain name ("mlx4_0", "rdmap0s6-rdm") or a PCI bus id.
 * Order: an override keyed by this name, one keyed by another name of the
 * same NIC, then "*", then discovery. Returns the node, or -EINVAL (name
 * NULL, empty or longer than PLACE_NAME_LEN - 1), -ENOENT (unknown, no
 * override), -ENODATA (attached above several nodes, no override).
 */
int place_nic_node(const struct place_topo *t, const char *name);

/*
 * The NIC nearest to node, copied to *out. Ranking: a NIC on node itself
 * first; then the smallest NUMA latency from node to the NIC's node (when
 * the firmware gives a matrix); then the deepest common ancestor in the
 * topology tree (same package before another package); then RDMA-capable
 * before not; then topology order. Effective (overridden) nodes count.
 * flags: 0 or PLACE_NIC_RDMA. Returns 0, or -EINVAL (node < 0, out NULL,
 * unknown flags), -ENXIO (no such node), -ENOENT (no NIC, or none with
 * RDMA under PLACE_NIC_RDMA).
 */
int place_nearest_nic(const struct place_topo *t, int node, unsigned int flags,
		      struct place_nic_info *out);

/* --- overrides ---------------------------------------------------------- */

/*
 * Forces the node of the GPU at bus_id ("*": every GPU) to node; node -1
 * removes the override. The device need not be visible to hwloc.
 * Returns 0, or -EINVAL (bus_id NULL or malformed, node < -1), -ENXIO (node
 * not in t), -ENOSPC (PLACE_OVERRIDE_MAX entries in use).
 * Not thread-safe against other calls on t (see top).
 */
int place_topo_set_gpu_node(struct place_topo *t, const char *bus_id, int node);

/*
 * Forces the node of the NIC called name (interface, fabric name or PCI bus
 * id; "*": every NIC) to node; -1 removes it. Errors as above, -EINVAL also
 * for an empty or over-long name.
 */
int place_topo_set_nic_node(struct place_topo *t, const char *name, int node);

/*
 * Applies TIDEPOOL_GPU_NODE and TIDEPOOL_NIC_NODE (grammar at the top) to
 * t; unset or empty variables are ignored. Each variable is all or
 * nothing: a bad one changes nothing and names itself in *bad_var (may be
 * NULL) for the caller's error message. Returns 0, or -EINVAL (malformed
 * value, node not a number), -ENXIO (node not in t), -ENOSPC (too many
 * entries). Not thread-safe against other calls on t; reads the
 * environment (no setenv concurrently).
 */
int place_topo_apply_env(struct place_topo *t, const char **bad_var);

/* --- binding this host ---------------------------------------------------- */

/*
 * Pins the calling thread to the CPUs of node. Returns 0, or -EINVAL (node
 * < 0), -ENXIO (no such node), -EOPNOTSUPP (t is not this host: XML or
 * synthetic), -ENODEV (none of the node's CPUs is usable here), or the
 * -errno of the affinity call (e.g. -EPERM).
 */
int place_bind_thread_to_node(const struct place_topo *t, int node);

/*
 * Binds the pages of [addr, addr + len_bytes) to node (mbind MPOL_BIND, or
 * MPOL_PREFERRED with PLACE_MEM_PREFERRED); with PLACE_MEM_MOVE pages
 * already present are migrated. addr must be page-aligned. Returns 0, or
 * -EINVAL (addr NULL or unaligned, len_bytes 0, node < 0, unknown flags),
 * -ENXIO (node not among this process's allowed memory nodes), -ENOSYS
 * (kernel without NUMA), -EIO (PLACE_MEM_MOVE could not move every page),
 * or mbind's -errno (-EFAULT: range not mapped, -ENOMEM).
 * Thread-safety: any thread; the caller owns the range.
 */
int place_membind(void *addr, size_t len_bytes, int node, unsigned int flags);

/*
 * Maps len_bytes (rounded up to pages) of anonymous private memory bound to
 * node (flags: PLACE_MEM_PREFERRED, PLACE_MEM_POPULATE). Without POPULATE
 * pages land on node when first touched. Returns 0 and *out, or -EINVAL
 * (out NULL, len_bytes 0, unknown flags), -ENOMEM, and the errors of
 * place_membind(); *out = NULL on failure. The caller owns the mapping and
 * frees it with place_free(*out, len_bytes). Any thread.
 */
int place_alloc_on_node(size_t len_bytes, int node, unsigned int flags,
			void **out);

/*
 * Unmaps memory from place_alloc_on_node() (same len_bytes). NULL is a
 * no-op. Returns 0 or -errno of munmap (-EINVAL: bad address).
 */
int place_free(void *addr, size_t len_bytes);

/*
 * The node that holds the page containing addr (move_pages query).
 * Returns the node, or -EINVAL (addr NULL), -ENOENT (page not populated:
 * never touched or swapped out), -EFAULT (not mapped), -ENOSYS.
 * Any thread.
 */
int place_memory_node(const void *addr);

#endif
