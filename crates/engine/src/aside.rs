//! Large buffers freed away from the runtime's workers.
//!
//! Freeing a buffer of a hundred megabytes (the read of a global sync at a million cells)
//! gives its pages back to the kernel (`munmap`), which takes milliseconds in proportion to
//! the pages touched. On a one-worker runtime that is a stall of every decision (the sync
//! merge's last turn, 7 to 16 ms of CPU in `munmap` for a 104 MB buffer). Dropped
//! on tokio's blocking pool instead, the pages are returned on another thread while
//! decisions go on.
//!
//! Used where such buffers are emptied: the sync merge (`Publication::merge_synced_all`)
//! and `gcounter_sql`'s decode of a sync's rows.

/// Buffers at least this large are dropped on the blocking pool; smaller ones cost less to
/// free than handing them over does.
pub const ASIDE_BYTES: usize = 1 << 20;

/// Drop `value`, which holds about `bytes` of memory: on tokio's blocking pool when it is at
/// least [`ASIDE_BYTES`] and a runtime is running here, otherwise at once.
///
/// Only for values whose drop does nothing but free memory (no lock, no I/O, no effect a
/// caller waits for): when the drop happens is not observable otherwise.
pub fn drop_aside<T: Send + 'static>(value: T, bytes: usize) {
    if bytes < ASIDE_BYTES {
        return drop(value);
    }
    match tokio::runtime::Handle::try_current() {
        // The handle of the blocking task is not awaited: nobody waits for a free.
        Ok(runtime) => drop(runtime.spawn_blocking(move || drop(value))),
        Err(_) => drop(value),
    }
}

/// The bytes a `Vec`'s buffer holds (its capacity, not its length).
pub fn buffer_bytes<T>(buffer: &Vec<T>) -> usize {
    buffer.capacity().saturating_mul(size_of::<T>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts its drops and the threads they ran on.
    struct Probe {
        drops: Arc<AtomicUsize>,
        on: Arc<std::sync::Mutex<Option<std::thread::ThreadId>>>,
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
            if let Ok(mut on) = self.on.lock() {
                *on = Some(std::thread::current().id());
            }
        }
    }

    fn probe() -> (
        Probe,
        Arc<AtomicUsize>,
        Arc<std::sync::Mutex<Option<std::thread::ThreadId>>>,
    ) {
        let drops = Arc::new(AtomicUsize::new(0));
        let on = Arc::new(std::sync::Mutex::new(None));
        let probe = Probe {
            drops: Arc::clone(&drops),
            on: Arc::clone(&on),
        };
        (probe, drops, on)
    }

    #[test]
    fn a_small_value_or_no_runtime_drops_at_once() {
        let (small, drops, _) = probe();
        drop_aside(small, ASIDE_BYTES - 1);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        // no runtime here: even a large value is dropped in place
        let (large, drops, on) = probe();
        drop_aside(large, ASIDE_BYTES);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        assert_eq!(*on.lock().unwrap(), Some(std::thread::current().id()));
    }

    #[test]
    fn a_large_value_is_dropped_on_another_thread() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (large, drops, on) = probe();
        runtime.block_on(async { drop_aside(large, ASIDE_BYTES) });
        // shutting the runtime down waits for its blocking pool
        drop(runtime);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        let thread = *on.lock().unwrap();
        assert!(thread.is_some());
        assert_ne!(thread, Some(std::thread::current().id()));
    }

    #[test]
    fn a_buffer_weighs_its_capacity() {
        let buffer: Vec<u64> = Vec::with_capacity(10);
        assert_eq!(buffer_bytes(&buffer), 80);
    }
}
