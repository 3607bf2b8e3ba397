// SPDX-License-Identifier: MIT
/*
 * tests/test_place.c - NUMA placement (numa/place.c).
 *
 * The placement logic runs on recorded hwloc XML topologies of real
 * servers ($TP_SOURCE_DIR/tests/data: DGX-2, POWER8 with GPUs,
 * multi-node Xeons with NICs), on two hand-written XML fixtures (NICs with
 * and without a distance matrix; a GPU-memory node) and on synthetic
 * topologies. Every expected value was read off lstopo/hwloc-calc for that
 * file, independently of place.c. The host part binds and allocates for
 * real on this machine's first node.
 *
 * Modes:
 *   test_place          everything that any host can run; exits 77 (after
 *                       running the rest) when the recorded topologies are
 *                       missing, so they never pass vacuously.
 *   test_place --bind   cross-node binding and allocation; exits 77 on a
 *                       host with fewer than two NUMA nodes, saying so.
 *
 * Single-threaded; Check forks each test, so bindings and environment
 * changes stay in their test.
 */
#include "numa/place.h"
#include "tests/testutil.h"

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static char topo_dir[PATH_MAX];

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define KIB 1024ull

static struct place_topo *open_xml(const char *file)
{
	struct place_topo *t = NULL;
	char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/%s", topo_dir, file);
	ck_assert_msg(place_topo_open(path, &t) == 0, "cannot load %s", path);
	ck_assert_ptr_nonnull(t);
	ck_assert(!place_topo_is_host(t));
	return t;
}

static struct place_topo *open_syn(const char *desc)
{
	struct place_topo *t = NULL;

	ck_assert_int_eq(place_topo_open_synthetic(desc, &t), 0);
	ck_assert_ptr_nonnull(t);
	return t;
}

/* Writes text to a fresh temporary file; returns its path (static). */
static const char *write_tmp(const char *text)
{
	static char path[64];
	size_t len = strlen(text);
	int fd;

	snprintf(path, sizeof(path), "/tmp/test_place.XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
	close(fd);
	return path;
}

static struct place_topo *open_text(const char *xml)
{
	const char *path = write_tmp(xml);
	struct place_topo *t = NULL;

	ck_assert_int_eq(place_topo_open(path, &t), 0);
	unlink(path);
	return t;
}

static void check_nodes(const struct place_topo *t, const int *ids, int n)
{
	ck_assert_int_eq(place_topo_nnodes(t), n);
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(place_topo_node_id(t, i), ids[i]);
		ck_assert(place_topo_has_node(t, ids[i]));
	}
	ck_assert_int_eq(place_topo_node_id(t, n), -EINVAL);
	ck_assert_int_eq(place_topo_node_id(t, -1), -EINVAL);
	ck_assert(!place_topo_has_node(t, ids[n - 1] + 1));
	ck_assert(!place_topo_has_node(t, -1));
}

static void check_cpulist(const struct place_topo *t, int node,
			  const char *want)
{
	char buf[256];

	ck_assert_int_eq(place_node_cpulist(t, node, buf, sizeof(buf)),
			 (int)strlen(want));
	ck_assert_str_eq(buf, want);
}

struct want_gpu {
	const char *bus_id;
	int node;
	const char *osdevs;
	const char *model;
};

static void check_gpus(const struct place_topo *t, const struct want_gpu *w,
		       int n)
{
	struct place_gpu_info g;

	ck_assert_int_eq(place_topo_ngpus(t), n);
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(place_gpu_get(t, i, &g), 0);
		ck_assert_str_eq(g.bus_id, w[i].bus_id);
		ck_assert_int_eq(g.node, w[i].node);
		ck_assert_int_eq(g.hwloc_node, w[i].node);
		ck_assert_str_eq(g.osdevs, w[i].osdevs);
		ck_assert_str_eq(g.model, w[i].model);
		ck_assert_int_eq(place_gpu_node(t, w[i].bus_id), w[i].node);
	}
	ck_assert_int_eq(place_gpu_get(t, n, &g), -EINVAL);
	ck_assert_int_eq(place_gpu_get(t, -1, &g), -EINVAL);
}

struct want_nic {
	const char *name;
	const char *fabric;
	const char *ifnames;
	const char *bus_id;
	unsigned int class_id;
	int node;
};

static void check_nics(const struct place_topo *t, const struct want_nic *w,
		       int n)
{
	struct place_nic_info x;

	ck_assert_int_eq(place_topo_nnics(t), n);
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(place_nic_get(t, i, &x), 0);
		ck_assert_str_eq(x.name, w[i].name);
		ck_assert_str_eq(x.fabric, w[i].fabric);
		ck_assert_str_eq(x.ifnames, w[i].ifnames);
		ck_assert_str_eq(x.bus_id, w[i].bus_id);
		ck_assert_uint_eq(x.class_id, w[i].class_id);
		ck_assert_int_eq(x.node, w[i].node);
		ck_assert_int_eq(x.hwloc_node, w[i].node);
		ck_assert_int_eq(place_nic_node(t, w[i].name), w[i].node);
		ck_assert_int_eq(place_nic_node(t, w[i].bus_id), w[i].node);
	}
	ck_assert_int_eq(place_nic_get(t, n, &x), -EINVAL);
}

static void check_nearest(const struct place_topo *t, int node,
			  unsigned int flags, const char *want)
{
	struct place_nic_info x;

	ck_assert_int_eq(place_nearest_nic(t, node, flags, &x), 0);
	ck_assert_msg(!strcmp(x.name, want), "node %d flags %u: got %s want %s",
		      node, flags, x.name, want);
}

/* --- pure parsers ----------------------------------------------------- */

START_TEST(test_pci_parse)
{
	static const struct {
		const char *s;
		uint32_t domain;
		unsigned int bus, dev, func;
	} ok[] = {
		{ "0000:3b:00.0", 0, 0x3b, 0, 0 },
		{ "3b:00.0", 0, 0x3b, 0, 0 },
		{ "0000:3B:00.0", 0, 0x3b, 0, 0 }, /* cudaDeviceGetPCIBusId */
		{ "00000000:3B:00.0", 0, 0x3b, 0, 0 }, /* nvidia-smi */
		{ "000a:01:00.0", 0xa, 1, 0, 0 },
		{ "10000:e1:1f.7", 0x10000, 0xe1, 0x1f, 7 }, /* VMD domain */
		{ "0:0:0.0", 0, 0, 0, 0 },
		{ "ffffffff:ff:1f.7", 0xffffffffu, 0xff, 0x1f, 7 },
	};
	static const char *const bad[] = {
		"",
		"3b:00",
		"3b:00.",
		"3b:20.0",
		"3b:00.8",
		"3b:00.0 ",
		" 3b:00.0",
		"g0:00.0",
		"123:00.0",
		"0000:123:00.0",
		"0000:3b:00.0.1",
		"0000:3b:000.0",
		"000000000:3b:00.0",
		"3b.00.0",
		"0000:3b:00:0",
		"3b:00.00",
		"0000:3b:00.0x",
		":3b:00.0",
		"0000::00.0",
		"+3b:00.0",
	};
	struct place_pci_addr a;

	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		memset(&a, 0xee, sizeof(a));
		ck_assert_msg(place_pci_parse(ok[i].s, &a) == 0, "%s", ok[i].s);
		ck_assert_uint_eq(a.domain, ok[i].domain);
		ck_assert_uint_eq(a.bus, ok[i].bus);
		ck_assert_uint_eq(a.dev, ok[i].dev);
		ck_assert_uint_eq(a.func, ok[i].func);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		ck_assert_msg(place_pci_parse(bad[i], &a) == -EINVAL,
			      "accepted \"%s\"", bad[i]);
	ck_assert_int_eq(place_pci_parse(NULL, &a), -EINVAL);
	ck_assert_int_eq(place_pci_parse("3b:00.0", NULL), -EINVAL);
}
END_TEST

