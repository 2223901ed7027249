package bench

import (
	"context"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"time"
)

// IO500's find: `find DIR -newer TIMESTAMP -size 3901c -name "*01*"`.
const (
	findNamePattern = "*01*"
	findSize        = 3901
)

// findMatches reports whether an entry is one IO500's find is looking for:
// a regular file named *01*, of exactly 3901 bytes, modified after newer.
func findMatches(name string, mode fs.FileMode, size int64, mtime, newer time.Time) bool {
	if !mode.IsRegular() || size != findSize || !mtime.After(newer) {
		return false
	}
	ok, _ := path.Match(findNamePattern, name)
	return ok
}

// findOwner says which rank checks a directory entry: every rank lists every
// directory (listing is cheap, and that is how it finds the tree), but each
// entry is examined by one rank only, chosen by a hash of its name, so the
// ranks share the work of a single huge directory the way pfind's hashing
// mode does.
func findOwner(name string, procs int) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % uint32(procs))
}

// findWalk runs rank's share of the find over root. checked counts the
// entries this rank examined (the phase's rate is all ranks' checked / time).
// It checks the name before asking for attributes, as pfind does.
func findWalk(ctx context.Context, root string, rank, procs int, newer time.Time) (checked, found int64, err error) {
	dirs := []string{root}
	for len(dirs) > 0 {
		if err := ctx.Err(); err != nil {
			return checked, found, err
		}
		dir := dirs[len(dirs)-1]
		dirs = dirs[:len(dirs)-1]
		f, err := os.Open(dir)
		if err != nil {
			return checked, found, err
		}
		for {
			ents, rerr := f.ReadDir(1024)
			for _, e := range ents {
				if e.IsDir() {
					dirs = append(dirs, filepath.Join(dir, e.Name()))
				}
				if findOwner(e.Name(), procs) != rank {
					continue
				}
				checked++
				if !e.Type().IsRegular() {
					continue
				}
				if ok, _ := path.Match(findNamePattern, e.Name()); !ok {
					continue
				}
				info, ierr := e.Info()
				if ierr != nil {
					f.Close()
					return checked, found, ierr
				}
				if findMatches(e.Name(), info.Mode(), info.Size(), info.ModTime(), newer) {
					found++
				}
			}
			if rerr == io.EOF || (rerr == nil && len(ents) == 0) {
				break
			}
			if rerr != nil {
				f.Close()
				return checked, found, rerr
			}
		}
		f.Close()
	}
	return checked, found, nil
}
