// Package ratelog rate-limits log lines that a peer can provoke at will:
// refused connections, refused requests, malformed frames. A flood of them
// must neither fill the disk nor hide other lines, yet the operator must
// still learn that it happened and from whom.
//
// Invariants: at most Burst lines pass per one-second window; every line
// that passes after some were held back says how many ("suppressed"), so
// no refusal goes uncounted.
package ratelog
