//! A TCP proxy between a node and its database that can stall or drop traffic on demand.

use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything.
    Pass,
    /// Accept and read, but forward nothing (a network partition that keeps sockets open).
    Stall,
    /// Close every connection and every new one at once (the server went away).
    Drop,
    /// Forward everything, each chunk this much later (added network latency).
    Delay(std::time::Duration),
    /// Forward everything, each round trip later by the simulator's `SlowStatements`
    /// draw: three parts, each uniform up to a third of this (two on the way there, one
    /// on the way back).
    Jitter(std::time::Duration),
}

pub struct Proxy {
    pub addr: SocketAddr,
    mode: watch::Sender<Mode>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        Proxy::start_on([127, 0, 0, 1].into(), upstream).await
    }

    /// [`Proxy::start`], listening on `ip` (an address of this host).
    pub async fn start_on(ip: std::net::IpAddr, upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (mode, watching) = watch::channel(Mode::Pass);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(connection(client, upstream, watching.clone()));
            }
        });
        Proxy { addr, mode, task }
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.set(Mode::Drop);
        self.task.abort();
    }
}

/// Waits until traffic may flow; false once the proxy drops connections.
async fn may_pass(mode: &mut watch::Receiver<Mode>) -> bool {
    loop {
        match *mode.borrow_and_update() {
            Mode::Pass | Mode::Delay(_) | Mode::Jitter(_) => return true,
            Mode::Drop => return false,
            Mode::Stall => {}
        }
        if mode.changed().await.is_err() {
            return false;
        }
    }
}

async fn connection(client: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Mode>) {
    if !may_pass(&mut mode).await {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let mut dropped = mode.clone();
    tokio::select! {
        _ = pump(client_read, server_write, mode.clone(), 2) => {}
        _ = pump(server_read, client_write, mode, 1) => {}
        _ = dropped.wait_for(|m| *m == Mode::Drop) => {}
    }
}

/// The delay of one chunk in [`Mode::Jitter`]: `parts` thirds of `max`, each uniform.
fn jitter(max: std::time::Duration, parts: u32) -> std::time::Duration {
    (0..parts)
        .map(|_| max.mul_f64(rand::random_range(0.0..1.0) / 3.0))
        .sum()
}

async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
    parts: u32,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !may_pass(&mut mode).await {
            return;
        }
        let current = *mode.borrow();
        match current {
            Mode::Delay(delay) => tokio::time::sleep(delay).await,
            Mode::Jitter(max) => tokio::time::sleep(jitter(max, parts)).await,
            _ => {}
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

/// An address of this host that is not a loopback one (the source address of its default
/// route), if it has one: a connection to it counts as a remote one.
pub fn non_loopback_ip() -> Option<std::net::IpAddr> {
    // Connecting a UDP socket sends nothing; it only picks the route and its source.
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("192.0.2.200:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}
