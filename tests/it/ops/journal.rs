//! Logs as journal fields under systemd: with `JOURNAL_STREAM` naming its stderr, a node
//! sends its events to journald's socket in the native protocol, each field its own
//! (`ELECTION`, `NODE`, `TERM`…), and nothing to stderr. Run in a mount namespace of its
//! own (`unshare -m`, as root) where the test's socket is /run/systemd/journal/socket, so
//! the host's journal is not touched.

use super::*;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;

/// The datagrams received within `limit`, each as its fields.
fn receive(socket: &UnixDatagram, limit: Duration) -> Vec<HashMap<String, String>> {
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let deadline = Instant::now() + limit;
    let mut events = Vec::new();
    let mut buf = vec![0u8; 65536];
    while Instant::now() < deadline {
        if let Ok(n) = socket.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            let fields = text
                .lines()
                .filter_map(|line| line.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            events.push(fields);
        }
    }
    events
}

fn start_in_namespace(
    db: &TestDb,
    settings: &NodeSettings,
    id: &str,
    journal_dir: &Path,
    stream: &str,
) -> Node {
    let mut command = std::process::Command::new("unshare");
    command.args([
        "-m",
        "sh",
        "-c",
        "mount -t tmpfs none /run && mkdir -p /run/systemd/journal && \
         mount --bind \"$JOURNAL_DIR\" /run/systemd/journal && exec \"$LEADERD\" \"$@\"",
        "sh",
    ]);
    Node::start_program(
        command,
        db,
        settings,
        id,
        &db.url,
        &[
            ("JOURNAL_DIR", journal_dir.to_str().unwrap()),
            ("LEADERD", env!("CARGO_BIN_EXE_leaderd")),
            ("JOURNAL_STREAM", stream),
            ("RUST_LOG", "info"),
        ],
    )
}

#[test]
fn under_journald_events_are_journal_fields() {
    let db = TestDb::new(Backend::Sqlite);
    let journal_dir = db.dir.join("journal");
    std::fs::create_dir_all(&journal_dir).unwrap();
    let socket = UnixDatagram::bind(journal_dir.join("socket")).unwrap();
    let settings = NodeSettings::default();
    // The node's stderr is this file (Node opens it to append): JOURNAL_STREAM names it.
    let log = db.dir.join("n1.log");
    std::fs::File::create(&log).unwrap();
    let meta = std::fs::metadata(&log).unwrap();
    let stream = format!("{}:{}", meta.dev(), meta.ino());
    let node = start_in_namespace(&db, &settings, "n1", &journal_dir, &stream);
    let events = receive(&socket, Duration::from_secs(4));
    drop(node);
    let leader = events
        .iter()
        .find(|e| e.get("MESSAGE").is_some_and(|m| m == "role is now leader"))
        .unwrap_or_else(|| {
            panic!(
                "no \"role is now leader\" event in {events:?}; stderr: {}",
                std::fs::read_to_string(&log).unwrap()
            )
        });
    assert_eq!(leader["ELECTION"], settings.election, "{leader:?}");
    assert_eq!(leader["NODE"], "n1", "{leader:?}");
    // Terms start at the database clock (µs since 1970), so only their form is known.
    assert!(
        leader["TERM"].parse::<i64>().is_ok_and(|t| t > 0),
        "{leader:?}"
    );
    assert_eq!(leader["PRIORITY"], "6", "{leader:?}");
    assert_eq!(leader["SYSLOG_IDENTIFIER"], "leaderd", "{leader:?}");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "",
        "nothing on stderr while the journal takes the events"
    );

    // A JOURNAL_STREAM that names another stream (inherited): lines on stderr as before.
    let other = db.dir.join("n2.log");
    std::fs::File::create(&other).unwrap();
    let node = start_in_namespace(&db, &NodeSettings::default(), "n2", &journal_dir, "1:1");
    let events = receive(&socket, Duration::from_secs(2));
    drop(node);
    assert!(events.is_empty(), "{events:?}");
    assert!(
        std::fs::read_to_string(&other)
            .unwrap()
            .contains("role is now"),
        "the log went to stderr"
    );
}
