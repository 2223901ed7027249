package storagerpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"syscall"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// OpReadSums reads with the checksums: the request is OpRead's (its offset
// and length multiples of SumBlock: whole blocks, as a checksum covers a
// whole block); the response is a head of ReadSumsHead(len)
// bytes, then the bytes read:
//
//	u8 format (1), u32 n (the bytes read, up to the object's end),
//	(cur u32, prev u32) x ceil(len/SumBlock): the sidecar entries of the blocks
//	n bytes
//
// The server does not check the bytes: it sends them straight from its
// page cache with sendfile(2) (transport.SendFile; through its own buffer
// when it cannot, e.g. on an encrypted connection), and the Client checks
// every block against its entries as the server's Read does. On a
// mismatch the Client reads the range again with OpRead, which checks on
// the server: it fails with EIO and reports the object as corrupt, or
// returns the bytes of a write that raced with the first read. So every
// byte a read returns is still checked, once, and the server copies none.
// OpJobReadSums is OpJob around OpReadSums.
const (
	OpReadSums    uint16 = 171
	OpJobReadSums uint16 = 172
)

// SumBlock is the block size of the checksums (storage.BlockSize).
const SumBlock = 4096

// MinReadSums is the smallest read the Client sends as OpReadSums. Below
// it the server's copy costs less than what the op adds (a second buffer
// on the client, the sendfile call, the checksums sent): 4 KiB random
// reads with warm caches took 5-10 % more CPU per read as OpReadSums.
const MinReadSums = 64 << 10

const readSumsFormat = 1

// ReadSumsHead is the size of an OpReadSums response's head for a request
// of n bytes.
func ReadSumsHead(n int) int { return 5 + 8*((n+SumBlock-1)/SumBlock) }

// SpanReader is what a storage service implements to serve OpReadSums
// (storage.Server.ReadSpan): the entries of the blocks of [off, off+n)
// into sums, and the range of data to send, held in place until release.
type SpanReader interface {
	ReadSpan(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off uint64, n int, sums []byte) (data io.ReaderAt, dataOff int64, dataLen int, release func(), err error)
}

// ErrChecksum is wrapped by CheckBlocks' errors: bytes that match neither
// checksum of their block.
var ErrChecksum = errors.New("storagerpc: bytes do not match their checksums")

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	zeroBlock  = make([]byte, SumBlock)
	// ZeroBlockCRC is the CRC32C of a block of zeros: what a hole reads
	// as.
	ZeroBlockCRC = crc32.Checksum(zeroBlock, castagnoli)
)

// BlockCRC is the CRC32C of a block whose first len(b) bytes are b and
// whose remaining bytes (past the end of the object) are zero: the
// checksum a storage target's sidecar keeps for each block.
func BlockCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	if len(b) < SumBlock {
		c = crc32.Update(c, castagnoli, zeroBlock[:SumBlock-len(b)])
	}
	return c
}

// SumMatches reports whether a block whose CRC is c matches a stored
// checksum: a stored 0 is a hole, which a block of zeros matches.
func SumMatches(c, stored uint32) bool {
	return c == stored || (stored == 0 && c == ZeroBlockCRC)
}

// CheckBlocks checks data, the bytes of consecutive blocks from a block
// boundary (the last one may be short: the object ends there, and its
// checksum counts the rest of the block as zeros), against sums, their
// entries (8 bytes each, {cur, prev}; 0 is a hole, which only zeros
// match). A block matches when its CRC32C is cur or prev, as the storage
// server's own check (package storage's sidecar).
func CheckBlocks(data, sums []byte) error {
	for i := 0; len(data) > 0; i++ {
		if len(sums) < 8*(i+1) {
			return fmt.Errorf("%w: no entry for block %d", ErrChecksum, i)
		}
		b := data[:min(len(data), SumBlock)]
		data = data[len(b):]
		c := BlockCRC(b)
		cur := binary.LittleEndian.Uint32(sums[8*i:])
		prev := binary.LittleEndian.Uint32(sums[8*i+4:])
		if !SumMatches(c, cur) && !SumMatches(c, prev) {
			return fmt.Errorf("%w: block %d", ErrChecksum, i)
		}
	}
	return nil
}

