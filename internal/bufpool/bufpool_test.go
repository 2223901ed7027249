package bufpool

import "testing"

func TestClasses(t *testing.T) {
	p := New(4096, 1<<20)
	for _, tc := range []struct{ n, cap int }{
		{100, 100},             // below Min: exact
		{4096, 4096},           // Min
		{4097, 8192},           // rounded up
		{1 << 20, 1 << 20},     // Max
		{1<<20 + 1, 1<<20 + 1}, // above Max: exact
	} {
		b := p.Get(tc.n)
		if len(b) != tc.n || cap(b) != tc.cap {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", tc.n, len(b), cap(b), tc.n, tc.cap)
		}
	}
}

func TestPutRecycles(t *testing.T) {
	p := New(4096, 1<<20)
	b := p.Get(5000)
	b[0] = 42
	p.Put(b)
	// sync.Pool may drop the buffer at any time; whatever comes back must
	// still have the class's capacity and the asked length.
	c := p.Get(6000)
	if len(c) != 6000 || cap(c) != 8192 {
		t.Fatalf("Get after Put: len %d cap %d", len(c), cap(c))
	}
	p.Put(make([]byte, 3000)) // not from the pool: ignored, no panic
	p.Put(make([]byte, 1<<21))
	p.Put(make([]byte, 5000))
}

func TestNewRejectsBadRange(t *testing.T) {
	for _, r := range [][2]int{{0, 8}, {8, 4}, {6, 8}, {8, 12}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%d, %d) accepted", r[0], r[1])
				}
			}()
			New(r[0], r[1])
		}()
	}
}
