package metarpc

import (
	"context"
	"fmt"
	"syscall"

	"github.com/weft-fs/weft/wire"
)

// Run-time parameters (ops 91..92 are this file's; see docs/params.md).
const (
	// OpParams lists every parameter with its effective value.
	OpParams uint16 = 91
	// OpParamSet sets one (root and servers only).
	OpParamSet uint16 = 92
)

// Param is one run-time parameter as `weft param` shows it.
type Param struct {
	Name, Scope, Default, Doc string
	Value                     string
	Source                    string // "default", "persisted" or "set"
}

// ParamService is what `weft param` asks of the metadata service.
// The meta package adapts meta.Server to it; Client implements it.
type ParamService interface {
	Params(ctx context.Context) ([]Param, error)
	SetParam(ctx context.Context, name, value string, persist bool) error
}

// paramsVersion is the format of paramsResp and paramSetReq (their first
// byte):
//
//	paramsResp:  u8 version, u32 n, n × (str name, scope, default, doc, value, source)
//	paramSetReq: u8 version, str name, str value, bool persist
const paramsVersion = 1

// maxParams bounds a list on the wire (the decoder's bound, not policy).
const maxParams = 4096

type paramsResp struct{ P []Param }

func (m *paramsResp) encode(e *wire.Encoder) {
	e.U8(paramsVersion)
	e.U32(uint32(len(m.P)))
	for _, p := range m.P {
		for _, s := range []string{p.Name, p.Scope, p.Default, p.Doc, p.Value, p.Source} {
			e.String(s)
		}
	}
}

func (m *paramsResp) decode(d *wire.Decoder) {
	if v := d.U8(); d.Err() == nil && v != paramsVersion {
		d.Fail(fmt.Errorf("metarpc: parameter list of version %d, want %d", v, paramsVersion))
		return
	}
	n := d.Count(maxParams, 24)
	for i := 0; i < n && d.Err() == nil; i++ {
		m.P = append(m.P, Param{Name: d.StringMax(256), Scope: d.StringMax(256), Default: d.StringMax(1024),
			Doc: d.StringMax(4096), Value: d.StringMax(1024), Source: d.StringMax(64)})
	}
}

type paramSetReq struct {
	Name, Value string
	Persist     bool
}

func (m *paramSetReq) encode(e *wire.Encoder) {
	e.U8(paramsVersion)
	e.String(m.Name)
	e.String(m.Value)
	e.Bool(m.Persist)
}

func (m *paramSetReq) decode(d *wire.Decoder) {
	if v := d.U8(); d.Err() == nil && v != paramsVersion {
		d.Fail(fmt.Errorf("metarpc: parameter request of version %d, want %d", v, paramsVersion))
		return
	}
	m.Name = d.StringMax(256)
	m.Value = d.StringMax(1024)
	m.Persist = d.Bool()
}

// Params implements ParamService.
func (c *Client) Params(ctx context.Context) ([]Param, error) {
	var r paramsResp
	err := c.do(ctx, OpParams, &emptyMsg{}, &r)
	return r.P, err
}

// SetParam implements ParamService. Setting is idempotent, so it may be
// sent again after a failover.
func (c *Client) SetParam(ctx context.Context, name, value string, persist bool) error {
	return c.do(ctx, OpParamSet, &paramSetReq{Name: name, Value: value, Persist: persist}, &emptyMsg{})
}

func (h *handler) callParams(ctx context.Context, op uint16, req message) (message, error) {
	if h.params == nil {
		return nil, fmt.Errorf("metarpc: the service has no parameters: %w", syscall.ENOSYS)
	}
	if op == OpParams {
		ps, err := h.params.Params(ctx)
		return &paramsResp{ps}, err
	}
	r := req.(*paramSetReq)
	return &emptyMsg{}, h.params.SetParam(ctx, r.Name, r.Value, r.Persist)
}
