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
//! mimalloc is called through its C entry points (`libmimalloc-sys`), not the `mimalloc` crate's
//! allocator, which passes every block to `mi_malloc_aligned`: that entry checks the alignment
//! before it reaches the small-block path, which cost 1,347 instructions per `SELECT 1` through
//! the gateway, about 27 a block (docs/PERFORMANCE.md, "The allocator"). A block whose alignment the plain entries already give
//! ([`MIN_ALIGN`] and at most its size, the rule Rust's `System` allocator uses) takes `mi_malloc`,
//! `mi_zalloc` and `mi_realloc`; any other takes the aligned ones.
//!
//! Which allocator owns a block follows from its layout's size alone, which Rust passes to every
//! call, so a block is always freed or resized by the allocator that made it; a resize across
//! [`LARGE`] moves the block from one to the other.

use libmimalloc_sys as mi;
use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::c_void;

/// Blocks of this size and up go to the system allocator: 256 KiB.
pub const LARGE: usize = 256 << 10;

/// Small blocks from mimalloc, large ones from the system allocator.
pub struct Split;

/// The alignment `mi_malloc` gives every block of at least this size (mimalloc's
/// `MI_MAX_ALIGN_SIZE` on 64-bit targets): 16 bytes.
pub const MIN_ALIGN: usize = 16;

fn large(size: usize) -> bool {
    size >= LARGE
}

/// Whether the plain (unaligned) mimalloc entries give a block of `size` bytes the alignment `align`.
fn plain(align: usize, size: usize) -> bool {
    align <= MIN_ALIGN && align <= size
}

/// mimalloc's block for `layout`, zeroed when `zeroed`.
fn mi_alloc(layout: Layout, zeroed: bool) -> *mut u8 {
    let (size, align) = (layout.size(), layout.align());
    // SAFETY: mimalloc's entries take any size and a power-of-two alignment, which `Layout` is.
    let p = unsafe {
        match (plain(align, size), zeroed) {
            (true, false) => mi::mi_malloc(size),
            (true, true) => mi::mi_zalloc(size),
            (false, false) => mi::mi_malloc_aligned(size, align),
            (false, true) => mi::mi_zalloc_aligned(size, align),
        }
    };
    p as *mut u8
}

/// mimalloc's block `ptr` of `layout` resized to `new_size`, keeping its alignment.
///
/// # Safety
/// `ptr` is a live block that mimalloc made for `layout`.
unsafe fn mi_realloc(ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
    if plain(layout.align(), new_size) {
        mi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8
    } else {
        mi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
    }
}

// SAFETY: each call goes to the allocator that owns the block, decided by `large(layout.size())`
// on both allocation and release. The system allocator upholds `GlobalAlloc`'s contract itself;
// mimalloc's plain entries are taken only where their blocks have the layout's alignment
// (`plain`), its aligned ones elsewhere, and `mi_free` frees a block of either.
unsafe impl GlobalAlloc for Split {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if large(layout.size()) {
            System.alloc(layout)
        } else {
            mi_alloc(layout, false)
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if large(layout.size()) {
            System.alloc_zeroed(layout)
        } else {
            mi_alloc(layout, true)
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if large(layout.size()) {
            System.dealloc(ptr, layout)
        } else {
            mi::mi_free(ptr as *mut c_void)
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match (large(layout.size()), large(new_size)) {
            (true, true) => System.realloc(ptr, layout, new_size),
            (false, false) => mi_realloc(ptr, layout, new_size),
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

    /// Every block has its layout's alignment: made plain or aligned, zeroed or not, and resized
    /// up and down, within mimalloc and across to the system allocator.
    #[test]
    fn blocks_have_their_alignment() {
        let a = Split;
        for size in [1, 2, 7, 8, 12, 16, 24, 33, 100, 4096, LARGE + 5] {
            for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
                let layout = Layout::from_size_align(size, align).unwrap();
                let aligned = |p: *mut u8| !p.is_null() && (p as usize).is_multiple_of(align);
                for to in [1, size / 2 + 1, size * 3, LARGE * 2] {
                    unsafe {
                        for p in [a.alloc(layout), a.alloc_zeroed(layout)] {
                            assert!(aligned(p), "{size} bytes, align {align}");
                            let q = a.realloc(p, layout, to);
                            assert!(aligned(q), "{size} -> {to} bytes, align {align}");
                            let back = a.realloc(q, Layout::from_size_align(to, align).unwrap(), size);
                            assert!(aligned(back), "{size} -> {to} -> {size} bytes, align {align}");
                            a.dealloc(back, layout);
                        }
                    }
                }
            }
        }
    }

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
