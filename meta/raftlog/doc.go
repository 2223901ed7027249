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
//     (HardState), s (the latest snapshot's metadata and descriptor), o
//     (the log's offset, the last dropped entry), c (ConfState), a (the
//     members' addresses recorded with it). The newest entries (up to
//     4,096 and 16 MiB) are also kept in memory, as saved: raft reads back
//     the entries it just wrote, to send them and to apply the committed
//     ones, and Entries serves those without a pebble read.
//   - Snapshots (snapshot.go): the state machine's snapshots as
//     directories of files on the state machine's file system (meta: a
//     pebble checkpoint), sealed with a descriptor (index, term, each
//     file's name, size and SHA-256, and the members' addresses) that is
//     all raft's Snapshot.Data carries.
//   - Node: a RawNode and the one goroutine that drives it. Everything
//     that touches the RawNode runs on that goroutine: ticks, messages
//     from peers (Step), proposals, reads, reports from the transport.
//   - Transport: sends raft messages; the receiving side calls Step.
//     MemNetwork connects nodes in one process (tests: partitions, cut
//     links); the framed-TCP transport of weft carries them between
//     processes (ops 60 messages, 61 snapshot chunk, 62 snapshot done,
//     63 answered messages). Both stream snapshots the same way
//     (snapstream.go).
//   - Answers (answer.go, tcpanswer.go): a member's reply to a call of
//     messages (op 63) carries what stepping them made it say back to
//     the sender: a follower's append acknowledgements (once the append
//     is durable), votes, heartbeat and read-index responses. A round of
//     replication is then one call to each follower, not two (the
//     acknowledgement as a call of its own, with a wake-up of a sender
//     goroutine on the follower and of a server worker on the leader).
//     No goroutine waits for messages to send: Send starts callers when
//     messages wait for a member, up to four calls under way to it, and
//     the member queues their messages to its node in the order sent
//     (an epoch and a sequence number per call; a failed call starts a
//     new epoch, so no call waits for one that never comes). A member
//     that does not know op 63 is sent op 60.
//
// # How the node is driven
//
// The RawNode runs with asynchronous storage writes
// (raft.Config.AsyncStorageWrites): the node goroutine steps messages,
// takes proposals and applies, while the appender (appender.go) writes
// the log on a goroutine of its own. Before each Ready the node goroutine
// takes every tick, message, request and finished append already waiting
// (up to maxDrain; it blocks for one only when there is no Ready). A
// leader holds the proposals it takes while its appender has a write
// under way (Node.held), and hands them to raft as one MsgProp when that
// write is done (or at once when the appender is idle): raft makes one
// append message per follower for each MsgProp, so proposals that arrive
// one by one would otherwise each cost a Ready, an append to the
// appender and a message to every follower. Held proposals are not in
// the log: on a change of leader they fail with ErrNotLeader. Each
// Ready is then handled so:
//
//  1. the messages to other members leave at once: a leader's appends and
//     heartbeats, vote requests, read-index traffic. raft itself holds
//     back every message that promises something about this node's disk
//     (a vote, an append acknowledgement, the leader's acknowledgement of
//     its own entries): they are the responses of the Ready's append.
//     An append that only tells a follower a new commit index is held
//     back for up to Config.CommitNoticeDelay (2 ms): the next append
//     with entries carries the index instead, so a busy group does not
//     pay a round per follower for each commit, and the appends to a
//     follower the quorum does not need are merged, every
//     Config.LaggardDelay (5 ms) (hold.go);
//  2. the append (MsgStorageAppend: entries and HardState) is queued to
//     the appender, which writes the appends waiting in one pebble batch
//     each, synced once for all of them when any has new entries, a new
//     term or a new vote (raft's MustSync), and only then sends the
//     responses: to members over the transport, to this node through the
//     node goroutine (stepLocal). So a leader's and its followers' fsyncs
//     run in parallel, the leader takes its followers' acknowledgements
//     during its own fsync, and an entry commits once a quorum has it on
//     disk, whichever members they are;
//  3. an append that carries a snapshot received from the leader is
//     written by the node goroutine itself, synced, after every earlier
//     append (appender.flush), and the state machine restores it before
//     the append's responses go out;
//  4. the committed entries (MsgStorageApply), which raft hands over only
//     once they are durable in this node's own log, are applied in order
//     (conf changes to the RawNode, commands to the StateMachine, each
//     result to its proposer if it waits on this node), and the apply's
//     response is stepped;
//  5. then linearizable reads whose index is applied are woken, and a
//     snapshot is taken (and the log compacted) every SnapshotEvery
//     entries and after every applied configuration change.
//
// # Invariants
//
//   - An entry is acknowledged to its proposer only after it is committed
//     (on disk on a majority: each member acknowledges, the leader its
//     own copy too, only after its appender synced it, step 2) and
//     applied on the proposer's node. Propose on a node that is not leader fails at once
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
//   - Config.OnRole is told, on the node goroutine, each change between
//     leader and not as raft makes it (before OnLeader on a new leader,
//     and before the Status that shows it): meta gives a follower, which
//     serves no clients, fewer threads.
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
//     durable (StateMachine.Snapshot) and the node sealed, keeping
//     SnapshotKeep entries for followers slightly behind; one further
//     behind gets the snapshot, streamed and checked before it is
//     installed.
//
// # Snapshots
//
// Every SnapshotEvery applied entries (and after each configuration
// change, so that a member being added can install the leader's latest
// snapshot: raft refuses one whose configuration does not include it) the
// node asks the state machine to write its state into a new directory
// (StateMachine.Snapshot), seals it (every file synced and hashed, the
// directory renamed to its id), records the descriptor in the log
// (Storage.CreateSnapshot) and compacts the log to the last SnapshotKeep
// entries. The snapshot directory keeps the newest sealed snapshot and the
// one before (a sender may still read it).
//
// raft's MsgSnap carries only the descriptor. The transport streams the
// files first, in chunks of at most ChunkSize (1 MiB) bytes, one call
// each (OpSnapChunk: descriptor, file number, offset, bytes; in order,
// each file written sequentially into a recv- directory), then the MsgSnap
// (OpSnapDone). The receiver checks every file's size and SHA-256 against
// the descriptor, seals the snapshot, and only then steps the MsgSnap into
// its node; a check that fails fails the call and the sender reports
// SnapshotFailure (raft retries later), a delivered one SnapshotFinish.
// Node.Step drops any MsgSnap whose files the node has not received and
// checked, so a snapshot cannot arrive by the message path alone. On the
// next Ready the node persists the snapshot's metadata (the log now starts
// after it), then StateMachine.Restore installs the directory; a crash
// between the two is finished at the next start (the log's snapshot is
// newer than the state machine's applied index: restored then).
//
// # Membership
//
// ChangeMembers proposes one ConfChangeV2 on the leader and returns once
// it is applied on that node. The added member's address travels in the
// change's context (after the proposal id); every member records it with
// the configuration (key a of the log, unsynced like c, and in every
// snapshot descriptor), so it knows the addresses after a restart, and a
// member that joins from a snapshot learns them from it
// (Node.Addresses, Config.OnAddresses). raft takes one change at a time:
// a second one proposed while the first is applied is dropped (ErrDropped,
// nothing changed). A leader that removes itself steps down once the
// change is applied (raft's StepDownOnRemoval). A node started with Config.Join has an empty log that
// is not bootstrapped: it waits for the leader, which sends it a snapshot
// (or the log from its start). Members lists the configuration with the
// leader's view of each member's progress; TCPTransport.SetPeer and
// RemovePeer add and drop members' addresses (meta calls them from
// OnConfChange).
//
// # Integrity
//
// The log's pebble instance is opened as strictly as meta's store:
// format FormatNewest (WAL chunks carry the synced offset, so a damaged
// record followed by synced ones fails the open instead of ending replay
// there), every table read through with its checksums verified, entries
// that do not decode or leave a hole refused: OpenStorage fails with
// ErrCorrupt and RecoverHint (wipe the member, re-sync it). Corruption
// found later fails every write; raft's panic on a failed storage read is
// recovered into a node stop with the error logged (never a crash). A
// state machine with an Err method that reports a failure (meta: its
// store failed a checksum) stops the node before it applies another
// entry.
//
// # Not yet here
//
// The initial members' addresses are the deployment's (each member's peer
// list), not recorded by the group: only members added with ChangeMembers
// are.
package raftlog
