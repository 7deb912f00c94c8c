//! Free loopback ports: bind `127.0.0.1:0`, read the port, let it go.
//!
//! Ports handed out by this process are remembered so that two servers started
//! in parallel by the same process never get the same one. Another process can
//! still grab a port between our check and the server's bind; the caller
//! retries on "Address already in use".

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::{Mutex, OnceLock};

use crate::error::LocalError;

fn handed_out() -> &'static Mutex<HashSet<u16>> {
    static SET: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    SET.get_or_init(Default::default)
}

/// Returns `n` distinct free ports on 127.0.0.1, none handed out before by this process.
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>, LocalError> {
    let mut seen = handed_out().lock().unwrap_or_else(|e| e.into_inner());
    // All listeners stay open until the end, so the kernel returns distinct ports.
    let mut held = Vec::with_capacity(n);
    let mut ports = Vec::with_capacity(n);
    let mut tries = 0;
    while ports.len() < n {
        tries += 1;
        if tries > 100 {
            return Err(LocalError::io(
                "find a free port on 127.0.0.1",
                std::io::Error::other("100 tries gave only ports used before"),
            ));
        }
        let l =
            TcpListener::bind("127.0.0.1:0").map_err(|e| LocalError::io("bind 127.0.0.1:0 to find a free port", e))?;
        let port = l.local_addr().map_err(|e| LocalError::io("read a bound port", e))?.port();
        held.push(l);
        if seen.insert(port) {
            ports.push(port);
        }
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_across_calls() {
        let mut a = free_ports(4).unwrap();
        a.extend(free_ports(4).unwrap());
        let set: HashSet<u16> = a.iter().copied().collect();
        assert_eq!(set.len(), 8);
        assert!(a.iter().all(|&p| p != 0));
    }
}
