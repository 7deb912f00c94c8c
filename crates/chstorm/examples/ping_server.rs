//! A minimal HTTP/1.1 server that answers every request with `Ok.`: the far end for measuring
//! chstorm itself at concurrency levels a 2-core ClickHouse can't hold (10,000 connections).
//! Used by `make bench` (scripts/bench_peers.py); not a ClickHouse stand-in for anything else.
//!
//! Usage: ping_server [PORT] [THREADS]  (default: a free port, 1 thread); prints the port.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    let threads: usize = std::env::args().nth(2).and_then(|p| p.parse().ok()).unwrap_or(1);
    raise_nofile();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        println!("{}", listener.local_addr()?.port());
        loop {
            let (mut sock, _) = listener.accept().await?;
            let _ = sock.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut carry = 0usize; // bytes of a partial "\r\n\r\n" match at the end of the last read
                loop {
                    let n = match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    // Count complete request heads (GET, no body).
                    let mut requests = 0;
                    for &b in &buf[..n] {
                        carry = match (carry, b) {
                            (0, b'\r') | (2, b'\r') => carry + 1,
                            (1, b'\n') | (3, b'\n') => carry + 1,
                            (_, b'\r') => 1,
                            _ => 0,
                        };
                        if carry == 4 {
                            requests += 1;
                            carry = 0;
                        }
                    }
                    let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nOk.\n";
                    for _ in 0..requests {
                        if sock.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    })
}

fn raise_nofile() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
