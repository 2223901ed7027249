package client

import (
	"errors"
	"fmt"
	"syscall"
)

// Quotas are enforced by the metadata service when it records a size
// (WriteDone, truncate): a size over a byte limit is refused with EDQUOT
// and not recorded, so the error reaches the caller at flush, fsync or
// close. After such a refusal the client fails writes that would extend
// the file past its recorded size at once, with EDQUOT, until a WriteDone
// succeeds again (the limit was raised, or space freed, and the next
// flush went through): a program that keeps writing learns of the quota
// from write(2), not only from close(2). Writes inside the recorded size
// still work (they do not grow usage).

// noteQuota records whether a WriteDone was refused for a quota.
func (st *inodeState) noteQuota(err error) {
	st.mu.Lock()
	st.overQuota = errors.Is(err, syscall.EDQUOT) || (err != nil && st.overQuota)
	st.mu.Unlock()
}

// quotaCheckLocked fails a write ending at end with EDQUOT if it would
// grow a file whose last WriteDone was refused for a quota.
func (st *inodeState) quotaCheckLocked(end uint64) error {
	if st.overQuota && end > st.metaSize {
		return fmt.Errorf("client: ino %d: over quota (the last recorded size was refused): %w", st.ino, syscall.EDQUOT)
	}
	return nil
}
