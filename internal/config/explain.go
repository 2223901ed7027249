package config

import (
	"os"
	"reflect"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/pflag"
)

// Setting is one key a config file set: its TOML key and its flag's name.
type Setting struct{ Key, Flag string }

// FromFile returns the settings of dst (as Load would apply them) that the
// file at path sets and the command line did not override. A file that
// cannot be read or decoded sets nothing (Load reports why).
func FromFile(path string, fs *pflag.FlagSet, dst any) []Setting {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	t := reflect.TypeOf(dst)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	md, err := toml.Decode(string(data), reflect.New(t).Interface())
	if err != nil {
		return nil
	}
	var out []Setting
	for _, f := range fields(t) {
		if !md.IsDefined(f.key) {
			continue
		}
		if fs != nil {
			if fl := fs.Lookup(f.flag); fl != nil && fl.Changed {
				continue
			}
		}
		out = append(out, Setting{Key: f.key, Flag: f.flag})
	}
	return out
}

// Explain returns err with every mention of the flag of a setting the
// config file at path set ("--timeout") replaced by the key and the file
// (`timeout (in /etc/weft/mount.toml)`), so that a value from the file is
// not reported as if it had been given on the command line. The result
// wraps err (errors.Is and As still see it).
func Explain(err error, path string, set []Setting) error {
	if err == nil || len(set) == 0 {
		return err
	}
	msg := err.Error()
	for _, s := range set {
		re := regexp.MustCompile(`--` + regexp.QuoteMeta(s.Flag) + `([^a-z0-9-]|$)`)
		msg = re.ReplaceAllString(msg, strings.ReplaceAll(s.Key+" (in "+path+")", "$", "$$")+"$1")
	}
	if msg == err.Error() {
		return err
	}
	return &explained{msg, err}
}

type explained struct {
	msg string
	err error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }
