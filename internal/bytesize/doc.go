// Package bytesize reads and writes byte sizes the way people type them
// (--memory-limit, kernelspec settings) and the way messages show them.
//
// # What it owns
//
// Parse, which takes "8G", "8GB", "8GiB", "512Mi", "1.5G" or a bare number
// of bytes, and Format, which writes a size back in the largest binary unit
// that keeps at most one decimal ("300 MiB"). Every unit is a power of 1024
// however it is spelled, as for Docker's --memory and the cgroup memory
// files: there is no decimal (1000-based) reading.
//
// # What it assumes
//
// Nothing about the host: both functions are pure, safe for concurrent use,
// and build on every platform. Format(n) parsed back with Parse is never
// more than n (Format rounds down).
package bytesize
