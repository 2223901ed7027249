//go:build !weft_nocheck

package checks

// Off is false: every check runs (see the package doc).
const Off = false