START_TEST(test_nodelist_parse)
{
	static const struct {
		const char *s;
		int n;
		int nodes[8];
	} ok[] = {
		{ "0", 1, { 0 } },
		{ "0,1", 2, { 0, 1 } },
		{ "0-3,8", 5, { 0, 1, 2, 3, 8 } },
		{ "3,1,1-2", 3, { 1, 2, 3 } },
		{ " 0 , 2 - 3 ", 3, { 0, 2, 3 } },
		{ "7-7", 1, { 7 } },
		{ "1023", 1, { 1023 } },
		{ "0010", 1, { 10 } },
	};
	static const struct {
		const char *s;
		int err;
	} bad[] = {
		{ "", -EINVAL },
		{ " ", -EINVAL },
		{ ",", -EINVAL },
		{ "1,", -EINVAL },
		{ ",1", -EINVAL },
		{ "1,,2", -EINVAL },
		{ "a", -EINVAL },
		{ "1-", -EINVAL },
		{ "3-1", -EINVAL },
		{ "-1", -EINVAL },
		{ "1;2", -EINVAL },
		{ "allx", -EINVAL },
		{ "all,0", -EINVAL },
		{ "ALL", -EINVAL },
		{ "1 2", -EINVAL },
		{ "+1", -EINVAL },
		{ "1024", -ERANGE },
		{ "0-1024", -ERANGE },
		{ "99999999999999999999999", -ERANGE },
	};
	int nodes[8];
	bool all = true;

	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		memset(nodes, 0xff, sizeof(nodes));
		ck_assert_msg(place_parse_nodelist(ok[i].s, &all, nodes, 8) ==
				      ok[i].n,
			      "\"%s\"", ok[i].s);
		ck_assert(!all);
		for (int j = 0; j < ok[i].n; j++)
			ck_assert_int_eq(nodes[j], ok[i].nodes[j]);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		ck_assert_msg(place_parse_nodelist(bad[i].s, &all, nodes, 8) ==
				      bad[i].err,
			      "\"%s\"", bad[i].s);
	all = false;
	ck_assert_int_eq(place_parse_nodelist("all", &all, nodes, 8), 0);
	ck_assert(all);
	ck_assert_int_eq(place_parse_nodelist(" all ", &all, NULL, 0), 0);
	ck_assert(all);
	ck_assert_int_eq(place_parse_nodelist("0-3", &all, nodes, 2), -ENOSPC);
	ck_assert_int_eq(place_parse_nodelist("0-1023", &all, NULL, 0),
			 -ENOSPC);
	ck_assert_int_eq(place_parse_nodelist(NULL, &all, nodes, 8), -EINVAL);
	ck_assert_int_eq(place_parse_nodelist("0", NULL, nodes, 8), -EINVAL);
	ck_assert_int_eq(place_parse_nodelist("0", &all, NULL, 8), -EINVAL);
}
END_TEST

/* --- recorded topologies ------------------------------------------------ */

START_TEST(test_dgx2)
{
	static const int ids[] = { 0, 1 };
	static const char *const bus[16] = {
		"0000:34:00.0", "0000:36:00.0", "0000:39:00.0", "0000:3b:00.0",
		"0000:57:00.0", "0000:59:00.0", "0000:5c:00.0", "0000:5e:00.0",
		"0000:b7:00.0", "0000:b9:00.0", "0000:bc:00.0", "0000:be:00.0",
		"0000:e0:00.0", "0000:e2:00.0", "0000:e5:00.0", "0000:e7:00.0",
	};
	struct place_topo *t = open_xml("nvidiaDGX2.xml");
	struct want_gpu w[16];
	char osdev[16][16];
	struct place_nic_info x;

	check_nodes(t, ids, 2);
	ck_assert_uint_eq(place_node_mem_bytes(t, 0), 791244484 * KIB);
	ck_assert_uint_eq(place_node_mem_bytes(t, 1), 792712816 * KIB);
	ck_assert_uint_eq(place_node_mem_bytes(t, 2), 0);
	/* The recorded machine was restricted to four CPUs. */
	check_cpulist(t, 0, "0-1");
	check_cpulist(t, 1, "24-25");
	ck_assert_int_eq(place_node_distance(t, 0, 1), 21);
	ck_assert_int_eq(place_node_distance(t, 1, 1), 10);
	/* 16 V100s, nvmlN at the Nth bus id, 8 per socket. */
	for (int i = 0; i < 16; i++) {
		snprintf(osdev[i], sizeof(osdev[i]), "nvml%d", i);
		w[i] = (struct want_gpu){ bus[i], i / 8, osdev[i],
					  "Tesla V100-SXM3-32GB-H" };
	}
	check_gpus(t, w, 16);
	ck_assert_int_eq(place_gpu_node(t, "3b:00.0"), 0);
	ck_assert_int_eq(place_gpu_node(t, "0000:3B:00.0"), 0);
	ck_assert_int_eq(place_gpu_node(t, "00000000:B7:00.0"), 1);
	ck_assert_int_eq(place_gpu_node(t, "0000:e7:00.0"), 1);
	ck_assert_int_eq(place_gpu_node_by_name(t, "nvml3"), 0);
	ck_assert_int_eq(place_gpu_node_by_name(t, "nvml11"), 1);
	ck_assert_int_eq(place_gpu_node_by_name(t, "nvml16"), -ENOENT);
	ck_assert_int_eq(place_gpu_node_by_name(t, "cuda0"), -ENOENT);
	/* An NVSwitch is a PCI device (any bus id resolves) but no GPU. */
	ck_assert_int_eq(place_gpu_node(t, "0000:c1:00.0"), 1);
	ck_assert_int_eq(place_gpu_node(t, "0000:3c:00.0"), -ENOENT);
	ck_assert_int_eq(place_gpu_node(t, "0001:3b:00.0"), -ENOENT);
	ck_assert_int_eq(place_gpu_node(t, "3b:00.1"), -ENOENT);
	ck_assert_int_eq(place_gpu_node(t, "3b:00"), -EINVAL);
	ck_assert_int_eq(place_gpu_node(t, ""), -EINVAL);
	ck_assert_int_eq(place_gpu_node(t, NULL), -EINVAL);
	/* The recording has no NICs. */
	ck_assert_int_eq(place_topo_nnics(t), 0);
	ck_assert_int_eq(place_nearest_nic(t, 0, 0, &x), -ENOENT);
	ck_assert_int_eq(place_nic_node(t, "mlx5_0"), -ENOENT);
	place_topo_close(t);
}
END_TEST

START_TEST(test_power8)
{
	static const int ids[] = { 0, 1 };
	static const struct want_gpu w[] = {
		{ "0002:01:00.0", 0, "cuda0,opencl0d0,nvml0",
		  "Tesla P100-SXM2-16GB" },
		{ "0003:01:00.0", 0, "cuda1,opencl0d1,nvml1",
		  "Tesla P100-SXM2-16GB" },
		{ "000a:01:00.0", 1, "cuda2,opencl0d2,nvml2",
		  "Tesla P100-SXM2-16GB" },
		{ "000b:01:00.0", 1, "cuda3,opencl0d3,nvml3",
		  "Tesla P100-SXM2-16GB" },
	};
	struct place_topo *t = open_xml("power8gpudistances.xml");
	int cpus[16];

	check_nodes(t, ids, 2);
	ck_assert_uint_eq(place_node_mem_bytes(t, 0), 66950016 * KIB);
	ck_assert_uint_eq(place_node_mem_bytes(t, 1), 66846400 * KIB);
	check_cpulist(t, 0, "0-1,8-9,16-17,24-25");
	check_cpulist(t, 1, "80-81,88-89,96-97,104-105");
	ck_assert_int_eq(place_node_cpus(t, 1, cpus, 16), 8);
	ck_assert_int_eq(cpus[0], 80);
	ck_assert_int_eq(cpus[7], 105);
	ck_assert_int_eq(place_cpu_node(t, 25), 0);
	ck_assert_int_eq(place_cpu_node(t, 104), 1);
	ck_assert_int_eq(place_cpu_node(t, 2), -ENOENT);
	/* The distance matrix, both ways. */
	ck_assert_int_eq(place_node_distance(t, 0, 0), 10);
	ck_assert_int_eq(place_node_distance(t, 0, 1), 40);
	ck_assert_int_eq(place_node_distance(t, 1, 0), 40);
	ck_assert_int_eq(place_node_distance(t, 1, 1), 10);
	ck_assert_int_eq(place_node_distance(t, 0, 2), -ENXIO);
	ck_assert_int_eq(place_node_distance(t, -1, 0), -EINVAL);
	check_gpus(t, w, 4);
	/* Non-zero PCI domains: without the domain it is another device. */
	ck_assert_int_eq(place_gpu_node(t, "000A:01:00.0"), 1);
	ck_assert_int_eq(place_gpu_node(t, "01:00.0"), -ENOENT);
	ck_assert_int_eq(place_gpu_node_by_name(t, "cuda2"), 1);
	ck_assert_int_eq(place_gpu_node_by_name(t, "opencl0d1"), 0);
	ck_assert_int_eq(place_gpu_node_by_name(t, "nvml3"), 1);
	ck_assert_int_eq(place_topo_nnics(t), 0);
	place_topo_close(t);
}
END_TEST

