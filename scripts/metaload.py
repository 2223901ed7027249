#!/usr/bin/env python3
"""One process's load for the metadata benchmarks (bench-meta-mount.sh,
bench-cpu-floor.sh): it creates empty files in a directory, or unlinks
them, and prints how many.

    metaload.py create DIR SECS [MOST]   open O_CREAT and close f0, f1, ...
                                          for SECS seconds (at most MOST
                                          files, checked every 50)
    metaload.py unlink DIR                unlink every file DIR holds
"""
import os
import sys
import time


def create(d, secs, most):
    os.makedirs(d, exist_ok=True)
    end, n = time.time() + secs, 0
    while time.time() < end and n < most:
        for _ in range(50):
            os.close(os.open(f"{d}/f{n}", os.O_CREAT | os.O_WRONLY, 0o644))
            n += 1
    return n


def unlink(d):
    names = os.listdir(d)
    for n in names:
        os.unlink(f"{d}/{n}")
    return len(names)


if __name__ == "__main__":
    mode, d = sys.argv[1], sys.argv[2]
    if mode == "create":
        most = int(sys.argv[4]) if len(sys.argv) > 4 else 1 << 62
        print(create(d, float(sys.argv[3]), most))
    elif mode == "unlink":
        print(unlink(d))
    else:
        sys.exit(f"metaload.py: unknown mode {mode!r} (create or unlink)")
