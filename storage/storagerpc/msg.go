package storagerpc

import (
	"fmt"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Operation codes of the storage RPCs (the storage range is 100..199).
// Read, Write, Truncate and Sync carry a capability since 106..109; the
// codes 100..103 of their earlier, capability-less format are retired and
// answered with ENOSYS, so an old client and a new server (or the reverse)
// fail plainly instead of misreading each other's requests. Every object
// name gained the file's generation (ObjectReq, RemoveManyReq) before any
// release, so the op codes stayed; a request of the earlier layout is
// shorter than the decoder expects and refused with EINVAL.
const (
	OpRead     uint16 = 106
	OpWrite    uint16 = 107
	OpTruncate uint16 = 108
	OpSync     uint16 = 109
	OpRemove   uint16 = 104
	// OpRemoveMany removes a list of objects of one target in one round
	// trip (the metadata server's object GC).
	OpRemoveMany uint16 = 105
	// OpSpace (fallocate on one object) and OpSeek (SEEK_DATA/SEEK_HOLE on
	// one object).
	OpSpace uint16 = 110
	OpSeek  uint16 = 111
	// OpAllocated: the bytes an object's allocated blocks take (a Sync
	// request's body; the response is a u64).
	OpAllocated uint16 = 112
	// OpCopy: copy a range of one object into another (copy_file_range),
	// sent to the destination's server, which reads the source itself.
	OpCopy uint16 = 113
	// OpExtend makes an object at least a size long, never shorter
	// (proto.ObjectExtender); its body is OpTruncate's.
	OpExtend uint16 = 115
)

// MaxCopy bounds the bytes of one Copy RPC; the Client splits longer ones.
const MaxCopy = 64 << 20

// MaxRemoveMany bounds the objects of one RemoveMany RPC; the Client splits
// longer lists and the handler refuses them with EINVAL.
const MaxRemoveMany = 4096

// MaxCapability bounds the capability a request carries (a version-1
// capability is 60 bytes plus its holder's name of at most 255).
const MaxCapability = 512

// MaxIO bounds the data of one Read or Write RPC. The Client splits larger
// requests; the handler refuses larger ones with EINVAL.
const MaxIO = 16 << 20

// ObjectReq names one object on one target: the whole of a Remove request,
// and part of the others.
type ObjectReq struct {
	Target proto.TargetID
	Obj    proto.ObjectID
}

func (r ObjectReq) encode(e *wire.Encoder) {
	e.U32(uint32(r.Target))
	e.U64(uint64(r.Obj.Ino))
	e.U32(r.Obj.Stripe)
	e.U64(r.Obj.Gen)
}

// A capability is the first field of the requests that carry one.
func decodeCap(d *wire.Decoder) []byte {
	if c := d.BytesMax(MaxCapability); len(c) > 0 {
		return c
	}
	return nil
}

func decodeObject(d *wire.Decoder) ObjectReq {
	return ObjectReq{
		Target: proto.TargetID(d.U32()),
		Obj:    proto.ObjectID{Ino: proto.Ino(d.U64()), Stripe: d.U32(), Gen: d.U64()},
	}
}

// ReadReq asks for Len bytes at Off. The response body is the bytes read
// (shorter than Len at the end of the object).
type ReadReq struct {
	Cap []byte // the capability (nil: none)
	ObjectReq
	Off uint64
	Len uint32
}

func (r ReadReq) Encode() []byte {
	e := wire.NewEncoder(32 + len(r.Cap))
	e.Bytes(r.Cap)
	r.encode(e)
	e.U64(r.Off)
	e.U32(r.Len)
	return e.B
}

func DecodeRead(b []byte) (ReadReq, error) {
	d := wire.NewDecoder(b)
	r := ReadReq{Cap: decodeCap(d), ObjectReq: decodeObject(d), Off: d.U64(), Len: d.U32()}
	if err := d.Done(); err != nil {
		return ReadReq{}, fmt.Errorf("storagerpc: read request: %w", err)
	}
	if r.Len > MaxIO {
		return ReadReq{}, fmt.Errorf("storagerpc: read of %d bytes (max %d)", r.Len, MaxIO)
	}
	return r, nil
}

// WriteReq stores Data at Off. The response body is the object's new
// version (u64).
type WriteReq struct {
	Cap []byte // the capability (nil: none)
	ObjectReq
	Off  uint64
	Data []byte
}

// EncodeHeader returns the request without its data: send it followed by
// Data as a separate part, so the data is never copied into a buffer.
func (r WriteReq) EncodeHeader() []byte {
	e := wire.NewEncoder(32 + len(r.Cap))
	e.Bytes(r.Cap)
	r.encode(e)
	e.U64(r.Off)
	e.U32(uint32(len(r.Data))) // the length prefix of Data
	return e.B
}

// DecodeWrite decodes a write request; Data aliases b.
func DecodeWrite(b []byte) (WriteReq, error) {
	d := wire.NewDecoder(b)
	r := WriteReq{Cap: decodeCap(d), ObjectReq: decodeObject(d), Off: d.U64(), Data: d.BytesMax(MaxIO)}
	if err := d.Done(); err != nil {
		return WriteReq{}, fmt.Errorf("storagerpc: write request: %w", err)
	}
	return r, nil
}

// EncodeVersion and DecodeVersion are the body of a response that is a
// version (a write's, of a service that does not count its blocks).
func EncodeVersion(v uint64) []byte {
	e := wire.NewEncoder(8)
	e.U64(v)
	return e.B
}

// EncodeWriteReply is the body of a write response: the object's new
// version and the bytes its allocated blocks take after the write.
func EncodeWriteReply(version, allocated uint64) []byte {
	e := wire.NewEncoder(16)
	e.U64(version)
	e.U64(allocated)
	return e.B
}

// DecodeWriteReply decodes a write response: version and allocated bytes,
// or the version alone (allocated proto.AllocatedUnknown).
func DecodeWriteReply(b []byte) (version, allocated uint64, err error) {
	if len(b) == 8 {
		v, err := DecodeVersion(b)
		return v, proto.AllocatedUnknown, err
	}
	d := wire.NewDecoder(b)
	version, allocated = d.U64(), d.U64()
	if err := d.Done(); err != nil {
		return 0, 0, fmt.Errorf("storagerpc: write response: %w", err)
	}
	return version, allocated, nil
}

func DecodeVersion(b []byte) (uint64, error) {
	d := wire.NewDecoder(b)
	v := d.U64()
	if err := d.Done(); err != nil {
		return 0, fmt.Errorf("storagerpc: write response: %w", err)
	}
	return v, nil
}

// TruncateReq sets an object's size. The response body is empty.
type TruncateReq struct {
	Cap []byte // the capability (nil: none)
	ObjectReq
	Size uint64
}

func (r TruncateReq) Encode() []byte {
	e := wire.NewEncoder(28 + len(r.Cap))
	e.Bytes(r.Cap)
	r.encode(e)
	e.U64(r.Size)
	return e.B
}

func DecodeTruncate(b []byte) (TruncateReq, error) {
	d := wire.NewDecoder(b)
	r := TruncateReq{Cap: decodeCap(d), ObjectReq: decodeObject(d), Size: d.U64()}
	if err := d.Done(); err != nil {
		return TruncateReq{}, fmt.Errorf("storagerpc: truncate request: %w", err)
	}
	return r, nil
}

// SpaceReq changes how a range of an object is backed
// (proto.StorageService.Space). The response body is empty.
type SpaceReq struct {
	Cap []byte // the capability (nil: none)
	ObjectReq
	Mode     proto.SpaceMode
	Off, Len uint64
}

func (r SpaceReq) Encode() []byte {
	e := wire.NewEncoder(48 + len(r.Cap))
	e.Bytes(r.Cap)
	r.encode(e)
	e.U8(uint8(r.Mode))
	e.U64(r.Off)
	e.U64(r.Len)
	return e.B
}

// DecodeSpace decodes a Space request; an unknown mode is an error.
func DecodeSpace(b []byte) (SpaceReq, error) {
	d := wire.NewDecoder(b)
	r := SpaceReq{Cap: decodeCap(d), ObjectReq: decodeObject(d), Mode: proto.SpaceMode(d.U8()), Off: d.U64(), Len: d.U64()}
	if err := d.Done(); err != nil {
		return SpaceReq{}, fmt.Errorf("storagerpc: space request: %w", err)
	}
	if r.Mode < proto.SpaceAllocate || r.Mode > proto.SpaceZero {
		return SpaceReq{}, fmt.Errorf("storagerpc: space request: unknown mode %d", r.Mode)
	}
	return r, nil
}

// SeekReq asks where an object's next data or hole is
// (proto.StorageService.Seek). The response is the offset, u64.
type SeekReq struct {
	Cap []byte // the capability (nil: none)
	ObjectReq
	Off  uint64
	What proto.SeekWhat
}

func (r SeekReq) Encode() []byte {
	e := wire.NewEncoder(40 + len(r.Cap))
	e.Bytes(r.Cap)
	r.encode(e)
	e.U64(r.Off)
	e.U8(uint8(r.What))
	return e.B
}

// DecodeSeek decodes a Seek request; an unknown What is an error.
func DecodeSeek(b []byte) (SeekReq, error) {
	d := wire.NewDecoder(b)
	r := SeekReq{Cap: decodeCap(d), ObjectReq: decodeObject(d), Off: d.U64(), What: proto.SeekWhat(d.U8())}
	if err := d.Done(); err != nil {
		return SeekReq{}, fmt.Errorf("storagerpc: seek request: %w", err)
	}
	if r.What != proto.SeekData && r.What != proto.SeekHole {
		return SeekReq{}, fmt.Errorf("storagerpc: seek request: unknown kind %d", r.What)
	}
	return r, nil
}

// CopyReq copies Len bytes of Src at SrcOff into Dst at DstOff
// (proto.StorageService.Copy). Cap must grant write on Dst, SrcCap read on
// Src. The response body is empty.
type CopyReq struct {
	Cap    []byte
	Dst    ObjectReq
	DstOff uint64
	SrcCap []byte
	Src    ObjectReq
	SrcOff uint64
	Len    uint64
}

func (r CopyReq) Encode() []byte {
	e := wire.NewEncoder(96 + len(r.Cap) + len(r.SrcCap))
	e.Bytes(r.Cap)
	r.Dst.encode(e)
	e.U64(r.DstOff)
	e.Bytes(r.SrcCap)
	r.Src.encode(e)
	e.U64(r.SrcOff)
	e.U64(r.Len)
	return e.B
}

// DecodeCopy decodes a Copy request; more than MaxCopy bytes is an error.
func DecodeCopy(b []byte) (CopyReq, error) {
	d := wire.NewDecoder(b)
	r := CopyReq{Cap: decodeCap(d), Dst: decodeObject(d), DstOff: d.U64(), SrcCap: decodeCap(d), Src: decodeObject(d), SrcOff: d.U64(), Len: d.U64()}
	if err := d.Done(); err != nil {
		return CopyReq{}, fmt.Errorf("storagerpc: copy request: %w", err)
	}
	if r.Len > MaxCopy {
		return CopyReq{}, fmt.Errorf("storagerpc: copy request of %d bytes (at most %d)", r.Len, MaxCopy)
	}
	return r, nil
}

// SyncReq makes an object's acknowledged writes durable. The response body
// is empty.
type SyncReq struct {
	Cap []byte // the capability (nil: none)
	ObjectReq
}

func (r SyncReq) Encode() []byte {
	e := wire.NewEncoder(20 + len(r.Cap))
	e.Bytes(r.Cap)
	r.encode(e)
	return e.B
}

// DecodeSync decodes a Sync request.
func DecodeSync(b []byte) (SyncReq, error) {
	d := wire.NewDecoder(b)
	r := SyncReq{Cap: decodeCap(d), ObjectReq: decodeObject(d)}
	if err := d.Done(); err != nil {
		return SyncReq{}, fmt.Errorf("storagerpc: sync request: %w", err)
	}
	return r, nil
}

// Encode encodes a Remove request.
func (r ObjectReq) Encode() []byte {
	e := wire.NewEncoder(16)
	r.encode(e)
	return e.B
}

func decodeObjectReq(what string, b []byte) (ObjectReq, error) {
	d := wire.NewDecoder(b)
	r := decodeObject(d)
	if err := d.Done(); err != nil {
		return ObjectReq{}, fmt.Errorf("storagerpc: %s request: %w", what, err)
	}
	return r, nil
}

// DecodeRemove decodes a Remove request. The response body is empty.
func DecodeRemove(b []byte) (ObjectReq, error) { return decodeObjectReq("remove", b) }

// removeManyObj is the size of one object of a RemoveMany request.
const removeManyObj = 8 + 4 + 8

// RemoveManyReq names objects of one target to remove. The response body
// is empty.
type RemoveManyReq struct {
	Target proto.TargetID
	Objs   []proto.ObjectID
}

// Encode encodes the request: target u32, count u32, then ino u64, stripe
// u32 and gen u64 per object.
func (r RemoveManyReq) Encode() []byte {
	e := wire.NewEncoder(8 + removeManyObj*len(r.Objs))
	e.U32(uint32(r.Target))
	e.U32(uint32(len(r.Objs)))
	for _, o := range r.Objs {
		e.U64(uint64(o.Ino))
		e.U32(o.Stripe)
		e.U64(o.Gen)
	}
	return e.B
}

// DecodeRemoveMany decodes a RemoveMany request.
func DecodeRemoveMany(b []byte) (RemoveManyReq, error) {
	d := wire.NewDecoder(b)
	r := RemoveManyReq{Target: proto.TargetID(d.U32())}
	n := d.U32()
	if d.Err() == nil && n > MaxRemoveMany {
		return RemoveManyReq{}, fmt.Errorf("storagerpc: remove-many request: %d objects, at most %d", n, MaxRemoveMany)
	}
	if d.Err() == nil && uint64(len(b)) != 8+removeManyObj*uint64(n) {
		return RemoveManyReq{}, fmt.Errorf("storagerpc: remove-many request: %d bytes for %d objects", len(b), n)
	}
	r.Objs = make([]proto.ObjectID, 0, n)
	for range n {
		r.Objs = append(r.Objs, proto.ObjectID{Ino: proto.Ino(d.U64()), Stripe: d.U32(), Gen: d.U64()})
	}
	if err := d.Done(); err != nil {
		return RemoveManyReq{}, fmt.Errorf("storagerpc: remove-many request: %w", err)
	}
	return r, nil
}
