package store

import (
	"bytes"
	"errors"
	"sync"

	"github.com/RaduBerinde/btreemap"
)

// Mem is an in-memory Store for unit tests. Sync is a no-op; everything is
// lost when the value is dropped.
type Mem struct {
	mu     sync.Mutex
	t      *btreemap.BTreeMap[[]byte, []byte]
	closed bool
	// Syncs counts Sync calls and synced commits, so tests can check group
	// commit.
	syncs int
	mark  *Mark
}

// NewMem returns an empty in-memory store.
func NewMem() *Mem {
	return &Mem{t: btreemap.New[[]byte, []byte](16, bytes.Compare)}
}

// Syncs returns how many times Sync or a synced Commit was called.
func (m *Mem) Syncs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.syncs
}

func (m *Mem) snapshot() (*btreemap.BTreeMap[[]byte, []byte], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	return m.t.Clone(), nil
}

// Get implements Reader.
func (m *Mem) Get(key []byte) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	return getTree(m.t, key)
}

// getTree returns a copy of key's value in t, or ErrNotFound.
func getTree(t *btreemap.BTreeMap[[]byte, []byte], key []byte) ([]byte, error) {
	_, v, ok := t.Get(key)
	if !ok {
		return nil, ErrNotFound
	}
	return append([]byte(nil), v...), nil
}

// Scan implements Reader. It iterates over a copy-on-write snapshot, so
// writers are not blocked.
func (m *Mem) Scan(lower, upper []byte, fn func(key, value []byte) bool) error {
	t, err := m.snapshot()
	if err != nil {
		return err
	}
	scanTree(t, lower, upper, fn)
	return nil
}

func scanTree(t *btreemap.BTreeMap[[]byte, []byte], lower, upper []byte, fn func(key, value []byte) bool) {
	hi := btreemap.Max[[]byte]()
	if upper != nil {
		hi = btreemap.LT(upper)
	}
	for k, v := range t.Ascend(btreemap.GE(lower), hi) {
		if !fn(k, v) {
			break
		}
	}
}

// View implements Store: a copy-on-write snapshot of the tree.
func (m *Mem) View() (View, error) {
	t, err := m.snapshot()
	if err != nil {
		return nil, err
	}
	return memView{t}, nil
}

type memView struct {
	t *btreemap.BTreeMap[[]byte, []byte]
}

func (v memView) Get(key []byte) ([]byte, error) { return getTree(v.t, key) }

func (v memView) Scan(lower, upper []byte, fn func(key, value []byte) bool) error {
	scanTree(v.t, lower, upper, fn)
	return nil
}

func (memView) Close() {}

// NewBatch implements Store.
func (m *Mem) NewBatch() Batch { return &memBatch{m: m} }

// Sync implements Store.
func (m *Mem) Sync() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.syncs++
	return nil
}

// Close implements Store.
func (m *Mem) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

type memOp struct {
	kind  byte // 's' set, 'd' delete, 'p' delete prefix
	key   []byte
	value []byte
}

type memBatch struct {
	m    *Mem
	ops  []memOp
	done bool
}

func (b *memBatch) Set(key, value []byte) {
	b.ops = append(b.ops, memOp{'s', bytes.Clone(key), bytes.Clone(value)})
}
func (b *memBatch) Delete(key []byte) { b.ops = append(b.ops, memOp{'d', bytes.Clone(key), nil}) }
func (b *memBatch) DeletePrefix(prefix []byte) {
	b.ops = append(b.ops, memOp{'p', bytes.Clone(prefix), nil})
}
func (b *memBatch) Len() int { return len(b.ops) }
func (b *memBatch) Close()   { b.done = true }

func (b *memBatch) Commit(sync bool) error {
	if b.done {
		return errors.New("store: batch reused")
	}
	b.done = true
	m := b.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	for _, op := range b.ops {
		switch op.kind {
		case 's':
			m.t.ReplaceOrInsert(op.key, op.value)
		case 'd':
			m.t.Delete(op.key)
		case 'p':
			var keys [][]byte
			hi := btreemap.Max[[]byte]()
			if end := PrefixEnd(op.key); end != nil {
				hi = btreemap.LT(end)
			}
			for k := range m.t.Ascend(btreemap.GE(op.key), hi) {
				keys = append(keys, k)
			}
			for _, k := range keys {
				m.t.Delete(k)
			}
		}
	}
	if sync {
		m.syncs++
	}
	return nil
}
