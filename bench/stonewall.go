package bench

import "fmt"

// stonewall is the coordinator's bookkeeping for one stonewalled phase:
// which ranks have reported the count they reached, whether the stonewall
// time has passed, and the count every rank must then complete to.
type stonewall struct {
	counts   []int64
	reported []bool
	expired  bool
	early    bool // a rank stopped on its per-process cap before the stonewall
}

func newStonewall(procs int) *stonewall {
	return &stonewall{counts: make([]int64, procs), reported: make([]bool, procs)}
}

// report records that rank stopped at count.
func (s *stonewall) report(rank int, count int64) error {
	if rank < 0 || rank >= len(s.counts) {
		return fmt.Errorf("bench: stonewall report from unknown rank %d", rank)
	}
	if s.reported[rank] {
		return fmt.Errorf("bench: rank %d reported its stonewall count twice", rank)
	}
	if count < 0 {
		return fmt.Errorf("bench: rank %d reported count %d", rank, count)
	}
	s.counts[rank], s.reported[rank] = count, true
	if !s.expired {
		s.early = true
	}
	return nil
}

// expire marks the stonewall time as passed and returns the ranks that
// have not stopped yet (they must be told to).
func (s *stonewall) expire() []int {
	s.expired = true
	var running []int
	for r, ok := range s.reported {
		if !ok {
			running = append(running, r)
		}
	}
	return running
}

// done says every rank has reported.
func (s *stonewall) done() bool {
	for _, ok := range s.reported {
		if !ok {
			return false
		}
	}
	return true
}

// target is the count every rank completes to: the largest reached.
func (s *stonewall) target() int64 {
	var m int64
	for _, c := range s.counts {
		m = max(m, c)
	}
	return m
}

// capped says the phase ended before the stonewall time because a rank
// hit its per-process limit: the write phase was shorter than the rules ask.
func (s *stonewall) capped() bool { return s.early }
