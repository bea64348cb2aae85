//! Records the git commit leaderd is built from, for `leaderd_build_info` and `--version`:
//! `LEADERD_COMMIT` if set (a build from a tarball or in a container without `.git`),
//! else `git rev-parse --short=12 HEAD`, else `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (output.status.success() && !text.is_empty()).then(|| text.to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=LEADERD_COMMIT");
    let commit = std::env::var("LEADERD_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    // A new commit changes the worktree's HEAD log (a branch checkout, HEAD itself).
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        for file in ["HEAD", "logs/HEAD"] {
            let path = std::path::Path::new(&dir).join(file);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    println!("cargo:rustc-env=LEADERD_COMMIT={commit}");
}
