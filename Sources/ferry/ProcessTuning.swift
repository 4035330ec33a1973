#if canImport(Glibc)
    import Glibc
#endif

/// Settings of the `ferry serve` process itself (a library never changes them for its host).
enum ProcessTuning {
    /// The server keeps every retained snapshot (and its gzip copy) open, so a scoped dataset with many scopes needs
    /// more descriptors than the usual soft limit of 1024: raise the soft limit to the hard one.
    static func raiseOpenFileLimit() {
        #if canImport(Glibc)
            var limit = rlimit()
            let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
            if getrlimit(resource, &limit) == 0, limit.rlim_cur < limit.rlim_max {
                limit.rlim_cur = limit.rlim_max
                _ = setrlimit(resource, &limit)
            }
        #endif
    }

    /// Streamed downloads allocate a 1 MiB buffer per chunk on the thread pool and free it on an event loop. With
    /// glibc's dynamic mmap threshold those buffers move into the per-thread arenas after the first free, and
    /// fragmentation kept the server's RSS at several times the memory in use (measured by scripts/hostile: 10
    /// concurrent 130 MB downloads left RSS 250 MiB above idle, 50 left 900 MiB, and it never came back). A fixed
    /// threshold keeps such buffers in their own mappings, returned to the system when freed.
    static func fixMallocThreshold() {
        #if canImport(Glibc)
            // mallopt is declared in <malloc.h>, which the Glibc module does not import: look it up. Only a tuning: if
            // it is missing or fails, glibc keeps its default behaviour, which is correct, just heavier.
            typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
            let mmapThreshold: Int32 = -3  // M_MMAP_THRESHOLD in <malloc.h>
            if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") {
                _ = unsafeBitCast(symbol, to: Mallopt.self)(mmapThreshold, 128 * 1024)
            }
        #endif
    }
}
