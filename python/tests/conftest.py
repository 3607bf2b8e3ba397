"""Fixtures of the tidepool Python tests: real memd processes on loopback.

- ``memd``: one standalone memd (512 MiB in 16 MiB slabs) for the session;
  ``memd.addr`` is "127.0.0.1:PORT".
- ``cluster``: a registry and two donors (deploy/local-pool.sh) with the
  tenant "demo"; ``cluster.addr``, ``cluster.tenant``,
  ``cluster.secret_file``, ``cluster.admin_secret``.
- ``pool_args``: parametrized over both, the keyword arguments of
  tidepool.Pool for each.

After each test the KV stores of the shared memds it used are emptied
(``_shared_stores_cleared``), so no test depends on what others left.

Helpers the test modules import: ``start_memd``/``stop``, ``kv_warmed``
(a tenant's KV store ready for the value sizes a module uses),
``threads_running``/``in_threads`` (worker threads whose errors fail the
test).

$TIDEPOOL_KEEP_LOGS=1 keeps the fixtures' directories (the memds' logs)
after the session and prints where they are, to look into a failure.

The binaries come from $TIDEPOOL_BUILD (a build tree, default
build/debug, then build/release) or else PATH (an installed tidepool). The
package is imported from python/ and the build tree's python/ unless
$TIDEPOOL_INSTALLED=1 (then the installed one is tested).
"""
import contextlib
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import types

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _build_dir():
    env = os.environ.get("TIDEPOOL_BUILD")
    if env:
        return os.path.abspath(os.path.join(ROOT, env))
    for cfg in ("debug", "release"):
        d = os.path.join(ROOT, "build", cfg)
        if os.path.exists(os.path.join(d, "memd", "memd")):
            return d
    return None


BUILD = _build_dir()
KEEP_LOGS = os.environ.get("TIDEPOOL_KEEP_LOGS") == "1"


def _remove_dir(d):
    """Removes a fixture's directory, or with $TIDEPOOL_KEEP_LOGS=1
    says where it stays."""
    if KEEP_LOGS:
        print(f"\ntidepool test logs kept in {d}", file=sys.stderr)
    else:
        shutil.rmtree(d, ignore_errors=True)
