//! What `ps` and `pgrep` show of a node's hook guards: `pgrep leaderd` finds them with the
//! daemon (their process name is `leaderd-guard`, not `exe` after /proc/self/exe), and
//! their command line starts `leaderd hook-guard`.

use super::*;

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| {
                    // The parent is the second field after the parenthesised name.
                    let rest = stat.rsplit_once(')')?.1;
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn pgrep_leaderd_finds_the_hook_guards() {
    let db = TestDb::new(Backend::Sqlite);
    let settings = hooks_config(
        &db,
        r#"
[hooks.leader_command]
command = ["sh", "-c", "touch DIR/running; exec sleep 60"]
"#,
    );
    let node = Node::start(&db, &settings, "named", &db.url);
    let running = db.dir.join("running");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !running.exists() {
        assert!(std::time::Instant::now() < deadline, "{}", node.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let daemon = node.pid().as_raw() as u32;
    let guards: Vec<u32> = children(daemon)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == b"hook-guard"))
        })
        .collect();
    assert!(!guards.is_empty(), "no guard among the daemon's children");
    let pgrep = std::process::Command::new("pgrep")
        .arg("leaderd")
        .output()
        .unwrap();
    let found: Vec<u32> = String::from_utf8_lossy(&pgrep.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(found.contains(&daemon), "{found:?}");
    for guard in guards {
        assert!(
            found.contains(&guard),
            "pgrep leaderd misses guard {guard}: {found:?}"
        );
        let comm = std::fs::read_to_string(format!("/proc/{guard}/comm")).unwrap();
        assert_eq!(comm.trim(), "leaderd-guard");
        let cmdline = std::fs::read(format!("/proc/{guard}/cmdline")).unwrap();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        assert_eq!(
            args[0],
            b"leaderd",
            "{:?}",
            String::from_utf8_lossy(&cmdline)
        );
        assert_eq!(args[1], b"hook-guard");
    }
}
