//! The deployment files checked offline: the systemd unit with systemd-analyze, the
//! Kubernetes manifests against the schemas bundled with kubernetes-validate.

use super::*;

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/leaderd.service"
    ))
    .unwrap();
    assert!(unit.contains("Type=notify") && unit.contains("WatchdogSec="));
    assert!(unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    // Hooks get cgroups of their own: delegated, and not made read-only.
    assert!(unit.contains("\nDelegate=yes\n") && !unit.contains("\nProtectControlGroups=yes"));
    // The installed path does not exist here: point the unit at the binary under test.
    let dir = tempdir("unit");
    let path = dir.join("leaderd.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/leaderd", env!("CARGO_BIN_EXE_leaderd")),
    )
    .unwrap();
    let output = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze is installed");
    assert!(
        output.status.success() && output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn tempdir(prefix: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(common::unique(prefix));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The validator scripts/test.sh installs (Kubernetes schemas bundled, no cluster needed).
fn kubernetes_validate() -> std::process::Command {
    let tool = std::env::var("LEADERD_KUBERNETES_VALIDATE").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/target/tools/venv/bin/kubernetes-validate"
        )
        .into()
    });
    assert!(
        Path::new(&tool).exists(),
        "{tool} missing: scripts/test.sh installs it (pip install kubernetes-validate)"
    );
    let mut command = std::process::Command::new(tool);
    command.arg("--strict");
    command
}

#[test]
fn the_kubernetes_manifests_pass_the_schema_check() {
    let manifest = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/kubernetes/leaderd.yaml"
    );
    let output = kubernetes_validate().arg(manifest).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{text}");
    for resource in [
        "configmap/leaderd",
        "deployment/leaderd",
        "service/leaderd-leader",
    ] {
        assert!(
            text.contains(&format!("passed for resource {resource}")),
            "{text}"
        );
    }
    // The check can fail: a misspelt field is refused.
    let broken = tempdir("manifest").join("broken.yaml");
    let original = std::fs::read_to_string(manifest).unwrap();
    std::fs::write(
        &broken,
        original.replace("terminationGracePeriodSeconds", "terminationGracePeriod"),
    )
    .unwrap();
    let output = kubernetes_validate().arg(&broken).output().unwrap();
    assert!(!output.status.success(), "a misspelt field passed");
}
