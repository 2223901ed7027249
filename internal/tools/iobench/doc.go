// Command iobench is the I/O load of scripts/bench-protect.sh: sequential
// writes and reads of one file and 4 KiB random reads of it, with direct
// I/O, each printing one JSON line of what it measured. It is a measuring
// tool (fio is not installed on the development machines, and weft bench
// io500 runs its phases only all together), not part of weft.
//
//	iobench write FILE [--size 1GiB] [--bs 1MiB] [--direct=true]
//	iobench read FILE [--bs 1MiB] [--direct=true]
//	iobench randread FILE [--bs 4KiB] [--jobs 4] [--time 10s] [--direct=true]
//
// write creates (or truncates) FILE, writes --size bytes in --bs blocks
// and fsyncs it before the clock stops, so the figure is what reached the
// servers, not the page cache. read reads FILE from start to end. randread
// runs --jobs readers, each with its own descriptor, reading blocks at
// random block-aligned offsets of FILE for --time; the file must hold at
// least one block.
//
// Output, one line: {"op":"write","bytes":N,"ops":N,"seconds":S,"mib_s":X,"iops":Y}.
// With --direct the buffers are page-aligned (O_DIRECT needs it) and the
// sizes must be multiples of 4 KiB. Any error (a short read included)
// ends the run with a non-zero exit: a benchmark that read less than it
// says would report a wrong figure.
package main
