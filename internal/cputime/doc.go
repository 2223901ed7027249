// Package cputime reads the CPU time (user and system) this process has
// used, for benchmarks and measuring tools that report CPU per operation
// beside their rates: on a shared, noisy machine CPU per operation varies
// less than latency does.
//
// Invariants: Self never fails; where getrusage(2) does, it returns 0, so a
// difference of two readings is at worst meaningless, never an error.
package cputime
