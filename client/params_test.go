package client

import (
	"context"
	"sync"
	"testing"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
)

// paramMeta is a metadata service that only lists parameters.
type paramMeta struct {
	proto.MetaService
	mu sync.Mutex
	ps map[string]string
}

func (m *paramMeta) Params(context.Context) ([]metarpc.Param, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []metarpc.Param
	for k, v := range m.ps {
		out = append(out, metarpc.Param{Name: k, Value: v})
	}
	return out, nil
}

// limitStorage records the in-flight bound it was given.
type limitStorage struct {
	proto.StorageService
	limit int
}

func (s *limitStorage) SetInflightLimit(n int) { s.limit = n }

// TestApplyParams: client.write_behind sets the mount's buffer budget (and
// the per-file share), client.rpcs_in_flight the storage client's bound
// per server, through the resolving wrapper New puts around it; auto
// gives back --cache-limit and no bound.
func TestApplyParams(t *testing.T) {
	meta := &paramMeta{ps: map[string]string{"client.write_behind": "4MiB", "client.rpcs_in_flight": "3"}}
	ls := &limitStorage{}
	c := NewWithServices(meta, &resolvingStorage{StorageService: ls}, Config{CacheLimit: 256 << 20})
	defer c.Close()
	c.applyParams(context.Background())
	if got := c.WriteBehindLimit(); got != 4<<20 {
		t.Fatalf("write-behind limit %d after client.write_behind=4MiB", got)
	}
	if got := c.perFile.Load(); got != 4<<20 {
		t.Fatalf("per-file share %d", got)
	}
	if ls.limit != 3 {
		t.Fatalf("storage bound %d after client.rpcs_in_flight=3", ls.limit)
	}
	meta.mu.Lock()
	meta.ps = map[string]string{"client.write_behind": "auto", "client.rpcs_in_flight": "auto"}
	meta.mu.Unlock()
	c.applyParams(context.Background())
	if got := c.WriteBehindLimit(); got != 256<<20 {
		t.Fatalf("write-behind limit %d with auto, want --cache-limit's", got)
	}
	if got := c.perFile.Load(); got != maxFileInflight {
		t.Fatalf("per-file share %d with auto", got)
	}
	if ls.limit != 0 {
		t.Fatalf("storage bound %d with auto", ls.limit)
	}
}
