//! How the process asks glibc's allocator to behave: no fastbins.
//!
//! glibc keeps freed small chunks in "fastbins" and merges them all in one pass
//! (`malloc_consolidate`) at the next large allocation. After the reaper frees a million cells
//! at a window rollover, that one pass ran inside a decision: its longest wait was 62–65 ms
//! (`cargo bench --bench memory rollover`, BENCHMARKS.md "Background work at 1M live cells").
//! Without fastbins the freed chunks are merged as they are freed, a little at a time, and the
//! longest wait fell to 9–10 ms, while the per-thread cache (tcache) still serves the warm
//! path's few small allocations: the engine's warm decision and thread benches measured no
//! slower, and memory per live cell stayed at 257–258 B.
//!
//! Only the binaries call this (the service, the benches that measure it): an allocator is a
//! process's choice, not a library's.

/// Turns glibc's fastbins off (`mallopt(M_MXFAST, 0)`); nothing on other C libraries.
pub fn avoid_consolidation_stalls() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only changes the allocator's tuning; glibc documents `M_MXFAST` with
    // 0 as "no fastbins". It is called before any thread of ours starts.
    unsafe {
        libc::mallopt(libc::M_MXFAST, 0);
    }
}
