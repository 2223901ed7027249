//go:build weft_nocheck

package checks

// Off is true: a benchmark build without per-request checks (see the
// package doc). Never serve real data with it.
const Off = true
