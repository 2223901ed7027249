// Package health judges a file system's status as the metadata service
// reports it (proto.ClusterStatus) and renders it as the report that
// `weft status --json` prints and the dashboard serves: what is up, what
// is down, and the list of problems that make the file system unhealthy.
//
// Invariant: Healthy is true exactly when Problems is empty; every target
// that is down, every storage server none of whose targets is up, a file
// system without targets and a replicated metadata group without a leader
// is a problem.
package health

import (
	"fmt"
	"slices"
	"strings"

	"github.com/weft-fs/weft/proto"
)

// Report is the judged status. Sizes are in bytes, durations in seconds.
type Report struct {
	FSID     string               `json:"fsid"`
	Healthy  bool                 `json:"healthy"`
	Problems []string             `json:"problems"`
	Meta     Meta                 `json:"meta"`
	Replica  *proto.ReplicaStatus `json:"replica,omitempty"`
	Servers  []Server             `json:"storage_servers"`
	Targets  []Target             `json:"targets"`
	Clients  []Client             `json:"clients"`
}

// Meta is the metadata server that answered.
type Meta struct {
	Addr     string  `json:"addr"`
	Version  string  `json:"version"`
	Uptime   float64 `json:"uptime_seconds"`
	Files    uint64  `json:"inodes"`
	Requests uint64  `json:"requests"`
}

// Server is one storage server: the targets it registered from one address.
type Server struct {
	Addr    string   `json:"addr"`
	Up      bool     `json:"up"`
	Targets []uint32 `json:"targets"`
}

// Target is one storage target: its space, objects and free inodes, the
// identity of the file system it lives on (targets with one Device share
// it), and the I/O it served since its server started.
type Target struct {
	ID        uint32           `json:"id"`
	Addr      string           `json:"addr"`
	Total     uint64           `json:"total"`
	Used      uint64           `json:"used"`
	Free      uint64           `json:"free"`
	Up        bool             `json:"up"`
	Objects   uint64           `json:"objects"`
	FilesFree uint64           `json:"files_free"`
	Device    string           `json:"device,omitempty"`
	IO        proto.IOCounters `json:"io"`
	// Domain is the failure domain: "domain NAME" or "server ADDR".
	Domain string `json:"domain"`
}

// TargetOf is t as reported (also the elements of the mount's
// user.weft.df attribute).
func TargetOf(t proto.TargetInfo) Target {
	return Target{ID: uint32(t.ID), Addr: t.Addr, Total: t.Total, Used: t.Used, Free: t.Free, Up: t.Up,
		Objects: t.Objects, FilesFree: t.FilesFree, Device: t.Device, IO: t.IO, Domain: t.FailureDomain()}
}

// Client is one mounted client's session.
type Client struct {
	Name      string  `json:"name"`
	Session   string  `json:"session"`
	Addr      string  `json:"addr"`
	Version   string  `json:"version"`
	Age       float64 `json:"age_seconds"`
	LeaseLeft float64 `json:"lease_left_seconds"`
	Handles   uint64  `json:"open_handles"`
}

// Judge builds the report of st, as answered by the metadata server at
// addr.
func Judge(addr string, st proto.ClusterStatus) Report {
	r := Report{
		FSID:    st.FSID,
		Meta:    Meta{Addr: addr, Version: st.Version, Uptime: st.Uptime.Seconds(), Files: st.Files, Requests: st.Requests},
		Replica: st.Replica, Servers: servers(st.Targets),
		Problems: []string{}, Targets: []Target{}, Clients: []Client{},
	}
	for _, t := range st.Targets {
		r.Targets = append(r.Targets, TargetOf(t))
	}
	for _, c := range st.Clients {
		r.Clients = append(r.Clients, Client{Name: c.Name, Session: fmt.Sprintf("%x", c.Session), Addr: c.Addr,
			Version: c.Version, Age: c.Age.Seconds(), LeaseLeft: c.LeaseLeft.Seconds(), Handles: c.Handles})
	}
	if len(st.Targets) == 0 {
		r.Problems = append(r.Problems, "no storage target is registered")
	}
	for _, s := range r.Servers {
		if !s.Up {
			r.Problems = append(r.Problems, fmt.Sprintf("storage server %s is down (targets %v)", s.Addr, s.Targets))
		}
	}
	for _, t := range st.Targets {
		if !t.Up {
			r.Problems = append(r.Problems, fmt.Sprintf("target-%d on %s is down", t.ID, t.Addr))
		}
	}
	if rs := st.Replica; rs != nil && rs.Leader == 0 {
		r.Problems = append(r.Problems, "the metadata group has no leader")
	}
	r.Healthy = len(r.Problems) == 0
	return r
}

// servers groups targets by the address of the server that holds them;
// a server is up when one of its targets is.
func servers(ts []proto.TargetInfo) []Server {
	out := []Server{}
	for _, t := range ts {
		i := slices.IndexFunc(out, func(s Server) bool { return s.Addr == t.Addr })
		if i < 0 {
			out = append(out, Server{Addr: t.Addr})
			i = len(out) - 1
		}
		out[i].Targets = append(out[i].Targets, uint32(t.ID))
		out[i].Up = out[i].Up || t.Up
	}
	slices.SortFunc(out, func(a, b Server) int { return strings.Compare(a.Addr, b.Addr) })
	return out
}

// Totals is what the targets that are up hold together.
type Totals struct {
	Total, Used, Free  uint64 // bytes
	Objects, FilesFree uint64
	Up                 int // targets up
}

// Sum adds up the targets that are up. A file system that several targets
// share (the same Device: several targets on one disk) counts its size,
// free space and free inodes once; Used and Objects are what each target
// holds. A down target's last report is stale and its space cannot be used.
func Sum(ts []Target) Totals {
	var s Totals
	seen := map[string]bool{}
	for _, t := range ts {
		if !t.Up {
			continue
		}
		s.Up++
		s.Used += t.Used
		s.Objects += t.Objects
		if t.Device != "" {
			if seen[t.Device] {
				continue
			}
			seen[t.Device] = true
		}
		s.Total += t.Total
		s.Free += t.Free
		s.FilesFree += t.FilesFree
	}
	return s
}
