// Package vfs is the small filesystem interface that storage targets are
// written against, modelled on pebble's vfs: the same target code runs on the
// real disk (Default), in memory (NewMem, for fast unit tests) and on an
// error-injecting wrapper (NewFaulty) that makes chosen operations on chosen
// paths fail with an errno such as ENOSPC or EIO, or corrupts bytes read.
//
// The interface holds only what a target needs: positional reads and writes
// (ReadAt/WriteAt, so one File is safe for concurrent use), Truncate, Sync,
// directory creation and listing, Remove, Rename and a Statfs-like Usage.
//
// Invariants:
//   - Errors keep their syscall.Errno: errors.Is(err, syscall.ENOSPC) holds
//     whichever implementation produced it (the OS one wraps *os.PathError,
//     the others return wrapped errnos), and a missing file matches
//     os.ErrNotExist (syscall.ENOENT).
//   - ReadAt past the end of a file returns the bytes there are and io.EOF,
//     like os.File.
//   - The in-memory FS behaves like a page cache that never loses anything:
//     Sync is a no-op. It models a process kill (the kernel keeps written
//     data), not power loss.
//   - NextData skips a file's holes where the implementation can tell (a
//     real file, through lseek SEEK_DATA/SEEK_HOLE) and otherwise reports
//     all of the file as data: it may over-report data, never miss any.
//   - Implementations hold no package-level state.
package vfs
