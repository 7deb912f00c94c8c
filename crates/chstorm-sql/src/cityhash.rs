//! CityHash64 v1.0.2 and ClickHouse's `intHash64`, bit-exact with what
//! ClickHouse bundles (`contrib/cityhash102`, namespace `CityHash_v1_0_2`).
//!
//! Google's later CityHash v1.1 changed the results for most lengths, so the
//! crates.io `cityhash` ports of v1.1 do not match ClickHouse. The test
//! `tests/route_vs_server.rs` compares this code with a real 18.16 server on
//! thousands of strings of every length from 0 to 300 bytes and beyond.

const K0: u64 = 0xc3a5_c85c_97cb_3127;
const K1: u64 = 0xb492_b66f_be98_f273;
const K2: u64 = 0x9ae1_6a3b_2f90_404f;
const K3: u64 = 0xc949_d7c7_509e_6557;
const K_MUL: u64 = 0x9ddf_ea08_eb38_2d69;

#[inline]
fn fetch64(s: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&s[at..at + 8]);
    u64::from_le_bytes(b)
}

#[inline]
fn fetch32(s: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&s[at..at + 4]);
    u64::from(u32::from_le_bytes(b))
}

/// `Rotate` of v1.0.2: a shift of 0 leaves the value alone.
#[inline]
fn rotate(v: u64, shift: u32) -> u64 {
    if shift == 0 {
        v
    } else {
        v.rotate_right(shift)
    }
}

#[inline]
fn shift_mix(v: u64) -> u64 {
    v ^ (v >> 47)
}

/// `Hash128to64(uint128(low, high))`: also what ClickHouse uses to combine
/// the hashes of several arguments of `cityHash64(a, b, ...)`.
#[inline]
pub fn hash128_to_64(low: u64, high: u64) -> u64 {
    let mut a = (low ^ high).wrapping_mul(K_MUL);
    a ^= a >> 47;
    let mut b = (high ^ a).wrapping_mul(K_MUL);
    b ^= b >> 47;
    b.wrapping_mul(K_MUL)
}

#[inline]
fn hash_len16(u: u64, v: u64) -> u64 {
    hash128_to_64(u, v)
}

fn hash_len0to16(s: &[u8]) -> u64 {
    let len = s.len();
    if len > 8 {
        let a = fetch64(s, 0);
        let b = fetch64(s, len - 8);
        // RotateByAtLeast1(b + len, len): len is 9..=16 here.
        return hash_len16(a, b.wrapping_add(len as u64).rotate_right(len as u32)) ^ b;
    }
    if len >= 4 {
        let a = fetch32(s, 0);
        return hash_len16((len as u64).wrapping_add(a << 3), fetch32(s, len - 4));
    }
    if len > 0 {
        let a = u64::from(s[0]);
        let b = u64::from(s[len >> 1]);
        let c = u64::from(s[len - 1]);
        let y = (a + (b << 8)) as u32;
        let z = (len as u64 + (c << 2)) as u32;
        return shift_mix(u64::from(y).wrapping_mul(K2) ^ u64::from(z).wrapping_mul(K3)).wrapping_mul(K2);
    }
    K2
}

fn hash_len17to32(s: &[u8]) -> u64 {
    let len = s.len();
    let a = fetch64(s, 0).wrapping_mul(K1);
    let b = fetch64(s, 8);
    let c = fetch64(s, len - 8).wrapping_mul(K2);
    let d = fetch64(s, len - 16).wrapping_mul(K0);
    hash_len16(
        rotate(a.wrapping_sub(b), 43).wrapping_add(rotate(c, 30)).wrapping_add(d),
        a.wrapping_add(rotate(b ^ K3, 20)).wrapping_sub(c).wrapping_add(len as u64),
    )
}

#[inline]
fn weak_hash_len32_with_seeds_raw(w: u64, x: u64, y: u64, z: u64, mut a: u64, mut b: u64) -> (u64, u64) {
    a = a.wrapping_add(w);
    b = rotate(b.wrapping_add(a).wrapping_add(z), 21);
    let c = a;
    a = a.wrapping_add(x);
    a = a.wrapping_add(y);
    b = b.wrapping_add(rotate(a, 44));
    (a.wrapping_add(z), b.wrapping_add(c))
}

#[inline]
fn weak_hash_len32_with_seeds(s: &[u8], at: usize, a: u64, b: u64) -> (u64, u64) {
    weak_hash_len32_with_seeds_raw(fetch64(s, at), fetch64(s, at + 8), fetch64(s, at + 16), fetch64(s, at + 24), a, b)
}

