//! The binary's allocator: small blocks from mimalloc, large ones from the system's (glibc's).
//!
//! A query through the gateway makes and frees about a hundred small blocks; glibc's allocator
//! spent about a fifth of the gateway's user-space instructions on them, and mimalloc makes the
//! gateway's whole `SELECT 1` about 14 % fewer instructions (docs/PERFORMANCE.md, "The
//! allocator"). Large blocks, [`LARGE`] and up, stay with glibc: it grows a large block in place
//! (`mremap`) and gives a freed one back to the system at once, where mimalloc copies a block to
//! grow it and keeps freed memory a while. A client buffer growing toward its limit would then
//! hold its old and new copies together, and the gateway's peak memory would pass its documented
//! bound (`crates/chstorm/tests/gateway_memory.rs`: 1,001 MiB against 608 with mimalloc alone).
//!
//! Which allocator owns a block follows from its layout's size alone, which Rust passes to every
//! call, so a block is always freed or resized by the allocator that made it; a resize across
//! [`LARGE`] moves the block from one to the other.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks of this size and up go to the system allocator: 256 KiB.
pub const LARGE: usize = 256 << 10;

/// Small blocks from mimalloc, large ones from the system allocator.
pub struct Split;

fn large(size: usize) -> bool {
    size >= LARGE
}

// SAFETY: each call goes to the allocator that owns the block, decided by `large(layout.size())`
// on both allocation and release; both allocators uphold `GlobalAlloc`'s contract themselves.
unsafe impl GlobalAlloc for Split {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if large(layout.size()) {
            System.alloc(layout)
        } else {
            mimalloc::MiMalloc.alloc(layout)
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if large(layout.size()) {
            System.alloc_zeroed(layout)
        } else {
            mimalloc::MiMalloc.alloc_zeroed(layout)
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if large(layout.size()) {
            System.dealloc(ptr, layout)
        } else {
            mimalloc::MiMalloc.dealloc(ptr, layout)
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match (large(layout.size()), large(new_size)) {
            (true, true) => System.realloc(ptr, layout, new_size),
            (false, false) => mimalloc::MiMalloc.realloc(ptr, layout, new_size),
            _ => {
                // Across the line: a new block from the other allocator, the bytes, the old freed.
                // SAFETY: `realloc`'s contract makes `new_size` with `layout.align()` a valid layout.
                let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
                let new = self.alloc(new_layout);
                if !new.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
                new
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks made, grown and shrunk across the line keep their bytes, and are freed by their owner.
    #[test]
    fn blocks_keep_their_bytes_across_the_line() {
        let a = Split;
        for (from, to) in
            [(16, LARGE * 2), (LARGE * 2, 16), (LARGE - 1, LARGE), (LARGE, LARGE - 1), (100, 200), (LARGE, LARGE * 3)]
        {
            unsafe {
                let layout = Layout::from_size_align(from, 8).unwrap();
                let p = a.alloc(layout);
                assert!(!p.is_null());
                for i in 0..from {
                    *p.add(i) = (i % 251) as u8;
                }
                let q = a.realloc(p, layout, to);
                assert!(!q.is_null());
                for i in 0..from.min(to) {
                    assert_eq!(*q.add(i), (i % 251) as u8, "{from} -> {to}, byte {i}");
                }
                a.dealloc(q, Layout::from_size_align(to, 8).unwrap());
                let z = a.alloc_zeroed(Layout::from_size_align(to, 64).unwrap());
                assert!((0..to).all(|i| *z.add(i) == 0));
                a.dealloc(z, Layout::from_size_align(to, 64).unwrap());
            }
        }
    }
}
