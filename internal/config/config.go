package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/pflag"
)

// ErrUnknownKey is wrapped by Load's error when the file sets a key that the
// command does not have.
var ErrUnknownKey = errors.New("config: unknown key")

// Load reads the TOML file at path into dst, a pointer to a struct whose
// fields are already filled from flags (defaults or given values). For every
// key the file sets, the field is overwritten unless its flag was changed on
// the command line (fs may be nil: then the file wins for every key it sets).
// An empty path does nothing.
func Load(path string, fs *pflag.FlagSet, dst any) error {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return Decode(path, string(data), fs, dst)
}

// Decode is Load for a file's contents already in memory; name is used in
// error messages.
func Decode(name, data string, fs *pflag.FlagSet, dst any) error {
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("config: Decode wants a pointer to a struct, got %T", dst)
	}
	fromFile := reflect.New(rv.Elem().Type())
	md, err := toml.Decode(data, fromFile.Interface())
	if err != nil {
		return fmt.Errorf("config %s: %w", name, err)
	}
	known := Keys(dst)
	var unknown []string
	for _, k := range md.Undecoded() {
		unknown = append(unknown, fmt.Sprintf("%q", k.String()))
	}
	// Exported fields without a toml tag are matched by name by the decoder;
	// they are not settings, so a file that names them is wrong too.
	for _, k := range md.Keys() {
		if len(k) == 1 && !slices.Contains(known, k[0]) && !slices.Contains(unknown, fmt.Sprintf("%q", k[0])) {
			unknown = append(unknown, fmt.Sprintf("%q", k[0]))
		}
	}
	if len(unknown) > 0 {
		keys := unknown
		return fmt.Errorf("%w %s in %s (known keys: %s)", ErrUnknownKey, strings.Join(keys, ", "), name, strings.Join(known, ", "))
	}
	for _, f := range fields(rv.Elem().Type()) {
		if !md.IsDefined(f.key) {
			continue
		}
		if fs != nil {
			if fl := fs.Lookup(f.flag); fl != nil && fl.Changed {
				continue
			}
		}
		rv.Elem().FieldByIndex(f.index).Set(fromFile.Elem().FieldByIndex(f.index))
	}
	return nil
}

// Keys lists the TOML keys that the struct pointed to by dst accepts, sorted.
func Keys(dst any) []string {
	t := reflect.TypeOf(dst)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var keys []string
	for _, f := range fields(t) {
		keys = append(keys, f.key)
	}
	sort.Strings(keys)
	return keys
}

// field is one setting: its TOML key, its flag name and where it is in the
// struct (embedded structs are flattened, as the TOML decoder does).
type field struct {
	key, flag string
	index     []int
}

func fields(t reflect.Type) []field {
	var out []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if f.Anonymous && f.Type.Kind() == reflect.Struct && tag == "" {
			for _, inner := range fields(f.Type) {
				inner.index = append([]int{i}, inner.index...)
				out = append(out, inner)
			}
			continue
		}
		if !f.IsExported() || tag == "" || tag == "-" {
			continue
		}
		name := f.Tag.Get("flag")
		if name == "" {
			name = strings.ReplaceAll(tag, "_", "-")
		}
		out = append(out, field{key: tag, flag: name, index: []int{i}})
	}
	return out
}