if os.environ.get("TIDEPOOL_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(ROOT, "python"))
    if BUILD:
        sys.path.insert(0, os.path.join(BUILD, "python"))


def _binary(name):
    if BUILD:
        p = os.path.join(BUILD, "memd", name)
        if os.access(p, os.X_OK):
            return p
    p = shutil.which(name)
    if not p:
        pytest.skip(f"no {name} binary: build tidepool or install it")
    return p


def start_memd(tmpdir, *extra, donate="512M", slab="16M"):
    """Starts a standalone memd on a free loopback port; returns
    (process, "127.0.0.1:PORT")."""
    ready = os.path.join(tmpdir, f"memd-{time.monotonic_ns()}.ready")
    log = open(os.path.join(tmpdir, "memd.log"), "ab")
    proc = subprocess.Popen(
        [_binary("memd"), "--listen", "127.0.0.1:0", "--donate", donate,
         "--slab-size", slab, "--hugepages", "no", "--ready-file", ready,
         *extra],
        stdout=log, stderr=log)
    for _ in range(300):
        if os.path.exists(ready) and os.path.getsize(ready) > 0:
            with open(ready) as f:
                return proc, f.read().strip()
        if proc.poll() is not None:
            raise RuntimeError(f"memd exited with {proc.returncode}; see "
                               f"{tmpdir}/memd.log")
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("memd not ready after 15 s")


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def poolctl_binary():
    """poolctl of the build under test, else the one on PATH."""
    if BUILD:
        p = os.path.join(BUILD, "poolctl", "poolctl")
        if os.access(p, os.X_OK):
            return p
    p = shutil.which("poolctl")
    if not p:
        pytest.skip("no poolctl binary: build tidepool or install it")
    return p


_TENANTS = {}


def cluster_tenant(cluster, name, quota):
    """Pool arguments of tenant name on the session's cluster, added
    there with quota (a poolctl size) the first time it is asked for.
    For a test whose values need more KV room than the demo tenant's
    share leaves: demo's 256 MiB quota is 16 slabs, 5 or 6 per memd,
    each size class in use holds a slab of its own, and a put of a
    class with no free block then evicts the small FIFO's oldest
    values, which can be the test's own (docs/kv.md, "Eviction")."""
    key = (cluster.addr, name)
    if key not in _TENANTS:
        secret = os.path.join(cluster.dir, f"tenant-{name}.secret")
        r = subprocess.run(
            [poolctl_binary(), "-a", cluster.addr, "-s",
             cluster.admin_secret, "tenant", "add", name, "--quota", quota,
             "--secret-out", secret], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        _TENANTS[key] = {"addr": cluster.addr, "tenant": name,
                         "secret_file": secret}
    return _TENANTS[key]


_KV_WARM = set()


def kv_warmed(args, sizes, deadline_s=20.0):
    """Returns the Pool arguments args once their KV store takes values
    of every size in sizes on every donor (checked once per address and
    sizes). A store may hold one slab per donor until the donor's report
    brings the tenant's KV allowance (docs/cluster.md, "KV memory and
    quotas"), so right after tenant-add the first puts of a new size
    class could get ENOSPC."""
    if (args["addr"], tuple(sizes)) in _KV_WARM:
        return args
    import tidepool
    with tidepool.Pool(**args) as p, p.kv() as k:
        end = time.monotonic() + deadline_s
        while True:
            vals = [bytearray(s) for s in sizes] * (24 // len(sizes))
            keys = [os.urandom(32) for _ in vals]
            st = k.put(keys, vals)
            k.delete(keys)
            if not any(st):
                break
            assert time.monotonic() < end, "no KV allowance: %s" % st
            time.sleep(0.2)
    _KV_WARM.add((args["addr"], tuple(sizes)))
    return args


@contextlib.contextmanager
def threads_running(fn, n, join_s=None):
    """Runs fn(0), ..., fn(n - 1), each in a thread of its own, while the
    with block runs; at its end joins them (join_s each; None: however
    long they take) and fails with whatever any of them raised."""
    errors = []

    def run(i):
        try:
            fn(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        for t in threads:
            t.join(join_s)
    assert not errors, errors


def in_threads(fn, n, join_s=None):
    """threads_running with nothing else to do meanwhile."""
    with threads_running(fn, n, join_s):
        pass


ENGINES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engines")


@pytest.fixture
def engines():
    """Puts the engines' stand-ins (python/tests/engines) first on
    sys.path for one test, so ``import vllm``, ``import sglang`` and
    ``import lmcache`` find them, and makes the connector modules import
    afresh (they subclass an engine's classes only when it is importable).
    Afterwards takes all of that off again and puts back the connector
    modules imported before (python/tests/engines/README.md). Yields the
    directory."""

    def ours(name):
        return (name.split(".")[0] in ("vllm", "sglang", "lmcache") or
                name.startswith("tidepool.connectors."))

    def drop():
        # the module, and the package's attribute naming it: "from
        # tidepool.connectors import vllm" reads the attribute
        for n in [n for n in sys.modules if ours(n)]:
            del sys.modules[n]
            pkg, _, attr = n.rpartition(".")
            if pkg == "tidepool.connectors" and pkg in sys.modules:
                sys.modules[pkg].__dict__.pop(attr, None)

    saved = {n: m for n, m in sys.modules.items() if ours(n)}
    drop()
    sys.path.insert(0, ENGINES)
    try:
        yield ENGINES
    finally:
        sys.path.remove(ENGINES)
        drop()
        sys.modules.update(saved)
        for n, m in saved.items():
            pkg, _, attr = n.rpartition(".")
            if pkg == "tidepool.connectors" and pkg in sys.modules:
                setattr(sys.modules[pkg], attr, m)


@pytest.fixture(scope="session")
def memd():
    tmp = tempfile.mkdtemp(prefix="tp-pytest-")
    proc, addr = start_memd(tmp)
    yield types.SimpleNamespace(addr=addr, proc=proc, dir=tmp)
    stop(proc)
    _remove_dir(tmp)


@pytest.fixture(scope="session")
def cluster():
    script = os.path.join(ROOT, "deploy", "local-pool.sh")
    memd_bin = _binary("memd")
    for attempt in range(20):
        base = random.randrange(20000, 40000)
        # files, not pipes: the detached memds inherit stdout and would
        # hold a pipe open forever
        with tempfile.TemporaryFile("w+") as out, \
                tempfile.TemporaryFile("w+") as err:
            r = subprocess.run(
                ["bash", script, "-n", "2", "-d", "256M", "-s", "16M",
                 "-p", str(base), "-m", memd_bin, "--detach"],
                stdout=out, stderr=err, stdin=subprocess.DEVNULL)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        if r.returncode == 0:
            break
        if "in use" not in stderr:
            raise RuntimeError(f"local-pool.sh failed: {stderr}")
    else:
        raise RuntimeError("no free ports for a local pool")
    m = re.search(r"local pool in (\S+)", stdout)
    d = m.group(1)
    yield types.SimpleNamespace(
        addr=f"127.0.0.1:{base}", tenant="demo",
        secret_file=os.path.join(d, "tenant-demo.secret"),
        admin_secret=os.path.join(d, "cluster.secret"), dir=d,
        donors=[f"127.0.0.1:{base + 1}", f"127.0.0.1:{base + 2}"])
    subprocess.run(["bash", script, "--stop", d], capture_output=True)
    _remove_dir(d)


@pytest.fixture(autouse=True)
def _shared_stores_cleared(request):
    """After each test, empties the KV stores of the session's shared
    memds that it used: the standalone memd's and, on the cluster,
    demo's and those of cluster_tenant's tenants. Their shares are a
    few 16 MiB slabs per memd (demo: 5 or 6), each class in use holding
    one; what earlier tests left there held slabs and filled the small
    FIFO, so whether a test's own values survived its puts depended on
    which tests ran before it (order, -k): S3-FIFO then evicts the
    small FIFO's oldest, often the test's own values not yet read
    (docs/kv.md, "Eviction"). Runs after the test's own fixtures have
    closed their handles (an autouse fixture is set up first)."""
    yield
    import tidepool
    names = request.fixturenames
    targets = []
    if "memd" in names:
        targets.append({"addr": request.getfixturevalue("memd").addr})
    if "cluster" in names:
        c = request.getfixturevalue("cluster")
        targets.append({"addr": c.addr, "tenant": c.tenant,
                        "secret_file": c.secret_file})
        targets += [t for (addr, _), t in _TENANTS.items()
                    if addr == c.addr]
    for t in targets:
        with tidepool.Pool(**t) as p, p.kv() as kv:
            kv.clear()


@pytest.fixture(params=["standalone", "cluster"])
def pool_args(request):
    """Keyword arguments of tidepool.Pool for a standalone memd and for
    a tenant of the 2-donor cluster."""
    if request.param == "standalone":
        return {"addr": request.getfixturevalue("memd").addr}
    c = request.getfixturevalue("cluster")
    return {"addr": c.addr, "tenant": c.tenant,
            "secret_file": c.secret_file}


@pytest.fixture
def model_name(request):
    """A model name unique to the test, so keys never collide."""
    return f"{request.node.name}-{os.getpid()}-{time.monotonic_ns()}"
