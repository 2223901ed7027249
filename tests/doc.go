// Package tests holds weft's integration tests: each starts real `weft`
// processes (meta, storage, mount) through internal/testcluster and drives a
// real FUSE mount with system calls, external tools (pjdfstest, fsx) and
// helper processes, as users and applications would.
//
// The tests need root, /dev/fuse and fusermount3; pjdfstest and fsx come
// from scripts/install-deps.sh. A missing prerequisite fails the test with
// a message saying so; nothing is skipped.
//
// No test asserts how long anything took, so a loaded machine (a load
// average of 10 on 2 cores) slows the suite down but does not fail it:
// tests wait for conditions, log durations and rates (fsx's ops/s, create
// rates, how long a failing call took to fail), and bound every wait only
// by hangGuard (helper_test.go), which turns a hang into a failure that
// says what hung. External tools (fsx, pjdfstest) run without a time limit
// of their own and fail a test only on an error they report.
//
// The test binary doubles as a helper process (see helper_test.go): tests
// re-execute it with WEFT_IT_HELPER set to run a step as another user or as
// one of several concurrent writers. The lock tests (locks_test.go) drive
// Python processes instead (testdata/locker.py, testdata/sqlite_writer.py):
// fcntl locks belong to processes, and python3 with its sqlite3 module
// (scripts/install-deps.sh) gives every lock call and SQLite directly.
package tests
