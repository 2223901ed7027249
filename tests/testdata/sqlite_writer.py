#!/usr/bin/env python3
"""One SQLite writer for tests/locks_test.go.

  sqlite_writer.py DB init            create table t(writer, k, primary key (writer, k))
  sqlite_writer.py DB write W N       N transactions, each inserting (W, k) and bumping a counter
  sqlite_writer.py DB check           print "ROWS COUNTER INTEGRITY"

Writers on different mounts serialize on SQLite's own fcntl locks, which
weft must enforce across mounts; a lost lock shows up as missing rows, a
counter that disagrees with the rows, or a malformed database.
"""
import sqlite3
import sys


def main():
    db, op = sys.argv[1], sys.argv[2]
    con = sqlite3.connect(db, timeout=600, isolation_level=None)
    if op == "init":
        con.execute("create table t(writer integer, k integer, primary key (writer, k))")
        con.execute("create table c(n integer)")
        con.execute("insert into c values (0)")
    elif op == "write":
        w, n = int(sys.argv[3]), int(sys.argv[4])
        for k in range(n):
            con.execute("begin immediate")
            # Read-modify-write: a writer that saw a stale page would
            # lose another writer's increment.
            (c,) = con.execute("select n from c").fetchone()
            con.execute("insert into t values (?, ?)", (w, k))
            con.execute("update c set n = ?", (c + 1,))
            con.execute("commit")
    elif op == "check":
        (rows,) = con.execute("select count(*) from t").fetchone()
        (n,) = con.execute("select n from c").fetchone()
        (ok,) = con.execute("pragma integrity_check").fetchone()
        print(rows, n, ok)
        return
    print("ok")


if __name__ == "__main__":
    main()
