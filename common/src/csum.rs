//! Internet checksum pieces (RFC 1071), summed over 16-bit words in memory order: the folded
//! result, stored in memory order, is right whatever the host's byte order.
//!
//! The kernel never reads its answer back to checksum it: it adds up sums of the pieces it
//! writes. The agent precomputes the sums of the record bytes with [`sum16`]; a piece that lands
//! at an odd offset of the datagram contributes its sum byte-swapped ([`at_offset`]).

/// Folds a running sum into 16 bits with end-around carry.
#[inline(always)]
pub const fn fold(mut sum: u64) -> u16 {
    sum = (sum & 0xffff_ffff) + (sum >> 32);
    sum = (sum & 0xffff_ffff) + (sum >> 32);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// Adds a little-endian 8-byte word read from memory to a running sum.
#[inline(always)]
pub const fn add_word(sum: u64, word: u64) -> u64 {
    sum + (word & 0xffff_ffff) + (word >> 32)
}

/// Folded sum of bytes that start at an even offset (an odd trailing byte is padded with zero).
pub fn sum16(bytes: &[u8]) -> u16 {
    let mut sum = 0u64;
    let mut pairs = bytes.chunks_exact(2);
    for pair in &mut pairs {
        sum += u16::from_ne_bytes([pair[0], pair[1]]) as u64;
    }
    if let [last] = pairs.remainder() {
        sum += u16::from_ne_bytes([*last, 0]) as u64;
    }
    fold(sum)
}

/// The contribution of a piece whose folded sum is `sum` when it starts at `offset` (counted from
/// the start of the checksummed data): odd offsets swap the bytes of every word.
#[inline(always)]
pub const fn at_offset(sum: u16, offset: usize) -> u64 {
    if offset & 1 == 1 {
        sum.swap_bytes() as u64
    } else {
        sum as u64
    }
}

/// The checksum to write: the complement of the folded sum, with zero sent as 0xffff (zero means
/// "no checksum" for UDP over IPv4 and is forbidden over IPv6).
#[inline(always)]
pub const fn udp_checksum(sum: u64) -> u16 {
    let check = !fold(sum);
    if check == 0 { 0xffff } else { check }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain RFC 1071 over big-endian words, for reference.
    fn reference(bytes: &[u8]) -> u16 {
        let mut sum = 0u32;
        for pair in bytes.chunks(2) {
            let hi = pair[0] as u32;
            let lo = pair.get(1).copied().unwrap_or(0) as u32;
            sum += (hi << 8) | lo;
        }
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    }

    #[test]
    fn pieces_at_odd_offsets_add_up_to_the_whole() {
        let data: std::vec::Vec<u8> = (0..101u32).map(|i| (i * 37 + 11) as u8).collect();
        for split in 0..data.len() {
            let (a, b) = data.split_at(split);
            let sum = at_offset(sum16(a), 0) + at_offset(sum16(b), split);
            let ours = u16::from_be_bytes(fold(sum).to_ne_bytes());
            assert_eq!(ours, reference(&data), "split at {split}");
        }
    }
}
