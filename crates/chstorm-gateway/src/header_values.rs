//! Header values seen again and again, made once per thread.
//!
//! A replica's answers carry the same `Content-Type` and display name and the `Date` of the
//! second; a client's requests the same `Host`, `User-Agent` and `Accept`. `HeaderValue::from_bytes`
//! copies each value into an allocation of its own, several per query on both sides of the
//! gateway. [`value`] hands out a clone of a value this thread made before from the same bytes
//! (a count's increment; the first clone of a value makes its shared count, once) and makes the
//! rest as `from_bytes` does, with the same checks. Each thread keeps the last [`SLOTS`] values
//! it made, the oldest replaced first; a value longer than [`MAX_LEN`] bytes, or of a header that
//! carries a client's credentials (`crate::request::is_credential`), is neither looked up nor
//! kept: credentials are made for their request alone. Written here rather than taken from a
//! crate: it is a few lines over `http`'s own type, and an interning crate would add a global
//! lock or a hash per value.

use http::header::InvalidHeaderValue;
use http::{HeaderName, HeaderValue};
use std::cell::RefCell;

/// The values one thread keeps: 8.
pub const SLOTS: usize = 8;
/// The longest value kept: 128 bytes (a `Date` is 29, ClickHouse's `Content-Type` 41).
pub const MAX_LEN: usize = 128;

struct Seen {
    values: [Option<HeaderValue>; SLOTS],
    next: usize,
}

thread_local! {
    static SEEN: RefCell<Seen> = const { RefCell::new(Seen { values: [const { None }; SLOTS], next: 0 }) };
}

/// `HeaderValue::from_bytes(bytes)` for header `name`, a clone of this thread's earlier value of
/// the same bytes where it kept one.
pub fn value(name: &HeaderName, bytes: &[u8]) -> Result<HeaderValue, InvalidHeaderValue> {
    if bytes.len() > MAX_LEN || crate::request::is_credential(name) {
        return HeaderValue::from_bytes(bytes);
    }
    SEEN.with(|seen| {
        let mut seen = seen.borrow_mut();
        if let Some(v) = seen.values.iter().flatten().find(|v| v.as_bytes() == bytes) {
            return Ok(v.clone());
        }
        let v = HeaderValue::from_bytes(bytes)?;
        let at = seen.next;
        seen.values[at] = Some(v.clone());
        seen.next = (at + 1) % SLOTS;
        Ok(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any header that is not a credential.
    const X: HeaderName = http::header::CONTENT_TYPE;

    #[test]
    fn a_value_is_the_one_from_bytes_would_make_and_a_bad_one_is_refused_alike() {
        for bytes in [&b"text/tab-separated-values; charset=UTF-8"[..], b"", b"2", b"a\tb", &[b'x'; 200][..]] {
            for _ in 0..3 {
                let v = value(&X, bytes).unwrap();
                assert_eq!(v, HeaderValue::from_bytes(bytes).unwrap());
                assert_eq!(v.as_bytes(), bytes);
                assert!(!v.is_sensitive());
            }
        }
        for bad in [&b"a\r\nb"[..], b"a\nb", b"\x00", b"\x7f"] {
            assert!(value(&X, bad).is_err(), "{bad:?}");
            assert!(HeaderValue::from_bytes(bad).is_err());
        }
    }

    #[test]
    fn a_kept_value_is_shared_and_the_oldest_is_replaced_first() {
        let first = value(&X, b"kept-0").unwrap();
        let again = value(&X, b"kept-0").unwrap();
        // The same bytes in memory: a clone, not a copy.
        assert_eq!(first.as_bytes().as_ptr(), again.as_bytes().as_ptr());
        for i in 1..SLOTS {
            value(&X, format!("kept-{i}").as_bytes()).unwrap();
        }
        let still = value(&X, b"kept-0").unwrap();
        assert_eq!(still.as_bytes().as_ptr(), first.as_bytes().as_ptr(), "within SLOTS values it is kept");
        value(&X, b"one more").unwrap();
        let made_again = value(&X, b"kept-0").unwrap();
        assert_ne!(made_again.as_bytes().as_ptr(), first.as_bytes().as_ptr(), "the oldest goes first");
        assert_eq!(made_again, first);
    }

    #[test]
    fn a_long_value_is_made_each_time() {
        let long = [b'y'; MAX_LEN + 1];
        let (a, b) = (value(&X, &long).unwrap(), value(&X, &long).unwrap());
        assert_ne!(a.as_bytes().as_ptr(), b.as_bytes().as_ptr());
    }

    #[test]
    fn a_credential_is_made_each_time_and_never_kept() {
        for name in [http::header::AUTHORIZATION, crate::request::X_CLICKHOUSE_KEY.clone()] {
            let (a, b) = (value(&name, b"Basic dTpw").unwrap(), value(&name, b"Basic dTpw").unwrap());
            assert_eq!(a, b);
            assert_ne!(a.as_bytes().as_ptr(), b.as_bytes().as_ptr(), "{name}");
        }
    }
}
