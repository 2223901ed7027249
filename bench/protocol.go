package bench

import (
	"encoding/json"
	"fmt"
	"io"
)

// The coordinator and a worker exchange one JSON object per line over a
// byte stream (a child's stdin/stdout, or a TCP connection to a listening
// worker). The coordinator sends:
//
//	init    {rank, procs, dir, direct}            -> ready
//	run     {phase, stonewall, limit, count, ...} -> done (or stopped, then done)
//	stop    the stonewall time has passed          (only during a stonewalled run)
//	finish  {count}: continue to count items, then -> done
//	exit
//
// A stonewalled run answers "stopped" with the count it reached when it got
// "stop" or hit its limit, then waits for "finish". A worker that fails
// answers "error" and keeps serving. Protocol version 1; a worker refuses an
// init of another version.
const protocolVersion = 1

// Message ops.
const (
	opInit    = "init"
	opRun     = "run"
	opStop    = "stop"
	opFinish  = "finish"
	opExit    = "exit"
	opReady   = "ready"
	opStopped = "stopped"
	opDone    = "done"
	opError   = "error"
)

type message struct {
	Op string `json:"op"`

	// init
	Version int    `json:"version,omitempty"`
	Rank    int    `json:"rank,omitempty"`
	Procs   int    `json:"procs,omitempty"`
	Dir     string `json:"dir,omitempty"`
	Direct  bool   `json:"direct,omitempty"`

	// run
	Phase     string `json:"phase,omitempty"`
	Stonewall bool   `json:"stonewall,omitempty"`
	Limit     int64  `json:"limit,omitempty"` // stonewalled: at most this many items
	Newer     int64  `json:"newer,omitempty"` // find: reference mtime, unix ns

	// run (items to do), finish (target), stopped/done (items done)
	Count int64 `json:"count,omitempty"`

	// done
	Bytes      int64 `json:"bytes,omitempty"`
	Mismatches int64 `json:"mismatches,omitempty"`
	Found      int64 `json:"found,omitempty"`

	// error
	Err string `json:"err,omitempty"`
}

// codec reads and writes messages on one stream. Reads and writes may run
// in different goroutines; each direction must have a single user.
type codec struct {
	dec *json.Decoder
	enc *json.Encoder
}

func newCodec(r io.Reader, w io.Writer) *codec {
	return &codec{dec: json.NewDecoder(r), enc: json.NewEncoder(w)}
}

func (c *codec) send(m message) error {
	if err := c.enc.Encode(m); err != nil {
		return fmt.Errorf("bench: send %s: %w", m.Op, err)
	}
	return nil
}

func (c *codec) recv() (message, error) {
	var m message
	if err := c.dec.Decode(&m); err != nil {
		if err == io.EOF {
			return m, io.EOF
		}
		return m, fmt.Errorf("bench: receive: %w", err)
	}
	if m.Op == "" {
		return m, fmt.Errorf("bench: receive: message without op")
	}
	return m, nil
}
