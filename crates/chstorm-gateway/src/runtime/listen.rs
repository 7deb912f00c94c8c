//! The listening socket, and how two gateways share one port during a restart.
//!
//! With `reuse_port: true` the socket is bound with `SO_REUSEPORT`, so a new gateway can listen on
//! the port while the old one still serves. Plain `SO_REUSEPORT` spreads new connections over both
//! sockets by hash, and a connection waiting in the accept queue of a socket that closes is reset
//! (Linux does not move it unless `net.ipv4.tcp_migrate_req` is on). So the new gateway also
//! attaches a classic BPF program to the port's group (`SO_ATTACH_REUSEPORT_CBPF`) that sends
//! every new connection to *its* socket: the old gateway's queue stays empty, and closing it loses
//! nothing. The program returns the new socket's index in the group, which is the number of
//! sockets listening on the port before it (Linux appends a joining socket, and moves the last
//! socket into a leaving one's slot); when the old socket leaves, the index is out of range and
//! Linux falls back to its hash over the one socket left.
//!
//! Written here rather than with a crate: the steering program is two instructions, and the
//! socket options are two `setsockopt` calls that `tokio::net::TcpSocket` does not offer.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use tokio::net::{TcpListener, TcpSocket};

/// The accept queue length: 1024 connections.
const BACKLOG: u32 = 1024;

/// Binds `addr`; with `reuse_port`, shares the port with the gateways already on it and takes
/// their new connections.
pub fn bind(addr: SocketAddr, reuse_port: bool) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    let before = if reuse_port {
        socket.set_reuseport(true)?;
        listeners_on(addr)
    } else {
        0
    };
    socket.bind(addr)?;
    let listener = socket.listen(BACKLOG)?;
    if reuse_port && before > 0 {
        steer_to(&listener, before)?;
    }
    Ok(listener)
}

/// Attaches `ret #index` as the port group's reuseport program.
fn steer_to(listener: &TcpListener, index: usize) -> io::Result<()> {
    // struct sock_filter { u16 code; u8 jt; u8 jf; u32 k; }: BPF_RET | BPF_K = 0x06.
    #[repr(C)]
    struct SockFilter {
        code: u16,
        jt: u8,
        jf: u8,
        k: u32,
    }
    #[repr(C)]
    struct SockFprog {
        len: u16,
        filter: *const SockFilter,
    }
    let prog = [SockFilter { code: 0x06, jt: 0, jf: 0, k: index as u32 }];
    let fprog = SockFprog { len: prog.len() as u16, filter: prog.as_ptr() };
    // SAFETY: a valid socket descriptor, and a sock_fprog that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const SockFprog as *const libc::c_void,
            std::mem::size_of::<SockFprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sockets listening on `addr`'s port at `addr`'s IP (or the wildcard), from /proc/net/tcp{,6}.
fn listeners_on(addr: SocketAddr) -> usize {
    let file = if addr.is_ipv4() { "/proc/net/tcp" } else { "/proc/net/tcp6" };
    std::fs::read_to_string(file).map(|t| count_listeners(&t, addr)).unwrap_or(0)
}

/// Counts LISTEN (`0A`) rows of a /proc/net/tcp text bound to `addr` (same port; same IP or any).
fn count_listeners(text: &str, addr: SocketAddr) -> usize {
    let want_port = format!("{:04X}", addr.port());
    let ip_hex = match addr {
        SocketAddr::V4(a) => format!("{:08X}", u32::from_le_bytes(a.ip().octets())),
        SocketAddr::V6(a) => {
            a.ip().octets().chunks(4).map(|c| format!("{:08X}", u32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect()
        }
    };
    let any = "0".repeat(ip_hex.len());
    text.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (Some(local), Some(state)) = (f.get(1), f.get(3)) else { return false };
            let Some((ip, port)) = local.split_once(':') else { return false };
            *state == "0A" && port == want_port && (ip == ip_hex || ip == any)
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_listeners_from_proc_net_tcp() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n\
   1: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0\n\
   2: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1\n\
   3: 00000000:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1 0 100 0 0 10 0\n";
        assert_eq!(count_listeners(text, "127.0.0.1:8080".parse().unwrap()), 2, "established rows are not listeners");
        assert_eq!(count_listeners(text, "127.0.0.1:8081".parse().unwrap()), 1, "the wildcard counts");
        assert_eq!(count_listeners(text, "127.0.0.2:8080".parse().unwrap()), 0);
    }

    #[tokio::test]
    async fn a_second_gateway_on_the_port_takes_every_new_connection() {
        let first = bind("127.0.0.1:0".parse().unwrap(), true).unwrap();
        let addr = first.local_addr().unwrap();
        let second = bind(addr, true).unwrap();
        // Without reuse_port the port is taken.
        assert!(bind(addr, false).is_err());
        for _ in 0..20 {
            let _c = tokio::net::TcpStream::connect(addr).await.unwrap();
            let accepted = tokio::time::timeout(std::time::Duration::from_secs(2), second.accept()).await;
            assert!(accepted.is_ok(), "the new socket got the connection");
        }
        // The old socket's queue stayed empty: closing it loses nothing.
        let none = tokio::time::timeout(std::time::Duration::from_millis(50), first.accept()).await;
        assert!(none.is_err(), "nothing queued on the old socket");
        drop(first);
        let _c = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(tokio::time::timeout(std::time::Duration::from_secs(2), second.accept()).await.is_ok());
    }
}
