// Package config loads the optional TOML file that every long-running weft
// command (meta, storage, mount) accepts with --config.
//
// A command describes its settings once, as a struct whose fields carry a
// `toml:"key"` tag and are bound to command-line flags. Load decodes the file
// into a fresh copy of that struct and copies over every key the file sets,
// except those whose flag was given on the command line.
//
// Invariants:
//   - Precedence is command line > config file > flag default.
//   - A key the struct does not know is an error naming the key and the file:
//     a misspelt setting never silently falls back to a default.
//   - Sizes and durations use internal/units types, so "10GiB" and "30s" mean
//     the same in a file as on the command line.
//   - By default a field's flag has the name of its TOML key with '_' turned
//     into '-'; a `flag:"name"` tag overrides that (e.g. key "targets", flag
//     "target").
package config