// serveReadSums serves OpReadSums: see the op's documentation.
func (h *Handler) serveReadSums(ctx context.Context, req []byte) ([]byte, error) {
	r, err := DecodeRead(req)
	if err == nil && (r.Off%SumBlock != 0 || r.Len%SumBlock != 0) {
		err = fmt.Errorf("storagerpc: checked read of %d bytes at %d, not whole blocks of %d", r.Len, r.Off, SumBlock)
	}
	if err != nil {
		return h.bad(OpReadSums, req, err)
	}
	if err := h.guard.object(ctx, OpReadSums, r.Cap, r.Obj, proto.AccessRead); err != nil {
		return nil, err
	}
	sr, ok := h.svc.(SpanReader)
	if !ok {
		return nil, fmt.Errorf("storagerpc: this storage cannot send checksums: %w", syscall.ENOSYS)
	}
	head := make([]byte, ReadSumsHead(int(r.Len)))
	head[0] = readSumsFormat
	if r.Len == 0 {
		return head, nil
	}
	// The read budget bounds the spans a connection holds (each keeps its
	// object's read lock until sent), and the buffer of a copied one.
	g, err := h.acquire(ctx, readCost(r.Len))
	if err != nil {
		return nil, err
	}
	data, off, n, release, err := sr.ReadSpan(ctx, r.Target, r.Obj, r.Off, int(r.Len), head[5:])
	if err != nil {
		release()
		g.release()
		return nil, err
	}
	binary.LittleEndian.PutUint32(head[1:], uint32(n))
	if n == 0 {
		release()
		g.release()
		return head, nil
	}
	if sc, ok := data.(syscall.Conn); ok && transport.SendFile(ctx, sc, off, n) {
		// Sent after the head, straight from the page cache; the handle
		// (its descriptor) stays held until then.
		transport.AfterResponse(ctx, func() {
			release()
			g.release()
		})
		return head, nil
	}
	buf := h.bufs.Get(len(head) + n)
	copy(buf, head)
	got, err := data.ReadAt(buf[len(head):], off)
	release()
	if got < n {
		h.bufs.Put(buf)
		g.release()
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("storagerpc: checked read of %d bytes at %d: %w (%w)", n, off, err, syscall.EIO)
	}
	g.buf = buf
	if !transport.AfterResponse(ctx, g.release) {
		g.buf = nil
		g.release()
	}
	return buf, nil
}

// readSums reads into p from off with OpReadSums and checks every block;
// errors match ErrChecksum when the bytes do not match their checksums,
// and ENOSYS when the server does not know the op.
func (c *Client) readSums(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off uint64, p []byte) (int, error) {
	done := 0
	for done < len(p) {
		want := min(len(p)-done, MaxIO)
		req := ReadReq{Cap: proto.CapabilityFrom(ctx), ObjectReq: ObjectReq{Target: t, Obj: obj}, Off: off + uint64(done), Len: uint32(want)}
		dst := p[done : done+want]
		head := c.bufs.Get(ReadSumsHead(want))
		rb := &transport.ResponseBuffers{Head: head, Body: dst}
		resp, err := c.call(transport.WithResponseBuffers(ctx, rb), t, OpReadSums, req.Encode())
		if err == nil && !rb.Fit { // another transport, or a body of another size
			if len(resp) < len(head) || len(resp)-len(head) > want {
				err = fmt.Errorf("storagerpc: checked read answered %d bytes for %d: %w", len(resp), want, syscall.EIO)
			} else {
				copy(head, resp)
				resp = dst[:copy(dst, resp[len(head):])]
			}
		}
		if err == nil {
			err = checkReadSums(head, resp)
		}
		c.bufs.Put(head)
		if err != nil {
			return done, err
		}
		done += len(resp)
		if len(resp) < want {
			break
		}
	}
	return done, nil
}

// checkReadSums checks an OpReadSums response: its head, and data against
// the entries in it.
func checkReadSums(head, data []byte) error {
	if head[0] != readSumsFormat {
		return fmt.Errorf("storagerpc: checked read of format %d (want %d): %w", head[0], readSumsFormat, syscall.EIO)
	}
	if n := binary.LittleEndian.Uint32(head[1:]); int(n) != len(data) {
		return fmt.Errorf("storagerpc: checked read says %d bytes, sent %d: %w", n, len(data), syscall.EIO)
	}
	return CheckBlocks(data, head[5:])
}