START_TEST(test_xeon_2n8c_wholeio)
{
	static const int ids[] = { 0, 1 };
	static const struct want_gpu w[] = {
		{ "0000:03:00.0", 0, "",
		  "Tesla M2075 Dual-Slot Computing Processor Module" },
		{ "0000:83:00.0", 1, "",
		  "Tesla M2075 Dual-Slot Computing Processor Module" },
		{ "0000:84:00.0", 1, "cuda0,card0", "Tesla K40m" },
		{ "0000:84:00.1", 1, "opencl0d1",
		  "AMD Radeon R9 200 / HD 7900 Series" },
	};
	static const struct want_nic n[] = {
		{ "eth0", "", "eth0", "0000:81:00.0", 0x0200, 1 },
		{ "eth1", "", "eth1", "0000:81:00.1", 0x0200, 1 },
		{ "mlx5_0", "mlx5_0", "ib0", "0000:04:00.0", 0x0207, 1 },
	};
	struct place_topo *t = open_xml("32em64t-2n8c2t-pci-wholeio.xml");

	check_nodes(t, ids, 2);
	ck_assert_uint_eq(place_node_mem_bytes(t, 0), 33525560 * KIB);
	ck_assert_uint_eq(place_node_mem_bytes(t, 1), 33554432 * KIB);
	check_cpulist(t, 0, "0-7,16-23");
	check_cpulist(t, 1, "8-15,24-31");
	ck_assert_int_eq(place_node_distance(t, 0, 1), 20);
	/* The Matrox BMC VGA (05:03.0) is not a GPU. */
	check_gpus(t, w, 4);
	ck_assert_int_eq(place_gpu_node(t, "05:03.0"), 0);
	check_nics(t, n, 3);
	/* cuda0 and ib0 share node 1, which is not node 0. */
	ck_assert_int_eq(place_gpu_node_by_name(t, "cuda0"), 1);
	ck_assert_int_eq(place_nic_node(t, "ib0"), 1);
	ck_assert_int_eq(place_nic_node(t, "mlx5_0"), 1);
	ck_assert_int_eq(place_nic_node(t, "eth1"), 1);
	ck_assert_int_eq(place_nic_node(t, "ib1"), -ENOENT);
	ck_assert_int_eq(place_nic_node(t, "mlx5"), -ENOENT);
	check_nearest(t, 1, 0, "mlx5_0");
	check_nearest(t, 0, 0, "mlx5_0");
	check_nearest(t, 0, PLACE_NIC_RDMA, "mlx5_0");
	place_topo_close(t);
}
END_TEST

START_TEST(test_xeon_2n6c)
{
	static const int ids[] = { 0, 1 };
	static const struct want_gpu w[] = {
		{ "0000:06:00.0", 0, "", "" },
		{ "0000:14:00.0", 1, "", "" },
		{ "0000:11:00.0", 1, "", "" },
	};
	static const struct want_nic n[] = {
		{ "eth0", "", "eth0", "0000:04:00.0", 0x0200, 0 },
		{ "eth1", "", "eth1", "0000:04:00.1", 0x0200, 0 },
		{ "mlx4_0", "mlx4_0", "eth2,ib0", "0000:05:00.0", 0x0c06, 0 },
	};
	struct place_topo *t = open_xml("24em64t-2n6c2t-pci.xml");
	struct place_nic_info x;

	check_nodes(t, ids, 2);
	ck_assert_uint_eq(place_node_mem_bytes(t, 0), 18863900 * KIB);
	ck_assert_uint_eq(place_node_mem_bytes(t, 1), 18874364 * KIB);
	/* CPUs alternate between the sockets. */
	check_cpulist(t, 0, "0,2,4,6,8,10,12,14,16,18,20,22");
	check_cpulist(t, 1, "1,3,5,7,9,11,13,15,17,19,21,23");
	ck_assert_int_eq(place_cpu_node(t, 12), 0);
	ck_assert_int_eq(place_cpu_node(t, 13), 1);
	ck_assert_int_eq(place_cpu_node(t, 24), -ENOENT);
	ck_assert_int_eq(place_cpu_node(t, -1), -EINVAL);
	/* Three Tesla (nVidia 3D) boards; the ATI ES1000 VGA is not one. */
	check_gpus(t, w, 3);
	ck_assert_int_eq(place_gpu_node(t, "01:03.0"), 0);
	/* Ethernet and mlx4 InfiniBand, all on node 0. */
	check_nics(t, n, 3);
	ck_assert_int_eq(place_nic_node(t, "ib0"), 0);
	ck_assert_int_eq(place_nic_node(t, "eth2"), 0);
	ck_assert_int_eq(place_nic_node(t, "mlx4_0-rdm"), 0);
	ck_assert_int_eq(place_nic_node(t, "05:00.0"), 0);
	ck_assert_int_eq(place_nic_node(t, ""), -EINVAL);
	ck_assert_int_eq(place_nic_node(t, NULL), -EINVAL);
	ck_assert_int_eq(
		place_nic_node(t, "a-name-that-is-longer-than-any-interface-"
				  "or-fabric-domain-name-can-be"),
		-EINVAL);
	/* Same node, RDMA first; node 1 has none and takes the same. */
	check_nearest(t, 0, 0, "mlx4_0");
	check_nearest(t, 1, 0, "mlx4_0");
	ck_assert_int_eq(place_nearest_nic(t, 1, 0, &x), 0);
	ck_assert_int_eq(x.node, 0);
	ck_assert_str_eq(x.ifnames, "eth2,ib0");
	ck_assert_int_eq(place_nearest_nic(t, 2, 0, &x), -ENXIO);
	ck_assert_int_eq(place_nearest_nic(t, -1, 0, &x), -EINVAL);
	ck_assert_int_eq(place_nearest_nic(t, 0, 0x80, &x), -EINVAL);
	ck_assert_int_eq(place_nearest_nic(t, 0, 0, NULL), -EINVAL);
	ck_assert_int_eq(place_bind_thread_to_node(t, 0), -EOPNOTSUPP);
	place_topo_close(t);
}
END_TEST

START_TEST(test_xeon_4n)
{
	static const int ids[] = { 0, 1, 2, 3 };
	static const struct want_nic n[] = {
		{ "eth0", "", "eth0", "0000:02:00.0", 0x0200, 0 },
		{ "eth1", "", "eth1", "0000:02:00.1", 0x0200, 0 },
		{ "eth2", "", "eth2", "0000:32:00.0", 0x0200, 1 },
		{ "eth3", "", "eth3", "0000:32:00.1", 0x0200, 1 },
		{ "eth4", "", "eth4", "0000:62:00.0", 0x0200, 2 },
		{ "eth5", "", "eth5", "0000:62:00.1", 0x0200, 2 },
		{ "eth6", "", "eth6", "0000:92:00.0", 0x0200, 3 },
		{ "eth7", "", "eth7", "0000:92:00.1", 0x0200, 3 },
	};
	static const char *const lists[] = { "0-23", "24-47", "48-71",
					     "72-95" };
	struct place_topo *t = open_xml("96em64t-4n4d3ca2co-pci.xml");
	struct place_nic_info x;
	int nodes[8];

	check_nodes(t, ids, 4);
	ck_assert_uint_eq(place_node_mem_bytes(t, 0), 50068292 * KIB);
	for (int i = 0; i < 4; i++) {
		char name[8];

		check_cpulist(t, i, lists[i]);
		ck_assert_int_eq(place_node_cpus(t, i, NULL, 0), 24);
		if (i)
			ck_assert_uint_eq(place_node_mem_bytes(t, i),
					  50069504 * KIB);
		for (int j = 0; j < 4; j++)
			ck_assert_int_eq(place_node_distance(t, i, j),
					 i == j ? 10 : 26);
		/* Two Broadcom ports per node; the first is nearest. */
		snprintf(name, sizeof(name), "eth%d", 2 * i);
		check_nearest(t, i, 0, name);
	}
	ck_assert_int_eq(place_cpu_node(t, 50), 2);
	/* Only the server VGA (a DRM card0, no compute): no GPU. */
	ck_assert_int_eq(place_topo_ngpus(t), 0);
	ck_assert_int_eq(place_gpu_node(t, "01:00.0"), 0);
	ck_assert_int_eq(place_gpu_node_by_name(t, "card0"), 0);
	check_nics(t, n, 8);
	ck_assert_int_eq(place_nearest_nic(t, 0, PLACE_NIC_RDMA, &x), -ENOENT);
	/* memd's "nodes =" resolved against this machine. */
	ck_assert_int_eq(place_topo_resolve_nodelist(t, "all", nodes, 8), 4);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(nodes[i], i);
	ck_assert_int_eq(place_topo_resolve_nodelist(t, "3,1", nodes, 8), 2);
	ck_assert_int_eq(nodes[0], 1);
	ck_assert_int_eq(nodes[1], 3);
	ck_assert_int_eq(place_topo_resolve_nodelist(t, "2-4", nodes, 8),
			 -ENXIO);
	ck_assert_int_eq(place_topo_resolve_nodelist(t, "all", nodes, 3),
			 -ENOSPC);
	ck_assert_int_eq(place_topo_resolve_nodelist(t, "x", nodes, 8),
			 -EINVAL);
	place_topo_close(t);
}
END_TEST

