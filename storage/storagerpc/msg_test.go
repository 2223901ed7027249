package storagerpc

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/weft-fs/weft/proto"
)

var (
	sampleObj  = ObjectReq{Target: 7, Obj: proto.ObjectID{Ino: 1 << 40, Stripe: 3}}
	sampleCap  = []byte("a capability, opaque to this package")
	sampleSync = SyncReq{sampleCap, sampleObj}
	sampleMany = RemoveManyReq{Target: 9, Objs: []proto.ObjectID{{Ino: 5, Stripe: 0}, {Ino: 1 << 50, Stripe: 7}}}
)

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name   string
		encode func() []byte
		decode func([]byte) (any, error)
		want   any
	}{
		{"read", ReadReq{sampleCap, sampleObj, 12345, 4096}.Encode, func(b []byte) (any, error) { return DecodeRead(b) }, ReadReq{sampleCap, sampleObj, 12345, 4096}},
		{"write", func() []byte {
			r := WriteReq{sampleCap, sampleObj, 99, []byte("data")}
			return append(r.EncodeHeader(), r.Data...)
		}, func(b []byte) (any, error) { return DecodeWrite(b) }, WriteReq{sampleCap, sampleObj, 99, []byte("data")}},
		{"empty write", func() []byte { return WriteReq{sampleCap, sampleObj, 0, []byte{}}.EncodeHeader() },
			func(b []byte) (any, error) { return DecodeWrite(b) }, WriteReq{sampleCap, sampleObj, 0, []byte{}}},
		{"truncate", TruncateReq{sampleCap, sampleObj, 1 << 33}.Encode, func(b []byte) (any, error) { return DecodeTruncate(b) }, TruncateReq{sampleCap, sampleObj, 1 << 33}},
		{"space", SpaceReq{sampleCap, sampleObj, proto.SpacePunch, 4096, 1 << 40}.Encode, func(b []byte) (any, error) { return DecodeSpace(b) },
			SpaceReq{sampleCap, sampleObj, proto.SpacePunch, 4096, 1 << 40}},
		{"seek", SeekReq{sampleCap, sampleObj, 77, proto.SeekHole}.Encode, func(b []byte) (any, error) { return DecodeSeek(b) }, SeekReq{sampleCap, sampleObj, 77, proto.SeekHole}},
		{"copy", sampleCopy.Encode, func(b []byte) (any, error) { return DecodeCopy(b) }, sampleCopy},
		{"sync", sampleSync.Encode, func(b []byte) (any, error) { return DecodeSync(b) }, sampleSync},
		{"read without capability", ReadReq{nil, sampleObj, 1, 2}.Encode, func(b []byte) (any, error) { return DecodeRead(b) }, ReadReq{nil, sampleObj, 1, 2}},
		{"remove", sampleObj.Encode, func(b []byte) (any, error) { return DecodeRemove(b) }, sampleObj},
		{"remove many", sampleMany.Encode, func(b []byte) (any, error) { return DecodeRemoveMany(b) }, sampleMany},
		{"remove none", RemoveManyReq{Target: 1, Objs: []proto.ObjectID{}}.Encode, func(b []byte) (any, error) { return DecodeRemoveMany(b) },
			RemoveManyReq{Target: 1, Objs: []proto.ObjectID{}}},
		{"version", func() []byte { return EncodeVersion(42) }, func(b []byte) (any, error) { return DecodeVersion(b) }, uint64(42)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.encode()
			got, err := tc.decode(b)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("decode = %+v, %v; want %+v", got, err, tc.want)
			}
			for n := 0; n < len(b); n++ {
				if _, err := tc.decode(b[:n]); err == nil {
					t.Fatalf("truncated to %d bytes: accepted", n)
				}
			}
			if _, err := tc.decode(append(bytes.Clone(b), 0)); err == nil {
				t.Fatal("trailing byte accepted")
			}
		})
	}
}

