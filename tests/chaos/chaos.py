#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""tests/chaos/chaos.py - randomized chaos run with a history checker.

Builds a pool in network namespaces (a bridge, a registry, four donors,
two client hosts, an admin host that is never partitioned), runs four
workload clients (tests/chaos/chaos_client.c: two on regions, two on KV
with two replicas), injects random faults from a fixed seed for a fixed
time, quiesces, and checks the whole history (tests/chaos/README.md).

  chaos.py run --seed S --duration SEC [--out DIR] [--build DIR] [--etcd]
  chaos.py check DIR...     check finished runs' files again (several:
                            each, then their sum)
  chaos.py selftest DIR     corrupt a finished run's history in several
                            ways; each must be caught (exit 0 if all are)

Exit: 0 no violation, 1 violation(s), 2 the run itself failed, 77 skipped
(not root, or no namespaces/veth/bridge/iptables).

Debian's /usr/bin/python3 and its standard library only.
"""
import argparse
import bisect
import collections
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

SLAB = 2 << 20
DONATE = "64M"
LEASE_CONF = "lease_ttl = 3s\nlease_grace = 1s\nreport_interval = 200ms\n"
NDONORS = 4
QUOTA = {"ra": 40 * SLAB, "kb": 48 * SLAB}
QUOTA_LOW = {"ra": 6 * SLAB, "kb": 8 * SLAB}
# (name, tenant, mode, host)
CLIENTS = [("c1", "ra", "regions", "ca"), ("c2", "ra", "regions", "cb"),
           ("c3", "kb", "kv", "ca"), ("c4", "kb", "kv", "cb"),
           ("c5", "ra", "paging", "cb")]
FAULT_WEIGHTS = {
    "kill_donor": 8, "kill_donor_newid": 4, "stop_donor": 6,
    "kill_registry": 5, "stop_registry": 4,
    "kill_client": 5, "stop_client": 4,
    "partition2": 8, "partition1": 6, "slow_link": 4,
    "disk_full_state": 3, "disk_full_spill": 3,
    "quota": 5, "drain": 5,
}
# --etcd: two registries on one etcd (one leads), and the faults that
# only such a pool has. Picked only with --etcd, so that a run without
# it (the CI slice) draws the same schedule as before.
ETCD_LEASE = "2s"
ETCD_FAULT_WEIGHTS = {"pause_leader": 5, "etcd_tamper": 3}
NOT_ON_ETCD = ("disk_full_state",)  # no state_dir: the state is in etcd
TAMPER_QUOTA = 1000 * SLAB  # what etcd_tamper writes as ra's quota
REG_DONORS = ("r0", "r1")  # the registries' own donor parts (drained)
ENOENT, EEXIST = 2, 17
# Faults after which KV copies may legitimately come back or go missing:
# donors that come and go (homes and second choices move; a donor back
# with its spill directory serves what it held; docs/kv.md, Replicas),
# a client cut from a donor (a put lands on one copy), a slow link (a
# read slower than its lease misses). From 1 s before the fault until
# SETTLE after its heal (lease_ttl + grace + a view refresh).
KV_DONOR_FAULTS = ("kill_donor", "kill_donor_newid", "stop_donor",
                   "kill_registry", "stop_registry", "pause_leader", "partition1",
                   "partition2", "slow_link", "drain")
SETTLE = 5e9
SIGNAMES = {4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
            9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}


def now_ns():
    return time.time_ns()


def log(msg):
    print(time.strftime("%H:%M:%S") + " chaos: " + msg, flush=True)


def sh(cmd, check=True, timeout=20):
    r = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout, text=True)
    if check and r.returncode:
        raise RuntimeError("%s: exit %d: %s" % (cmd, r.returncode,
                                                r.stdout.strip()))
    return r


class Proc:
    """A process started inside a host's namespace (nsenter execs it, so
    the pid is the program's own)."""

    def __init__(self, name, ns, argv, logpath):
        self.name, self.ns, self.argv, self.logpath = name, ns, argv, logpath
        self.p = None
        self.stopped = False

    def start(self):
        logf = open(self.logpath, "ab")
        self.p = subprocess.Popen(
            ["nsenter", "--net=/run/netns/" + self.ns, "--"] + self.argv,
            stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        logf.close()
        self.stopped = False

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            os.kill(self.p.pid, sig)

    def kill(self):
        if self.alive():
            os.kill(self.p.pid, signal.SIGKILL)
            self.p.wait()
        self.stopped = False

    def cont(self):
        if self.alive() and self.stopped:
            os.kill(self.p.pid, signal.SIGCONT)
        self.stopped = False


class Cluster:
    def __init__(self, args, out):
        self.args, self.out = args, out
        self.build = args.build
        self.memd = os.path.join(self.build, "memd/memd")
        self.poolctl = os.path.join(self.build, "poolctl/poolctl")
        self.client = os.path.join(self.build, "tests/chaos/chaos_client")
        # a subnet and namespace names no other run on this host uses
        used = sh("ip netns list", check=False).stdout
        self.id = os.getpid() % 200 + 20
        while "tpc%dsw" % self.id in used:
            self.id = (self.id - 19) % 200 + 20
        self.sw = "tpc%dsw" % self.id
        self.hosts = {}  # name -> (ns, ip)
        self.mounts = []
        self.procs = []
        self.lock = threading.Lock()
        self.donors = []  # dicts: host, name, gen, proc, spill, conf
        self.tbf_ok = False

    # ---- network ----
    def net_up(self):
        names = ["reg"] + ["d%d" % i for i in range(1, NDONORS + 1)] + \
            ["ca", "cb", "adm"]
        if self.args.etcd:
            names += ["reg2", "etcd"]
        sh("ip netns add %s && ip -n %s link add br0 type bridge && "
           "ip -n %s link set br0 up" % (self.sw, self.sw, self.sw))
        for i, h in enumerate(names):
            ns = "tpc%d%s" % (self.id, h)
            ip = "10.78.%d.%d" % (self.id, i + 1)
            self.hosts[h] = (ns, ip)
            sh("ip netns add %s && ip -n %s link set lo up && "
               "ip link add tpc%dv%d netns %s type veth peer name eth0 "
               "netns %s && ip -n %s link set tpc%dv%d master br0 up && "
               "ip -n %s addr add %s/24 dev eth0 && "
               "ip -n %s link set eth0 up" %
               (ns, ns, self.id, i, self.sw, ns, self.sw, self.id, i, ns,
                ip, ns))
        sh("ip netns exec %s iptables -L INPUT -n" % self.hosts["reg"][0])
        r = sh("ip netns exec %s tc qdisc add dev eth0 root tbf rate 1mbit "
               "burst 32kb latency 400ms && ip netns exec %s tc qdisc del "
               "dev eth0 root" % (self.hosts["d1"][0], self.hosts["d1"][0]),
               check=False)
        self.tbf_ok = r.returncode == 0
        if not self.tbf_ok:
            log("tc tbf unavailable, no slow links: " + r.stdout.strip())

    def net_down(self):
        for ns, _ in self.hosts.values():
            sh("ip netns del %s" % ns, check=False)
        sh("ip netns del %s" % self.sw, check=False)

    def iptables(self, host, rule, on):
        sh("ip netns exec %s iptables %s %s" %
           (self.hosts[host][0], "-I" if on else "-D", rule))

    def tmpfs(self, path, size):
        os.makedirs(path, exist_ok=True)
        sh("mount -t tmpfs -o size=%s,mode=0700 tmpfs %s" % (size, path))
        self.mounts.append(path)

    # ---- processes ----
    def ip(self, h):
        return self.hosts[h][1]

    def regaddr(self):
        if self.args.etcd:
            return self.ip("reg") + ":7470," + self.ip("reg2") + ":7470"
        return self.ip("reg") + ":7470"

    def poolctl_argv(self, *a):
        return [self.poolctl, "-a", self.regaddr(), "-s", self.secret,
                "--timeout", "2000"] + list(a)

    def ctl(self, *a, host="adm", timeout=15, addr=None):
        """poolctl from a host: (rc, stdout)."""
        argv = self.poolctl_argv(*a)
        if addr:
            argv[2] = addr
        try:
            r = subprocess.run(
                ["nsenter", "--net=/run/netns/" + self.hosts[host][0], "--"]
                + argv, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, timeout=timeout, text=True)
        except subprocess.TimeoutExpired:
            return 124, ""
        return r.returncode, r.stdout

    def ctl_retry(self, *a, secs=30):
        """poolctl until it succeeds (a restore must not be lost to a
        registry that is down under another fault): its last rc."""
        end = time.time() + secs
        while True:
            rc, _ = self.ctl(*a)
            if rc == 0 or time.time() > end:
                return rc
            time.sleep(0.5)

    def ctl_json(self, *a):
        rc, out = self.ctl("--json", *a)
        if rc:
            return None
        try:
            return json.loads(out)
        except ValueError:
            return None

    def memd_conf(self, path, host, extra):
        with open(path, "w") as f:
            f.write("listen = %s:7470\ndonate = %s\nslab_size = 2M\n"
                    "log_level = info\ncluster_secret_file = %s\n"
                    "metrics_listen = %s:9100\n%s%s" %
                    (self.ip(host), DONATE, self.secret, self.ip(host),
                     LEASE_CONF, extra))

    def start_memd(self, proc):
        ready = os.path.join(self.out, proc.name + ".ready")
        if os.path.exists(ready):
            os.unlink(ready)
        proc.argv = proc.argv[:3] + ["--ready-file", ready]
        proc.start()
        for _ in range(600):
            if os.path.exists(ready):
                return
            if not proc.alive():
                raise RuntimeError("%s exited at start (see %s)" %
                                   (proc.name, proc.logpath))
            time.sleep(0.05)
        raise RuntimeError("%s never got ready" % proc.name)

    def setup(self):
        self.secret = os.path.join(self.out, "cluster.secret")
        with open(self.secret, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        os.chmod(self.secret, 0o600)
        self.net_up()
        self.regs = []  # (proc, donor name)
        if self.args.etcd:
            self.etcd_up()
            for i, h in enumerate(("reg", "reg2")):
                conf = os.path.join(self.out, h + ".conf")
                self.memd_conf(conf, h, "registry = etcd\n"
                               "etcd_endpoints = %s:2379\n"
                               "etcd_lease = %s\nregistry_peers = %s:7470\n"
                               "donor_name = r%d\n" %
                               (self.ip("etcd"), ETCD_LEASE,
                                self.ip("reg2" if i == 0 else "reg"), i))
                p = Proc(h, self.hosts[h][0], [self.memd, "-c", conf],
                         os.path.join(self.out, h + ".log"))
                self.procs.append(p)
                self.regs.append((p, "r%d" % i))
                self.start_memd(p)
        else:
            state = os.path.join(self.out, "state")
            self.tmpfs(state, "256k")
            conf = os.path.join(self.out, "reg.conf")
            self.memd_conf(conf, "reg", "registry = yes\nstate_dir = %s\n"
                           "donor_name = r0\n" % state)
            p = Proc("reg", self.hosts["reg"][0], [self.memd, "-c", conf],
                     os.path.join(self.out, "reg.log"))
            self.procs.append(p)
            self.regs.append((p, "r0"))
            self.start_memd(p)
        self.reg = self.regs[0][0]
        for i in range(1, NDONORS + 1):
            h = "d%d" % i
            spill = os.path.join(self.out, "spill-" + h)
            self.tmpfs(spill, "4m")
            d = {"host": h, "name": h, "gen": 0, "spill": spill,
                 "conf": os.path.join(self.out, h + ".conf")}
            self.write_donor_conf(d)
            d["proc"] = Proc(h, self.hosts[h][0],
                             [self.memd, "-c", d["conf"]],
                             os.path.join(self.out, h + ".log"))
            self.procs.append(d["proc"])
            self.donors.append(d)
            self.start_memd(d["proc"])
        self.wait_donors_up([n for _, n in self.regs] +
                            [d["name"] for d in self.donors], 60)
        # The registries' own donations stay out of the way.
        for _, n in self.regs:
            rc, out = self.ctl("drain", n)
            if rc:
                raise RuntimeError("drain %s: %s" % (n, out))
        for t, q in QUOTA.items():
            sec = os.path.join(self.out, t + ".secret")
            rc, out = self.ctl("tenant", "add", t, "--quota", str(q),
                               "--secret-out", sec)
            if rc:
                raise RuntimeError("tenant add %s: %s" % (t, out))
        self.clients = {}
        for seq, (name, tenant, mode, host) in enumerate(CLIENTS, 1):
            argv = [self.client, "--registry", self.regaddr(), "--tenant",
                    tenant, "--secret",
                    os.path.join(self.out, tenant + ".secret"),
                    "--id", str(seq), "--mode", mode, "--seed",
                    str(self.args.seed), "--slab", str(SLAB), "--history",
                    os.path.join(self.out, "hist-%s" % name)]
            if self.args.corrupt_client and name == "c1":
                argv += ["--corrupt-after", "40"]
            if self.args.corrupt_client and name == "c5":
                # one wrong byte in the 6th read that took a page fault
                argv += ["--corrupt-after", "5"]
            if self.args.corrupt_client and name == "c3":
                # the second churned key comes back after its delete
                argv += ["--resurrect-after", "1"]
            p = Proc(name, self.hosts[host][0], argv,
                     os.path.join(self.out, name + ".log"))
            self.clients[name] = (p, tenant, host)
            self.procs.append(p)
            p.start()

    # ---- etcd (--etcd) ----
    def etcd_up(self):
        """One etcd member on host etcd, never faulted itself."""
        ip = self.ip("etcd")
        data = os.path.join(self.out, "etcd-data")
        self.etcd = Proc("etcd", self.hosts["etcd"][0], [
            "etcd", "--name", "e0", "--data-dir", data,
            "--listen-client-urls", "http://%s:2379" % ip,
            "--advertise-client-urls", "http://%s:2379" % ip,
            "--listen-peer-urls", "http://127.0.0.1:2380",
            "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
            "--initial-cluster", "e0=http://127.0.0.1:2380",
            "--heartbeat-interval", "50", "--election-timeout", "500",
            "--logger", "zap"], os.path.join(self.out, "etcd.log"))
        self.etcd.start()
        for _ in range(200):
            if self.etcd_call("kv/range", {"key": "L3Byb2Jl"}) is not None:
                return
            if not self.etcd.alive():
                break
            time.sleep(0.1)
        raise RuntimeError("etcd never answered (see %s)" %
                           self.etcd.logpath)

    def etcd_call(self, path, body):
        """A request to etcd's v3 JSON gateway from host adm: its
        answer, or None."""
        try:
            r = subprocess.run(
                ["nsenter", "--net=/run/netns/" + self.hosts["adm"][0], "--",
                 sys.executable, "-c",
                 "import sys, urllib.request; sys.stdout.write(urllib."
                 "request.urlopen(urllib.request.Request(sys.argv[1], "
                 "data=sys.argv[2].encode()), timeout=3).read().decode())",
                 "http://%s:2379/v3/%s" % (self.ip("etcd"), path),
                 json.dumps(body)], stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, timeout=5, text=True)
            return json.loads(r.stdout) if r.returncode == 0 else None
        except (subprocess.TimeoutExpired, OSError, ValueError):
            return None

    def leader(self):
        """The registry that serves now: (proc, donor name) or None."""
        for p, n in self.regs:
            rc, _ = self.ctl("status", addr=self.ip(p.name) + ":7470",
                             timeout=5)
            if rc == 0:
                return p, n
        return None

    def write_donor_conf(self, d):
        self.memd_conf(d["conf"], d["host"],
                       "registry = %s\ndonor_name = %s\nkv_spill_dir = %s\n"
                       "kv_spill_size = 16M\n" %
                       (self.regaddr(), d["name"], d["spill"]))

    def wait_donors_up(self, names, secs):
        end = time.time() + secs
        while time.time() < end:
            j = self.ctl_json("donors")
            if j:
                st = {d["name"]: d["state"] for d in j["donors"]}
                if all(st.get(n) in ("up", "draining") for n in names):
                    return True
            time.sleep(0.3)
        return False

    def teardown(self):
        for p in self.procs:
            try:
                p.cont()
                p.kill()
            except OSError:
                pass
        for m in reversed(self.mounts):
            sh("umount -l %s" % m, check=False)
        if self.args.etcd and getattr(self, "etcd", None):
            self.etcd.kill()
        self.net_down()


class Recorder:
    """faults.jsonl and snapshots.jsonl, appended as things happen."""

    def __init__(self, out):
        self.f = open(os.path.join(out, "faults.jsonl"), "a")
        self.s = open(os.path.join(out, "snapshots.jsonl"), "a")
        self.lock = threading.Lock()

    def fault(self, rec):
        with self.lock:
            self.f.write(json.dumps(rec) + "\n")
            self.f.flush()

    def snap(self, rec):
        with self.lock:
            self.s.write(json.dumps(rec) + "\n")
            self.s.flush()


def snapshot(cl, rec, phase):
    t0 = now_ns()
    ten = cl.ctl_json("tenants")
    don = cl.ctl_json("donors")
    leases = {}
    for d in cl.donors:
        # The donor's own table, asked directly (poolctl asks through
        # the registry, which may be down)
        try:
            r = subprocess.run(
                ["nsenter", "--net=/run/netns/" + cl.hosts["adm"][0], "--",
                 cl.client, "--admin", cl.ip(d["host"]) + ":7470",
                 "--cluster-secret", cl.secret, "--cmd",
                 '{"cmd":"leases"}'],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=5,
                text=True)
            if r.returncode == 0:
                leases[d["name"]] = json.loads(r.stdout)
        except (subprocess.TimeoutExpired, ValueError):
            pass
    metrics = {}
    for d in cl.donors if phase != "run" else []:
        m = donor_metrics(cl, d["host"])
        if m:
            metrics[d["name"]] = m
    snap = {"t0": t0, "t1": now_ns(), "phase": phase, "tenants": ten,
            "donors": don, "leases": leases, "metrics": metrics}
    rec.snap(snap)
    return snap


def donor_metrics(cl, host):
    """A donor's /metrics: leased bytes, and leased bytes and sessions
    per tenant id; None when it cannot be read."""
    try:
        r = subprocess.run(
            ["nsenter", "--net=/run/netns/" + cl.hosts["adm"][0], "--",
             sys.executable, "-c",
             "import sys, urllib.request; sys.stdout.write(urllib.request."
             "urlopen(sys.argv[1], timeout=3).read().decode())",
             "http://%s:9100/metrics" % cl.ip(host)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=5,
            text=True)
    except (subprocess.TimeoutExpired, OSError):
        return None
    if r.returncode:
        return None
    m = {"leased_bytes": None, "tenant_leased": {}, "tenant_sessions": {}}
    for l in r.stdout.splitlines():
        if l.startswith("tidepool_memd_leased_bytes "):
            m["leased_bytes"] = int(float(l.split()[1]))
        for k in ("tenant_leased", "tenant_sessions"):
            pre = "tidepool_memd_%s%s{tenant_id=\"" % (
                k, "_bytes" if k == "tenant_leased" else "")
            if l.startswith(pre):
                tid = l[len(pre):].split("\"", 1)[0]
                m[k][tid] = int(float(l.rsplit(" ", 1)[1]))
    return m


def log_tail(path, n):
    """The last n lines of a log file (none if it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            return f.read().decode("utf-8", "replace").splitlines()[-n:]
    except OSError:
        return []


def reap_clients(cl, rec, busy):
    """Records and restarts clients that died of something other than a
    fault (a signal: SIGBUS outside an access the client guards, SIGSEGV,
    SIGABRT; or an exit status): the checker reports each, apart from
    wrong bytes."""
    lock, held = busy
    for name, (p, _, _) in sorted(cl.clients.items()):
        with lock:
            if name in held or p.p is None or p.alive():
                continue
            held.add(name)
        try:
            rc = p.p.returncode
            t = now_ns()
            rec.fault({"kind": "client_died", "target": name,
                       "t_inject": t, "t_heal": t,
                       "signal": -rc if rc < 0 else 0,
                       "exit": rc if rc >= 0 else None})
            log("client %s died: %s" % (name, "signal %d" % -rc if rc < 0
                                        else "exit %d" % rc))
            # What it said last (a libpool error line, a backtrace): the
            # run's directory is gone after a CI run, this line is not.
            for line in log_tail(p.logpath, 8):
                log("  %s| %s" % (name, line))
            p.start()
        finally:
            with lock:
                held.discard(name)


def poller(cl, rec, stop_ev, busy):
    while not stop_ev.wait(2.0):
        try:
            reap_clients(cl, rec, busy)
            snapshot(cl, rec, "run")
        except Exception as e:  # the poller never stops the run
            log("poller: %s" % e)


class Busy(Exception):
    """The fault's target is under another fault (--overlap)."""


class Scheduler:
    """Injects faults, one at a time. With --overlap a second scheduler
    (its own seed) runs beside it; the two share `busy`, the targets under
    a fault (a host's process, a link's qdisc, a tmpfs, a tenant's
    quota), so that they never act on the same thing at once."""

    def __init__(self, cl, rec, seed, busy=None):
        self.cl, self.rec = cl, rec
        self.rng = random.Random(seed)
        self.counts = collections.Counter()
        self.busy = busy if busy is not None else (threading.Lock(), set())

    @contextlib.contextmanager
    def claim(self, *keys):
        lock, busy = self.busy
        with lock:
            if any(k in busy for k in keys):
                raise Busy()
            busy.update(keys)
        try:
            yield
        finally:
            with lock:
                busy.difference_update(keys)

    def pick(self):
        weights = dict(FAULT_WEIGHTS)
        if self.cl.args.etcd:
            for k in NOT_ON_ETCD:
                del weights[k]
            weights.update(ETCD_FAULT_WEIGHTS)
        kinds = [k for k in sorted(weights)
                 if (k != "slow_link" or self.cl.tbf_ok) and
                 (not self.cl.args.only or k in self.cl.args.only)]
        if not kinds:
            raise SystemExit("chaos: --only leaves no fault kind to "
                             "inject here (slow_link needs tc tbf)")
        return self.rng.choices(kinds, [weights[k] for k in kinds])[0]

    def run(self, duration, quiet=0):
        end = time.time() + duration
        time.sleep(quiet)
        while time.time() < end:
            time.sleep(self.rng.uniform(0.5, 3.0))
            kind = self.pick()
            hold = self.rng.uniform(1.0, 7.0)
            try:
                getattr(self, "f_" + kind)(kind, hold)
            except Busy:
                pass
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                # Reported as a violation by the checker; the run goes on
                # with every process back.
                log("fault %s failed: %s" % (kind, e))
                self.rec.fault({"kind": "runner_error", "target": kind,
                                "t_inject": now_ns(), "t_heal": now_ns(),
                                "error": str(e)})
                self.restore()

    def restore(self):
        lock, busy = self.busy
        for p in self.cl.procs:
            with lock:
                if p.name in busy:  # another fault holds it
                    continue
            p.cont()
            if not p.alive():
                if p in [c[0] for c in self.cl.clients.values()]:
                    p.start()
                else:
                    self.cl.start_memd(p)

    def record(self, kind, target, t_inject, t_heal, **kw):
        self.counts[kind] += 1
        r = {"kind": kind, "target": target, "t_inject": t_inject,
             "t_heal": t_heal}
        r.update(kw)
        self.rec.fault(r)
        log("%s %s %.1fs %s" % (kind, target, (t_heal - t_inject) / 1e9,
                                " ".join("%s=%s" % i for i in kw.items())))

    def donor(self):
        return self.rng.choice(self.cl.donors)

    def f_kill_donor(self, kind, hold, newid=False):
        d = self.donor()
        with self.claim(d["host"], "disk:" + d["host"]):
            self.kill_donor(d, kind, hold, newid)

    def kill_donor(self, d, kind, hold, newid):
        t0 = now_ns()
        d["proc"].kill()
        time.sleep(hold)
        old = d["name"]
        if newid:
            d["gen"] += 1
            d["name"] = "%sn%d" % (d["host"], d["gen"])
            sh("rm -rf %s/*" % d["spill"], check=False)
            self.cl.write_donor_conf(d)
        t1 = now_ns()
        self.cl.start_memd(d["proc"])
        self.record(kind, old, t0, t1, new_name=d["name"])

    def f_kill_donor_newid(self, kind, hold):
        self.f_kill_donor(kind, hold, newid=True)

    def f_stop_donor(self, kind, hold):
        d = self.donor()
        with self.claim(d["host"]):
            self.stop(d["proc"], kind, d["name"], hold)

    def stop(self, proc, kind, target, hold):
        t0 = now_ns()
        proc.signal(signal.SIGSTOP)
        proc.stopped = True
        time.sleep(hold)
        t1 = now_ns()
        proc.cont()
        self.record(kind, target, t0, t1)

    def registry(self):
        # one registry: no draw, so that a run without --etcd keeps the
        # schedule it had
        if len(self.cl.regs) == 1:
            return self.cl.regs[0]
        return self.rng.choice(self.cl.regs)

    def f_kill_registry(self, kind, hold):
        p, n = self.registry()
        with self.claim(p.name):
            t0 = now_ns()
            p.kill()
            time.sleep(hold)
            t1 = now_ns()
            self.cl.start_memd(p)
            self.record(kind, n, t0, t1)

    def f_stop_registry(self, kind, hold):
        p, n = self.registry()
        with self.claim(p.name):
            self.stop(p, kind, n, hold)

    def f_pause_leader(self, kind, hold):
        """SIGSTOP the leading registry past its etcd lease (the standby
        takes over; tickets it issued and LEASE_GRANTs queued at it must
        not pass a quota once it wakes: docs/cluster.md, Fencing), then
        SIGCONT. The checker's quota check of the donors' lease tables
        covers this fault's window."""
        lead = self.cl.leader()
        if not lead:
            raise Busy()  # an election under way: another time
        p, n = lead
        lease = float(ETCD_LEASE.rstrip("s"))
        with self.claim(p.name):
            self.stop(p, kind, n, max(hold, 1.5 * lease))

    def f_etcd_tamper(self, kind, hold):
        """Whoever writes etcd edits the registry state: tenant ra's
        quota raised to TAMPER_QUOTA and ra's and kb's sealed keys
        swapped (the MAC still the old one). Registries must refuse it
        (no leader, allocation waits) and never show or use it; the
        original is put back after hold."""
        import base64
        key = base64.b64encode(b"/tidepool/state").decode()
        with self.claim("etcd", "tenant:ra", "tenant:kb"):
            got = self.cl.etcd_call("kv/range", {"key": key})
            if not got or not got.get("kvs"):
                raise RuntimeError("etcd_tamper: no state in etcd")
            kv = got["kvs"][0]
            orig = base64.b64decode(kv["value"])
            doc = json.loads(orig)
            ts = {t["name"]: t for t in doc["tenants"]}
            ts["ra"]["quota_bytes"] = TAMPER_QUOTA
            ts["ra"]["key_sealed"], ts["kb"]["key_sealed"] = \
                ts["kb"]["key_sealed"], ts["ra"]["key_sealed"]
            bad = json.dumps(doc, separators=(",", ":")).encode()
            t0 = now_ns()
            r = self.cl.etcd_call("kv/txn", {
                "compare": [{"key": key, "target": "MOD",
                             "result": "EQUAL",
                             "mod_revision": kv["mod_revision"]}],
                "success": [{"request_put": {
                    "key": key,
                    "value": base64.b64encode(bad).decode()}}]})
            if not r or not r.get("succeeded"):
                raise Busy()  # the leader wrote meanwhile: another time
            rev = r["header"]["revision"]
            time.sleep(hold)
            t1 = now_ns()
            r = self.cl.etcd_call("kv/txn", {
                "compare": [{"key": key, "target": "MOD",
                             "result": "EQUAL", "mod_revision": rev}],
                "success": [{"request_put": {
                    "key": key,
                    "value": base64.b64encode(orig).decode()}}]})
            refused = sum(open(p.logpath, errors="replace").read().count(
                "does not verify") for p, _ in self.cl.regs)
            self.record(kind, "/tidepool/state", t0, t1,
                        tampered_quota=TAMPER_QUOTA,
                        restored=bool(r and r.get("succeeded")),
                        refusals_logged=refused)
            if not (r and r.get("succeeded")):
                raise RuntimeError("etcd_tamper: the state changed while "
                                   "tampered: not restored")

    def f_kill_client(self, kind, hold):
        name = self.rng.choice(sorted(self.cl.clients))
        p = self.cl.clients[name][0]
        with self.claim(name):
            t0 = now_ns()
            p.kill()
            time.sleep(hold)
            t1 = now_ns()
            p.start()
            self.record(kind, name, t0, t1)

    def f_stop_client(self, kind, hold):
        name = self.rng.choice(sorted(self.cl.clients))
        with self.claim(name):
            self.stop(self.cl.clients[name][0], kind, name, hold)

    def pair(self):
        """Two hosts to cut apart: client-donor, donor-registry or
        client-registry."""
        x = self.rng.random()
        d = self.donor()["host"]
        c = self.rng.choice(["ca", "cb"])
        if x < 0.5:
            return c, d
        if x < 0.8:
            return d, "reg"
        return c, "reg"

    def f_partition2(self, kind, hold):
        a, b = self.pair()
        rules = [(a, "INPUT -s %s -j DROP" % self.cl.ip(b)),
                 (a, "OUTPUT -d %s -j DROP" % self.cl.ip(b))]
        self.cut(kind, "%s<->%s" % (a, b), rules, hold)

    def f_partition1(self, kind, hold):
        a, b = self.pair()
        if self.rng.random() < 0.5:
            a, b = b, a
        # a no longer hears b; b still hears a
        self.cut(kind, "%s-x->%s" % (b, a),
                 [(a, "INPUT -s %s -j DROP" % self.cl.ip(b))], hold)

    def cut(self, kind, target, rules, hold):
        t0 = now_ns()
        for h, r in rules:
            self.cl.iptables(h, r, True)
        time.sleep(hold)
        t1 = now_ns()
        for h, r in rules:
            self.cl.iptables(h, r, False)
        self.record(kind, target, t0, t1)

    def f_slow_link(self, kind, hold):
        d = self.donor()
        with self.claim("tbf:" + d["host"]):
            self.slow(d, kind, hold)

    def slow(self, d, kind, hold):
        ns = self.cl.hosts[d["host"]][0]
        t0 = now_ns()
        sh("ip netns exec %s tc qdisc add dev eth0 root tbf rate 2mbit "
           "burst 32kb latency 300ms" % ns)
        time.sleep(hold)
        t1 = now_ns()
        sh("ip netns exec %s tc qdisc del dev eth0 root" % ns)
        self.record(kind, d["host"], t0, t1)

    def fill(self, path):
        f = os.path.join(path, "chaos-filler")
        fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            while os.write(fd, b"\1" * 4096) > 0:
                pass
        except OSError:
            pass  # full
        finally:
            os.close(fd)
        return f

    def f_disk_full_state(self, kind, hold):
        with self.claim("disk:state", "tenant:ra"):
            self.disk_full_state(kind, hold)

    def disk_full_state(self, kind, hold):
        state = os.path.join(self.cl.out, "state")
        t0 = now_ns()
        f = self.fill(state)
        # A change while the disk is full must fail and not apply.
        rc, _ = self.cl.ctl("quota", "set", "ra", str(QUOTA["ra"] - SLAB))
        time.sleep(hold)
        os.unlink(f)
        t1 = now_ns()
        q = self.cl.ctl_json("quota", "get", "ra")
        rc2 = self.cl.ctl_retry("quota", "set", "ra", str(QUOTA["ra"]))
        self.record(kind, "registry state_dir", t0, t1, set_full_rc=rc,
                    quota_after=q and q.get("quota_bytes"),
                    set_after_rc=rc2)

    def f_disk_full_spill(self, kind, hold):
        d = self.donor()
        with self.claim("disk:" + d["host"]):
            t0 = now_ns()
            f = self.fill(d["spill"])
            time.sleep(hold)
            os.unlink(f)
            self.record(kind, d["name"], t0, now_ns())

    def f_quota(self, kind, hold):
        t = self.rng.choice(sorted(QUOTA))
        with self.claim("tenant:" + t):
            t0 = now_ns()
            rc, _ = self.cl.ctl("quota", "set", t, str(QUOTA_LOW[t]))
            time.sleep(hold)
            t1 = now_ns()
            rc2 = self.cl.ctl_retry("quota", "set", t, str(QUOTA[t]))
            self.record(kind, t, t0, t1, low=QUOTA_LOW[t], rc=rc,
                        rc_back=rc2)

    def f_drain(self, kind, hold):
        d = self.donor()
        with self.claim("drain:" + d["host"]):
            name = d["name"]
            t0 = now_ns()
            rc, _ = self.cl.ctl("drain", name)
            time.sleep(hold)
            t1 = now_ns()
            rc2 = self.cl.ctl_retry("undrain", name)
            self.record(kind, name, t0, t1, rc=rc, rc_back=rc2)


def quiesce(cl, rec, busy):
    """Every fault is healed; wait for the pool, hold the clients, let
    dead sessions expire, then compare donors, registry and clients."""
    names = [d["name"] for d in cl.donors]
    reap_clients(cl, rec, busy)
    Scheduler(cl, rec, 0).restore()
    if not cl.wait_donors_up(names, 60):
        log("quiesce: donors not all up after 60 s")
    time.sleep(2)
    t_q = now_ns()
    for p, _, _ in cl.clients.values():
        p.signal(signal.SIGUSR1)
    end = time.time() + 30
    pending = set(cl.clients)
    while pending and time.time() < end:
        for n in list(pending):
            h = os.path.join(cl.out, "hist-" + n)
            with open(h) as f:
                if any(l.startswith("H ") and int(l.split()[1]) >= t_q
                       for l in f):
                    pending.discard(n)
        time.sleep(0.2)
    if pending:
        log("quiesce: clients never held: %s" % sorted(pending))
    # Sessions of killed clients expire (lease_ttl 3 s + grace 1 s) and
    # the donors report.
    time.sleep(6)
    settle(cl, rec, "hold", 15)
    for p, _, _ in cl.clients.values():
        p.signal(signal.SIGTERM)
    for p, _, _ in cl.clients.values():
        try:
            p.p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
    time.sleep(2)
    settle(cl, rec, "final", 30)


def settle(cl, rec, phase, tries):
    """Snapshots (phase) once a second until one is consistent, at most
    tries of them; the last one."""
    for i in range(tries):
        s = snapshot(cl, rec, phase)
        if consistent(s):
            break
        time.sleep(1)
    return s


def consistent(s):
    """Registry usage equals the donors' leases, per tenant."""
    try:
        ids = {t["id"]: t["name"] for t in s["tenants"]["tenants"]}
        used = {t["name"]: t["used_bytes"] for t in s["tenants"]["tenants"]}
        up = [d["name"] for d in s["donors"]["donors"]
              if d["state"] in ("up", "draining")]
    except (TypeError, KeyError):
        return False
    if any(n not in s["leases"] for n in up if n not in REG_DONORS):
        return False
    cnt = collections.Counter()
    for n, l in s["leases"].items():
        if n in up:
            for e in l["leases"]:
                cnt[ids.get(e["tenant_id"], "?")] += 1
    return all(used[t] == cnt[t] * SLAB for t in used)


# ---------------------------------------------------------------- checker

def rejoin_times(faults):
    """Heals after which a tenant's reported usage may rise without a
    PLACE: the registry restarted (usage is what donors report as they
    rejoin) or a donor's reports stopped and resume (marked down, then
    up with its leases)."""
    return sorted(f["t_heal"] for f in faults
                  if f["kind"] in ("kill_registry", "stop_registry",
                                   "pause_leader", "etcd_tamper",
                                   "stop_donor", "slow_link") or
                  (f["kind"].startswith("partition") and
                   "reg" in f["target"] and "d" in f["target"]))


class KvHistory:
    """What every KV client of every tenant did, for the checks of each
    get: versions put (start, end, status), successful deletes and puts
    per key (after which an older version must not come back), pins, and
    the deletes and unpins that may have ended a pin (begun, whether or
    not their client lived to log the end)."""

    def __init__(self, hs, faults):
        self.vput = {}  # (tenant, id, ver) -> [S t0, P t1, status]
        ev = collections.defaultdict(list)  # (tenant, id) -> (t1, t0, what)
        self.pins = collections.defaultdict(list)  # -> [(t0, t1)]
        self.unpins = collections.defaultdict(list)  # -> [(t0, t1)]
        inf = float("inf")
        for name, (tenant, mode, lines) in hs.items():
            if mode != "kv":
                continue
            last_s, pend = None, {}  # pend: (op, id) -> t0 of a T line
            for l in lines:
                f = l.split()
                try:
                    if f[0] == "S":
                        last_s = []
                        for x in f[3].split(","):
                            i, v = x.split(":")
                            self.vput[(tenant, int(i), int(v))] = \
                                [int(f[1]), None, None]
                            last_s.append((int(i), int(v)))
                    elif f[0] == "P" and last_s is not None:
                        for (i, v), x in zip(last_s, f[5].split(",")):
                            st = int(x.split(":")[1])
                            vp = self.vput[(tenant, i, v)]
                            vp[1], vp[2] = int(f[2]), st
                            if st == 0:
                                ev[(tenant, i)].append(
                                    (int(f[2]), vp[0], "put of version %d"
                                     % v))
                        last_s = None
                    elif f[0] == "T":
                        for i in f[4].split(","):
                            pend[(f[3], int(i))] = int(f[1])
                    elif f[0] in ("D", "O"):
                        for x in f[5].split(","):
                            i, st = (int(y) for y in x.split(":"))
                            t0 = pend.pop((f[0], i), int(f[1]))
                            self.unpins[(tenant, i)].append((t0, int(f[2])))
                            if f[0] == "D" and st == 0:
                                ev[(tenant, i)].append((int(f[2]), t0,
                                                        "a delete"))
                    elif f[0] == "N":
                        for x in f[5].split(","):
                            i, st = (int(y) for y in x.split(":"))
                            if st == 0:
                                self.pins[(tenant, i)].append(
                                    (int(f[1]), int(f[2])))
                except (IndexError, ValueError, KeyError):
                    continue  # torn line: Checker.check_client says so
            # deletes and unpins begun and never ended: from then on
            for (op, i), t0 in pend.items():
                self.unpins[(tenant, i)].append((t0, inf))
        # per key, by end: the latest start so far (prefix maximum)
        self.events = {}
        for k, es in ev.items():
            es.sort()
            pmax, best = [], (-1, "")
            for t1, t0, what in es:
                if t0 > best[0]:
                    best = (t0, what)
                pmax.append(best)
            self.events[k] = ([e[0] for e in es], pmax, None)
        # windows of donor faults, merged
        w = sorted((f["t_inject"] - 1e9, f["t_heal"] + SETTLE)
                   for f in faults if f["kind"] in KV_DONOR_FAULTS)
        self.kinds = sorted((f["t_inject"] - 1e9, f["t_heal"] + SETTLE,
                             f["kind"]) for f in faults
                            if f["kind"] in KV_DONOR_FAULTS)
        self.win = []
        for a, b in w:
            if self.win and a <= self.win[-1][1]:
                self.win[-1][1] = max(self.win[-1][1], b)
            else:
                self.win.append([a, b])
        self.win_starts = [a for a, _ in self.win]

    def exempt(self, a, b):
        """Whether a donor fault's window overlaps [a, b]."""
        k = bisect.bisect_right(self.win_starts, b)
        return k > 0 and self.win[k - 1][1] >= a

    def causes(self, a, b):
        """The kinds of donor fault whose windows overlap [a, b]."""
        return set(k for x, y, k in self.kinds if x <= b and y >= a)

    def pinned(self, tenant, i, g0, g1):
        """The start of the last pin of key i that succeeded before g0
        and that no delete or unpin may have ended by g1, or None."""
        ps = [p for p in self.pins.get((tenant, i), ()) if p[1] < g0]
        if not ps:
            return None
        p0 = max(ps)[0]
        for a, b in self.unpins.get((tenant, i), ()):
            if b >= p0 and a <= g1:
                return None
        return p0

    def after_delete(self, tenant, i, g0):
        """The start of the last successful delete of key i that ended
        before g0 if it is the last such event, else None."""
        t1s, pmax, _ = self.events.get((tenant, i), ([], [], None))
        k = bisect.bisect_left(t1s, g0)
        if k and pmax[k - 1][1] == "a delete":
            return pmax[k - 1][0]
        return None


class Checker:
    def __init__(self, out, quick=False):
        self.out = out
        self.quick = quick  # selftest: no recovery times
        self.v = []  # violations: (kind, text)
        self.stats = collections.Counter()
        # exempt KV cases by the kinds of donor fault that explain them
        self.stale_causes = collections.Counter()
        self.pin_causes = collections.Counter()

    def bad(self, kind, text):
        self.v.append((kind, text))

    def histories(self):
        hs = {}
        for name, tenant, mode, _ in CLIENTS:
            p = os.path.join(self.out, "hist-" + name)
            if os.path.exists(p):
                with open(p) as f:
                    hs[name] = (tenant, mode, f.read().splitlines())
        return hs

    def run(self):
        hs = self.histories()
        faults = self.load("faults.jsonl")
        snaps = self.load("snapshots.jsonl")
        self.kv = KvHistory(hs, faults)
        self.bus_times = []
        self.succ = {}
        for name, (tenant, mode, lines) in hs.items():
            self.check_client(name, tenant, lines, self.kv)
        # SIGBUS with no fault on in the 15 s before: not wrong (the
        # history shows no byte was), but counted
        for t in self.bus_times:
            if not any(fl["t_inject"] <= t and t - 15e9 <= fl["t_heal"]
                       for fl in faults if fl["kind"] != "client_died"):
                self.stats["page_sigbus_unexplained"] += 1
        for fl in faults:
            if fl["kind"] == "client_died":
                sig = fl.get("signal") or 0
                self.bad("client_crash", "%s died of %s at %d" % (
                    fl["target"], SIGNAMES.get(sig, "signal %d" % sig)
                    if sig else "exit %s" % fl.get("exit"), fl["t_inject"]))
        self.check_snapshots(snaps, faults)
        self.check_quiesce(snaps, hs)
        if not self.quick:
            self.recovery(faults, hs)
        return not self.v

    def load(self, name):
        p = os.path.join(self.out, name)
        if not os.path.exists(p):
            return []
        with open(p) as f:
            return [json.loads(l) for l in f if l.strip()]

    def check_client(self, name, tenant, lines, kv):
        blocks = {}  # (inc, rid, blk) -> [last_ok, uncertain set]
        repl = {}  # (inc, rid) -> whether it has a replica
        succ = []
        for n, l in enumerate(lines, 1):
            f = l.split()
            if not f:
                continue
            op, where = f[0], "%s:%d" % (name, n)
            try:
                if op == "W":
                    self.stats["region_writes"] += 1
                    key = (f[3], f[4], f[5])
                    b = blocks.setdefault(key, [None, set()])
                    ver, rc = int(f[6]), int(f[7])
                    if rc == 0:
                        b[0], b[1] = ver, set()
                        succ.append(int(f[2]))
                    else:
                        b[1].add(ver)
                        self.stats["region_write_errors"] += 1
                elif op == "R":
                    self.stats["region_reads"] += 1
                    rc = int(f[6])
                    if rc:
                        self.stats["region_read_errors"] += 1
                        continue
                    succ.append(int(f[2]))
                    b = blocks.get((f[3], f[4], f[5]), [None, set()])
                    self.check_read(where, b, f[7])
                elif op == "A":
                    repl[(f[3], f[4])] = f[6] == "1"
                    self.stats["allocs"] += 1
                    if int(f[7]):
                        self.stats["alloc_errors"] += 1
                elif op == "F":
                    self.stats["frees"] += 1
                elif op == "C":
                    self.stats["connects"] += 1
                elif op == "P":
                    self.stats["kv_puts"] += 1
                    sts = [int(x.split(":")[1]) for x in f[5].split(",")]
                    self.stats["kv_keys_put"] += len(sts)
                    if any(s in (0, -EEXIST) for s in sts):
                        succ.append(int(f[2]))
                    else:
                        self.stats["kv_put_errors"] += 1
                elif op == "G":
                    self.stats["kv_gets"] += 1
                    t0, t1 = int(f[1]), int(f[2])
                    ok = int(f[4]) >= 0
                    for x in f[5].split(","):
                        i, s, dec = x.split(":")
                        i, s = int(i), int(s)
                        self.stats["kv_keys_got"] += 1
                        d = kv.after_delete(tenant, i, t0)
                        if d is not None and not kv.exempt(d, t1):
                            self.stats["kv_gets_after_delete_checked"] += 1
                        p = kv.pinned(tenant, i, t0, t1)
                        if p is not None and not kv.exempt(p, t1):
                            self.stats["kv_pinned_gets_checked"] += 1
                        if s == 0:
                            self.stats["kv_hits"] += 1
                            if dec[0] != "v":
                                self.bad("wrong_bytes", "%s: key %d hit "
                                         "decoded as %s" % (where, i, dec))
                            else:
                                self.kv_hit(where, tenant, i, int(dec[1:]),
                                            t0, t1)
                        elif s == -ENOENT:
                            self.stats["kv_misses"] += 1
                            self.kv_miss(where, i, p, t0, t1)
                        else:
                            self.stats["kv_get_errors"] += 1
                    if ok:
                        succ.append(t1)
                elif op in "DNO" and len(op) == 1:
                    kind = {"D": "delete", "N": "pin", "O": "unpin"}[op]
                    sts = [int(x.split(":")[1]) for x in f[5].split(",")]
                    self.stats["kv_%s_keys" % kind] += len(sts)
                    self.stats["kv_%s_ok" % kind] += sts.count(0)
                    if int(f[4]) >= 0:
                        succ.append(int(f[2]))
                elif op == "M":
                    self.stats["maps"] += 1
                    self.stats["map_errors"] += int(f[5]) != 0
                elif op == "U":
                    self.stats["unmaps_" + f[5]] += 1
                    self.stats["unmap_errors_" + f[5]] += int(f[6]) != 0
                elif op == "Y":
                    self.stats["page_writes"] += 1
                    key = ("p", f[3], f[4], f[5])
                    b = blocks.setdefault(key, [None, set()])
                    if f[7] == "0":
                        b[0], b[1] = int(f[6]), set()
                        succ.append(int(f[2]))
                    elif f[7] == "bus":
                        # the store faulted: not done (maybe partly)
                        b[1].add(int(f[6]))
                        self.stats["page_sigbus"] += 1
                        self.stats["page_sigbus_replica"] += \
                            repl.get((f[3], f[4]), False)
                        self.bus_times.append(int(f[1]))
                    else:
                        raise ValueError("rc " + f[7])
                elif op == "X":
                    self.stats["page_reads"] += 1
                    if f[6] == "bus":
                        self.stats["page_sigbus"] += 1
                        self.stats["page_sigbus_replica"] += \
                            repl.get((f[3], f[4]), False)
                        self.bus_times.append(int(f[1]))
                        continue
                    if f[6] != "0":
                        raise ValueError("rc " + f[6])
                    self.stats["page_reads_faulted"] += int(f[7])
                    succ.append(int(f[2]))
                    b = blocks.get(("p", f[3], f[4], f[5]), [None, set()])
                    self.check_read(where + " (mapped page)", b, f[8])
            except (IndexError, ValueError) as e:
                # A torn last line (client SIGKILLed mid-write) is not an
                # operation; anything else is a broken history.
                if n != len(lines):
                    self.bad("history", "%s: unparsable: %r (%s)" %
                             (where, l, e))
        self.succ[name] = sorted(succ)

    def kv_hit(self, where, tenant, i, ver, g0, g1):
        """A hit of version ver of key i, got in [g0, g1]: that version
        was put, its put was not refused, and no successful delete or put
        of another version began after its put ended and ended before the
        get began, unless a donor fault in between explains it."""
        kv = self.kv
        vp = kv.vput.get((tenant, i, ver))
        if vp is None or vp[0] > g1:
            self.bad("wrong_bytes", "%s: key %d hit version %d, which "
                     "no put had begun" % (where, i, ver))
            return
        s0, p1, st = vp
        end = p1 if p1 is not None else float("inf")
        if st == -EEXIST:
            why = "its put was refused (-EEXIST) at %d" % p1
        else:
            why = None
            t1s, pmax, who = kv.events.get((tenant, i), ([], [], []))
            k = bisect.bisect_left(t1s, g0)
            if k and pmax[k - 1][0] > end:
                why = "%s began at %d, after its put ended at %d" % (
                    pmax[k - 1][1], pmax[k - 1][0], end)
        if why is None:
            return
        if kv.exempt(s0, g1):
            self.stats["kv_stale_exempt"] += 1
            for k in kv.causes(s0, g1):
                self.stale_causes[k] += 1
            return
        self.bad("kv_phantom" if st == -EEXIST else "kv_resurrected",
                 "%s: key %d hit version %d, but %s (no donor fault "
                 "since its put)" % (where, i, ver, why))

    def kv_miss(self, where, i, pin, g0, g1):
        """A miss of key i got in [g0, g1]: not while a pin of it holds
        (pin: its start, from KvHistory.pinned; pinned keys are never
        evicted) unless a donor fault explains it, or the read took
        longer than its lease."""
        if pin is None:
            return
        if self.kv.exempt(pin, g1) or g1 - g0 > 1.5e9:
            self.stats["kv_pinned_miss_exempt"] += 1
            for k in self.kv.causes(pin, g1) or ["slow read"]:
                self.pin_causes[k] += 1
            return
        self.bad("pinned_missing", "%s: key %d missed while pinned "
                 "since %d (no unpin, delete or donor fault since)" %
                 (where, i, pin))

    def check_read(self, where, b, toks):
        last_ok, unc = b
        for tok in toks.split(","):
            what, cnt = tok.rsplit("*", 1)
            if what[0] == "v":
                ver = int(what[1:])
                if ver == last_ok or ver in unc:
                    continue
                self.bad("wrong_bytes", "%s: %s sectors of version %d; "
                         "latest written %s, failed since %s" %
                         (where, cnt, ver, last_ok, sorted(unc) or "none"))
            elif what == "Z":
                if last_ok is None:
                    continue
                self.bad("wrong_bytes", "%s: %s zero sectors after "
                         "version %d was written" % (where, cnt, last_ok))
            elif what == "G":
                if unc:
                    continue  # a failed write may leave torn sectors
                self.bad("wrong_bytes", "%s: %s sectors match no write "
                         "(latest %s)" % (where, cnt, last_ok))
            else:
                self.bad("foreign_bytes", "%s: %s sectors of another "
                         "region or session: %s" % (where, cnt, what[1:]))
            self.stats["wrong_sector_runs"] += 1

    def check_snapshots(self, snaps, faults):
        rejoin = rejoin_times(faults)
        # Where a tenant's quota was surely low: from 3 s after the quota
        # set began (poolctl's own timeout is 2 s) until the heal began
        # to set it back. Anywhere else it may have been the high one.
        low = collections.defaultdict(list)
        for f in faults:
            if f["kind"] == "quota":
                low[f["target"]].append((f["t_inject"] + 3e9,
                                         f["t_heal"]))
        prev = {}
        for s in snaps:
            for name, l in (s.get("leases") or {}).items():
                seen = set()
                for e in l.get("leases", []):
                    if e["slab"] in seen:
                        self.bad("double_lease", "slab %d of %s leased "
                                 "twice at %d" % (e["slab"], name, s["t0"]))
                    seen.add(e["slab"])
                self.stats["lease_snapshots"] += 1
            if not s.get("tenants"):
                continue
            up = set(d["name"] for d in (s.get("donors") or
                                         {"donors": []})["donors"]
                     if d["state"] == "up")
            ndon = len(up)
            for t in s["tenants"]["tenants"]:
                self.stats["quota_snapshots"] += 1
                held = t["used_bytes"] + t["reserved_bytes"]
                # KV stores may pass the quota by about one slab per
                # donor for a report interval (docs/cluster.md, Bound)
                slack = ndon * SLAB if t["name"] == "kb" else 0
                p = prev.get(t["name"])
                prev[t["name"]] = (s["t0"], held, t["quota_bytes"], up)
                if p is None:
                    continue
                # a PLACE between the two snapshots was checked against
                # the quota of its time: the highest it may have been
                q = max(t["quota_bytes"], p[2])
                if not any(a <= p[0] and s["t1"] <= b
                           for a, b in low[t["name"]]):
                    q = max(q, QUOTA.get(t["name"], 0))
                if held <= q + slack:
                    continue
                self.stats["over_quota_rows"] += 1
                if held <= p[1]:
                    continue
                # usage reported again: a donor that is up now and was
                # not then (rejoined, e.g. after a registry restart), or
                # one whose reports stopped and resumed in between
                if up - p[3] or any(p[0] - 5e9 <= r <= s["t1"]
                                    for r in rejoin):
                    self.stats["over_quota_growth_rejoin"] += 1
                    continue
                self.bad("over_quota", "tenant %s grew %d -> %d bytes "
                         "over its quota %d at %d" %
                         (t["name"], p[1], held, q, s["t0"]))

        self.check_etcd(snaps, faults)

    def check_etcd(self, snaps, faults):
        """--etcd runs. etcd_tamper: the tampered state is never used (ra
        never shows the tampered quota). pause_leader: while the leader is
        paused past its lease, a standby takes over, and the paused one
        wakes with tickets out (docs/cluster.md, Fencing), the donors' own
        lease tables never hold more of ra than its quota. Windows that
        another fault which takes a donor's usage out of the registry's
        count (a donor marked down, a registry restart) comes near are
        left out (counted)."""
        for s in snaps:
            for t in (s.get("tenants") or {}).get("tenants", []):
                if t.get("quota_bytes") == TAMPER_QUOTA:
                    self.bad("etcd_tamper_accepted", "tenant %s shows the "
                             "quota written into etcd behind the "
                             "registries (%d) at %d" %
                             (t["name"], TAMPER_QUOTA, s["t0"]))
        pauses = [f for f in faults if f["kind"] == "pause_leader"]
        if not pauses:
            return
        ra = None
        for s in snaps:
            for t in (s.get("tenants") or {}).get("tenants", []):
                if t["name"] == "ra":
                    ra = t["id"]
        rej = set(("kill_registry", "stop_registry", "etcd_tamper",
                   "stop_donor", "slow_link"))
        for f in pauses:
            a, b = f["t_inject"], f["t_heal"] + SETTLE
            near = [g for g in faults if g is not f and
                    (g["kind"] in rej or (g["kind"].startswith("partition")
                                          and "reg" in g["target"] and
                                          "d" in g["target"])) and
                    g["t_inject"] - 1e9 <= b and g["t_heal"] + 10e9 >= a]
            if near or ra is None:
                self.stats["pause_leader_windows_exempt"] += 1
                continue
            self.stats["pause_leader_windows"] += 1
            for s in snaps:
                if not (a <= s["t0"] and s["t1"] <= b) or \
                        not s.get("leases"):
                    continue
                n = sum(1 for l in s["leases"].values()
                        for e in l.get("leases", [])
                        if e["tenant_id"] == ra)
                self.stats["pause_leader_lease_rows"] += 1
                if n * SLAB > QUOTA["ra"]:
                    self.bad("pause_leader_over_quota",
                             "the donors lease %d slabs of ra (quota %d) "
                             "at %d, %s paused %.1f s from %d" %
                             (n, QUOTA["ra"] // SLAB, s["t0"], f["target"],
                              (f["t_heal"] - f["t_inject"]) / 1e9,
                              f["t_inject"]))

    def check_quiesce(self, snaps, hs):
        hold = [s for s in snaps if s["phase"] == "hold"]
        final = [s for s in snaps if s["phase"] == "final"]
        if not hold or not final:
            self.bad("quiesce", "no quiesce snapshots (run cut short?)")
            return
        # Held: what the clients say they hold (their last H line).
        held = collections.Counter()  # donor addr -> slabs of tenant ra
        for name, (tenant, mode, lines) in hs.items():
            hl = [l for l in lines if l.startswith("H ")]
            if not hl or tenant != "ra":
                continue
            for reg in hl[-1].split()[3:]:
                if reg == "-":
                    continue
                for slab in reg.split(":", 1)[1].split(";"):
                    for a in slab.split("/"):
                        held[a] += 1
        s = hold[-1]
        ids = {t["name"]: t["id"] for t in s["tenants"]["tenants"]}
        for name, l in s["leases"].items():
            n = sum(1 for e in l["leases"] if e["tenant_id"] == ids["ra"])
            if n > held[l["listen"]]:
                self.bad("leak", "%s holds %d slabs of ra while live "
                         "sessions hold %d there" %
                         (name, n, held[l["listen"]]))
            self.stats["held_copies_lost"] += max(0, held[l["listen"]] - n)
        s = final[-1]
        if not consistent(s):
            self.bad("usage", "registry usage != donors' leases after "
                     "quiescing: %s" % json.dumps(
                         {"tenants": s["tenants"],
                          "leases": {n: len(l["leases"]) for n, l in
                                     s["leases"].items()}}))
        ids = {t["name"]: t["id"] for t in s["tenants"]["tenants"]}
        for name, l in s["leases"].items():
            n = sum(1 for e in l["leases"] if e["tenant_id"] == ids["ra"])
            if n:
                self.bad("leak", "%s still leases %d slabs of ra after "
                         "every client closed" % (name, n))
        for d in s["donors"]["donors"]:
            l = s["leases"].get(d["name"])
            if l is not None and d["state"] != "down" and \
                    d["slabs_leased"] != len(l["leases"]):
                self.bad("usage", "registry says %s has %d slabs leased, "
                         "it has %d" % (d["name"], d["slabs_leased"],
                                        len(l["leases"])))
        self.stats["final_leases"] = sum(len(l["leases"]) for l in
                                         s["leases"].values())
        # memd's /metrics says the same as its lease table
        for ph in (hold[-1], s):
            for name, m in (ph.get("metrics") or {}).items():
                l = ph["leases"].get(name)
                if l is None:
                    continue
                per = collections.Counter(str(e["tenant_id"])
                                          for e in l["leases"])
                mine = {t: b for t, b in m["tenant_leased"].items() if b}
                if m["leased_bytes"] != len(l["leases"]) * SLAB or \
                        mine != {t: n * SLAB for t, n in per.items()}:
                    self.bad("usage", "%s: /metrics says %s leased (%s),"
                             " its lease table %d slabs (%s) [%s]" %
                             (name, m["leased_bytes"], mine,
                              len(l["leases"]), dict(per), ph["phase"]))
                self.stats["metrics_checked"] += 1
                if ph is s:
                    self.stats["sessions_left_ra"] += \
                        m["tenant_sessions"].get(str(ids["ra"]), 0)

    def recovery(self, faults, hs):
        """Per fault: from its heal until every client has completed an
        operation that started after it."""
        self.rec = collections.defaultdict(list)
        self.stall = collections.defaultdict(list)
        self.faults = collections.Counter()
        starts = {}
        for name, (tenant, mode, lines) in hs.items():
            st = []
            for l in lines:
                f = l.split()
                if len(f) > 3 and f[0] in "WRPGYXDNO" and len(f[0]) == 1:
                    try:
                        rc = int(f[7] if f[0] in "WY" else
                                 f[6] if f[0] in "RX" else f[4])
                    except (IndexError, ValueError):
                        continue  # torn, or "bus"
                    if f[0] == "P":
                        okp = any(int(x.split(":")[1]) in (0, -EEXIST)
                                  for x in f[5].split(","))
                    else:
                        okp = rc >= 0
                    if okp:
                        st.append((int(f[1]), int(f[2])))
            st.sort()
            # sufmin[i]: the first end among successes started at i on
            sufmin = [e for _, e in st]
            for k in range(len(sufmin) - 2, -1, -1):
                sufmin[k] = min(sufmin[k], sufmin[k + 1])
            starts[name] = ([a for a, _ in st], sufmin,
                            sorted(e for _, e in st))
        for fl in faults:
            self.faults[fl["kind"]] += 1
            if fl["kind"] == "disk_full_state" and fl["set_full_rc"] and \
                    fl.get("quota_after") not in (None, QUOTA["ra"]):
                self.bad("durability", "a quota set refused on a full "
                         "state_dir was applied anyway: %s" % fl)
            if fl["kind"] == "runner_error":
                self.bad("runner", "fault %s failed: %s" %
                         (fl["target"], fl.get("error")))
                continue
            worst, stall = 0, 0
            for name, st in starts.items():
                s0s, sufmin, es = st
                i = bisect.bisect_left(s0s, fl["t_heal"])
                if i == len(s0s):
                    worst = None
                    break
                nxt = sufmin[i]
                worst = max(worst, nxt - fl["t_heal"])
                # the longest wait between two successes of this client
                # from before the fault until it recovered
                es = st[2]
                a = max(0, bisect.bisect_left(es, fl["t_inject"]) - 1)
                b = bisect.bisect_right(es, nxt)
                for k in range(a, min(b, len(es) - 1)):
                    stall = max(stall, es[k + 1] - es[k])
            if worst is not None:
                self.rec[fl["kind"]].append(worst / 1e9)
                self.stall[fl["kind"]].append(stall / 1e9)

    def summary(self):
        out = ["chaos check: %s" % self.out]
        st = self.stats
        out.append("ops: region writes %d (%d failed), reads %d (%d failed)"
                   ", allocs %d (%d failed), frees %d, connects %d" %
                   (st["region_writes"], st["region_write_errors"],
                    st["region_reads"], st["region_read_errors"],
                    st["allocs"], st["alloc_errors"], st["frees"],
                    st["connects"]))
        out.append("kv: puts %d (%d keys, %d all-failed), gets %d (%d keys:"
                   " %d hits, %d misses, %d errors)" %
                   (st["kv_puts"], st["kv_keys_put"], st["kv_put_errors"],
                    st["kv_gets"], st["kv_keys_got"], st["kv_hits"],
                    st["kv_misses"], st["kv_get_errors"]))
        out.append("kv deletes %d keys (%d deleted), pins %d (%d pinned), "
                   "unpins %d (%d); gets checked after a delete %d, of "
                   "pinned keys %d (outside donor faults); exempt: %d hits "
                   "of an older version, %d misses of pinned keys" %
                   (st["kv_delete_keys"], st["kv_delete_ok"],
                    st["kv_pin_keys"], st["kv_pin_ok"], st["kv_unpin_keys"],
                    st["kv_unpin_ok"], st["kv_gets_after_delete_checked"],
                    st["kv_pinned_gets_checked"], st["kv_stale_exempt"],
                    st["kv_pinned_miss_exempt"]))
        for what, c in (("older-version hits", self.stale_causes),
                        ("pinned misses", self.pin_causes)):
            if c:
                out.append("  exempt %s by fault in their window: %s" %
                           (what, ", ".join("%s %d" % x for x in
                                            sorted(c.items()))))
        out.append("paging: page writes %d, reads %d (%d through a fault); "
                   "SIGBUS %d (%d on a region with a replica, %d with no "
                   "fault in the 15 s before); maps %d (%d failed), unmaps "
                   "flush %d (%d failed), discard %d"
                   % (st["page_writes"], st["page_reads"],
                      st["page_reads_faulted"], st["page_sigbus"],
                      st["page_sigbus_replica"],
                      st["page_sigbus_unexplained"], st["maps"],
                      st["map_errors"], st["unmaps_flush"],
                      st["unmap_errors_flush"], st["unmaps_discard"]))
        out.append("snapshots: %d lease tables, %d quota rows, %d /metrics"
                   "; held copies lost with their donor: %d; sessions of "
                   "ra left after its clients closed: %d" %
                   (st["lease_snapshots"], st["quota_snapshots"],
                    st["metrics_checked"], st["held_copies_lost"],
                    st["sessions_left_ra"]))
        out.append("quota: %d rows over a quota (lowered below usage, or "
                   "KV past its slack), %d of them grew, across a rejoin"
                   % (st["over_quota_rows"], st["over_quota_growth_rejoin"]))
        if st["pause_leader_windows"] or st["pause_leader_windows_exempt"]:
            out.append("etcd: %d paused-leader windows checked (%d lease "
                       "snapshots within the quota), %d left out near "
                       "another fault" %
                       (st["pause_leader_windows"],
                        st["pause_leader_lease_rows"],
                        st["pause_leader_windows_exempt"]))
        out.append("%-18s %5s %9s %9s %9s %9s" %
                   ("fault", "n", "rec p50", "rec max", "stall p50",
                    "stall max"))

        def p50max(r):
            r = sorted(r)
            if not r:
                return "-", "-"
            return "%.2fs" % r[len(r) // 2], "%.2fs" % r[-1]
        for k in sorted(self.faults):
            out.append("%-18s %5d %9s %9s %9s %9s" %
                       ((k, self.faults[k]) + p50max(self.rec.get(k, [])) +
                        p50max(self.stall.get(k, []))))
        kinds = collections.Counter(k for k, _ in self.v)
        out.append("wrong bytes (reads no write explains): %d; KV versions "
                   "back after a delete or newer put: %d; pinned keys "
                   "missing: %d; leaks: %d; clients crashed: %d" %
                   (kinds["wrong_bytes"] + kinds["foreign_bytes"],
                    kinds["kv_resurrected"] + kinds["kv_phantom"],
                    kinds["pinned_missing"], kinds["leak"],
                    kinds["client_crash"]))
        out.append("violations: %d %s" % (len(self.v), dict(kinds)))
        for k, t in self.v[:20]:
            out.append("  %s: %s" % (k, t))
        return "\n".join(out)


def check(out, expect_wrong=False):
    c = Checker(out)
    ok = c.run()
    print(c.summary(), flush=True)
    return check_verdict(c, ok, expect_wrong)


def check_many(dirs):
    """Checks several runs and prints their sum (docs/reliability.md)."""
    total = Checker(" + ".join(dirs))
    total.rec, total.faults = collections.defaultdict(list), \
        collections.Counter()
    total.stall = collections.defaultdict(list)
    for d in dirs:
        c = Checker(d)
        c.run()
        print(c.summary() + "\n", flush=True)
        total.v += c.v
        total.stats.update(c.stats)
        total.faults.update(c.faults)
        total.stale_causes.update(c.stale_causes)
        total.pin_causes.update(c.pin_causes)
        for k, r in c.rec.items():
            total.rec[k] += r
        for k, r in c.stall.items():
            total.stall[k] += r
    print(total.summary(), flush=True)
    return 0 if not total.v else 1


def check_verdict(c, ok, expect_wrong):
    if expect_wrong:
        # --corrupt-client: exactly the spoiled operations must be
        # caught: c1's region read, c5's read through a page fault (both
        # wrong bytes), and c3's deleted key that came back
        kinds = set(k for k, _ in c.v)
        want = {"c1 region read": ("wrong_bytes", "c1:"),
                "c5 read through a page fault": ("wrong_bytes",
                                                 "(mapped page)"),
                "c3 deleted key back": ("kv_resurrected", "c3:")}
        good = kinds == {"wrong_bytes", "kv_resurrected"}
        for what, (kind, mark) in sorted(want.items()):
            hit = any(k == kind and mark in t for k, t in c.v)
            print("chaos: spoiled %s: %s" % (what, "caught" if hit else
                                               "NOT CAUGHT"))
            good = good and hit
        if kinds - {"wrong_bytes", "kv_resurrected"}:
            print("chaos: and other violations: %s" % sorted(kinds))
        return 0 if good else 1
    return 0 if ok else 1


def selftest(out):
    """Each corruption of a good run's files must be caught."""
    cases = []

    def mutate_hist(kind):
        def m(d):
            for name, _, mode, _ in CLIENTS:
                p = os.path.join(d, "hist-" + name)
                lines = open(p).read().splitlines()
                for i, l in enumerate(lines):
                    f = l.split()
                    if kind == "stale" and f[0] == "R" and f[6] == "0" \
                            and f[7].startswith("v") and \
                            "," not in f[7] and int(f[7][1:].split("*")[0]) > 1:
                        f[7] = "v1*128"
                    elif kind == "byte" and f[0] == "R" and f[6] == "0" \
                            and "," not in f[7]:
                        v, n = f[7].split("*")
                        f[7] = "%s*%d,G*1" % (v, int(n) - 1)
                    elif kind == "foreign" and f[0] == "R" and f[6] == "0":
                        f[7] = "F9.0.1.0.0.1*128"
                    elif kind == "kv" and f[0] == "G" and ":0:v" in l:
                        f[5] = re.sub(":0:v[0-9]+", ":0:G@0", f[5], 1)
                    elif kind == "page" and f[0] == "X" and \
                            f[6] == "0" and f[8].startswith("v") and \
                            "," not in f[8]:
                        v, n = f[8].split("*")
                        f[8] = "%s*%d,G*1" % (v, int(n) - 1)
                    else:
                        continue
                    lines[i] = " ".join(f)
                    open(p, "w").write("\n".join(lines) + "\n")
                    return True
            return False
        return m

    def after_all(d):
        """A time after everything in the run (and every fault window):
        the last times of the histories, faults and snapshots."""
        t = 0
        for f in os.listdir(d):
            with open(os.path.join(d, f), "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - 65536))
                tail = fh.read().decode(errors="replace").splitlines()[-20:]
            for l in tail:
                for x in l.replace(",", " ").replace(":", " ").split():
                    if x.isdigit() and len(x) >= 18:
                        t = max(t, int(x))
        return t + 100 * 10**9

    def append_kv(kind):
        # a key put, deleted and then hit; or put, pinned and then
        # missed: appended to c3's history after the run (keys 5001 and
        # 5002: outside the workload's 1,024, nothing else touches them)
        def m(d):
            t = after_all(d)
            if kind == "resurrect":
                ls = ["S %d 0 5001:77777" % t,
                      "P %d %d 0 1 5001:0" % (t, t + 1000),
                      "T %d 0 D 5001" % (t + 2000),
                      "D %d %d 0 1 5001:0" % (t + 2000, t + 3000),
                      "G %d %d 0 1 5001:0:v77777" % (t + 4000, t + 5000)]
            else:
                ls = ["S %d 0 5002:77778" % t,
                      "P %d %d 0 1 5002:0" % (t, t + 1000),
                      "N %d %d 0 1 5002:0" % (t + 2000, t + 3000),
                      "G %d %d 0 0 5002:-2:-" % (t + 4000, t + 5000)]
            with open(os.path.join(d, "hist-c3"), "a") as f:
                f.write("\n".join(ls) + "\n")
            return True
        return m

    def crash(d):
        t = after_all(d)
        with open(os.path.join(d, "faults.jsonl"), "a") as f:
            f.write(json.dumps({"kind": "client_died", "target": "c5",
                                "t_inject": t, "t_heal": t, "signal": 7,
                                "exit": None}) + "\n")
        return True

    def mutate_snap(kind):
        def m(d):
            p = os.path.join(d, "snapshots.jsonl")
            snaps = [json.loads(l) for l in open(p)]
            rejoin = rejoin_times([json.loads(l) for l in open(
                os.path.join(d, "faults.jsonl"))])
            done = False
            for s in reversed(snaps):
                if kind == "double" and s["leases"]:
                    for l in s["leases"].values():
                        if l["leases"]:
                            l["leases"].append(dict(l["leases"][0]))
                            done = True
                            break
                if kind == "leak" and s["phase"] == "final" and s["leases"]:
                    ids = {t["name"]: t["id"]
                           for t in s["tenants"]["tenants"]}
                    l = next(iter(s["leases"].values()))
                    l["leases"].append({"slab": 9999, "generation": 1,
                                        "node": 0, "tenant_id": ids["ra"],
                                        "session": "0", "expires_in_ms": 1})
                    done = True
                if done:
                    break
            if kind == "tamper":
                # a registry that used the tampered state would show it
                for x in snaps:
                    if x.get("tenants"):
                        for t in x["tenants"]["tenants"]:
                            if t["name"] == "ra":
                                t["quota_bytes"] = TAMPER_QUOTA
                                done = True
                                break
                    if done:
                        break
            if kind == "paused":
                # 41 slabs of ra leased inside a checked pause window
                fl = [json.loads(l) for l in open(
                    os.path.join(d, "faults.jsonl"))]
                c = Checker(d)
                c.check_etcd(snaps, fl)
                ids = [t["id"] for x in snaps if x.get("tenants")
                       for t in x["tenants"]["tenants"] if t["name"] == "ra"]
                for f in fl if c.stats["pause_leader_windows"] else ():
                    if f["kind"] != "pause_leader" or done or not ids:
                        continue
                    for x in snaps:
                        if f["t_inject"] <= x["t0"] and x["leases"] and \
                                x["t1"] <= f["t_heal"] + SETTLE:
                            l = next(iter(x["leases"].values()))
                            for k in range(QUOTA["ra"] // SLAB + 1):
                                l["leases"].append(
                                    {"slab": 10000 + k, "generation": 1,
                                     "node": 0, "tenant_id": ids[0],
                                     "session": "0", "expires_in_ms": 1})
                            done = True
                            break
            if kind == "quota" and not done:
                # two snapshots after the last, clear of every rejoin,
                # the second over the quota
                run = [x for x in snaps if x["phase"] == "run" and
                       x["tenants"]]
                if run:
                    t = int(max(rejoin + [run[-1]["t1"]]) + 20e9)
                    a, b = json.loads(json.dumps(run[-1])), \
                        json.loads(json.dumps(run[-1]))
                    a["t0"], a["t1"], b["t0"], b["t1"] = t, t, t + 2e9, \
                        t + 2e9
                    for x in b["tenants"]["tenants"]:
                        if x["name"] == "ra":
                            x["used_bytes"] = x["quota_bytes"] + 64 * SLAB
                    i = snaps.index(run[-1]) + 1
                    snaps[i:i] = [a, b]
                    done = True
            with open(p, "w") as f:
                for s in snaps:
                    f.write(json.dumps(s) + "\n")
            return done
        return m

    for kind in ("stale", "byte", "foreign", "kv", "page"):
        cases.append((kind, mutate_hist(kind), "bytes"))
    cases.append(("resurrect", append_kv("resurrect"), "kv_resurrected"))
    cases.append(("pinned", append_kv("pinned"), "pinned_missing"))
    cases.append(("crash", crash, "client_crash"))
    cases.append(("double", mutate_snap("double"), "double_lease"))
    cases.append(("leak", mutate_snap("leak"), "leak"))
    cases.append(("quota", mutate_snap("quota"), "over_quota"))
    # --etcd runs only (the CI slice's selftest stays as it was)
    fp = os.path.join(out, "faults.jsonl")
    kinds = set(json.loads(l)["kind"] for l in open(fp)) \
        if os.path.exists(fp) else set()
    if "etcd_tamper" in kinds:
        cases.append(("tamper", mutate_snap("tamper"),
                      "etcd_tamper_accepted"))
    if "pause_leader" in kinds:
        cases.append(("paused", mutate_snap("paused"),
                      "pause_leader_over_quota"))
    # Each case checks a copy of the run whose histories stop SELFTEST_SPAN
    # after the first operation (cheaper; snapshots and faults whole),
    # which must itself check clean.
    base = tempfile.mkdtemp(prefix="tp-chaos-self-")
    try:
        selftest_copy(out, base)
        c = Checker(base, quick=True)
        c.run()
        if c.v:
            print("selftest: the shortened run does not check clean: %s"
                  % c.v[:3])
            return 1
        return selftest_cases(base, cases)
    finally:
        shutil.rmtree(base)


SELFTEST_SPAN = 30e9


def selftest_copy(out, d):
    """Copies the run's files to d, each history cut SELFTEST_SPAN after
    its first operation: lines that began later are left out, but for
    the H lines (quiesce) and the starts of puts, deletes and unpins
    (S, T) within 10 s more, so that a kept get never lacks the put it
    read or the unpin under way beside it (a start without its end only
    loosens the checks)."""
    hs = [f for f in os.listdir(out) if f.startswith("hist-")]
    first = None
    for f in hs:
        with open(os.path.join(out, f)) as fh:
            for l in fh:
                x = l.split()
                if len(x) > 1 and x[1].isdigit():
                    t = int(x[1])
                    first = t if first is None else min(first, t)
                    break
    cut = (first or 0) + SELFTEST_SPAN
    for f in os.listdir(out):
        if f.endswith(".jsonl"):
            shutil.copy(os.path.join(out, f), d)
    for f in hs:
        with open(os.path.join(out, f)) as src, \
                open(os.path.join(d, f), "w") as dst:
            for l in src:
                x = l.split()
                if not x or not x[1].isdigit():
                    continue
                t = int(x[1])
                if x[0] == "H" or t < cut or \
                        (x[0] in ("S", "T") and t < cut + 10e9):
                    dst.write(l)


def selftest_cases(base, cases):
    failed = 0
    for name, mut, want in cases:
        d = tempfile.mkdtemp(prefix="tp-chaos-self-")
        try:
            for f in os.listdir(base):
                shutil.copy(os.path.join(base, f), d)
            if not mut(d):
                print("selftest %s: nothing to corrupt in this run" % name)
                continue
            c = Checker(d, quick=True)
            c.run()
            caught = any(want in k for k, _ in c.v)
            print("selftest %s: %s" % (name, "caught" if caught else
                                       "NOT CAUGHT"))
            failed += not caught
        finally:
            shutil.rmtree(d)
    return 1 if failed else 0


def cmd_run(args):
    if os.geteuid() != 0:
        print("chaos: SKIP: needs root for network namespaces")
        return 77
    for tool in ("ip", "iptables", "nsenter", "mount") + \
            (("etcd",) if args.etcd else ()):
        if not shutil.which(tool):
            print("chaos: SKIP: %s not found" % tool)
            return 77
    for b in ("memd/memd", "poolctl/poolctl", "tests/chaos/chaos_client"):
        if not os.access(os.path.join(args.build, b), os.X_OK):
            print("chaos: %s not built in %s" % (b, args.build))
            return 2
    out = args.out or tempfile.mkdtemp(prefix="tp-chaos-")
    os.makedirs(out, exist_ok=True)
    log("seed %d duration %ds out %s (reproduce: %s run --seed %d "
        "--duration %d)" % (args.seed, args.duration, out, sys.argv[0],
                            args.seed, args.duration))
    cl = Cluster(args, out)

    def on_term(sig, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, on_term)
    stop_ev = threading.Event()
    rec = Recorder(out)
    t_start = time.time()
    try:
        try:
            cl.setup()
        except RuntimeError as e:
            if "ip netns add" in str(e) or "iptables" in str(e) or \
                    "mount" in str(e):
                print("chaos: SKIP: namespaces, veth, bridge, iptables or "
                      "tmpfs unavailable: %s" % e)
                return 77
            raise
        sch = Scheduler(cl, rec, args.seed)
        th = threading.Thread(target=poller,
                              args=(cl, rec, stop_ev, sch.busy),
                              daemon=True)
        th.start()
        scheds = [sch]
        # --corrupt-client: the spoiled operations happen in the first
        # seconds, before any fault (a resurrected KV key is only a
        # violation where no donor fault explains it)
        quiet = 10 if args.corrupt_client else 0
        if args.overlap:
            # a second stream of faults beside the first
            scheds.append(Scheduler(cl, rec, args.seed * 7919 + 1,
                                    sch.busy))
            th2 = threading.Thread(target=scheds[1].run,
                                   args=(args.duration, quiet), daemon=True)
            th2.start()
        sch.run(args.duration, quiet)
        if args.overlap:
            th2.join()
        stop_ev.set()
        th.join()
        quiesce(cl, rec, sch.busy)
    except KeyboardInterrupt:
        log("interrupted")
        return 2
    finally:
        stop_ev.set()
        cl.teardown()
    log("ran %.0fs, faults %s" % (time.time() - t_start,
                                   dict(sum((x.counts for x in scheds),
                                            collections.Counter()))))
    rc = check(out, args.corrupt_client)
    if rc == 0 and not args.no_selftest:
        rc = selftest(out)
    if rc == 0 and not args.keep:
        shutil.rmtree(out)
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sp = ap.add_subparsers(dest="cmd", required=True)
    r = sp.add_parser("run")
    r.add_argument("--seed", type=int, default=None)
    r.add_argument("--duration", type=int, default=150)
    r.add_argument("--out")
    r.add_argument("--build", default=os.environ.get("TP_BUILD_DIR",
                                                     "build/debug"))
    r.add_argument("--keep", action="store_true",
                   help="keep the run's directory when it passes")
    r.add_argument("--no-selftest", action="store_true")
    r.add_argument("--overlap", action="store_true",
                   help="two fault streams at once, never on one target")
    r.add_argument("--only", type=lambda x: x.split(","), default=None,
                   help="inject only these fault kinds (comma-separated), "
                   "to narrow a failure down")
    r.add_argument("--etcd", action="store_true",
                   help="two registries on one etcd (one leads), with "
                   "the faults pause_leader and etcd_tamper")
    r.add_argument("--corrupt-client", action="store_true",
                   help="client c1 spoils one read: exit 0 only if that "
                   "is caught and nothing else is wrong")
    c = sp.add_parser("check")
    c.add_argument("dir", nargs="+")
    s = sp.add_parser("selftest")
    s.add_argument("dir")
    args = ap.parse_args()
    if args.cmd == "run":
        known = set(FAULT_WEIGHTS) | set(ETCD_FAULT_WEIGHTS)
        bad = set(args.only or ()) - known
        if bad:
            ap.error("--only: unknown fault kind(s) %s; known: %s" %
                     (",".join(sorted(bad)), ",".join(sorted(known))))
        if not args.etcd and set(args.only or ()) & set(ETCD_FAULT_WEIGHTS):
            ap.error("--only: %s need --etcd" %
                     ",".join(sorted(set(args.only) &
                                     set(ETCD_FAULT_WEIGHTS))))
        if args.seed is None:
            args.seed = int.from_bytes(os.urandom(4), "little")
        return cmd_run(args)
    if args.cmd == "check":
        return check(args.dir[0]) if len(args.dir) == 1 else \
            check_many(args.dir)
    return selftest(args.dir)


if __name__ == "__main__":
    sys.exit(main())
