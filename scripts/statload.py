#!/usr/bin/env python3
"""The create-then-stat load of scripts/bench-lease-stat.sh and
scripts/bench-meta-stat.sh, through a mount:

    statload.py ROOT FILES PROCS HARD

PROCS processes create FILES files each (HARD "1": 3,901 bytes each, all in
one shared directory, as mdtest-hard; else empty, one directory per
process), the kernel's dentry and inode caches are dropped and its 1 s
timeouts waited out, then every file is stat'ed once. Prints
"CREATES/S STATS/S LEASES" (LEASES: the mount's user.weft.leases, or -).
Run as root (dropping the caches needs it).
"""
import os, sys, time
from multiprocessing import Process

root, files, procs, hard = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
data = b"x" * 3901 if hard else b""
if hard:
    os.mkdir(os.path.join(root, "shared"))

def path(i, j):
    if hard:
        return os.path.join(root, "shared", "r%d.f%d" % (i, j))
    return os.path.join(root, "d%d" % i, "f%d" % j)

def create(i):
    if not hard:
        os.mkdir(os.path.join(root, "d%d" % i))
    for j in range(files):
        with open(path(i, j), "wb") as f:
            f.write(data)

def stat(i):
    for j in range(files):
        if os.stat(path(i, j)).st_size != len(data):
            sys.exit("statload: wrong size")

def timed(fn):
    ps = [Process(target=fn, args=(i,)) for i in range(procs)]
    t = time.monotonic()
    for p in ps:
        p.start()
    for p in ps:
        p.join()
        if p.exitcode != 0:
            sys.exit("statload: a worker failed")
    return time.monotonic() - t

n = files * procs
c = timed(create)
with open("/proc/sys/vm/drop_caches", "w") as f:
    f.write("2\n")  # dentries and inodes: every stat is a LOOKUP again
time.sleep(2)  # past the mount's 1 s entry and attribute timeouts
s = timed(stat)
try:
    leases = os.getxattr(root, "user.weft.leases").decode()
except OSError:
    leases = "-"
print("%.0f %.0f %s" % (n / c, n / s, leases))
