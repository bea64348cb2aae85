//! The README's two-node demo, run as written: its lines are taken from README.md, so the
//! test fails when the README's promise does. Each `sleep` is tripled, for a loaded
//! machine; everything else is the README's own.

use std::path::Path;
use std::process::Command;

/// The shell lines of the README's block after the line that introduces the demo.
fn readme_demo() -> Vec<String> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let start = readme
        .find("a Ctrl-C handover")
        .expect("the README introduces its demo with \"a Ctrl-C handover\"");
    let block = readme[start..]
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the demo is a ```sh block");
    block.lines().map(str::to_owned).collect()
}

#[test]
fn the_readme_demo_hands_over_on_ctrl_c() {
    let lines = readme_demo();
    assert!(
        lines[0].starts_with("cargo build --release"),
        "the demo builds first: {lines:?}"
    );
    let dir = std::env::temp_dir().join(crate::support::unique("readme-demo"));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_leaderd")).parent().unwrap();
    let script = format!(
        "set -e\nPATH={}:$PATH\nsleep() {{ command sleep \"$(awk \"BEGIN {{print $1 * 3}}\")\"; }}\n{}\nkill %2; wait\n",
        bin.display(),
        lines[1..].join("\n")
    );
    let output = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{script}\n{stdout}\n{stderr}");
    let leaders: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("leader:"))
        .map(str::trim)
        .collect();
    assert_eq!(leaders, ["a", "b"], "{stdout}\n{stderr}");
    let member = |name: &str, role: &str| {
        stdout
            .lines()
            .any(|l| l.split_whitespace().take(2).eq([name, role]))
    };
    assert!(member("b", "follower") && member("a", "gone"), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}
