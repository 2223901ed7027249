// Package raftlog replicates a log of opaque commands over a group of
// nodes with go.etcd.io/raft/v3, and applies the committed log, in order,
// to a StateMachine on every node. It is the replicated implementation of
// the metadata service's commit path (package meta, "How raft slots in");
// it knows nothing of metadata: an entry is bytes, applying it is the
// StateMachine's business.
//
// raft itself does no I/O: it says, in a Ready, what must be persisted,
// sent and applied. This package does that I/O, and nothing of consensus:
// elections, log matching, commitment and membership are raft's.
//
// # Parts
//
//   - Storage: raft's log on a pebble instance of its own (raft.Storage
//     for the RawNode, plus Save for what a Ready persists, and
//     CreateSnapshot for compaction). Keys: e+index (entries), h
//     (HardState), s (the latest snapshot), o (the log's offset, the last
//     dropped entry), c (ConfState).
//   - Node: a RawNode and the one goroutine that drives it. Everything
//     that touches the RawNode runs on that goroutine: ticks, messages
//     from peers (Step), proposals, reads, reports from the transport.
//   - Transport: sends raft messages; the receiving side calls Step.
//     MemNetwork connects nodes in one process (tests: partitions, cut
//     links); the framed-TCP transport of weft carries them between
//     processes.
//
// # How the node is driven
//
// Each turn of the node goroutine takes one event (a tick, a message, a
// request) and then handles every Ready, each in this order, as raft
// requires of a synchronous-storage RawNode:
//
//  1. persist the Ready's snapshot, HardState and entries in one pebble
//     batch, fsync'd when Ready.MustSync (new entries, a new term or
//     vote);
//  2. only then send its messages: a vote or an append acknowledgement
//     never leaves the node before what it promises is on disk;
//  3. restore a received snapshot into the state machine, then apply the
//     committed entries in order (conf changes to the RawNode, commands
//     to the StateMachine) and hand each result to its proposer if it
//     waits on this node;
//  4. Advance; then wake linearizable reads whose index is applied, and
//     take a snapshot (and compact the log) every SnapshotEvery entries.
//
// # Invariants
//
//   - An entry is acknowledged to its proposer only after it is committed
//     (on disk on a majority, step 1 on each of them) and applied on the
//     proposer's node. Propose on a node that is not leader fails at once
//     with NotLeaderError (proposals are never forwarded: clients find the
//     leader). Every other proposal is resolved when the index it was
//     appended at is applied: by its own entry (the result) or by another
//     one that a new leader committed in its place (ErrDropped: not
//     applied, safe to propose again). Only when that cannot be known
//     (ctx ended first, ErrUnknown, ErrStopped) is the outcome unknown;
//     never is a proposal that was not applied reported a success.
//   - A new leader takes proposals only once it has applied its term's
//     first entry (the empty entry raft appends at election), and so every
//     entry of earlier terms (ErrNotReady before; Status.Ready after).
//     Config.OnLeader runs at that moment on the node goroutine, and
//     ProposeIf's check runs there too, so a proposer that resets state
//     from the applied state (meta's inode allocator) can refuse
//     proposals built before the reset.
//   - A command entry's data is an 8-byte proposal id and the command.
//     Ids are unique per node incarnation (the node id in the top 16 bits,
//     a random 48-bit counter), so an entry proposed before a restart can
//     never wake a proposer after it. The StateMachine sees only the
//     command.
//   - The StateMachine is applied each committed entry once per state:
//     at start the node resumes after StateMachine.Applied(), which the
//     state machine records with its own state; if the log was compacted
//     past it (a snapshot was received, then a crash) the snapshot is
//     restored first. A state machine must therefore record its applied
//     index atomically with the changes of each entry (meta does, in the
//     same pebble batch).
//   - ReadIndex returns only on a leader that confirmed its leadership
//     with a quorum after the read arrived (raft's ReadOnlySafe) and has
//     applied the commit index of that moment; a deposed or partitioned
//     leader never confirms.
//   - CheckQuorum and PreVote are on: a leader that cannot reach a quorum
//     steps down within an election timeout, and a node rejoining after a
//     partition does not depose a working leader.
//   - The log is compacted only at a snapshot the state machine made
//     durable (StateMachine.Snapshot), keeping SnapshotKeep entries for
//     followers slightly behind; one further behind gets the snapshot.
//
// # Not yet here
//
// Snapshots travel inside raft's MsgSnap, whole: fine for tests and small
// states, not for a pebble checkpoint of a large namespace, which needs
// chunked streaming over the transport. Membership changes (ConfChangeV2)
// are applied when committed but nothing proposes them yet.
package raftlog