/* --- overrides ------------------------------------------------------------ */

START_TEST(test_override_gpu)
{
	struct place_topo *t = open_xml("nvidiaDGX2.xml");
	struct place_gpu_info g;
	char bus[PLACE_BUSID_LEN];

	ck_assert_int_eq(place_topo_set_gpu_node(t, "0000:3B:00.0", 1), 0);
	ck_assert_int_eq(place_gpu_node(t, "3b:00.0"), 1);
	ck_assert_int_eq(place_gpu_node_by_name(t, "nvml3"), 1);
	ck_assert_int_eq(place_gpu_get(t, 3, &g), 0);
	ck_assert_int_eq(g.node, 1);
	ck_assert_int_eq(g.hwloc_node, 0);
	ck_assert_int_eq(place_gpu_node(t, "39:00.0"), 0);
	/* "*" for the rest; the specific entry still wins. */
	ck_assert_int_eq(place_topo_set_gpu_node(t, "*", 0), 0);
	ck_assert_int_eq(place_gpu_node(t, "b7:00.0"), 0);
	ck_assert_int_eq(place_gpu_node(t, "3b:00.0"), 1);
	/* A GPU hwloc does not see is answered by the override too. */
	ck_assert_int_eq(place_gpu_node(t, "ff:00.0"), 0);
	ck_assert_int_eq(place_gpu_node_by_name(t, "cuda0"), 0);
	ck_assert_int_eq(place_topo_set_gpu_node(t, "*", -1), 0);
	ck_assert_int_eq(place_gpu_node(t, "ff:00.0"), -ENOENT);
	ck_assert_int_eq(place_gpu_node(t, "b7:00.0"), 1);
	ck_assert_int_eq(place_topo_set_gpu_node(t, "3b:00.0", -1), 0);
	ck_assert_int_eq(place_gpu_node(t, "3b:00.0"), 0);
	ck_assert_int_eq(place_topo_set_gpu_node(t, "3b:00.0", -1), 0);
	/* Bad input changes nothing. */
	ck_assert_int_eq(place_topo_set_gpu_node(t, "3b:00.0", 2), -ENXIO);
	ck_assert_int_eq(place_topo_set_gpu_node(t, "3b:00.0", -2), -EINVAL);
	ck_assert_int_eq(place_topo_set_gpu_node(t, "3b", 1), -EINVAL);
	ck_assert_int_eq(place_topo_set_gpu_node(t, NULL, 1), -EINVAL);
	ck_assert_int_eq(place_topo_set_gpu_node(NULL, "3b:00.0", 1), -EINVAL);
	ck_assert_int_eq(place_gpu_node(t, "3b:00.0"), 0);
	/* The table is bounded; replacing an entry needs no new slot. */
	for (int i = 0; i < PLACE_OVERRIDE_MAX; i++) {
		snprintf(bus, sizeof(bus), "00:%02x.%d", i / 8, i % 8);
		ck_assert_int_eq(place_topo_set_gpu_node(t, bus, i % 2), 0);
	}
	ck_assert_int_eq(place_topo_set_gpu_node(t, "3b:00.0", 1), -ENOSPC);
	ck_assert_int_eq(place_topo_set_gpu_node(t, "00:07.7", 0), 0);
	ck_assert_int_eq(place_gpu_node(t, "00:07.7"), 0);
	ck_assert_int_eq(place_gpu_node(t, "00:07.6"), 0);
	ck_assert_int_eq(place_gpu_node(t, "00:00.1"), 1);
	place_topo_close(t);
}
END_TEST

START_TEST(test_override_nic)
{
	struct place_topo *t = open_xml("24em64t-2n6c2t-pci.xml");
	struct place_nic_info x;

	/* Firmware says node 0; the operator knows the HCA is on node 1. */
	ck_assert_int_eq(place_topo_set_nic_node(t, "mlx4_0-rdm", 1), 0);
	ck_assert_int_eq(place_nic_node(t, "ib0"), 1);
	ck_assert_int_eq(place_nic_node(t, "0000:05:00.0"), 1);
	ck_assert_int_eq(place_nic_get(t, 2, &x), 0);
	ck_assert_int_eq(x.node, 1);
	ck_assert_int_eq(x.hwloc_node, 0);
	check_nearest(t, 1, 0, "mlx4_0");
	check_nearest(t, 0, 0, "eth0");
	check_nearest(t, 0, PLACE_NIC_RDMA, "mlx4_0");
	/* Keyed by a bus id, and for a NIC hwloc does not know. */
	ck_assert_int_eq(place_topo_set_nic_node(t, "04:00.1", 1), 0);
	ck_assert_int_eq(place_nic_node(t, "eth1"), 1);
	ck_assert_int_eq(place_topo_set_nic_node(t, "hsn0", 1), 0);
	ck_assert_int_eq(place_nic_node(t, "hsn0"), 1);
	ck_assert_int_eq(place_nic_node(t, "hsn1"), -ENOENT);
	ck_assert_int_eq(place_topo_set_nic_node(t, "", 1), -EINVAL);
	ck_assert_int_eq(place_topo_set_nic_node(t, "ib0", 5), -ENXIO);
	ck_assert_int_eq(place_topo_set_nic_node(t, "mlx4_0", -1), 0);
	ck_assert_int_eq(place_nic_node(t, "ib0"), 0);
	place_topo_close(t);
}
END_TEST

START_TEST(test_override_env)
{
	struct place_topo *t = open_xml("nvidiaDGX2.xml");
	const char *bad = "unset";

	unsetenv("TIDEPOOL_GPU_NODE");
	unsetenv("TIDEPOOL_NIC_NODE");
	ck_assert_int_eq(place_topo_apply_env(t, &bad), 0);
	ck_assert_ptr_null(bad);
	ck_assert_int_eq(place_gpu_node(t, "34:00.0"), 0);

	setenv("TIDEPOOL_GPU_NODE", "0000:34:00.0=1, b7:00.0 = 0", 1);
	ck_assert_int_eq(place_topo_apply_env(t, &bad), 0);
	ck_assert_int_eq(place_gpu_node(t, "34:00.0"), 1);
	ck_assert_int_eq(place_gpu_node(t, "b7:00.0"), 0);
	ck_assert_int_eq(place_gpu_node(t, "36:00.0"), 0);
	ck_assert_int_eq(place_gpu_node(t, "b9:00.0"), 1);

	/* All or nothing: the good first entry is not applied either. */
	setenv("TIDEPOOL_GPU_NODE", "36:00.0=1,zz:00.0=0", 1);
	ck_assert_int_eq(place_topo_apply_env(t, &bad), -EINVAL);
	ck_assert_str_eq(bad, "TIDEPOOL_GPU_NODE");
	ck_assert_int_eq(place_gpu_node(t, "36:00.0"), 0);
	ck_assert_int_eq(place_gpu_node(t, "34:00.0"), 1);
	static const char *const bad_specs[] = {
		"x",	       "1x",	     "-1",
		"36:00.0=",    "36:00.0=a",  "=1",
		"36:00.0=1,",  ",36:00.0=1", "36:00.0=1,,b7:00.0=1",
		"36:00.0=1=2", "36:00.0",    "1,2",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad_specs); i++) {
		setenv("TIDEPOOL_GPU_NODE", bad_specs[i], 1);
		ck_assert_msg(place_topo_apply_env(t, NULL) == -EINVAL,
			      "accepted \"%s\"", bad_specs[i]);
	}
	setenv("TIDEPOOL_GPU_NODE", "36:00.0=2", 1);
	ck_assert_int_eq(place_topo_apply_env(t, &bad), -ENXIO);
	ck_assert_int_eq(place_gpu_node(t, "36:00.0"), 0);

	/* A bare node: every GPU. */
	setenv("TIDEPOOL_GPU_NODE", " 1 ", 1);
	ck_assert_int_eq(place_topo_apply_env(t, &bad), 0);
	ck_assert_int_eq(place_gpu_node(t, "36:00.0"), 1);
	ck_assert_int_eq(place_gpu_node(t, "b7:00.0"), 0); /* specific */

	unsetenv("TIDEPOOL_GPU_NODE");
	setenv("TIDEPOOL_NIC_NODE", "eth0=1,x=", 1);
	ck_assert_int_eq(place_topo_apply_env(t, &bad), -EINVAL);
	ck_assert_str_eq(bad, "TIDEPOOL_NIC_NODE");
	setenv("TIDEPOOL_NIC_NODE", "ib0=1,mlx5_1=0", 1);
	ck_assert_int_eq(place_topo_apply_env(t, &bad), 0);
	ck_assert_int_eq(place_nic_node(t, "ib0"), 1);
	ck_assert_int_eq(place_nic_node(t, "mlx5_1-dgrm"), 0);
	unsetenv("TIDEPOOL_NIC_NODE");
	ck_assert_int_eq(place_topo_apply_env(NULL, &bad), -EINVAL);
	place_topo_close(t);
}
END_TEST

