//! A global allocator that keeps large freed blocks for the next allocation of the same size.
//!
//! On the CPU backends every tensor operation allocates its output, and a training step frees
//! and allocates the same large buffers again each step: BERT-base's 94 MB word-embedding
//! gradient several times, every 9.4 MB feed-forward gradient, the optimizer's copies. The
//! system allocator returns blocks of that size to the kernel when they are freed (glibc maps
//! anything over 32 MB on its own and trims or deletes its 64 MB thread heaps), so each step
//! page-faults all of them back in, zeroed, and the kernel's page clearing and TLB shootdowns
//! take a share of the step (docs/history/performance.md has the profile).
//!
//! [`BlockCache`] wraps [`System`]: a freed block of at least [`BlockCache::MIN_BLOCK`] bytes is
//! kept, and an allocation of the same size class and alignment takes it back, already mapped.
//! A large block's size is rounded up to its class (within an eighth of it: [`size_class`]),
//! so that the activations of batches of a few more or fewer tokens, which differ in size by a
//! little each step, find each other's blocks. Smaller blocks go to the system allocator
//! unchanged. The blocks kept never
//! exceed the most the program has had in large blocks in use at once (the oldest go back to
//! the system first), so memory stays within twice the program's own peak: a training step,
//! which uses the same sizes each step, finds them again, and a pipeline whose batches change
//! shape keeps no more than its largest batch used (unbounded, a long `embed` would keep
//! blocks of sizes no later batch asks for). A byte budget and a count of
//! blocks cap it besides. A binary opts in:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: sesame_layers::block_cache::BlockCache = sesame_layers::block_cache::BlockCache::new(4 << 30);
//! ```
//!
//! `cargo xtask` does; a library cannot choose its user's allocator, so a program that trains
//! with Sesame's crates gets the same speed-up by declaring it too.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;

/// How many freed blocks are kept at most.
const SLOTS: usize = 4096;

/// The size a large block of `size` bytes is allocated with: `size` rounded up to a multiple
/// of an eighth of the power of two below it (at most 12.5% more); a small one's own.
pub fn size_class(size: usize) -> usize {
    if size < BlockCache::MIN_BLOCK {
        return size;
    }
    let step = 1usize << (usize::BITS - 1 - size.leading_zeros() - 3);
    size.div_ceil(step).saturating_mul(step)
}

/// `layout` with its size rounded up to its [`size_class`].
fn classed(layout: Layout) -> Layout {
    // The class is no larger than twice the size, and a valid layout's size is far below the
    // limit, so the rounded layout is valid too.
    Layout::from_size_align(size_class(layout.size()), layout.align()).unwrap_or(layout)
}

/// A freed block kept for reuse.
#[derive(Clone, Copy)]
struct Slot {
    ptr: *mut u8,
    size: usize,
    align: usize,
    /// When it was freed (a counter): the oldest goes back to the system first.
    freed_at: u64,
}

struct Blocks {
    slots: [Option<Slot>; SLOTS],
    /// The bytes of the blocks kept.
    bytes: usize,
    /// The bytes of large blocks in use, and the most there have been.
    live: usize,
    peak_live: usize,
    clock: u64,
}

impl Blocks {
    /// Return the oldest kept block to the system; false when none is kept.
    fn release_oldest(&mut self) -> bool {
        let Some(oldest) = (0..SLOTS).filter(|&i| self.slots[i].is_some()).min_by_key(|&i| self.slots[i].map(|s| s.freed_at)) else {
            return false;
        };
        let slot = self.slots[oldest].take().expect("a kept block");
        self.bytes -= slot.size;
        // SAFETY: the block came from `System` with this size and alignment and is no one's.
        unsafe { System.dealloc(slot.ptr, Layout::from_size_align_unchecked(slot.size, slot.align)) };
        true
    }

    /// A large block of `size` bytes came from the system: count it.
    fn allocated(&mut self, size: usize) {
        self.live += size;
        self.peak_live = self.peak_live.max(self.live);
    }
}

// The pointers are blocks no one else holds; the cache only hands each to one caller.
unsafe impl Send for Blocks {}

/// [`System`] with large freed blocks kept for reuse (module docs), holding at most
/// `max_bytes` of them.
pub struct BlockCache {
    max_bytes: usize,
    blocks: Mutex<Blocks>,
}

impl BlockCache {
    /// Blocks smaller than this go straight to the system allocator (which keeps them in its
    /// heaps anyway).
    pub const MIN_BLOCK: usize = 1 << 20;

    /// A cache that keeps at most `max_bytes` of freed blocks.
    pub const fn new(max_bytes: usize) -> Self {
        Self { max_bytes, blocks: Mutex::new(Blocks { slots: [None; SLOTS], bytes: 0, live: 0, peak_live: 0, clock: 0 }) }
    }

