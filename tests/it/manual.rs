//! The man page as `leaderd man` prints it (the package installs it): one page for every
//! subcommand, with EXIT STATUS, ENVIRONMENT and FILES, and clean for groff.

use crate::support::leaderd;

#[test]
fn one_man_page_covers_every_command_exit_status_environment_and_files() {
    let output = leaderd().arg("man").output().unwrap();
    assert!(output.status.success());
    let page = String::from_utf8(output.stdout).unwrap();
    assert!(page.contains(".TH leaderd 1"), "{page}");
    for section in [
        ".SH EXIT STATUS",
        ".SH ENVIRONMENT",
        ".SH FILES",
        ".SH COMMANDS",
    ] {
        assert!(page.contains(section), "{section}");
    }
    for command in [
        "run",
        "status",
        "migrate",
        "resign",
        "handover",
        "pause",
        "resume",
        "watch",
        "lock",
        "unlock",
        "locks",
        "wait",
        "man",
        "completions",
        "check\\-config",
    ] {
        assert!(
            page.contains(&format!(".SS leaderd {command}")),
            "no section for {command}"
        );
    }
    // No pages that are never generated, and no hidden subcommands.
    assert!(
        !page.contains("(1)\n.TP") && !page.contains("leaderd\\-lock(1)"),
        "{page}"
    );
    assert!(!page.contains("hook\\-guard"));
    for code in ["69", "73", "75", "76", "78", "126, 127"] {
        assert!(
            page.contains(&format!("\\fB{code}\\fR")),
            "exit status {code}"
        );
    }
    for name in [
        "LEADERD_<SECTION>__<KEY>",
        "/etc/leaderd/leaderd.toml",
        "RUST_LOG",
    ] {
        assert!(page.contains(name), "{name}");
    }
    // groff's warnings on: none.
    let path = std::env::temp_dir().join(crate::support::unique("leaderd") + ".1");
    std::fs::write(&path, &page).unwrap();
    let groff = std::process::Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(&path)
        .output()
        .expect("groff runs (scripts/test.sh installs it)");
    std::fs::remove_file(&path).unwrap();
    assert!(groff.status.success());
    assert_eq!(String::from_utf8_lossy(&groff.stderr), "", "groff warnings");
}

/// `man` and `completions` print the same text whatever the configuration: a --config
/// given to them is a mistake, refused as a usage error.
#[test]
fn man_and_completions_refuse_config() {
    for args in [
        &["man", "--config", "x.toml"][..],
        &["completions", "bash", "--config", "x.toml"],
        &["man", "--database", "sqlite://x"],
    ] {
        let output = leaderd().args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(output.stdout.is_empty());
        assert!(String::from_utf8_lossy(&output.stderr).contains("--config"));
    }
    let output = leaderd().args(["completions", "bash"]).output().unwrap();
    assert!(output.status.success());
}
