package metrics

import (
	"errors"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-fs/weft/transport"
)

// Namer names an operation code for the "op" label.
type Namer func(op uint16) string

// OpNumber is the Namer of last resort: "op_" and the code.
func OpNumber(op uint16) string { return "op_" + strconv.Itoa(int(op)) }

// latencyBuckets span a loopback small call (~20 µs) to a stalled disk (>2 s).
var latencyBuckets = prometheus.ExponentialBuckets(10e-6, 4, 10)

// rpcObserver is a transport.Observer keeping the weft_rpc_<side>_* metrics.
type rpcObserver struct {
	requests *prometheus.CounterVec
	errors   *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
	bytesIn  *prometheus.CounterVec
	bytesOut *prometheus.CounterVec
	inflight prometheus.Gauge
	name     Namer

	mu   sync.RWMutex
	byOp map[uint16]*opMetrics
}

// opMetrics are one operation's label-resolved handles, so that a call does
// no label lookup.
type opMetrics struct {
	requests, answers, failures, bytesIn, bytesOut prometheus.Counter
	seconds                                        prometheus.Observer
	inflight                                       prometheus.Gauge // the side's, shared by its operations
}

func newRPCObserver(reg prometheus.Registerer, side string, name Namer) (*rpcObserver, error) {
	if name == nil {
		name = OpNumber
	}
	ns := "weft_rpc_" + side
	o := &rpcObserver{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "_requests_total",
			Help: "Requests started, by operation (" + side + " side)."}, []string{"op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "_errors_total",
			Help: "Requests that ended in an error, by operation (" + side + " side) and class: " +
				`"answer", a file system answer that is part of normal work (ENOENT, EEXIST, EACCES, ...); ` +
				`"failure", everything else (timeouts, lost connections, EIO, ENOSPC, ...).`}, []string{"op", "class"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: ns + "_seconds",
			Help: "Time from request to response (" + side + " side).", Buckets: latencyBuckets}, []string{"op"}),
		bytesIn: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "_request_bytes_total",
			Help: "Request payload bytes, by operation (" + side + " side)."}, []string{"op"}),
		bytesOut: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "_response_bytes_total",
			Help: "Response payload bytes, by operation (" + side + " side)."}, []string{"op"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "_inflight",
			Help: "Requests in progress (" + side + " side)."}),
		name: name,
		byOp: make(map[uint16]*opMetrics),
	}
	for _, c := range []prometheus.Collector{o.requests, o.errors, o.seconds, o.bytesIn, o.bytesOut, o.inflight} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return o, nil
}

func (o *rpcObserver) op(op uint16) *opMetrics {
	o.mu.RLock()
	m := o.byOp[op]
	o.mu.RUnlock()
	if m != nil {
		return m
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if m = o.byOp[op]; m == nil {
		l := o.name(op)
		m = &opMetrics{
			requests: o.requests.WithLabelValues(l),
			answers:  o.errors.WithLabelValues(l, "answer"),
			failures: o.errors.WithLabelValues(l, "failure"),
			seconds:  o.seconds.WithLabelValues(l),
			bytesIn:  o.bytesIn.WithLabelValues(l),
			bytesOut: o.bytesOut.WithLabelValues(l),
			inflight: o.inflight,
		}
		o.byOp[op] = m
	}
	return m
}

// Begin implements transport.Observer.
func (o *rpcObserver) Begin(op uint16) transport.OpEnd {
	m := o.op(op)
	m.requests.Inc()
	m.inflight.Inc()
	return m
}

// End implements transport.OpEnd.
func (m *opMetrics) End(start time.Time, in, out int, err error) {
	m.seconds.Observe(time.Since(start).Seconds())
	m.bytesIn.Add(float64(in))
	m.bytesOut.Add(float64(out))
	switch {
	case err == nil:
	case isAnswer(err):
		m.answers.Inc()
	default:
		m.failures.Inc()
	}
	m.inflight.Dec()
}

// answers are the errnos a file system gives in normal work: a lookup of a
// name that does not exist, a create that finds one, a permission check,
// an attribute that is not set. They are counted apart from failures, so
// an alert on failures does not fire on every failed lookup.
var answers = map[syscall.Errno]bool{
	syscall.ENOENT: true, syscall.EEXIST: true, syscall.ENOTEMPTY: true, syscall.ENOTDIR: true,
	syscall.EISDIR: true, syscall.EACCES: true, syscall.EPERM: true, syscall.ENODATA: true,
	syscall.ENAMETOOLONG: true, syscall.ERANGE: true, syscall.EXDEV: true, syscall.ELOOP: true,
	syscall.EMLINK: true, syscall.EINVAL: true, syscall.ESTALE: true, syscall.EBUSY: true,
	syscall.ENOTSUP: true, syscall.EAGAIN: true, syscall.EDQUOT: true,
}

func isAnswer(err error) bool {
	var errno syscall.Errno
	return errors.As(err, &errno) && answers[errno]
}

// Transport returns tr observed into reg (see the package comment); name
// labels operations (nil: by number). It fails if reg already holds
// weft_rpc_* metrics.
func Transport(tr transport.Transport, reg prometheus.Registerer, name Namer) (transport.Transport, error) {
	srv, err := newRPCObserver(reg, "server", name)
	if err != nil {
		return nil, err
	}
	cl, err := newRPCObserver(reg, "client", name)
	if err != nil {
		return nil, err
	}
	return transport.Observed(tr, srv, cl), nil
}
