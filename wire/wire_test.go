package wire

import (
	"errors"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var e Encoder
	e.U8(1)
	e.U16(2)
	e.U32(3)
	e.U64(4)
	e.I64(-5)
	e.Bool(true)
	e.Bytes([]byte("abc"))
	e.String("name")
	d := NewDecoder(e.B)
	if d.U8() != 1 || d.U16() != 2 || d.U32() != 3 || d.U64() != 4 || d.I64() != -5 || !d.Bool() ||
		string(d.Bytes()) != "abc" || d.String() != "name" {
		t.Fatal("values differ")
	}
	if err := d.Done(); err != nil {
		t.Fatal(err)
	}
}

func TestTruncatedAndTrailing(t *testing.T) {
	d := NewDecoder([]byte{1, 2})
	if d.U32() != 0 || !errors.Is(d.Err(), ErrTruncated) {
		t.Fatalf("want truncated, got %v", d.Err())
	}
	// Reads after an error keep returning zero values.
	if d.U8() != 0 || d.Bytes() != nil {
		t.Fatal("read after error returned data")
	}
	d = NewDecoder([]byte{1, 2})
	d.U8()
	if d.Done() == nil {
		t.Fatal("trailing byte accepted")
	}
}

func TestLimits(t *testing.T) {
	var e Encoder
	e.U32(1 << 30) // a hostile length prefix
	d := NewDecoder(e.B)
	if d.Bytes() != nil || !errors.Is(d.Err(), ErrTooLong) {
		t.Fatalf("want too long, got %v", d.Err())
	}
	e = Encoder{}
	e.U32(1000) // count larger than the bytes that follow
	d = NewDecoder(e.B)
	if d.Count(1<<20, 8) != 0 || d.Err() == nil {
		t.Fatal("count beyond input accepted")
	}
}

func FuzzDecoder(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{255, 255, 255, 255, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDecoder(b)
		for d.Err() == nil && len(d.Remaining()) > 0 {
			switch len(d.Remaining()) % 4 {
			case 0:
				d.Bytes()
			case 1:
				d.U64()
			case 2:
				d.Count(100, 1)
			default:
				_ = d.String()
			}
		}
	})
}
