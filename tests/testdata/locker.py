#!/usr/bin/env python3
"""A process that holds file locks for tests/locks_test.go.

fcntl locks belong to a process (POSIX) or to an open file description
(OFD, flock), so each lock holder in the tests is a process of its own,
driven line by line on stdin. Every command answers one line on stdout:
"ok", an errno name (EAGAIN, EINTR, ...), or what the command reports.

  open PATH            open PATH read-write (created if missing); it becomes current
  openappend PATH      open PATH write-only with O_APPEND (created if missing); it becomes current
  records N SIZE TAG   N writes to the current descriptor of SIZE-byte records "TAG:k", dot-padded
  dup                  dup the current descriptor; the copy becomes current
  close                close the current descriptor; the one before becomes current
  flock sh|ex|un nb|w  flock(2), non-blocking or waiting
  posix rd|wr|un START LEN nb|w    fcntl F_SETLK / F_SETLKW (LEN 0: to EOF)
  ofd   rd|wr|un START LEN nb|w    fcntl F_OFD_SETLK / F_OFD_SETLKW
  getlk posix|ofd rd|wr START LEN  F_GETLK / F_OFD_GETLK: "unlck" or "TYPE START LEN PID"
  pid                  this process's pid
  loop N               N times F_SETLK of a write lock on the whole file and its unlock; "ok SECONDS"
  append N SIZE TAG PATH  N O_APPEND writes to PATH of SIZE-byte records "TAG:k", dot-padded

A waiting lock ends with EINTR when the process gets SIGUSR1 (whose handler
raises, so Python does not restart the system call).
"""
import errno
import fcntl
import os
import signal
import struct
import sys
import time


class Interrupted(Exception):
    pass


def on_usr1(signum, frame):
    raise Interrupted()


signal.signal(signal.SIGUSR1, on_usr1)

TYPES = {"rd": fcntl.F_RDLCK, "wr": fcntl.F_WRLCK, "un": fcntl.F_UNLCK}
NAMES = {fcntl.F_RDLCK: "rd", fcntl.F_WRLCK: "wr", fcntl.F_UNLCK: "unlck"}
# struct flock on x86-64 and arm64: short type, short whence, off_t start,
# off_t len, pid_t pid (padded).
FLOCK = "hhqqi4x"


def lockcmd(fd, cmd, typ, start, length):
    arg = struct.pack(FLOCK, typ, os.SEEK_SET, start, length, 0)
    return struct.unpack(FLOCK, fcntl.fcntl(fd, cmd, arg))


def run(fds, words):
    """Runs one command on the descriptor stack fds; returns the answer."""
    op = words[0]
    if op == "open":
        fds.append(os.open(words[1], os.O_RDWR | os.O_CREAT, 0o644))
        return "ok"
    if op == "openappend":
        fds.append(os.open(words[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        return "ok"
    if op == "pid":
        return str(os.getpid())
    if op == "append":
        n, size, tag = int(words[1]), int(words[2]), words[3]
        with open(words[4], "ab", buffering=0) as f:
            for k in range(n):
                rec = ("%s:%d" % (tag, k)).encode().ljust(size - 1, b".") + b"\n"
                if f.write(rec) != len(rec):
                    return "short"
        return "ok"
    fd = fds[-1]
    if op == "records":
        n, size, tag = int(words[1]), int(words[2]), words[3]
        for k in range(n):
            rec = ("%s:%d" % (tag, k)).encode().ljust(size - 1, b".") + b"\n"
            if os.write(fd, rec) != len(rec):
                return "short"
        return "ok"
    if op == "loop":
        t = time.monotonic()
        for _ in range(int(words[1])):
            lockcmd(fd, fcntl.F_SETLK, fcntl.F_WRLCK, 0, 0)
            lockcmd(fd, fcntl.F_SETLK, fcntl.F_UNLCK, 0, 0)
        return "ok %.6f" % (time.monotonic() - t)
    if op == "dup":
        fds.append(os.dup(fd))
        return "ok"
    if op == "close":
        os.close(fds.pop())
        return "ok"
    if op == "flock":
        how = {"sh": fcntl.LOCK_SH, "ex": fcntl.LOCK_EX, "un": fcntl.LOCK_UN}[words[1]]
        if words[2] == "nb":
            how |= fcntl.LOCK_NB
        fcntl.flock(fd, how)
        return "ok"
    if op in ("posix", "ofd"):
        nb = words[4] == "nb"
        if op == "posix":
            cmd = fcntl.F_SETLK if nb else fcntl.F_SETLKW
        else:
            cmd = fcntl.F_OFD_SETLK if nb else fcntl.F_OFD_SETLKW
        lockcmd(fd, cmd, TYPES[words[1]], int(words[2]), int(words[3]))
        return "ok"
    if op == "getlk":
        cmd = fcntl.F_GETLK if words[1] == "posix" else fcntl.F_OFD_GETLK
        typ, _, start, length, pid = lockcmd(fd, cmd, TYPES[words[2]], int(words[3]), int(words[4]))
        if typ == fcntl.F_UNLCK:
            return "unlck"
        return "%s %d %d %d" % (NAMES[typ], start, length, pid)
    return "unknown command"


def main():
    fds = []
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        try:
            out = run(fds, words)
        except Interrupted:
            out = "EINTR"
        except OSError as e:
            out = errno.errorcode.get(e.errno, str(e.errno))
        print(out, flush=True)


if __name__ == "__main__":
    main()