/* --- opening and synthetic topologies ------------------------------------ */

START_TEST(test_open_errors)
{
	struct place_topo *t = (struct place_topo *)&t;
	const char *path;

	ck_assert_int_eq(place_topo_open("/nonexistent/topo.xml", &t), -ENOENT);
	ck_assert_ptr_null(t);
	path = write_tmp("this is not an hwloc export\n");
	t = (struct place_topo *)&t;
	ck_assert_int_eq(place_topo_open(path, &t), -EINVAL);
	ck_assert_ptr_null(t);
	unlink(path);
	ck_assert_int_eq(place_topo_open(NULL, NULL), -EINVAL);
	t = (struct place_topo *)&t;
	ck_assert_int_eq(place_topo_open_synthetic("pack:2 gizmo:3", &t),
			 -EINVAL);
	ck_assert_ptr_null(t);
	ck_assert_int_eq(place_topo_open_synthetic("", &t), -EINVAL);
	ck_assert_int_eq(place_topo_open_synthetic(NULL, &t), -EINVAL);
	ck_assert_int_eq(place_topo_open_synthetic("pack:2", NULL), -EINVAL);
	place_topo_close(NULL);
	/* NULL handles are refused, not dereferenced. */
	ck_assert_int_eq(place_topo_nnodes(NULL), -EINVAL);
	ck_assert_int_eq(place_node_cpus(NULL, 0, NULL, 0), -EINVAL);
	ck_assert_int_eq(place_gpu_node(NULL, "3b:00.0"), -EINVAL);
	ck_assert_int_eq(place_nic_node(NULL, "ib0"), -EINVAL);
	ck_assert(!place_topo_is_host(NULL));
}
END_TEST

START_TEST(test_hwloc_xmlfile)
{
	char path[PATH_MAX + 64];
	struct place_topo *t = NULL;

	snprintf(path, sizeof(path), "%s/power8gpudistances.xml", topo_dir);
	setenv("HWLOC_XMLFILE", path, 1);
	ck_assert_int_eq(place_topo_open(NULL, &t), 0);
	ck_assert(!place_topo_is_host(t));
	ck_assert_int_eq(place_topo_ngpus(t), 4);
	ck_assert_int_eq(place_gpu_node_by_name(t, "cuda3"), 1);
	place_topo_close(t);
	/* An explicit path wins over the variable. */
	snprintf(path, sizeof(path), "%s/96em64t-4n4d3ca2co-pci.xml", topo_dir);
	ck_assert_int_eq(place_topo_open(path, &t), 0);
	ck_assert_int_eq(place_topo_nnodes(t), 4);
	place_topo_close(t);
	/* A wrong one is an error, not a silent fallback to the host. */
	setenv("HWLOC_XMLFILE", "/nonexistent/topo.xml", 1);
	ck_assert_int_eq(place_topo_open(NULL, &t), -ENOENT);
	unsetenv("HWLOC_XMLFILE");
}
END_TEST

START_TEST(test_synthetic)
{
	static const int ids2[] = { 0, 1 }, ids4[] = { 0, 1, 2, 3 };
	struct place_topo *t = open_syn("pack:2 numa:1 core:4 pu:2");
	struct place_nic_info x;
	int cpus[16], nodes[4];

	ck_assert(!place_topo_is_host(t));
	check_nodes(t, ids2, 2);
	ck_assert_int_eq(place_node_cpus(t, 1, cpus, 16), 8);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(cpus[i], 8 + i);
	/* Reports the full count when max is short, writes only max. */
	cpus[3] = -7;
	ck_assert_int_eq(place_node_cpus(t, 0, cpus, 3), 8);
	ck_assert_int_eq(cpus[2], 2);
	ck_assert_int_eq(cpus[3], -7);
	ck_assert_int_eq(place_node_cpus(t, 2, cpus, 16), -ENXIO);
	ck_assert_int_eq(place_node_cpus(t, -1, cpus, 16), -EINVAL);
	ck_assert_int_eq(place_node_cpus(t, 0, NULL, 16), -EINVAL);
	check_cpulist(t, 0, "0-7");
	check_cpulist(t, 1, "8-15");
	{
		char small[4];

		ck_assert_int_eq(place_node_cpulist(t, 1, small, 4), -ENOSPC);
		ck_assert_int_eq(place_node_cpulist(t, 1, NULL, 4), -EINVAL);
		ck_assert_int_eq(place_node_cpulist(t, 7, small, 4), -ENXIO);
	}
	ck_assert_uint_eq(place_node_mem_bytes(t, 0), 1ull << 30);
	ck_assert_int_eq(place_cpu_node(t, 7), 0);
	ck_assert_int_eq(place_cpu_node(t, 8), 1);
	ck_assert_int_eq(place_cpu_node(t, 16), -ENOENT);
	ck_assert_int_eq(place_node_distance(t, 0, 1), -ENODATA);
	ck_assert_int_eq(place_topo_ngpus(t), 0);
	ck_assert_int_eq(place_topo_nnics(t), 0);
	ck_assert_int_eq(place_gpu_node(t, "3b:00.0"), -ENOENT);
	ck_assert_int_eq(place_nearest_nic(t, 0, 0, &x), -ENOENT);
	ck_assert_int_eq(place_bind_thread_to_node(t, 0), -EOPNOTSUPP);
	ck_assert_int_eq(place_bind_thread_to_node(t, 2), -ENXIO);
	ck_assert_int_eq(place_topo_resolve_nodelist(t, "1", nodes, 4), 1);
	ck_assert_int_eq(nodes[0], 1);
	ck_assert_int_eq(place_topo_resolve_nodelist(t, "2", nodes, 4), -ENXIO);
	ck_assert_int_eq(place_topo_resolve_nodelist(t, "0-1", nodes, 1),
			 -ENOSPC);
	place_topo_close(t);

	t = open_syn("pack:4 numa:1 core:2 pu:1");
	check_nodes(t, ids4, 4);
	check_cpulist(t, 3, "6-7");
	place_topo_close(t);

	t = open_syn("pack:2 [numa(memory=2GiB)] core:3 pu:1");
	check_nodes(t, ids2, 2);
	ck_assert_uint_eq(place_node_mem_bytes(t, 1), 2ull << 30);
	check_cpulist(t, 1, "3-5");
	place_topo_close(t);
}
END_TEST

/*
 * Two packages of two single-core nodes (from "pack:2 numa:2 core:1 pu:1")
 * with an InfiniBand HCA on node 1, an Ethernet port on node 2, and an EFA
 * device and a GPU attached to the Machine (no single node). %s is where
 * the distance matrix goes, or nothing.
 */
