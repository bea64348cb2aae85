//! The reference: the same graceful handover for `etcdctl elect`.

use super::*;

/// etcd's own election: three `etcdctl elect` contenders on a loopback etcd; SIGTERM to
/// the leader (etcdctl resigns) until the next one prints its proposal.
pub fn etcd_handovers(runs: usize) -> Result<(Vec<f64>, String), String> {
    let have = |tool: &str, arg: &str| {
        std::process::Command::new(tool)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !(have("etcd", "--version") && have("etcdctl", "version")) {
        return Err("etcd/etcdctl not installed (apt-get install etcd-server etcd-client)".into());
    }
    let version = String::from_utf8_lossy(
        &std::process::Command::new("etcd")
            .arg("--version")
            .output()
            .unwrap()
            .stdout,
    )
    .lines()
    .next()
    .unwrap_or_default()
    .to_owned();
    let dir = std::env::temp_dir().join(common::unique("etcd"));
    let (client, peer) = (free_port(), free_port());
    let endpoint = format!("http://127.0.0.1:{client}");
    let mut etcd = std::process::Command::new("etcd")
        .args(["--data-dir", dir.to_str().unwrap()])
        .args([
            "--listen-client-urls",
            &endpoint,
            "--advertise-client-urls",
            &endpoint,
        ])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args([
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
        ])
        .args([
            "--initial-cluster",
            &format!("default=http://127.0.0.1:{peer}"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_secs(2));
    let (lines, elected) = std::sync::mpsc::channel::<(usize, u128)>();
    let contender = |i: usize| {
        let mut child = std::process::Command::new("etcdctl")
            .args(["--endpoints", &endpoint, "elect", "bench", &format!("p{i}")])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                if line.is_ok_and(|l| l == format!("p{i}")) {
                    let _ = lines.send((i, now_ns()));
                }
            }
        });
        child
    };
    let mut children: Vec<(usize, std::process::Child)> =
        (0..3).map(|i| (i, contender(i))).collect();
    let mut samples = Vec::new();
    let (mut leader, _) = elected
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| "no etcd leader".to_string())?;
    for next_id in 3..3 + runs {
        std::thread::sleep(Duration::from_millis(300));
        let index = children.iter().position(|(id, _)| *id == leader).unwrap();
        let signalled = now_ns();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(children[index].1.id() as i32),
            Signal::SIGTERM,
        )
        .unwrap();
        let (new_leader, at) = elected
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| "no etcd handover".to_string())?;
        samples.push((at - signalled) as f64 / 1e6);
        let _ = children[index].1.wait();
        children[index] = (next_id, contender(next_id));
        leader = new_leader;
    }
    for (_, child) in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = etcd.kill();
    let _ = etcd.wait();
    let _ = std::fs::remove_dir_all(&dir);
    Ok((samples, version))
}
