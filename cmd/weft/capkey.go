package main

import (
	"encoding/hex"
	"fmt"
	"os"

	"github.com/weft-fs/weft/capability"
)

// testCapabilityKey is a STOPGAP until helper AUTH's key bundles land (the
// lead replaces it with keys.CapabilityKey() at the merge): the capability
// key shared by meta and storage, hex in WEFT_TEST_CAPABILITY_KEY, which
// internal/testcluster sets. Unset: nil (meta issues no capabilities;
// storage refuses clients' data requests once peers authenticate).
func testCapabilityKey() ([]byte, error) {
	s := os.Getenv("WEFT_TEST_CAPABILITY_KEY")
	if s == "" {
		return nil, nil
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != capability.KeySize {
		return nil, fmt.Errorf("WEFT_TEST_CAPABILITY_KEY: want %d bytes in hex", capability.KeySize)
	}
	return b, nil
}