static const char fixture_fmt[] =
	"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	"<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
	"<topology version=\"2.0\">\n"
	"<object type=\"Machine\" os_index=\"0\" cpuset=\"0x0000000f\" "
	"complete_cpuset=\"0x0000000f\" allowed_cpuset=\"0x0000000f\" "
	"nodeset=\"0x0000000f\" complete_nodeset=\"0x0000000f\" "
	"allowed_nodeset=\"0x0000000f\" gp_index=\"1\">\n"
	" <object type=\"Package\" os_index=\"0\" cpuset=\"0x00000003\" "
	"complete_cpuset=\"0x00000003\" nodeset=\"0x00000003\" "
	"complete_nodeset=\"0x00000003\" gp_index=\"8\">\n"
	"  <object type=\"Core\" os_index=\"0\" cpuset=\"0x00000001\" "
	"complete_cpuset=\"0x00000001\" nodeset=\"0x00000001\" "
	"complete_nodeset=\"0x00000001\" gp_index=\"3\">\n"
	"   <object type=\"NUMANode\" os_index=\"0\" cpuset=\"0x00000001\" "
	"complete_cpuset=\"0x00000001\" nodeset=\"0x00000001\" "
	"complete_nodeset=\"0x00000001\" gp_index=\"4\" "
	"local_memory=\"1073741824\"/>\n"
	"   <object type=\"PU\" os_index=\"0\" cpuset=\"0x00000001\" "
	"complete_cpuset=\"0x00000001\" nodeset=\"0x00000001\" "
	"complete_nodeset=\"0x00000001\" gp_index=\"2\"/>\n"
	"  </object>\n"
	"  <object type=\"Core\" os_index=\"1\" cpuset=\"0x00000002\" "
	"complete_cpuset=\"0x00000002\" nodeset=\"0x00000002\" "
	"complete_nodeset=\"0x00000002\" gp_index=\"6\">\n"
	"   <object type=\"NUMANode\" os_index=\"1\" cpuset=\"0x00000002\" "
	"complete_cpuset=\"0x00000002\" nodeset=\"0x00000002\" "
	"complete_nodeset=\"0x00000002\" gp_index=\"7\" "
	"local_memory=\"1073741824\"/>\n"
	"   <object type=\"PU\" os_index=\"1\" cpuset=\"0x00000002\" "
	"complete_cpuset=\"0x00000002\" nodeset=\"0x00000002\" "
	"complete_nodeset=\"0x00000002\" gp_index=\"5\"/>\n"
	"   <object type=\"Bridge\" gp_index=\"20\" bridge_type=\"0-1\" "
	"depth=\"0\" bridge_pci=\"0000:[01-01]\">\n"
	"    <object type=\"PCIDev\" gp_index=\"21\" "
	"pci_busid=\"0000:01:00.0\" "
	"pci_type=\"0207 [15b3:1017] [15b3:0020] 00\">\n"
	"     <object type=\"OSDev\" gp_index=\"22\" name=\"ib0\" "
	"osdev_type=\"2\"/>\n"
	"     <object type=\"OSDev\" gp_index=\"23\" name=\"mlx5_0\" "
	"osdev_type=\"3\"/>\n"
	"    </object>\n"
	"   </object>\n"
	"  </object>\n"
	" </object>\n"
	" <object type=\"Package\" os_index=\"1\" cpuset=\"0x0000000c\" "
	"complete_cpuset=\"0x0000000c\" nodeset=\"0x0000000c\" "
	"complete_nodeset=\"0x0000000c\" gp_index=\"15\">\n"
	"  <object type=\"Core\" os_index=\"2\" cpuset=\"0x00000004\" "
	"complete_cpuset=\"0x00000004\" nodeset=\"0x00000004\" "
	"complete_nodeset=\"0x00000004\" gp_index=\"10\">\n"
	"   <object type=\"NUMANode\" os_index=\"2\" cpuset=\"0x00000004\" "
	"complete_cpuset=\"0x00000004\" nodeset=\"0x00000004\" "
	"complete_nodeset=\"0x00000004\" gp_index=\"11\" "
	"local_memory=\"1073741824\"/>\n"
	"   <object type=\"PU\" os_index=\"2\" cpuset=\"0x00000004\" "
	"complete_cpuset=\"0x00000004\" nodeset=\"0x00000004\" "
	"complete_nodeset=\"0x00000004\" gp_index=\"9\"/>\n"
	"   <object type=\"Bridge\" gp_index=\"24\" bridge_type=\"0-1\" "
	"depth=\"0\" bridge_pci=\"0000:[02-02]\">\n"
	"    <object type=\"PCIDev\" gp_index=\"25\" "
	"pci_busid=\"0000:02:00.0\" "
	"pci_type=\"0200 [8086:1521] [0000:0000] 01\">\n"
	"     <object type=\"OSDev\" gp_index=\"26\" name=\"eth0\" "
	"osdev_type=\"2\"/>\n"
	"    </object>\n"
	"   </object>\n"
	"  </object>\n"
	"  <object type=\"Core\" os_index=\"3\" cpuset=\"0x00000008\" "
	"complete_cpuset=\"0x00000008\" nodeset=\"0x00000008\" "
	"complete_nodeset=\"0x00000008\" gp_index=\"13\">\n"
	"   <object type=\"NUMANode\" os_index=\"3\" cpuset=\"0x00000008\" "
	"complete_cpuset=\"0x00000008\" nodeset=\"0x00000008\" "
	"complete_nodeset=\"0x00000008\" gp_index=\"14\" "
	"local_memory=\"1073741824\"/>\n"
	"   <object type=\"PU\" os_index=\"3\" cpuset=\"0x00000008\" "
	"complete_cpuset=\"0x00000008\" nodeset=\"0x00000008\" "
	"complete_nodeset=\"0x00000008\" gp_index=\"12\"/>\n"
	"  </object>\n"
	" </object>\n"
	" <object type=\"Bridge\" gp_index=\"27\" bridge_type=\"0-1\" "
	"depth=\"0\" bridge_pci=\"0000:[03-04]\">\n"
	"  <object type=\"PCIDev\" gp_index=\"28\" pci_busid=\"0000:03:00.0\" "
	"pci_type=\"0200 [1d0f:efa1] [0000:0000] 00\">\n"
	"   <object type=\"OSDev\" gp_index=\"29\" name=\"rdmap3s0\" "
	"osdev_type=\"3\"/>\n"
	"  </object>\n"
	"  <object type=\"PCIDev\" gp_index=\"30\" pci_busid=\"0000:04:00.0\" "
	"pci_type=\"0302 [10de:2330] [10de:16c1] a1\">\n"
	"   <object type=\"OSDev\" gp_index=\"31\" name=\"cuda0\" "
	"subtype=\"CUDA\" osdev_type=\"5\">\n"
	"    <info name=\"GPUModel\" value=\"H100 SXM5 80GB\"/>\n"
	"   </object>\n"
	"  </object>\n"
	" </object>\n"
	"</object>\n"
	"%s"
	"</topology>\n";

/* A latency matrix that puts node 0 nearer node 2 than its package peer. */
static const int fixture_dist[4][4] = {
	{ 10, 30, 12, 40 },
	{ 30, 10, 40, 12 },
	{ 12, 40, 10, 30 },
	{ 40, 12, 30, 10 },
};

static struct place_topo *open_fixture(bool with_matrix)
{
	static char xml[sizeof(fixture_fmt) + 1024];
	char vals[256] = "", dist[512] = "";

	if (with_matrix) {
		size_t off = 0;

		for (int i = 0; i < 4; i++)
			for (int j = 0; j < 4; j++)
				off += (size_t)snprintf(
					vals + off, sizeof(vals) - off, "%d ",
					fixture_dist[i][j]);
		snprintf(dist, sizeof(dist),
			 "<distances2 type=\"NUMANode\" nbobjs=\"4\" "
			 "kind=\"5\" name=\"NUMALatency\" indexing=\"os\">\n"
			 "<indexes length=\"8\">0 1 2 3 </indexes>\n"
			 "<u64values length=\"%zu\">%s</u64values>\n"
			 "</distances2>\n",
			 strlen(vals), vals);
	}
	snprintf(xml, sizeof(xml), fixture_fmt, dist);
	return open_text(xml);
}

