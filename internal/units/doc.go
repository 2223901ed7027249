// Package units parses and prints the human sizes and durations that flags
// and config files accept: "1MiB", "512k", "4G", "30s", "2m".
//
// Sizes are binary: "k", "K", "KiB" and "KB" all mean 1024 bytes; weft never
// uses decimal multiples, so a storage admin never has to guess.
package units
