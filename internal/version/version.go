// Package version names the weft build a binary is: the release, the
// source revision it was built from, and the versions of the protocols
// and formats it speaks, for `weft version`, `--version` on every command,
// and the line every server logs at start.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/weft-fs/weft/internal/checks"
)

// Release is the version of this source tree. Bumped at each release;
// "-dev" between releases.
const Release = "0.4.0-dev"

// Info describes one build.
type Info struct {
	Release  string `json:"release"`
	Revision string `json:"revision,omitempty"` // VCS revision, "+dirty" if modified
	Built    string `json:"vcs_time,omitempty"` // commit time of Revision
	Go       string `json:"go"`
}

var (
	once sync.Once
	info Info
)

// Get returns this binary's Info, read once from its build information
// (go build stamps the VCS revision when built inside a checkout).
func Get() Info {
	once.Do(func() {
		info = Info{Release: Release, Go: runtime.Version()}
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			return
		}
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
				if len(info.Revision) > 12 {
					info.Revision = info.Revision[:12]
				}
			case "vcs.time":
				info.Built = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && info.Revision != "" {
			info.Revision += "+dirty"
		}
	})
	return info
}

// String is the one-line form: "0.4.0-dev (3f2a9c1e0b7d, go1.23.4)".
func (i Info) String() string {
	rev := i.Revision
	if rev == "" {
		rev = "unknown revision"
	}
	if checks.Off {
		return fmt.Sprintf("%s (%s, %s, checks OFF: a benchmark build, never serve real data with it)", i.Release, rev, i.Go)
	}
	return fmt.Sprintf("%s (%s, %s)", i.Release, rev, i.Go)
}

// String returns this binary's one-line version.
func String() string { return Get().String() }