START_TEST(test_fixture_tree)
{
	static const struct want_gpu w[] = {
		{ "0000:04:00.0", -1, "cuda0", "H100 SXM5 80GB" },
	};
	static const struct want_nic n[] = {
		{ "mlx5_0", "mlx5_0", "ib0", "0000:01:00.0", 0x0207, 1 },
		{ "eth0", "", "eth0", "0000:02:00.0", 0x0200, 2 },
		{ "rdmap3s0", "rdmap3s0", "", "0000:03:00.0", 0x0200, -1 },
	};
	struct place_topo *t = open_fixture(false);
	struct place_gpu_info g;

	ck_assert_int_eq(place_topo_nnodes(t), 4);
	ck_assert_int_eq(place_node_distance(t, 0, 2), -ENODATA);
	/* Attached above all four nodes: known device, unknown node. */
	ck_assert_int_eq(place_topo_ngpus(t), 1);
	ck_assert_int_eq(place_gpu_get(t, 0, &g), 0);
	ck_assert_str_eq(g.bus_id, w[0].bus_id);
	ck_assert_int_eq(g.node, -1);
	ck_assert_str_eq(g.model, w[0].model);
	ck_assert_int_eq(place_gpu_node(t, "04:00.0"), -ENODATA);
	ck_assert_int_eq(place_gpu_node_by_name(t, "cuda0"), -ENODATA);
	ck_assert_int_eq(place_topo_set_gpu_node(t, "04:00.0", 3), 0);
	ck_assert_int_eq(place_gpu_node_by_name(t, "cuda0"), 3);
	/* check_nics() would look the EFA NIC up expecting -1. */
	ck_assert_int_eq(place_topo_nnics(t), 3);
	for (int i = 0; i < 3; i++) {
		struct place_nic_info x;

		ck_assert_int_eq(place_nic_get(t, i, &x), 0);
		ck_assert_str_eq(x.name, n[i].name);
		ck_assert_str_eq(x.fabric, n[i].fabric);
		ck_assert_str_eq(x.ifnames, n[i].ifnames);
		ck_assert_str_eq(x.bus_id, n[i].bus_id);
		ck_assert_uint_eq(x.class_id, n[i].class_id);
		ck_assert_int_eq(x.node, n[i].node);
	}
	ck_assert_int_eq(place_nic_node(t, "ib0"), 1);
	ck_assert_int_eq(place_nic_node(t, "eth0"), 2);
	ck_assert_int_eq(place_nic_node(t, "rdmap3s0-rdm"), -ENODATA);
	/* No matrix: the tree decides (same package first). */
	check_nearest(t, 0, 0, "mlx5_0");
	check_nearest(t, 1, 0, "mlx5_0");
	check_nearest(t, 2, 0, "eth0");
	check_nearest(t, 3, 0, "eth0");
	/* RDMA only, from the other package: equal in the tree; order. */
	check_nearest(t, 3, PLACE_NIC_RDMA, "mlx5_0");
	/* Placing the EFA device on node 3 makes it node 3's choice. */
	ck_assert_int_eq(place_topo_set_nic_node(t, "rdmap3s0", 3), 0);
	check_nearest(t, 3, 0, "rdmap3s0");
	check_nearest(t, 2, 0, "eth0");
	check_nearest(t, 2, PLACE_NIC_RDMA, "rdmap3s0");
	place_topo_close(t);
}
END_TEST

START_TEST(test_fixture_matrix)
{
	struct place_topo *t = open_fixture(true);

	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 4; j++)
			ck_assert_int_eq(place_node_distance(t, i, j),
					 fixture_dist[i][j]);
	/* The matrix beats the tree: node 0 is nearer node 2 (12 < 30). */
	check_nearest(t, 0, 0, "eth0");
	check_nearest(t, 0, PLACE_NIC_RDMA, "mlx5_0");
	check_nearest(t, 3, 0, "mlx5_0");
	check_nearest(t, 1, 0, "mlx5_0");
	check_nearest(t, 2, 0, "eth0");
	/* A NIC of unknown node ranks after every NIC of known distance. */
	check_nearest(t, 3, PLACE_NIC_RDMA, "mlx5_0");
	place_topo_close(t);
}
END_TEST

/* One package with a DRAM node and a GPU-memory node (Grace Hopper). */
static const char fixture_gpumem[] =
	"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	"<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
	"<topology version=\"2.0\">\n"
	"<object type=\"Machine\" os_index=\"0\" cpuset=\"0x00000003\" "
	"complete_cpuset=\"0x00000003\" allowed_cpuset=\"0x00000003\" "
	"nodeset=\"0x00000003\" complete_nodeset=\"0x00000003\" "
	"allowed_nodeset=\"0x00000003\" gp_index=\"1\">\n"
	" <object type=\"Package\" os_index=\"0\" cpuset=\"0x00000003\" "
	"complete_cpuset=\"0x00000003\" nodeset=\"0x00000003\" "
	"complete_nodeset=\"0x00000003\" gp_index=\"2\">\n"
	"  <object type=\"NUMANode\" os_index=\"0\" cpuset=\"0x00000003\" "
	"complete_cpuset=\"0x00000003\" nodeset=\"0x00000001\" "
	"complete_nodeset=\"0x00000001\" gp_index=\"3\" "
	"local_memory=\"4294967296\"/>\n"
	"  <object type=\"NUMANode\" os_index=\"1\" cpuset=\"0x00000003\" "
	"complete_cpuset=\"0x00000003\" nodeset=\"0x00000002\" "
	"complete_nodeset=\"0x00000002\" gp_index=\"4\" "
	"subtype=\"GPUMemory\" local_memory=\"2147483648\"/>\n"
	"  <object type=\"Core\" os_index=\"0\" cpuset=\"0x00000001\" "
	"complete_cpuset=\"0x00000001\" nodeset=\"0x00000003\" "
	"complete_nodeset=\"0x00000003\" gp_index=\"5\">\n"
	"   <object type=\"PU\" os_index=\"0\" cpuset=\"0x00000001\" "
	"complete_cpuset=\"0x00000001\" nodeset=\"0x00000003\" "
	"complete_nodeset=\"0x00000003\" gp_index=\"6\"/>\n"
	"  </object>\n"
	"  <object type=\"Core\" os_index=\"1\" cpuset=\"0x00000002\" "
	"complete_cpuset=\"0x00000002\" nodeset=\"0x00000003\" "
	"complete_nodeset=\"0x00000003\" gp_index=\"7\">\n"
	"   <object type=\"PU\" os_index=\"1\" cpuset=\"0x00000002\" "
	"complete_cpuset=\"0x00000002\" nodeset=\"0x00000003\" "
	"complete_nodeset=\"0x00000003\" gp_index=\"8\"/>\n"
	"  </object>\n"
	"  <object type=\"Bridge\" gp_index=\"9\" bridge_type=\"0-1\" "
	"depth=\"0\" bridge_pci=\"0009:[01-01]\">\n"
	"   <object type=\"PCIDev\" gp_index=\"10\" "
	"pci_busid=\"0009:01:00.0\" "
	"pci_type=\"0302 [10de:2342] [10de:16eb] a1\"/>\n"
	"  </object>\n"
	" </object>\n"
	"</object>\n"
	"</topology>\n";

START_TEST(test_fixture_gpu_memory_node)
{
	static const int ids[] = { 0, 1 };
	struct place_topo *t = open_text(fixture_gpumem);

	check_nodes(t, ids, 2);
	ck_assert_uint_eq(place_node_mem_bytes(t, 1), 2ull << 30);
	/* The package spans both nodes; the DRAM one is the answer. */
	ck_assert_int_eq(place_gpu_node(t, "0009:01:00.0"), 0);
	ck_assert_int_eq(place_cpu_node(t, 1), 0);
	/* A memory-only node reports the CPUs it hangs off. */
	check_cpulist(t, 1, "0-1");
	place_topo_close(t);
}
END_TEST

/* --- this host ------------------------------------------------------------ */

static struct place_topo *open_host(void)
{
	struct place_topo *t = NULL;

	unsetenv("HWLOC_XMLFILE");
	ck_assert_int_eq(place_topo_open(NULL, &t), 0);
	ck_assert(place_topo_is_host(t));
	return t;
}

/*
 * Reads a node list from file, from the line that starts with key ("" for
 * the first line), into a node bitmap. Returns false if it cannot.
 */
static bool read_nodes(const char *file, const char *key, bool *set)
{
	int nodes[PLACE_NODE_MAX];
	char line[8192];
	bool all, found = false;
	ssize_t n = -1;
	FILE *f = fopen(file, "r");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = !strncmp(line, key, strlen(key));
	fclose(f);
	if (found) {
		line[strcspn(line, "\n")] = '\0';
		n = place_parse_nodelist(line + strlen(key), &all, nodes,
					 PLACE_NODE_MAX);
	}
	if (n < 0 || all)
		return false;
	memset(set, 0, PLACE_NODE_MAX * sizeof(*set));
	for (ssize_t i = 0; i < n; i++)
		set[nodes[i]] = true;
	return true;
}

/* Binds to node and checks the affinity is exactly its CPUs. */
static void bind_and_check(const struct place_topo *t, int node)
{
	int cpus[PLACE_NODE_MAX * 4];
	ssize_t n = place_node_cpus(t, node, cpus, ARRAY_SIZE(cpus));
	cpu_set_t set;
	int cpu;

	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(place_bind_thread_to_node(t, node), 0);
	CPU_ZERO(&set);
	ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
	ck_assert_int_eq(CPU_COUNT(&set), n);
	for (ssize_t i = 0; i < n; i++)
		ck_assert(CPU_ISSET(cpus[i], &set));
	cpu = sched_getcpu();
	ck_assert_int_eq(place_cpu_node(t, cpu), node);
}

/* Allocates on node, fills with a pattern, checks pages sit on node. */
static void alloc_and_check(int node, unsigned int flags)
{
	const size_t len = 4u << 20;
	long page = sysconf(_SC_PAGESIZE);
	uint8_t *p = NULL;

	ck_assert_int_eq(place_alloc_on_node(len, node, flags, (void **)&p), 0);
	ck_assert_ptr_nonnull(p);
	tu_pattern_fill(p, len, (uint64_t)node + 1, 0);
	for (size_t off = 0; off < len; off += (size_t)page * 97)
		ck_assert_int_eq(place_memory_node(p + off), node);
	ck_assert_int_eq(place_memory_node(p + len - 1), node);
	ck_assert_int_eq(tu_pattern_check(p, len, (uint64_t)node + 1, 0), -1);
	ck_assert_int_eq(place_free(p, len), 0);
}

