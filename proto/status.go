package proto

import (
	"context"
	"time"
)

// ClusterStatus is what the metadata service knows of the whole file
// system, for `weft status`: itself, the storage targets and the clients.
type ClusterStatus struct {
	FSID    string        // the file system's uuid
	Version string        // the answering metadata server's version
	Uptime  time.Duration // since the answering server started
	Files   uint64        // inodes in use
	// Requests the answering server served over the network since it
	// started (every metadata operation of every client and server).
	Requests uint64
	// Replica is the answering member's raft state; nil for a single
	// metadata server.
	Replica *ReplicaStatus
	Targets []TargetInfo
	Clients []ClientStatus
}

// ReplicaStatus is one metadata group member's view of the group.
type ReplicaStatus struct {
	ID        uint64 `json:"id"`
	Leader    uint64 `json:"leader"` // 0: none known
	Term      uint64 `json:"term"`
	Commit    uint64 `json:"commit"`
	Applied   uint64 `json:"applied"`
	LastIndex uint64 `json:"last_index"` // the last entry in its log
	Snapshot  uint64 `json:"snapshot"`   // the index of its latest snapshot
	// Members is the group's configuration as the answering member
	// applied it; the progress fields are the leader's view (zero when
	// the answering member is not the leader).
	Members []ReplicaMember `json:"members,omitempty"`
}

// ReplicaMember is one member of a metadata group as a member knows it.
type ReplicaMember struct {
	ID      uint64 `json:"id"`
	Addr    string `json:"addr,omitempty"` // "" when the answering member does not know it
	Learner bool   `json:"learner,omitempty"`
	Leader  bool   `json:"leader,omitempty"`
	// Match is the last log index the leader knows is on the member;
	// Active: the leader heard from it within an election timeout;
	// Snapshot: the leader is sending it a snapshot.
	Match    uint64 `json:"match"`
	Active   bool   `json:"active"`
	Snapshot bool   `json:"snapshot,omitempty"`
}

// ClientStatus is one client session (a mount) the metadata server keeps.
type ClientStatus struct {
	Name      string        // the client's certificate name (its host)
	Session   SessionID     // the mount's session id
	Addr      string        // where the session was opened from
	Version   string        // the client's version, as it told ("" if it did not)
	Age       time.Duration // since the session was opened here
	LeaseLeft time.Duration // until the lease expires unless renewed
	Handles   uint64        // open file handles
}

// WithClientVersion returns ctx carrying the version a client announced
// when it opened its session (the metadata RPC handler sets it).
func WithClientVersion(ctx context.Context, v string) context.Context {
	return context.WithValue(ctx, clientVersionKey{}, v)
}

// ClientVersionFrom returns the version WithClientVersion put in ctx.
func ClientVersionFrom(ctx context.Context) string {
	v, _ := ctx.Value(clientVersionKey{}).(string)
	return v
}

type clientVersionKey struct{}
