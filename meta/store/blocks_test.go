package store

import (
	"crypto/rand"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestCopiesShareBlocks checks that small files' copies written one after
// another share data blocks: 256 records of 3,901 bytes (mdtest-hard's
// file size) under consecutive copy keys make about 32 blocks of 32 KiB,
// where pebble's default 4 KiB blocks made one a record.
func TestCopiesShareBlocks(t *testing.T) {
	p, err := OpenPebble(t.TempDir(), PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const records = 256
	b := p.NewBatch()
	for ino := uint64(1); ino <= records; ino++ {
		v := make([]byte, 3901)
		_, _ = rand.Read(v) // incompressible, as most files are
		b.Set(AppendCopyKey(nil, ino), v)
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	levels, err := p.db.SSTables(pebble.WithProperties())
	if err != nil {
		t.Fatal(err)
	}
	var tables, blocks uint64
	for _, l := range levels {
		for _, tb := range l {
			tables++
			blocks += tb.Properties.NumDataBlocks
		}
	}
	if tables == 0 {
		t.Fatal("no table after the flush")
	}
	// 256 × 3.9 KiB = 975 KiB: 30-31 blocks of 32 KiB, rounded up per
	// table; 256 with 4 KiB blocks.
	if blocks == 0 || blocks > records/6 {
		t.Errorf("%d copies of 3,901 bytes in %d data blocks (%d tables): want several copies a block", records, blocks, tables)
	}
}
