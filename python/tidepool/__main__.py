"""python -m tidepool status [--addr A] [--tenant T] [--secret-file F] [--json]

Prints what a session sees of the pool (Pool.status()): the address, the
session kind, every memd's capacity, free and leased memory and sessions
(a donor that cannot be asked shows as down, with why), the session's
counters, the donors its KV handle knows and the GPU backends usable
here. Exit status: 0, 1 when the pool cannot be reached
(the error on stderr), 64 for bad usage.
"""
import argparse
import json
import sys

import tidepool


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tidepool",
        description="tidepool from Python: the pool as a session sees it")
    sub = ap.add_subparsers(dest="cmd")
    st = sub.add_parser("status", help="print the pool's state")
    st.add_argument("--addr", help="memd or registry (LIBPOOL_ADDR)")
    st.add_argument("--tenant", help="tenant (LIBPOOL_TENANT)")
    st.add_argument("--secret-file", help="tenant secret "
                    "(LIBPOOL_SECRET_FILE)")
    st.add_argument("--json", action="store_true", help="one JSON object")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 64 if e.code else 0
    if args.cmd != "status":
        ap.print_usage(sys.stderr)
        return 64
    try:
        with tidepool.Pool(args.addr, args.tenant,
                           args.secret_file) as pool:
            s = pool.status()
    except (tidepool.PoolError, ValueError) as e:
        print(f"tidepool: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(s, indent=2, sort_keys=True))
        return 0
    ses, kv = s["session"], s["kv"]
    print(f"pool      {s['addr']} ({s['kind']}"
          + (f", tenant {s['tenant']})" if s["tenant"] else ")"))
    print(f"capacity  {_human(s['capacity_bytes'])}, "
          f"{_human(s['free_bytes'])} free, "
          f"{_human(s['leased_bytes'])} leased")
    print(f"{'memd':<12} {'addr':<22} {'state':<9} {'donated':>10} "
          f"{'free':>10} {'leased':>10} {'sessions':>8}")
    for m in s["memds"]:
        name = m["name"] or "-"
        if m["err"]:
            print(f"{name:<12} {m['addr']:<22} {'down':<9} {m['error']}")
            continue
        state = "draining" if m["draining"] else "up"
        print(f"{name:<12} {m['addr']:<22} {state:<9} "
              f"{_human(m['donated_bytes']):>10} "
              f"{_human(m['slabs_free'] * m['slab_bytes']):>10} "
              f"{_human(m['slabs_leased'] * m['slab_bytes']):>10} "
              f"{m['sessions']:>8}")
    print(f"session   {ses['slabs_held']} slabs held "
          f"({_human(ses['slabs_held'] * ses['slab_bytes'])}), "
          f"{ses['regions']} regions, {ses['heartbeats']} heartbeats")
    if "error" in kv:
        print(f"kv        unavailable: {kv['error']}")
    else:
        print(f"kv        {kv['ndonors']} donor(s) serve this tenant's "
              "KV tier")
    gpus = ", ".join(f"{b}: {n} device(s)" if n > 0
                     else f"{b}: {tidepool.strerror(n)}"
                     for b, n in s["gpu"].items())
    print(f"gpu       {gpus}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
