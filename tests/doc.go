// Package tests holds weft's integration tests: each starts real `weft`
// processes (meta, storage, mount) through internal/testcluster and drives a
// real FUSE mount with system calls, external tools (pjdfstest, fsx) and
// helper processes, as users and applications would.
//
// The tests need root, /dev/fuse and fusermount3; pjdfstest and fsx come
// from scripts/install-deps.sh. A missing prerequisite fails the test with
// a message saying so; nothing is skipped.
//
// The test binary doubles as a helper process (see helper_test.go): tests
// re-execute it with WEFT_IT_HELPER set to run a step as another user or as
// one of several concurrent writers. The lock tests (locks_test.go) drive
// Python processes instead (testdata/locker.py, testdata/sqlite_writer.py):
// fcntl locks belong to processes, and python3 with its sqlite3 module
// (scripts/install-deps.sh) gives every lock call and SQLite directly.
package tests