func TestLimits(t *testing.T) {
	if _, err := DecodeRead(ReadReq{sampleCap, sampleObj, 0, MaxIO + 1}.Encode()); err == nil {
		t.Fatal("read over MaxIO accepted")
	}
	if _, err := DecodeRead(ReadReq{sampleCap, sampleObj, 0, MaxIO}.Encode()); err != nil {
		t.Fatal(err)
	}
	many := RemoveManyReq{Target: 1, Objs: make([]proto.ObjectID, MaxRemoveMany+1)}
	if _, err := DecodeRemoveMany(many.Encode()); err == nil {
		t.Fatal("remove-many over MaxRemoveMany accepted")
	}
	// A count promising far more objects than the body holds is refused
	// before anything is allocated for them.
	lie := RemoveManyReq{Target: 1, Objs: make([]proto.ObjectID, 3)}.Encode()
	lie[4] = 200
	if _, err := DecodeRemoveMany(lie); err == nil {
		t.Fatal("remove-many with a count larger than its body accepted")
	}
	long := ReadReq{make([]byte, MaxCapability+1), sampleObj, 0, 1}
	if _, err := DecodeRead(long.Encode()); err == nil {
		t.Fatal("capability over MaxCapability accepted")
	}
	big := WriteReq{sampleCap, sampleObj, 0, make([]byte, MaxIO+1)}
	if _, err := DecodeWrite(append(big.EncodeHeader(), big.Data...)); err == nil {
		t.Fatal("write over MaxIO accepted")
	}
}

func FuzzDecodeRead(f *testing.F) {
	f.Add(ReadReq{sampleCap, sampleObj, 1, 2}.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := DecodeRead(b); err == nil && !bytes.Equal(r.Encode(), b) {
			t.Fatalf("%+v does not re-encode to its input", r)
		}
	})
}

func FuzzDecodeWrite(f *testing.F) {
	r := WriteReq{sampleCap, sampleObj, 5, []byte("abc")}
	f.Add(append(r.EncodeHeader(), r.Data...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := DecodeWrite(b); err == nil && !bytes.Equal(append(r.EncodeHeader(), r.Data...), b) {
			t.Fatalf("%+v does not re-encode to its input", r)
		}
	})
}

func FuzzDecodeTruncate(f *testing.F) {
	f.Add(TruncateReq{sampleCap, sampleObj, 9}.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := DecodeTruncate(b); err == nil && !bytes.Equal(r.Encode(), b) {
			t.Fatalf("%+v does not re-encode to its input", r)
		}
	})
}

func FuzzDecodeSpace(f *testing.F) {
	f.Add(SpaceReq{sampleCap, sampleObj, proto.SpaceZero, 9, 10}.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := DecodeSpace(b); err == nil && !bytes.Equal(r.Encode(), b) {
			t.Fatalf("%+v does not re-encode to its input", r)
		}
	})
}

func FuzzDecodeSeek(f *testing.F) {
	f.Add(SeekReq{sampleCap, sampleObj, 9, proto.SeekData}.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := DecodeSeek(b); err == nil && !bytes.Equal(r.Encode(), b) {
			t.Fatalf("%+v does not re-encode to its input", r)
		}
	})
}

var sampleCopy = CopyReq{sampleCap, ObjectReq{Target: 2, Obj: proto.ObjectID{Ino: 9, Stripe: 1, Gen: 5}}, 4097, []byte("source cap"), sampleObj, 77, 1 << 20}

func FuzzDecodeCopy(f *testing.F) {
	f.Add(sampleCopy.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := DecodeCopy(b); err == nil && !bytes.Equal(r.Encode(), b) {
			t.Fatalf("%+v does not re-encode to its input", r)
		}
	})
}

func FuzzDecodeSync(f *testing.F) {
	f.Add(sampleSync.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := DecodeSync(b); err == nil && !bytes.Equal(r.Encode(), b) {
			t.Fatalf("%+v does not re-encode to its input", r)
		}
	})
}

func FuzzDecodeRemove(f *testing.F) {
	f.Add(sampleObj.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := DecodeRemove(b); err == nil && !bytes.Equal(r.Encode(), b) {
			t.Fatalf("%+v does not re-encode to its input", r)
		}
	})
}

func FuzzDecodeRemoveMany(f *testing.F) {
	f.Add(sampleMany.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := DecodeRemoveMany(b); err == nil && !bytes.Equal(r.Encode(), b) {
			t.Fatalf("%+v does not re-encode to its input", r)
		}
	})
}

func FuzzDecodeVersion(f *testing.F) {
	f.Add(EncodeVersion(3))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := DecodeVersion(b); err == nil && !bytes.Equal(EncodeVersion(v), b) {
			t.Fatalf("%d does not re-encode to its input", v)
		}
	})
}