    /// The bytes of freed blocks kept now.
    pub fn kept_bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Blocks> {
        // Nothing panics while the lock is held; a poisoned lock still guards consistent slots.
        self.blocks.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A kept block of exactly `layout` (a size class), the most recently freed.
    fn take(&self, layout: Layout) -> Option<*mut u8> {
        if layout.size() < Self::MIN_BLOCK {
            return None;
        }
        let mut blocks = self.lock();
        let index = (0..SLOTS)
            .filter(|&i| blocks.slots[i].is_some_and(|s| s.size == layout.size() && s.align == layout.align()))
            .max_by_key(|&i| blocks.slots[i].map(|s| s.freed_at))?;
        let slot = blocks.slots[index].take()?;
        blocks.bytes -= slot.size;
        blocks.live += slot.size;
        Some(slot.ptr)
    }

    /// Count a large block `ptr` just taken from the system (nothing when it failed).
    fn allocated(&self, ptr: *mut u8, size: usize) -> *mut u8 {
        if !ptr.is_null() && size >= Self::MIN_BLOCK {
            self.lock().allocated(size);
        }
        ptr
    }
}

unsafe impl GlobalAlloc for BlockCache {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let class = classed(layout);
        match self.take(class) {
            Some(ptr) => ptr,
            None => self.allocated(unsafe { System.alloc(class) }, class.size()),
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let class = classed(layout);
        match self.take(class) {
            Some(ptr) => {
                unsafe { ptr.write_bytes(0, layout.size()) };
                ptr
            }
            None => self.allocated(unsafe { System.alloc_zeroed(class) }, class.size()),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let layout = classed(layout);
        let size = layout.size();
        if size < Self::MIN_BLOCK {
            return unsafe { System.dealloc(ptr, layout) };
        }
        let mut blocks = self.lock();
        blocks.live = blocks.live.saturating_sub(size);
        if size > self.max_bytes {
            return unsafe { System.dealloc(ptr, layout) };
        }
        // Make room: the oldest kept blocks go back to the system.
        let budget = self.max_bytes.min(blocks.peak_live);
        while (blocks.bytes + size > budget || blocks.slots.iter().all(Option::is_some)) && blocks.release_oldest() {}
        blocks.clock += 1;
        let freed_at = blocks.clock;
        let free = blocks.slots.iter().position(Option::is_none).expect("room was made above");
        blocks.slots[free] = Some(Slot { ptr, size, align: layout.align(), freed_at });
        blocks.bytes += size;
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Every block, kept or not, is the system allocator's own: it can grow it in place. Its
        // new size is its class's, as every large block's is.
        let (layout, new_size) = (classed(layout), size_class(new_size));
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() && (layout.size() >= Self::MIN_BLOCK || new_size >= Self::MIN_BLOCK) {
            let mut blocks = self.lock();
            if layout.size() >= Self::MIN_BLOCK {
                blocks.live = blocks.live.saturating_sub(layout.size());
            }
            if new_size >= Self::MIN_BLOCK {
                blocks.allocated(new_size);
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: usize = 1 << 20;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 64).unwrap()
    }

    #[test]
    fn a_freed_large_block_is_taken_back_by_the_same_size_and_zeroed_on_request() {
        let cache = BlockCache::new(64 * MB);
        unsafe {
            // 16 MB in use once: room to keep blocks below (the 16 MB block itself goes back
            // when `a` is freed, since both would exceed that peak).
            let ballast = cache.alloc(layout(16 * MB));
            cache.dealloc(ballast, layout(16 * MB));
            let a = cache.alloc(layout(3 * MB));
            a.write_bytes(7, 3 * MB);
            cache.dealloc(a, layout(3 * MB));
            assert_eq!(cache.kept_bytes(), 3 * MB);
            // Another size or alignment does not take it.
            let b = cache.alloc(layout(3 * MB + 4));
            assert_ne!(a, b);
            let c = cache.alloc(Layout::from_size_align(3 * MB, 128).unwrap());
            assert_ne!(a, c);
            assert_eq!(cache.kept_bytes(), 3 * MB);
            // The same size and alignment does, zeroed when asked.
            let d = cache.alloc_zeroed(layout(3 * MB));
            assert_eq!(a, d);
            assert_eq!(cache.kept_bytes(), 0);
            assert!(std::slice::from_raw_parts(d, 3 * MB).iter().all(|&byte| byte == 0));
            for (p, l) in [(b, layout(3 * MB + 4)), (c, Layout::from_size_align(3 * MB, 128).unwrap()), (d, layout(3 * MB))] {
                cache.dealloc(p, l);
            }
        }
    }

    /// A batch of a few more or fewer tokens takes the block its predecessor freed: sizes within
    /// an eighth of a power of two share a class, which is never smaller than the size.
    #[test]
    fn sizes_within_a_class_share_a_block_and_the_class_holds_the_size() {
        for size in [MB, MB + 1, 3 * MB - 7, 3 * MB, 5 * MB + 12_345, 94 * MB + 1, 1 << 40] {
            let class = size_class(size);
            assert!(class >= size && class - size <= size / 8, "{size}: class {class}");
        }
        assert_eq!(size_class(MB - 1), MB - 1, "a small block keeps its size");
        let cache = BlockCache::new(64 * MB);
        unsafe {
            let ballast = cache.alloc(layout(16 * MB));
            cache.dealloc(ballast, layout(16 * MB));
            // 2.9 MB and 2.95 MB are both in the 3 MB class (steps of 256 KB above 2 MB).
            let a = cache.alloc(layout(2_900_000));
            a.write_bytes(1, 2_900_000);
            cache.dealloc(a, layout(2_900_000));
            assert_eq!(cache.kept_bytes(), 3 * MB);
            let b = cache.alloc(layout(2_950_000));
            assert_eq!(a, b, "the same class takes the block back");
            b.write_bytes(2, 2_950_000);
            cache.dealloc(b, layout(2_950_000));
            // Grown in place or moved, a reallocated block is of its new class.
            let c = cache.realloc(cache.alloc(layout(2 * MB)), layout(2 * MB), 2 * MB + 5);
            c.write_bytes(3, 2 * MB + 5);
            cache.dealloc(c, layout(2 * MB + 5));
        }
    }

    #[test]
    fn small_blocks_pass_through_and_the_budget_returns_the_oldest_first() {
        let cache = BlockCache::new(10 * MB);
        unsafe {
            let small = cache.alloc(layout(MB - 1));
            cache.dealloc(small, layout(MB - 1));
            assert_eq!(cache.kept_bytes(), 0, "a block under MIN_BLOCK is not kept");
            let too_large = cache.alloc(layout(11 * MB));
            cache.dealloc(too_large, layout(11 * MB));
            assert_eq!(cache.kept_bytes(), 0, "a block over the budget is not kept");
            let blocks: Vec<*mut u8> = (0..3).map(|_| cache.alloc(layout(4 * MB))).collect();
            for &b in &blocks {
                cache.dealloc(b, layout(4 * MB));
            }
            // 12 MB freed into a 10 MB budget: the first freed went back, the last two stay.
            assert_eq!(cache.kept_bytes(), 8 * MB);
            let again: Vec<*mut u8> = (0..2).map(|_| cache.alloc(layout(4 * MB))).collect();
            assert_eq!(again, vec![blocks[2], blocks[1]], "the most recently freed first");
            assert_eq!(cache.kept_bytes(), 0);
            for b in again {
                cache.dealloc(b, layout(4 * MB));
            }
        }
    }

    /// The blocks kept never exceed the most that was in use at once.
    #[test]
    fn what_is_kept_stays_within_the_peak_in_use() {
        let cache = BlockCache::new(usize::MAX);
        unsafe {
            let (a, b) = (cache.alloc(layout(4 * MB)), cache.alloc(layout(4 * MB)));
            cache.dealloc(a, layout(4 * MB));
            cache.dealloc(b, layout(4 * MB));
            assert_eq!(cache.kept_bytes(), 8 * MB, "8 MB were in use at once");
            // A 6 MB block of a new size, freed: 14 MB would exceed the peak of 8, so both
            // 4 MB blocks go back, the oldest first.
            let c = cache.alloc(layout(6 * MB));
            assert_eq!(cache.kept_bytes(), 8 * MB, "nothing goes back while in use");
            cache.dealloc(c, layout(6 * MB));
            assert_eq!(cache.kept_bytes(), 6 * MB);
            // Shapes that keep changing (none as large as 8 MB) keep no more than the peak.
            for i in 0..40 {
                let size = MB * (2 + i % 5) + 4096 * (i + 1);
                let p = cache.alloc(layout(size));
                cache.dealloc(p, layout(size));
                assert!(cache.kept_bytes() <= 8 * MB, "{} kept", cache.kept_bytes());
            }
        }
    }

    #[test]
    fn more_blocks_than_slots_return_the_oldest() {
        let cache = BlockCache::new(usize::MAX);
        unsafe {
            let blocks: Vec<*mut u8> = (0..SLOTS + 2).map(|_| cache.alloc(layout(MB))).collect();
            for &b in &blocks {
                cache.dealloc(b, layout(MB));
            }
            assert_eq!(cache.kept_bytes(), SLOTS * MB);
            let again = cache.alloc(layout(MB));
            assert_eq!(again, blocks[SLOTS + 1]);
            cache.dealloc(again, layout(MB));
        }
    }
}