fn hash_len33to64(s: &[u8]) -> u64 {
    let len = s.len();
    let mut z = fetch64(s, 24);
    let mut a = fetch64(s, 0).wrapping_add((len as u64).wrapping_add(fetch64(s, len - 16)).wrapping_mul(K0));
    let mut b = rotate(a.wrapping_add(z), 52);
    let mut c = rotate(a, 37);
    a = a.wrapping_add(fetch64(s, 8));
    c = c.wrapping_add(rotate(a, 7));
    a = a.wrapping_add(fetch64(s, 16));
    let vf = a.wrapping_add(z);
    let vs = b.wrapping_add(rotate(a, 31)).wrapping_add(c);
    a = fetch64(s, 16).wrapping_add(fetch64(s, len - 32));
    z = fetch64(s, len - 8);
    b = rotate(a.wrapping_add(z), 52);
    c = rotate(a, 37);
    a = a.wrapping_add(fetch64(s, len - 24));
    c = c.wrapping_add(rotate(a, 7));
    a = a.wrapping_add(fetch64(s, len - 16));
    let wf = a.wrapping_add(z);
    let ws = b.wrapping_add(rotate(a, 31)).wrapping_add(c);
    let r = shift_mix(vf.wrapping_add(ws).wrapping_mul(K2).wrapping_add(wf.wrapping_add(vs).wrapping_mul(K0)));
    shift_mix(r.wrapping_mul(K0).wrapping_add(vs)).wrapping_mul(K2)
}

/// CityHash64 v1.0.2 of `data`: ClickHouse's `cityHash64(s)` for a `String`
/// (or `FixedString`) argument.
pub fn city_hash64(data: &[u8]) -> u64 {
    let s = data;
    let len = s.len();
    if len <= 32 {
        if len <= 16 {
            return hash_len0to16(s);
        }
        return hash_len17to32(s);
    } else if len <= 64 {
        return hash_len33to64(s);
    }

    // Over 64 bytes: hash the end first, then loop over 64-byte chunks
    // keeping 56 bytes of state: v, w, x, y and z.
    let mut x = fetch64(s, 0);
    let mut y = fetch64(s, len - 16) ^ K1;
    let mut z = fetch64(s, len - 56) ^ K0;
    let mut v = weak_hash_len32_with_seeds(s, len - 64, len as u64, y);
    let mut w = weak_hash_len32_with_seeds(s, len - 32, (len as u64).wrapping_mul(K1), K0);
    z = z.wrapping_add(shift_mix(v.1).wrapping_mul(K1));
    x = rotate(z.wrapping_add(x), 39).wrapping_mul(K1);
    y = rotate(y, 33).wrapping_mul(K1);

    // Round len down to a multiple of 64 (the last partial or full chunk was
    // covered above) and walk the chunks.
    let mut left = (len - 1) & !63usize;
    let mut at = 0usize;
    loop {
        x = rotate(x.wrapping_add(y).wrapping_add(v.0).wrapping_add(fetch64(s, at + 16)), 37).wrapping_mul(K1);
        y = rotate(y.wrapping_add(v.1).wrapping_add(fetch64(s, at + 48)), 42).wrapping_mul(K1);
        x ^= w.1;
        y ^= v.0;
        z = rotate(z ^ w.0, 33);
        v = weak_hash_len32_with_seeds(s, at, v.1.wrapping_mul(K1), x.wrapping_add(w.0));
        w = weak_hash_len32_with_seeds(s, at + 32, z.wrapping_add(w.1), y);
        std::mem::swap(&mut z, &mut x);
        at += 64;
        left -= 64;
        if left == 0 {
            break;
        }
    }
    hash_len16(
        hash_len16(v.0, w.0).wrapping_add(shift_mix(y).wrapping_mul(K1)).wrapping_add(z),
        hash_len16(v.1, w.1).wrapping_add(x),
    )
}

/// ClickHouse's SQL function `intHash64` (`IntHash64Impl::apply`): the
/// MurmurHash3 64-bit finalizer of `x ^ 0x4CF2D2BAAE6DA887`. `cityHash64` of
/// an integer argument is this of the value's bits (see the [`route`](super)
/// module documentation). Note the XOR: the internal hash-table `intHash64`
/// of ClickHouse's `Hash.h` is the bare finalizer and gives other values.
#[inline]
pub fn int_hash64(x: u64) -> u64 {
    let mut x = x ^ 0x4CF2_D2BA_AE6D_A887;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by a ClickHouse 18.16.1 server.
    #[test]
    fn known_values_from_18_16() {
        assert_eq!(city_hash64(b""), 11160318154034397263);
        assert_eq!(city_hash64(b"abc"), 4220206313085259313);
        assert_eq!(int_hash64(123), 12585326385145454095);
        assert_eq!(int_hash64(255), 8055013221972926055);
        assert_eq!(int_hash64(65535), 6547939410751295652);
        assert_eq!(int_hash64(u64::from(u32::MAX)), 9168733277332772950);
        assert_eq!(int_hash64(u64::MAX), 14600443904207254319);
    }

    #[test]
    fn every_length_up_to_300_is_total() {
        // No panics on any length (all the Fetch offsets stay in bounds).
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut seen = std::collections::HashSet::new();
        for len in 0..=data.len() {
            seen.insert(city_hash64(&data[..len]));
        }
        assert_eq!(seen.len(), 301);
    }

    #[test]
    fn hash128_to_64_is_the_city_combiner() {
        // HashLen16 is Hash128to64; spot-check that it mixes both halves.
        assert_ne!(hash128_to_64(1, 2), hash128_to_64(2, 1));
        assert_eq!(hash_len16(5, 6), hash128_to_64(5, 6));
    }
}
