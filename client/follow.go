package client

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/weft-fs/weft/proto"
)

// Open handles follow a restripe (`weft migrate`, migrate.go).
//
// A handle reads through the inode state of the generation it opened
// (inodeState.gen names its objects). A restripe gives the file a new
// generation and new objects, and its old objects are removed after the
// moved-object grace. A handle opened before it learns of the new
// generation when:
//   - this client hears the inode's attributes with another generation
//     (a stat: Client.merge; an open here: acquire) or a capability
//     renewal finds it (renewCap): inodeState.moved is set, and each
//     handle of the state follows at its next read;
//   - a read finds an object of its generation shorter than the file
//     (removed after the grace) while the file now has another
//     generation (checkLength: errMoved): the handle follows and the
//     read is made again, once, through the new objects.
//
// To follow, the handle asks the metadata service (proto.MigrateFollower)
// for the file's current attributes and a capability for its open mode,
// naming its own generation: the service answers only if that generation
// is the file's or one a restripe replaced; a file that merely has the
// same inode number (a metadata store put back to an earlier state) is
// ESTALE, as generations promise. The handle then moves to the inode
// state of the new generation (shared with this client's other handles
// of it, so reads see this client's writes through them) with a fresh
// read-ahead, and drops its reference on the old one. A restripe is only
// committed while nobody has the file open for writing, so the old state
// has no unsent writes to carry over.

// errMoved is wrapped when a read found its objects gone because a
// restripe replaced them: the handle follows (File.follow) and reads again.
var errMoved = errors.New("client: the file was restriped while open here")

// follower returns the metadata service's MigrateFollower, if it has one
// (a server from before it answered ENOSYS: c.noFollow).
func (c *Client) follower() (proto.MigrateFollower, bool) {
	if c.noFollow.Load() {
		return nil, false
	}
	m := c.meta
	if r, ok := m.(releasingMeta); ok {
		m = r.MetaService
	}
	fw, ok := m.(proto.MigrateFollower)
	return fw, ok
}

// followIfMoved follows a restripe the client heard of. Only a refusal
// (the file is another one now: ESTALE) fails the caller; if the service
// cannot be asked now, the handle keeps reading its objects while they
// last.
func (f *File) followIfMoved(ctx context.Context) error {
	st := f.state()
	if st == nil || st.moved.Load() == 0 {
		return nil
	}
	f.pinLocal(ctx, "a follow") // the follow opens the new generation as this handle
	err := f.follow(ctx)
	if err != nil && !errors.Is(err, syscall.ESTALE) {
		f.c.log.Warn("following a restripe failed; reading the objects opened", "ino", f.ino, "err", err)
		return nil
	}
	return err
}

// follow moves the handle to the file's current generation if a restripe
// replaced the one it reads (see the comment above).
func (f *File) follow(ctx context.Context) error {
	f.followMu.Lock()
	defer f.followMu.Unlock()
	f.mu.Lock()
	released := f.released
	f.mu.Unlock()
	old := f.state()
	if old == nil || released {
		return nil
	}
	fw, ok := f.c.follower()
	if !ok {
		return fmt.Errorf("client: ino %d was restriped while open here and the metadata service cannot follow it; reopen it: %w", f.ino, syscall.ESTALE)
	}
	heard := old.moved.Load()
	if h := old.caps.get(f.want); h != nil && h.hasCred {
		ctx = proto.WithCred(ctx, h.cred) // ask as the opener, as renewals do
	}
	rctx, cancel := f.c.rpcCtx(ctx)
	a, cap, err := fw.Follow(rctx, f.ino, old.gen, f.want)
	cancel()
	if errors.Is(err, syscall.ENOSYS) {
		f.c.noFollow.Store(true)
	}
	if err != nil {
		return fmt.Errorf("client: ino %d: following its restripe: %w", f.ino, err)
	}
	if a.Gen == old.gen {
		old.moved.CompareAndSwap(heard, 0) // not restriped after all
		return nil
	}
	old.moved.Store(a.Gen) // the state's other handles follow too
	st := f.c.acquire(&a, nil, 0)
	if f.want != 0 {
		st.setCap(newHeldCap(ctx, cap, f.want))
	}
	f.view.Store(&fileView{st: st})
	f.c.unref(old)
	f.c.log.Info("an open handle follows its file's restripe", "ino", f.ino, "gen", a.Gen)
	return nil
}
