package fuseceiling

import (
	"os"

	"github.com/hanwen/go-fuse/v2/fs"
)

func newLoopbackFile(f *os.File) fs.FileHandle { return fs.NewLoopbackFileFromOS(f) }
