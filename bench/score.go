package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Phase names, as IO500 prints them.
const (
	IorEasyWrite     = "ior-easy-write"
	IorEasyRead      = "ior-easy-read"
	IorHardWrite     = "ior-hard-write"
	IorHardRead      = "ior-hard-read"
	IorRnd4KEasyRead = "ior-rnd4K-easy-read"
	MdEasyWrite      = "mdtest-easy-write"
	MdEasyStat       = "mdtest-easy-stat"
	MdEasyDelete     = "mdtest-easy-delete"
	MdHardWrite      = "mdtest-hard-write"
	MdHardStat       = "mdtest-hard-stat"
	MdHardRead       = "mdtest-hard-read"
	MdHardDelete     = "mdtest-hard-delete"
	Find             = "find"
)

// Phases lists every phase in the order IO500 runs them.
func Phases() []string {
	return []string{
		IorEasyWrite, MdEasyWrite, IorHardWrite, MdHardWrite, Find,
		IorEasyRead, MdEasyStat, IorHardRead, MdHardStat,
		MdEasyDelete, MdHardRead, MdHardDelete, IorRnd4KEasyRead,
	}
}

// BandwidthPhases are the phases whose geometric mean is the bandwidth score.
func BandwidthPhases() []string {
	return []string{IorEasyWrite, IorEasyRead, IorHardWrite, IorHardRead}
}

// MetadataPhases are the phases whose geometric mean is the metadata score.
func MetadataPhases() []string {
	return []string{MdEasyWrite, MdEasyStat, MdEasyDelete, MdHardWrite, MdHardStat, MdHardRead, MdHardDelete, Find}
}

// Units.
const (
	UnitGiBps = "GiB/s"
	UnitKIOPS = "kIOPS"
)

// unitOf says in which unit a phase is reported.
func unitOf(phase string) string {
	if strings.HasPrefix(phase, "ior-") {
		return UnitGiBps
	}
	return UnitKIOPS
}

// verifies says whether a phase checks what it reads.
func verifies(phase string) bool {
	switch phase {
	case IorEasyRead, IorHardRead, IorRnd4KEasyRead, MdHardStat, MdHardRead:
		return true
	}
	return false
}

// PhaseResult is one phase's outcome.
type PhaseResult struct {
	Value   float64 `json:"value"`
	Unit    string  `json:"unit"`
	Seconds float64 `json:"seconds"`
	// Verified is set for phases that check data (or sizes) they read.
	Verified *bool `json:"verified,omitempty"`
	// Items is the number of operations (transfers, files, entries) done by
	// all ranks; Bytes the data moved.
	Items int64 `json:"items"`
	Bytes int64 `json:"bytes,omitempty"`
	// Capped says a stonewalled phase ended on the per-process cap before
	// the stonewall time: IO500 would call such a run invalid.
	Capped bool `json:"capped,omitempty"`
	// Found is the number of matches of the find phase.
	Found int64 `json:"found,omitempty"`
}

// Score is the IO500 summary.
type Score struct {
	Bandwidth float64 `json:"bandwidth"` // GiB/s
	Metadata  float64 `json:"metadata"`  // kIOPS
	Total     float64 `json:"total"`
}

// RunInfo describes how the results were obtained.
type RunInfo struct {
	Dir       string    `json:"dir"`
	Procs     int       `json:"procs"`
	Stonewall float64   `json:"stonewall_seconds"`
	Direct    bool      `json:"direct"`
	Start     time.Time `json:"start"`
}

// Report is everything a run produced; its JSON form is what --json writes.
type Report struct {
	Phases map[string]PhaseResult `json:"phases"`
	Score  Score                  `json:"score"`
	Run    RunInfo                `json:"run"`
}

// GeoMean is the geometric mean of xs; 0 if xs is empty or holds a value <= 0
// (a phase that did nothing makes the whole score 0, as in IO500).
func GeoMean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		if !(x > 0) {
			return 0
		}
		sum += math.Log(x)
	}
	return math.Exp(sum / float64(len(xs)))
}

// Scores computes the IO500 scores from phase results; missing phases
// count as 0.
func Scores(phases map[string]PhaseResult) Score {
	pick := func(names []string) []float64 {
		out := make([]float64, len(names))
		for i, n := range names {
			out[i] = phases[n].Value
		}
		return out
	}
	bw := GeoMean(pick(BandwidthPhases()))
	md := GeoMean(pick(MetadataPhases()))
	return Score{Bandwidth: bw, Metadata: md, Total: math.Sqrt(bw * md)}
}

// ResultLine formats one phase the way IO500 does.
func ResultLine(name string, r PhaseResult) string {
	line := fmt.Sprintf("[RESULT] %20s %15.6f %s : time %.3f seconds", name, r.Value, r.Unit, r.Seconds)
	var notes []string
	if r.Verified != nil {
		if *r.Verified {
			notes = append(notes, "verified")
		} else {
			notes = append(notes, "VERIFY FAILED")
		}
	}
	if r.Capped {
		notes = append(notes, "capped")
	}
	if len(notes) > 0 {
		line += " [" + strings.Join(notes, ", ") + "]"
	}
	return line
}

// WriteText prints the report in IO500's style.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, name := range Phases() {
		p, ok := r.Phases[name]
		if !ok {
			continue
		}
		b.WriteString(ResultLine(name, p))
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "[SCORE ] Bandwidth %f GiB/s : IOPS %f kiops : TOTAL %f\n", r.Score.Bandwidth, r.Score.Metadata, r.Score.Total)
	_, err := io.WriteString(w, b.String())
	return err
}

// MarshalJSON-ready: WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
