//! The table maps as the writer sees them: each `BPF_F_MMAPABLE` array mapped into the agent's
//! memory, written with plain stores instead of a system call per entry. Only the agent writes
//! these maps (the program reads them), so what this mapping shows is what the writer wrote.

use std::{
    io,
    marker::PhantomData,
    os::fd::{AsRawFd, BorrowedFd},
    ptr::NonNull,
};

use aya::Pod;

/// An mmapable array map of `len` elements of `T`, mapped shared and writable.
pub struct SharedArray<T: Pod> {
    base: NonNull<u8>,
    /// Bytes mapped.
    mapped: usize,
    /// Bytes from one element to the next: the value size rounded up to 8, as the kernel lays
    /// out array elements.
    stride: usize,
    len: u32,
    _values: PhantomData<T>,
}

// SAFETY: the mapping is plain memory owned by this value; access goes through &self/&mut self.
unsafe impl<T: Pod> Send for SharedArray<T> {}

impl<T: Pod> SharedArray<T> {
    /// Maps the array map `fd` of `len` elements, writable.
    pub fn map(fd: BorrowedFd, len: u32) -> io::Result<Self> {
        Self::map_with(fd, len, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// Maps it to read only (an operator's look at a running agent's table: `set` and its kin
    /// would fault).
    pub fn map_read_only(fd: BorrowedFd, len: u32) -> io::Result<Self> {
        Self::map_with(fd, len, libc::PROT_READ)
    }

    fn map_with(fd: BorrowedFd, len: u32, protection: libc::c_int) -> io::Result<Self> {
        let stride = size_of::<T>().next_multiple_of(8);
        let bytes = stride * len as usize;
        // SAFETY: a plain sysconf query.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let mapped = bytes.next_multiple_of(page).max(page);
        // SAFETY: a new shared mapping of the map's value area; the kernel checks the size and
        // that the map is mmapable.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                protection,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(base.cast::<u8>()).ok_or_else(|| io::Error::other("mmap"))?;
        Ok(Self {
            base,
            mapped,
            stride,
            len,
            _values: PhantomData,
        })
    }

    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn at(&self, index: u32) -> *mut T {
        assert!(index < self.len, "index {index} of {}", self.len);
        // SAFETY: within the mapping (checked above); elements are 8-byte aligned, which is all
        // the alignment the map's value types ask beyond their size's (Bucket's 64 comes from
        // the mapping being page-aligned and its stride 64).
        unsafe {
            self.base
                .as_ptr()
                .add(index as usize * self.stride)
                .cast::<T>()
        }
    }

    /// Element `index`.
    pub fn get(&self, index: u32) -> T {
        // SAFETY: a valid element; T is plain data; unaligned read in case T asks for more
        // alignment than the stride gives.
        unsafe { self.at(index).read_unaligned() }
    }

    /// A reference to element `index` (no copy: for large values).
    pub fn get_ref(&self, index: u32) -> &T {
        debug_assert!(self.stride.is_multiple_of(align_of::<T>()));
        // SAFETY: a valid, aligned element; only this writer changes it, through &mut self.
        unsafe { &*self.at(index) }
    }

    /// Writes element `index`.
    pub fn set(&mut self, index: u32, value: &T) {
        // SAFETY: a valid element; T is plain data.
        unsafe { self.at(index).write_unaligned(*value) }
    }

    /// A pointer to element `index`, for the atomic accesses of `HPD_GEN`.
    pub fn as_ptr(&self, index: u32) -> *mut T {
        self.at(index)
    }

    /// Elements `from..from + count` as a slice (element types whose size is a multiple of 8,
    /// as every table map's is: the stride is then the size).
    pub fn slice_mut(&mut self, from: u32, count: u32) -> &mut [T] {
        assert_eq!(self.stride, size_of::<T>(), "a padded element type");
        assert!(from + count <= self.len);
        if count == 0 {
            return &mut [];
        }
        debug_assert!((self.at(from) as usize).is_multiple_of(align_of::<T>()));
        // SAFETY: `count` elements of T, laid out without gaps (stride == size), aligned (the
        // mapping is page-aligned and the stride a multiple of T's alignment), inside the
        // mapping; borrowed mutably from self, so nothing else here aliases them.
        unsafe { std::slice::from_raw_parts_mut(self.at(from), count as usize) }
    }

    /// Copies `count` elements from `from` to `to` (ranges of one map; they may not overlap).
    pub fn copy_within(&mut self, from: u32, to: u32, count: u32) {
        if count == 0 {
            return;
        }
        assert!(from + count <= self.len && to + count <= self.len);
        assert!(from + count <= to || to + count <= from, "overlapping copy");
        // SAFETY: both ranges lie within the mapping and do not overlap (checked above).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.at(from).cast::<u8>(),
                self.at(to).cast::<u8>(),
                count as usize * self.stride,
            )
        }
    }

    /// Zeroes `count` elements from `from`.
    pub fn zero(&mut self, from: u32, count: u32) {
        if count == 0 {
            return;
        }
        assert!(from + count <= self.len);
        // SAFETY: within the mapping (checked above); all-zero bytes are a valid T (plain data).
        unsafe {
            std::ptr::write_bytes(self.at(from).cast::<u8>(), 0, count as usize * self.stride)
        }
    }
}

impl<T: Pod> Drop for SharedArray<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.mapped) };
    }
}

/// The bytes of a plain-old-data value.
pub fn bytes_of<V: Pod>(value: &V) -> &[u8] {
    // SAFETY: Pod types are plain bytes without padding.
    unsafe { std::slice::from_raw_parts((value as *const V).cast::<u8>(), size_of::<V>()) }
}