START_TEST(test_host)
{
	struct place_topo *t = open_host();
	static bool online[PLACE_NODE_MAX], allowed[PLACE_NODE_MAX];
	int first = place_topo_node_id(t, 0);

	/*
	 * hwloc and the kernel agree: every node hwloc lists is online, and
	 * every online node this process may allocate on is listed.
	 */
	if (read_nodes("/sys/devices/system/node/online", "", online) &&
	    read_nodes("/proc/self/status", "Mems_allowed_list:", allowed)) {
		for (int n = 0; n < PLACE_NODE_MAX; n++) {
			if (place_topo_has_node(t, n))
				ck_assert_msg(online[n], "node %d offline", n);
			else
				ck_assert_msg(!online[n] || !allowed[n],
					      "node %d missing", n);
		}
	}
	ck_assert_int_ge(first, 0);
	ck_assert_uint_gt(place_node_mem_bytes(t, first), 0);
	/* Every NIC hwloc lists is found again by its name. */
	for (int i = 0; i < place_topo_nnics(t); i++) {
		struct place_nic_info x;

		ck_assert_int_eq(place_nic_get(t, i, &x), 0);
		ck_assert_int_eq(place_nic_node(t, x.name),
				 x.node >= 0 ? x.node : -ENODATA);
	}
	for (int i = 0; i < place_topo_ngpus(t); i++) {
		struct place_gpu_info g;

		ck_assert_int_eq(place_gpu_get(t, i, &g), 0);
		ck_assert_int_eq(place_gpu_node(t, g.bus_id),
				 g.node >= 0 ? g.node : -ENODATA);
	}
	bind_and_check(t, first);
	ck_assert_int_eq(place_bind_thread_to_node(t, PLACE_NODE_MAX), -ENXIO);
	place_topo_close(t);
}
END_TEST

START_TEST(test_host_memory)
{
	struct place_topo *t = open_host();
	int first = place_topo_node_id(t, 0);
	long page = sysconf(_SC_PAGESIZE);
	char *p = NULL;
	void *q;

	alloc_and_check(first, PLACE_MEM_POPULATE);
	alloc_and_check(first, 0);
	alloc_and_check(first, PLACE_MEM_PREFERRED | PLACE_MEM_POPULATE);
	/* Untouched pages are on no node yet; a write places them. */
	ck_assert_int_eq(
		place_alloc_on_node(3 * (size_t)page, first, 0, (void **)&p),
		0);
	ck_assert_int_eq(place_memory_node(p + page), -ENOENT);
	p[page] = 1;
	ck_assert_int_eq(place_memory_node(p + page), first);
	ck_assert_int_eq(place_memory_node(p + 2 * page), -ENOENT);
	ck_assert_int_eq(place_free(p, 3 * (size_t)page), 0);
	/* Unmapped: -EFAULT. */
	q = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(q, MAP_FAILED);
	ck_assert_int_eq(munmap(q, (size_t)page), 0);
	ck_assert_int_eq(place_memory_node(q), -EFAULT);
	ck_assert_int_eq(place_memory_node(NULL), -EINVAL);
	/* Bad requests allocate nothing. */
	q = &q;
	ck_assert_int_eq(place_alloc_on_node(0, first, 0, &q), -EINVAL);
	ck_assert_ptr_null(q);
	ck_assert_int_eq(place_alloc_on_node(4096, first, 0x100, &q), -EINVAL);
	ck_assert_int_eq(place_alloc_on_node(4096, -1, 0, &q), -EINVAL);
	if (!place_topo_has_node(t, PLACE_NODE_MAX - 1))
		ck_assert_int_eq(
			place_alloc_on_node(4096, PLACE_NODE_MAX - 1, 0, &q),
			-ENXIO);
	ck_assert_int_eq(place_alloc_on_node(4096, first, 0, NULL), -EINVAL);
	ck_assert_int_eq(place_membind((char *)&q + 1, 4096, first, 0),
			 -EINVAL);
	ck_assert_int_eq(place_membind(NULL, 4096, first, 0), -EINVAL);
	ck_assert_int_eq(place_free(NULL, 4096), 0);
	place_topo_close(t);
}
END_TEST

/* --- cross-node binding (--bind) ------------------------------------------ */

START_TEST(test_bind_each_node)
{
	struct place_topo *t = open_host();

	for (int i = 0; i < place_topo_nnodes(t); i++) {
		int node = place_topo_node_id(t, i);

		if (place_node_cpus(t, node, NULL, 0) > 0)
			bind_and_check(t, node);
		alloc_and_check(node, PLACE_MEM_POPULATE);
	}
	place_topo_close(t);
}
END_TEST

START_TEST(test_bind_move)
{
	struct place_topo *t = open_host();
	int a = place_topo_node_id(t, 0);
	int b = place_topo_node_id(t, place_topo_nnodes(t) - 1);
	const size_t len = 1u << 20;
	long page = sysconf(_SC_PAGESIZE);
	uint8_t *p = NULL;

	ck_assert_int_eq(
		place_alloc_on_node(len, a, PLACE_MEM_POPULATE, (void **)&p),
		0);
	tu_pattern_fill(p, len, 77, 0);
	ck_assert_int_eq(place_memory_node(p), a);
	ck_assert_int_eq(place_membind(p, len, b, PLACE_MEM_MOVE), 0);
	for (size_t off = 0; off < len; off += (size_t)page)
		ck_assert_int_eq(place_memory_node(p + off), b);
	ck_assert_int_eq(tu_pattern_check(p, len, 77, 0), -1);
	ck_assert_int_eq(place_free(p, len), 0);
	place_topo_close(t);
}
END_TEST

/* --- main --------------------------------------------------------------- */

static bool find_topologies(void)
{
	const char *src = getenv("TP_SOURCE_DIR");
	char probe[PATH_MAX + 64];
	struct stat st;

	if (!src || !*src)
		return false;
	snprintf(topo_dir, sizeof(topo_dir), "%s/tests/data", src);
	snprintf(probe, sizeof(probe), "%s/nvidiaDGX2.xml", topo_dir);
	return stat(probe, &st) == 0;
}

static Suite *place_suite(bool topologies)
{
	Suite *s = suite_create("place");
	TCase *tc;

	tc = tcase_create("parse");
	tcase_add_test(tc, test_pci_parse);
	tcase_add_test(tc, test_nodelist_parse);
	suite_add_tcase(s, tc);

	tc = tcase_create("synthetic");
	TU_ADD_TESTS(tc, test_open_errors, test_synthetic, test_fixture_tree,
		     test_fixture_matrix, test_fixture_gpu_memory_node);
	suite_add_tcase(s, tc);

	if (topologies) {
		tc = tcase_create("topologies");
		TU_ADD_TESTS(tc, test_dgx2, test_power8, test_xeon_2n8c_wholeio,
			     test_xeon_2n6c, test_xeon_4n, test_override_gpu,
			     test_override_nic, test_override_env,
			     test_hwloc_xmlfile);
		suite_add_tcase(s, tc);
	}

	tc = tcase_create("host");
	tcase_add_test(tc, test_host);
	tcase_add_test(tc, test_host_memory);
	suite_add_tcase(s, tc);
	return s;
}

static int run_bind(void)
{
	Suite *s;
	TCase *tc;

	tu_need_numa_nodes(2, "cross-node binding",
			   "test_place ran the single-node binding, allocation "
			   "and memory_node checks");
	s = suite_create("place-bind");
	tc = tcase_create("bind");
	tcase_add_test(tc, test_bind_each_node);
	tcase_add_test(tc, test_bind_move);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}

int main(int argc, char **argv)
{
	bool topologies;

	if (argc > 1 && !strcmp(argv[1], "--bind"))
		return run_bind() ? EXIT_FAILURE : EXIT_SUCCESS;
	topologies = find_topologies();
	if (tu_run_suite(place_suite(topologies)))
		return EXIT_FAILURE;
	if (!topologies)
		tu_skip("recorded topologies not found at "
			"$TP_SOURCE_DIR/tests/data "
			"(TP_SOURCE_DIR=%s):"
			" the XML placement tests did not run",
			getenv("TP_SOURCE_DIR") ? getenv("TP_SOURCE_DIR")
						: "unset");
	return EXIT_SUCCESS;
}
