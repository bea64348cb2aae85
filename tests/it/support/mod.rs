//! Shared test support: a database of its own per test on each backend (`db`), a TCP
//! proxy that breaks connections on demand (`proxy`), nodes that run the real `leaderd`
//! binary (`node`) and the sampler that watches their status files (`sampler`), recording
//! hooks (`records`) and leader work that escapes its process group (`escape`).

#[macro_use]
pub mod db;
#[macro_use]
pub mod escape;
pub mod mariadb;
pub mod node;
pub mod proxy;
pub mod records;
pub mod sampler;
pub mod servers;
pub mod tls;

pub use db::{Backend, TestDb};
pub use node::{Node, NodeSettings, StatusFile, leaderd, status_json, wait_members};
pub use sampler::{Sampler, agreed_leader, wait_agreed, wait_new_leader};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

/// A name no other test (or test process) uses.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// `holder`'s lease on the row `name` in `term`, its terms marked with a token of their
/// own (for tests in which it does not matter which process started a term).
pub fn lease(name: &str, holder: &str, ttl: Duration, term: i64) -> leaderd::store::Lease {
    leaderd::store::Lease {
        name: name.to_owned(),
        holder: holder.to_owned(),
        token: leaderd::store::ProcessToken::random(),
        ttl,
        term,
    }
}

/// The wall clock in nanoseconds, as the recording scripts' `date +%s%N` writes it.
pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Writes an executable script `name` into `dir`.
pub fn script(dir: &Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Every line of the files in `dir` whose names start with `prefix`.
pub fn lines_of(dir: &Path, prefix: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if name.starts_with(prefix) {
            let text = std::fs::read_to_string(&path).unwrap();
            lines.extend(text.lines().map(str::to_owned));
        }
    }
    lines
}

/// A port free right now (bound and let go), outside the ephemeral range.
pub fn free_port() -> u16 {
    // Below the kernel's ephemeral range (32768 and up here): a port the kernel picked
    // for bind(0) could be handed to some outgoing connection, or to another caller,
    // before the node binds it, and a node then failed with "Address already in use".
    // Each test process walks its own stretch of the range, starting from its pid.
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 10_000;
    const PORTS: u32 = 22_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(1_009) % PORTS,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    loop {
        let port = (FIRST + NEXT.fetch_add(1, Ordering::Relaxed) % PORTS) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// One plain HTTP/1.0 GET: the status code and the whole response (headers and body).
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let code = response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not HTTP: {response:?}"));
    (code, response)
}
