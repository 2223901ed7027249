package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weft-fs/weft/meta/metarpc"
)

// MemberFile is the name of the file in a replicated member's data
// directory that says which member of which group the directory belongs
// to. It is written at the member's first start and checked at every
// later one, so that a directory is never served by another member id,
// or with another peer list, than the one it was made for.
const MemberFile = "WEFT-MEMBER"

// memberVersion is the format of MemberFile (JSON).
const memberVersion = 1

// ErrWrongMember is wrapped by the error of Run for a data directory made
// for another member, another group, or a single server.
var ErrWrongMember = errors.New("meta: data directory of another member")

type memberRecord struct {
	Version int               `json:"version"`
	ID      uint64            `json:"id"`
	Peers   map[string]string `json:"peers"` // id → address
}

// Peers is a replicated group's members: id → address.
type Peers map[uint64]string

// ParsePeers parses "1=h1:7400,2=h2:7400,3=h3:7400". Ids are 1 to 65535
// and distinct; every member has an address; addresses are distinct.
func ParsePeers(s string) (Peers, error) {
	p := Peers{}
	addrs := map[string]uint64{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(v) == "" {
			return nil, fmt.Errorf("meta: peer %q: want ID=HOST:PORT", part)
		}
		id, err := strconv.ParseUint(strings.TrimSpace(k), 10, 64)
		if err != nil || id == 0 || id >= 1<<16 {
			return nil, fmt.Errorf("meta: peer %q: the id must be a number from 1 to 65535", part)
		}
		v = strings.TrimSpace(v)
		if _, dup := p[id]; dup {
			return nil, fmt.Errorf("meta: peers %q: member id %d appears twice", s, id)
		}
		if other, dup := addrs[v]; dup {
			return nil, fmt.Errorf("meta: peers %q: members %d and %d have the same address %s", s, other, id, v)
		}
		p[id], addrs[v] = v, id
	}
	if len(p) == 0 {
		return nil, fmt.Errorf("meta: peers %q: no members", s)
	}
	return p, nil
}

// IDs returns the member ids in order.
func (p Peers) IDs() []uint64 { return slices.Sorted(maps.Keys(p)) }

// String is the canonical form ParsePeers reads.
func (p Peers) String() string {
	var b strings.Builder
	for i, id := range p.IDs() {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d=%s", id, p[id])
	}
	return b.String()
}

// checkMemberDir checks that dir may be served as member id of peers: its
// MemberFile names the same member and peers, or, if it has none, the
// directory is empty (a first start). It changes nothing; fresh reports a
// first start.
func checkMemberDir(dir string, id uint64, peers Peers) (fresh bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, MemberFile))
	if errors.Is(err, os.ErrNotExist) {
		names, rerr := os.ReadDir(dir)
		if rerr != nil {
			return false, fmt.Errorf("meta: data directory: %w", rerr)
		}
		for _, n := range names {
			if n.Name() != "lost+found" {
				return false, fmt.Errorf("%w: %s holds %q but no %s: it is not a member's directory (a single server's store cannot join a group; start members on empty directories)",
					ErrWrongMember, dir, n.Name(), MemberFile)
			}
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("meta: %w", err)
	}
	var rec memberRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return false, fmt.Errorf("meta: %s: %v: %w", filepath.Join(dir, MemberFile), err, ErrWrongMember)
	}
	if rec.Version != memberVersion {
		return false, fmt.Errorf("meta: %s: format version %d, want %d", filepath.Join(dir, MemberFile), rec.Version, memberVersion)
	}
	if rec.ID != id {
		return false, fmt.Errorf("%w: %s belongs to member %d, not %d (check --id and --data)", ErrWrongMember, dir, rec.ID, id)
	}
	had := Peers{}
	for k, v := range rec.Peers {
		n, err := strconv.ParseUint(k, 10, 64)
		if err != nil {
			return false, fmt.Errorf("meta: %s: bad member id %q: %w", filepath.Join(dir, MemberFile), k, ErrWrongMember)
		}
		had[n] = v
	}
	if !maps.Equal(had, peers) {
		return false, fmt.Errorf("%w: %s was made for the group %s, not %s (changing members is done with the group running, not by editing --peers)",
			ErrWrongMember, dir, had, peers)
	}
	return false, nil
}

// checkSingleDir refuses to serve a member's data directory as a single
// server: a member's store has no write-ahead log (it is caught up from
// the raft log beside it, DataDir/raft), so after a crash it lacks the
// entries since its last flush, which only the raft log holds; a single
// server would serve that older state as if it were whole.
func checkSingleDir(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, MemberFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	var rec memberRecord
	who := "a member of a replicated group"
	if json.Unmarshal(b, &rec) == nil && rec.ID != 0 {
		who = fmt.Sprintf("member %d of a replicated group", rec.ID)
	}
	return fmt.Errorf("%w: %s is the data directory of %s (%s in it): start it with its --id and --peers; "+
		"a member's store cannot be served by a single server (its latest changes may be only in its raft log)",
		ErrWrongMember, dir, who, MemberFile)
}

// writeMemberFile records, atomically and durably, that dir is member id
// of peers.
func writeMemberFile(dir string, id uint64, peers Peers) error {
	rec := memberRecord{Version: memberVersion, ID: id, Peers: map[string]string{}}
	for k, v := range peers {
		rec.Peers[strconv.FormatUint(k, 10)] = v
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	tmp := filepath.Join(dir, MemberFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, MemberFile))
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(dir); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("meta: write %s: %w", MemberFile, err)
	}
	return nil
}

// checkPeers asks every other member that answers (within a short
// timeout; one that is not running yet is skipped: it checks this one
// when it starts) what group it is in, and refuses a peer list that
// disagrees with any of theirs, or a store of another file system than
// theirs (fsid "" skips that check: a new member learns the fsid from the
// group).
func checkPeers(ctx context.Context, ask func(ctx context.Context, addr string) (metarpc.Membership, error), id uint64, peers Peers, fsid string) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for pid, addr := range peers {
		if pid == id {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := ask(ctx, addr)
			if err != nil || m.ID == 0 {
				return // not running (yet), or not a member: nothing to compare
			}
			theirs := Peers{}
			for _, x := range m.Members {
				theirs[x.ID] = x.Addr
			}
			var bad error
			switch {
			case m.ID != pid:
				bad = fmt.Errorf("meta: %s answers as member %d, but --peers names it member %d: %w", addr, m.ID, pid, ErrWrongMember)
			case !maps.Equal(theirs, peers):
				bad = fmt.Errorf("meta: member %d at %s has the peer list %s, this one %s: every member must be given the same list: %w",
					pid, addr, theirs, peers, ErrWrongMember)
			case fsid != "" && m.FSID != "" && m.FSID != fsid:
				bad = fmt.Errorf("%w: this store belongs to file system %s, member %d at %s to %s", ErrForeignStore, fsid, pid, addr, m.FSID)
			}
			if bad != nil {
				mu.Lock()
				errs = append(errs, bad)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
