//! The install: the unit's hardening score, and the Debian package built with cargo-deb,
//! installed into a throwaway root with dpkg, checked as the unprivileged user the unit
//! runs as, run that way, verified with systemd-analyze and purged.

use super::*;
use deploy::tempdir;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Command, Output};

const UNIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/leaderd.service");
/// The user the checks run as: a stand-in for the unit's DynamicUser, which is no member
/// of any group owning the files.
const SERVICE_USER: [&str; 4] = [
    "setpriv",
    "--reuid=nobody",
    "--regid=nogroup",
    "--clear-groups",
];

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(output.status.success(), "{command:?}: {}", text(&output));
    output
}

/// The overall exposure `systemd-analyze security --offline=true` gives a unit file.
fn exposure(unit: &Path) -> f64 {
    let output = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(unit)
        .output()
        .expect("systemd-analyze is installed");
    let text = text(&output);
    let line = text
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no overall exposure in:\n{text}"));
    let after = line.rsplit_once(": ").unwrap().1;
    after.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn the_unit_is_hardened_to_an_ok_exposure() {
    let unit = std::fs::read_to_string(UNIT).unwrap();
    // What the daemon needs stays: its cgroup for the hooks, the network, its directories.
    for line in [
        "\nDelegate=yes\n",
        "\nDynamicUser=yes\n",
        "\nRuntimeDirectory=leaderd\n",
        "\nStateDirectory=leaderd\n",
        "\nCapabilityBoundingSet=\n",
        "\nUMask=0077\n",
        "\nRestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n",
    ] {
        assert!(unit.contains(line), "the unit lacks {line:?}");
    }
    assert!(!unit.contains("\nProtectControlGroups=yes"));
    // The status path is in the configuration file, where `status --local` finds it.
    assert!(!unit.contains("LEADERD_STATUS__PATH"));
    let score = exposure(Path::new(UNIT));
    assert!(score <= 2.5, "exposure {score} > 2.5 (OK)");
    // The measure can fail: the same unit without its hardening lines scores worse.
    let dir = tempdir("unit");
    let bare = dir.join("bare.service");
    let hardening = unit.split("\n# Hardening").nth(1).unwrap();
    let hardening = hardening.split("\n[Install]").next().unwrap();
    std::fs::write(&bare, unit.replace(hardening, "\n")).unwrap();
    let bare_score = exposure(&bare);
    assert!(bare_score > 2.5, "the unhardened unit scores {bare_score}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Installing as root and checking as another user need root; CI runs the tests as root.
fn needs_root(test: &str) -> bool {
    // /proc/self belongs to the effective user.
    let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    if !root {
        eprintln!("SKIPPED {test}: it installs files owned by root and switches to nobody");
    }
    root
}

/// Where this process's cgroup v2 tree is mounted (all of /sys/fs/cgroup, or the
/// unified part of a hybrid layout).
fn cgroup2_root() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.contains(" - cgroup2 "))
        .expect("a cgroup v2 mount");
    PathBuf::from(line.split(' ').nth(4).unwrap())
}

/// Builds the package from the binary under test (no second build).
fn build_package(out: &Path) -> PathBuf {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/package.sh");
    run(Command::new(script)
        .args([
            "--binary",
            env!("CARGO_BIN_EXE_leaderd"),
            "--fast",
            "--quiet",
            "--output",
        ])
        .arg(out));
    std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("a .deb")
}

/// dpkg with its database in `root` and the maintainer scripts run outside a chroot (the
/// throwaway root has no shell), told about the root by $DPKG_ROOT. The root has no libc6
/// package either, hence --force-depends.
fn dpkg(root: &Path) -> Command {
    let mut command = Command::new("dpkg");
    command
        .arg(format!("--root={}", root.display()))
        .args(["--force-script-chrootless", "--force-depends"]);
    command
}

/// What the unit's user needs of an install in `root`, checked as that user: the
/// configuration readable, the credentials and their directory not.
fn check_as_service_user(root: &Path) -> Result<(), String> {
    let as_user = |args: &[&str]| {
        let output = Command::new(SERVICE_USER[0])
            .args(&SERVICE_USER[1..])
            .args(args)
            .output()
            .unwrap();
        (output.status.success(), text(&output))
    };
    let config = root.join("etc/leaderd/leaderd.toml");
    let (ok, out) = as_user(&["cat", config.to_str().unwrap()]);
    if !ok {
        return Err(format!(
            "the service user cannot read {}: {out}",
            config.display()
        ));
    }
    let credentials = root.join("etc/leaderd/credentials");
    let (ok, _) = as_user(&["ls", credentials.to_str().unwrap()]);
    if ok {
        return Err(format!(
            "the service user can list {}",
            credentials.display()
        ));
    }
    for entry in std::fs::read_dir(&credentials).unwrap() {
        let path = entry.unwrap().path();
        let mode = path.metadata().unwrap().mode();
        if mode & 0o077 != 0 {
            return Err(format!("{} has mode {:o}", path.display(), mode & 0o777));
        }
    }
    Ok(())
}

#[test]
fn the_debian_package_installs_runs_as_the_service_user_and_purges() {
    if !needs_root("the Debian package test") {
        return;
    }
    let dir = tempdir("deb");
    let deb = build_package(&dir.join("out"));
    let root = dir.join("root");
    for sub in ["var/lib/dpkg/info", "var/lib/dpkg/updates"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    run(dpkg(&root).arg("--install").arg(&deb));

    // Files and modes.
    let mode = |path: &str| {
        let meta = std::fs::metadata(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        (meta.mode() & 0o7777, meta.uid(), meta.gid())
    };
    assert_eq!(mode("usr/bin/leaderd"), (0o755, 0, 0));
    assert_eq!(
        mode("usr/lib/systemd/system/leaderd.service"),
        (0o644, 0, 0)
    );
    assert_eq!(mode("etc/leaderd/leaderd.toml"), (0o644, 0, 0));
    assert_eq!(mode("etc/leaderd/credentials"), (0o700, 0, 0));
    for path in [
        "usr/share/man/man1/leaderd.1.gz",
        "usr/share/bash-completion/completions/leaderd",
        "usr/share/zsh/vendor-completions/_leaderd",
        "usr/share/fish/vendor_completions.d/leaderd.fish",
        "usr/share/doc/leaderd/leaderd.toml.example",
        "usr/share/doc/leaderd/copyright",
    ] {
        assert_eq!(mode(path).0, 0o644, "{path}");
    }
    let completion =
        std::fs::read_to_string(root.join("usr/share/bash-completion/completions/leaderd"))
            .unwrap();
    // The hidden subcommand (the hook guard) is not offered.
    assert!(completion.contains("check-config") && !completion.contains("hook-guard"));
    let man = run(Command::new("sh").arg("-c").arg(format!(
        "zcat {}/usr/share/man/man1/leaderd.1.gz",
        root.display()
    )));
    assert!(String::from_utf8_lossy(&man.stdout).contains(".TH leaderd 1"));
    let admindir = format!("--admindir={}/var/lib/dpkg", root.display());
    let conffiles = run(Command::new("dpkg-query").args([
        &admindir,
        "--showformat=${Conffiles}",
        "--show",
        "leaderd",
    ]));
    assert!(
        String::from_utf8_lossy(&conffiles.stdout).contains("/etc/leaderd/leaderd.toml "),
        "{}",
        text(&conffiles)
    );
    let unit =
        std::fs::read_to_string(root.join("usr/lib/systemd/system/leaderd.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/leaderd run --config /etc/leaderd/leaderd.toml"));
    assert!(unit.contains("LoadCredential=database-password:/etc/leaderd/credentials/"));
    // The installed unit verifies (pointed at the installed binary, not /usr/bin's).
    let verify = dir.join("leaderd.service");
    let installed = root.join("usr/bin/leaderd");
    std::fs::write(
        &verify,
        unit.replace("/usr/bin/leaderd", installed.to_str().unwrap()),
    )
    .unwrap();
    let output = run(Command::new("systemd-analyze").arg("verify").arg(&verify));
    assert!(output.stderr.is_empty(), "{}", text(&output));

    // The credential, as the admin puts it there (the README's steps).
    let config = root.join("etc/leaderd/leaderd.toml");
    let password = root.join("etc/leaderd/credentials/database-password");
    std::fs::write(&password, "s3cret\n").unwrap();
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(
        &config,
        std::fs::read_to_string(&config).unwrap().replace(
            "# url = \"postgres://leaderd@db.internal:5432/app\"",
            "url = \"postgres://leaderd@db.internal:5432/app\"",
        ),
    )
    .unwrap();
    check_as_service_user(&root).unwrap();
    // The check can fail: a configuration the service user cannot read is caught.
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o640)).unwrap();
    let error = check_as_service_user(&root).unwrap_err();
    assert!(error.contains("cannot read"), "{error}");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    // So can a credential others may read.
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o644)).unwrap();
    let error = check_as_service_user(&root).unwrap_err();
    assert!(error.contains("has mode 644"), "{error}");
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o600)).unwrap();

    // As the unit would run it: the service user, the credentials copied to a directory of
    // its own (what LoadCredential= does), /run/leaderd its runtime directory, the state
    // directory its working directory. A private mount namespace gives it a /run of its
    // own, so the status path stays the one in the file.
    let state = dir.join("state");
    let cgroup = cgroup2_root().join(common::unique("leaderd-package"));
    let script = format!(
        r#"set -eu
mount -t tmpfs -o mode=755 tmpfs /run
install -d -o nobody -g nogroup -m 755 /run/leaderd
install -d -o nobody -g nogroup -m 700 {state}
creds=/run/credentials/leaderd.service
install -d -m 500 -o nobody -g nogroup $creds
install -m 400 -o nobody -g nogroup {password} $creds/database-password
printf 'sqlite://%s/leaderd.sqlite3\n' {state} >$creds/database-url
chown nobody:nogroup $creds/database-url; chmod 400 $creds/database-url
cd {state}
as_user="{user}"
# The password credential is read (check-config shows it redacted) for the URL in the file.
CREDENTIALS_DIRECTORY=$creds $as_user {bin} check-config --config {config} >{state}/check.txt
# Without database.url, the URL credential: SQLite in the state directory.
sed -i 's|^url = |# url = |' {config}
# Delegate=yes and PrivateUsers=yes: a cgroup of the service user's own (as systemd chowns
# it), and a user namespace in which only that user is mapped. A hook must still get a
# cgroup of its own below it.
echo 'on_elected = ["sh", "-c", "cat /proc/self/cgroup >{state}/hook-cgroup"]' >>{config}
cgroup={cgroup}
mkdir $cgroup
chown nobody:nogroup $cgroup $cgroup/cgroup.procs $cgroup/cgroup.threads $cgroup/cgroup.subtree_control
echo $$ >$cgroup/cgroup.procs
LEADERD_HOOKS__CONTAINMENT=cgroup CREDENTIALS_DIRECTORY=$creds $as_user \
  unshare --user --map-current-user {bin} run --config {config} 2>{state}/run.log &
daemon=$!
echo $$ >$(dirname $cgroup)/cgroup.procs
# The first round decides the role: until then the status is unknown (3).
for _ in $(seq 1 300); do
  code=0
  {bin} status --local --config {config} >{state}/status.txt 2>&1 || code=$?
  [ $code != 3 ] && break
  sleep 0.1
done
stat -c %U {state}/leaderd.sqlite3 >{state}/owner.txt
kill -TERM $daemon
wait $daemon
rmdir $cgroup/leaderd-hook-* 2>/dev/null || true
rmdir $cgroup
echo $code
"#,
        state = state.display(),
        password = password.display(),
        user = SERVICE_USER.join(" "),
        bin = installed.display(),
        config = config.display(),
        cgroup = cgroup.display(),
    );
    let output = run(Command::new("unshare")
        .args(["--mount", "--propagation", "private", "bash", "-c"])
        .arg(&script));
    let read = |name: &str| std::fs::read_to_string(state.join(name)).unwrap_or_default();
    let check = read("check.txt");
    assert!(
        check.contains("postgres://leaderd:***@db.internal:5432/app") && !check.contains("s3cret"),
        "{check}"
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "0",
        "status --local with the unit's configuration file: {}\n{}",
        read("status.txt"),
        read("run.log")
    );
    assert_eq!(read("owner.txt").trim(), "nobody");
    let hook = read("hook-cgroup");
    assert!(
        hook.contains("/leaderd-package") && hook.contains("/leaderd-hook-"),
        "the hook is not in a cgroup of its own: {hook:?}\n{}",
        read("run.log")
    );
    assert!(!cgroup.exists());

    // Removal: purge leaves nothing of the package behind, the credentials included.
    run(dpkg(&root).args(["--purge", "leaderd"]));
    for path in [
        "usr/bin/leaderd",
        "usr/lib/systemd/system/leaderd.service",
        "etc/leaderd",
    ] {
        assert!(!root.join(path).exists(), "{path} is left after the purge");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The system calls in a `systemd-analyze syscall-filter` group, nested groups expanded.
fn syscall_group(group: &str) -> std::collections::BTreeSet<String> {
    let output = run(Command::new("systemd-analyze").args(["syscall-filter", group]));
    let mut calls = std::collections::BTreeSet::new();
    for word in String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .skip(1)
    {
        match word.strip_prefix('@') {
            Some(_) => calls.extend(syscall_group(word)),
            None => {
                calls.insert(word.to_owned());
            }
        }
    }
    calls
}

/// What the unit's filters would refuse, seen by tracing the daemon and a hook on
/// PostgreSQL (TCP): a system call outside `@system-service` less `@privileged`, writable
/// executable memory (`MemoryDenyWriteExecute=`) or a socket family beyond
/// `RestrictAddressFamilies=`. systemd cannot run here (no systemd as PID 1), so this
/// checks the daemon against the filters, not the filters against the daemon.
#[test]
fn the_daemon_and_its_hooks_stay_within_the_units_filters() {
    let unit = std::fs::read_to_string(UNIT).unwrap();
    assert!(unit.contains("\nSystemCallFilter=@system-service\nSystemCallFilter=~@privileged\n"));
    assert!(unit.contains("\nMemoryDenyWriteExecute=yes\n"));
    let allowed: std::collections::BTreeSet<String> = syscall_group("@system-service")
        .difference(&syscall_group("@privileged"))
        .cloned()
        .collect();
    assert!(allowed.contains("openat") && !allowed.contains("setuid"));

    let db = TestDb::new(Backend::Postgres);
    let trace = db.dir.join("trace");
    let hook_ran = db.dir.join("hook-ran");
    let config = db.dir.join("leaderd.toml");
    std::fs::write(
        &config,
        format!(
            "[status]\npath = \"{}\"\n[hooks]\non_elected = [\"sh\", \"-c\", \"date >{}\"]\n",
            db.dir.join("status.json").display(),
            hook_ran.display()
        ),
    )
    .unwrap();
    let mut strace = Command::new("strace")
        .args(["-f", "-qq", "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_leaderd"))
        .args(["run", "--config"])
        .arg(&config)
        .env("LEADERD_DATABASE__URL", &db.url)
        .env("LEADERD_HOOKS__CONTAINMENT", "subreaper")
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("strace is installed (scripts/test.sh)");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !hook_ran.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    // The daemon is the first process in the trace; strace ends when it does.
    let text = std::fs::read_to_string(&trace).unwrap();
    let daemon: i32 = text.split_whitespace().next().unwrap().parse().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon), Signal::SIGTERM).unwrap();
    assert!(strace.wait().unwrap().success());
    assert!(hook_ran.exists(), "the hook did not run");

    let text = std::fs::read_to_string(&trace).unwrap();
    // Each refused call with one line that made it, for the message.
    let mut refused = std::collections::BTreeMap::new();
    for line in text.lines() {
        // "PID name(args) = result", or "PID <... name resumed>..." for an interrupted one.
        let rest = line
            .split_once(' ')
            .map_or("", |(_, rest)| rest.trim_start());
        if rest.starts_with("<...") || rest.starts_with("---") || rest.starts_with("+++") {
            continue;
        }
        let Some((name, args)) = rest.split_once('(') else {
            continue;
        };
        // "???": a thread torn down by exit_group mid-call, which strace cannot name.
        if name == "???" {
            continue;
        }
        if !allowed.contains(name) {
            refused.insert(name.to_owned(), line.to_owned());
        }
        if (name == "mmap" || name == "mprotect")
            && args.contains("PROT_WRITE")
            && args.contains("PROT_EXEC")
        {
            refused.insert("writable executable memory".to_owned(), line.to_owned());
        }
        if name == "socket"
            && !["AF_UNIX", "AF_INET,", "AF_INET6"]
                .iter()
                .any(|family| args.starts_with(family))
        {
            refused.insert("socket family".to_owned(), line.to_owned());
        }
    }
    assert!(
        refused.is_empty(),
        "the unit's filters would refuse: {refused:?}"
    );
}

/// The manual steps of docs/operations.md ("Without the package"), run into a throwaway
/// root: `sudo` dropped, system paths under the root, the build and `systemctl` skipped
/// (the binary under test stands for the release build). They must give what the package
/// gives: files the service user can read, a credential directory it cannot, a unit that
/// verifies with the binary where the steps put it.
#[test]
fn the_manual_install_steps_work_for_the_service_user() {
    if !needs_root("the manual install test") {
        return;
    }
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap();
    let block = docs
        .split("Without the package")
        .nth(1)
        .and_then(|after| after.split("```sh\n").nth(1))
        .and_then(|block| block.split("```").next())
        .expect("the manual steps in docs/operations.md");
    let script: String = block
        .lines()
        .filter(|l| !l.starts_with("cargo build") && !l.starts_with("sudo systemctl"))
        .map(|l| {
            l.replace("sudo ", "")
                .replace("target/release/leaderd", env!("CARGO_BIN_EXE_leaderd"))
                .replace(" /etc/", " \"$ROOT\"/etc/")
                .replace(" /usr/local/", " \"$ROOT\"/usr/local/")
                + "\n"
        })
        .collect();
    assert!(script.contains("/etc/leaderd/credentials"), "{script}");
    let root = tempdir("manual");
    std::fs::create_dir_all(root.join("etc/systemd/system")).unwrap();
    std::fs::create_dir_all(root.join("usr/local/bin")).unwrap();
    run(Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .env("ROOT", &root)
        .current_dir(env!("CARGO_MANIFEST_DIR")));
    let password = root.join("etc/leaderd/credentials/database-password");
    std::fs::write(&password, "s3cret\n").unwrap();
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o600)).unwrap();
    check_as_service_user(&root).unwrap();
    let unit = std::fs::read_to_string(root.join("etc/systemd/system/leaderd.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/local/bin/leaderd run --config /etc/leaderd/leaderd.toml")
    );
    let verify = root.join("verify.service");
    let binary = root.join("usr/local/bin/leaderd");
    std::fs::write(
        &verify,
        unit.replace("/usr/local/bin/leaderd", binary.to_str().unwrap()),
    )
    .unwrap();
    let output = run(Command::new("systemd-analyze").arg("verify").arg(&verify));
    assert!(output.stderr.is_empty(), "{}", text(&output));
    std::fs::remove_dir_all(root).unwrap();
}

/// What the check in the container below runs, under systemd as PID 1: the unit with the
/// `database-url` credential, then without any credential file, each time started, led,
/// probed with `status --local --config`, stopped.
const IN_CONTAINER: &str = r#"round() {
  echo "== $1"
  systemctl start leaderd.service && echo "started"
  code=3
  for _ in $(seq 1 150); do
    /opt/leaderd/leaderd status --local --config /etc/leaderd/leaderd.toml >/dev/null 2>&1
    code=$?
    [ $code = 0 ] && [ -s /run/leaderd/hook-cgroup ] && break
    sleep 0.2
  done
  echo "status-local=$code"
  systemctl show -p ActiveState -p NRestarts leaderd.service
  echo "hook-cgroup=$(grep '^0::' /run/leaderd/hook-cgroup)"
  echo "hook-uid=$(cat /run/leaderd/hook-uid)"
  echo "database=$(ls /var/lib/leaderd/ | grep -cx from-credential.sqlite3)"
  rm -f /run/leaderd/hook-cgroup
  systemctl stop leaderd.service
  systemctl show -p Result leaderd.service
  journalctl -u leaderd.service -o cat --no-pager | tail -n 20
  echo "journal-fields=$(journalctl -u leaderd.service -o json --no-pager \
    | grep '"MESSAGE":"role is now leader"' | grep '"ELECTION":"' | grep '"NODE":"' \
    | grep -c '"TERM":"')"
  journalctl --rotate >/dev/null 2>&1; journalctl --vacuum-files=1 >/dev/null 2>&1
}
round credential
rm /etc/leaderd/credentials/database-url
rm -f /var/lib/leaderd/from-credential.sqlite3*
round none
# A bad configuration (exit 78) fails the unit at once: no restart loop.
mkdir -p /etc/systemd/system/leaderd.service.d
printf '[Service]\nEnvironment=LEADERD_ELECTION__TTL=soon\n' \
  >/etc/systemd/system/leaderd.service.d/bad.conf
systemctl daemon-reload
systemctl start leaderd.service
sleep 4
echo "== bad-config"
systemctl show -p ActiveState -p NRestarts -p Result -p ExecMainStatus leaderd.service
"#;

/// The unit under a real systemd (252 here), booted in a container (systemd-nspawn, the
/// host's /usr, a throwaway root) since this machine has no systemd as PID 1: it starts as
/// its dynamic user with all its hardening, with the credential and with no credential
/// file at all (the `SetCredential=` fallback), leads, runs its hook in a cgroup of its own
/// below the delegated one, is found by `status --local --config`, and stops cleanly.
/// Boots systemd in a container (systemd-nspawn: the host's /usr, a throwaway root) with
/// the unit (run from the binary under test), `config` as /etc/leaderd/leaderd.toml,
/// `credentials` in /etc/leaderd/credentials, and a service that runs `check` once booted,
/// then powers off; returns what `check` wrote to /out/result.txt.
fn in_container(
    config: &str,
    credentials: &[(&str, &str)],
    check: &str,
    private_network: bool,
) -> String {
    let dir = tempdir("nspawn");
    let (units, etc, opt, out) = (
        dir.join("units"),
        dir.join("leaderd"),
        dir.join("opt"),
        dir.join("out"),
    );
    for d in [
        &units.join("multi-user.target.wants"),
        &units.join("leaderd.service.d"),
        &etc.join("credentials"),
        &opt,
        &out,
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    let mode = |path: &Path, mode| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    mode(&etc, 0o755);
    mode(&etc.join("credentials"), 0o700);
    std::fs::copy(env!("CARGO_BIN_EXE_leaderd"), opt.join("leaderd")).unwrap();
    std::fs::write(
        opt.join("check.sh"),
        format!("#!/bin/sh\nexec >/out/result.txt 2>&1\n{check}\necho DONE\nsystemctl poweroff\n"),
    )
    .unwrap();
    mode(&opt.join("check.sh"), 0o755);
    let unit = std::fs::read_to_string(UNIT).unwrap();
    std::fs::write(
        units.join("leaderd.service"),
        unit.replace("/usr/bin/leaderd", "/opt/leaderd/leaderd"),
    )
    .unwrap();
    std::fs::write(
        units.join("leaderd-check.service"),
        "[Unit]\nAfter=multi-user.target\n[Service]\nType=oneshot\nExecStart=/opt/leaderd/check.sh\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(
        "../leaderd-check.service",
        units.join("multi-user.target.wants/leaderd-check.service"),
    )
    .unwrap();
    // network-online.target would wait two minutes for a link that never comes.
    std::os::unix::fs::symlink(
        "/dev/null",
        units.join("systemd-networkd-wait-online.service"),
    )
    .unwrap();
    std::fs::write(etc.join("leaderd.toml"), config).unwrap();
    mode(&etc.join("leaderd.toml"), 0o644);
    for (name, secret) in credentials {
        let path = etc.join("credentials").join(name);
        std::fs::write(&path, secret).unwrap();
        mode(&path, 0o600);
    }

    let bind = |flag: &str, from: &Path, to: &str| format!("{flag}={}:{to}", from.display());
    let mut nspawn = Command::new("timeout");
    nspawn
        .args([
            "300",
            "systemd-nspawn",
            "--quiet",
            "--register=no",
            "--keep-unit",
        ])
        .arg(format!(
            "--machine={}",
            common::unique("leaderd").replace('_', "-")
        ))
        .args(["--directory=/", "--volatile=yes"])
        .arg(bind("--bind", &units, "/etc/systemd/system"))
        .arg(bind("--bind", &etc, "/etc/leaderd"))
        .arg(bind("--bind-ro", &opt, "/opt/leaderd"))
        .arg(bind("--bind", &out, "/out"));
    if private_network {
        nspawn.arg("--private-network");
    }
    let output = nspawn
        .args(["--boot", "systemd.firstboot=off"])
        .output()
        .expect("systemd-nspawn is installed (scripts/test.sh: systemd-container)");
    let result = std::fs::read_to_string(out.join("result.txt")).unwrap_or_default();
    assert!(
        result.contains("DONE"),
        "the container did not finish ({}): {result}\n{}",
        output.status,
        text(&output)
    );
    std::fs::remove_dir_all(dir).unwrap();
    result
}

/// The unit under a real systemd (252 here), booted in a container since this machine has
/// no systemd as PID 1: it starts as its dynamic user with all its hardening, with the
/// credential and with no credential file at all (the `SetCredential=` fallback), leads,
/// runs its hook in a cgroup of its own below the delegated one, is found by
/// `status --local --config`, and stops cleanly.
#[test]
fn the_unit_runs_under_systemd_with_and_without_its_credential() {
    if !needs_root("the systemd test") {
        return;
    }
    let config = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/leaderd.toml"
    ))
    .unwrap()
        + "on_elected = [\"sh\", \"-c\", \"id -u >/run/leaderd/hook-uid; cat /proc/self/cgroup >/run/leaderd/hook-cgroup\"]\n";
    let result = in_container(
        &config,
        &[(
            "database-url",
            "sqlite:///var/lib/leaderd/from-credential.sqlite3\n",
        )],
        IN_CONTAINER,
        false,
    );
    let mut rounds: Vec<&str> = result.split("== ").skip(1).collect();
    assert_eq!(rounds.len(), 3, "{result}");
    // 78 is not restarted: the unit failed once, after 4 s with RestartSec=1s.
    let bad = rounds.pop().unwrap();
    for line in [
        "ActiveState=failed",
        "NRestarts=0",
        "Result=exit-code",
        "ExecMainStatus=78",
    ] {
        assert!(bad.contains(line), "no {line:?} in:\n{bad}");
    }
    for (round, from_credential) in rounds.iter().zip(["1", "0"]) {
        // Under systemd the events are journal fields: `journalctl -o json` has the role
        // change with ELECTION, NODE and TERM.
        let fields: u32 = round
            .split("journal-fields=")
            .nth(1)
            .and_then(|rest| rest.lines().next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("{round}"));
        assert!(fields >= 1, "no role change with journal fields:\n{round}");
        for line in [
            "started",
            "status-local=0",
            "ActiveState=active",
            "NRestarts=0",
            "Result=success",
        ] {
            assert!(round.contains(line), "no {line:?} in:\n{round}");
        }
        assert!(
            round.contains("hook-cgroup=0::/system.slice/leaderd.service/leaderd-hook-"),
            "{round}"
        );
        // A dynamic user (61184 to 65519), not root.
        let uid: u32 = round
            .split("hook-uid=")
            .nth(1)
            .and_then(|rest| rest.lines().next())
            .and_then(|uid| uid.parse().ok())
            .unwrap_or_else(|| panic!("{round}"));
        assert!((61184..=65519).contains(&uid), "uid {uid}");
        assert!(
            round.contains(&format!("database={from_credential}")),
            "{round}"
        );
    }
}

/// The docs' drop-in for a hook that moves a virtual IP, taken from docs/operations.md and
/// tried under systemd in a container with a network of its own: the hardened unit refuses
/// the hook `ip addr add`, the drop-in without its `PrivateUsers=no` still does (a
/// capability in the unit's user namespace does not reach the network's), the whole
/// drop-in lets it through.
#[test]
fn the_virtual_ip_drop_in_lets_a_hook_add_an_address() {
    if !needs_root("the systemd drop-in test") {
        return;
    }
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap();
    let drop_in = docs
        .split("**A virtual IP**")
        .nth(1)
        .and_then(|after| after.split("```ini\n").nth(1))
        .and_then(|block| block.split("```").next())
        .expect("the virtual IP drop-in in docs/operations.md");
    let drop_in: String = drop_in
        .lines()
        .map(|l| l.trim().to_owned() + "\n")
        .collect();
    assert!(drop_in.contains("PrivateUsers=no\n"), "{drop_in}");
    let partial = drop_in.replace("PrivateUsers=no\n", "");
    let config = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/leaderd.toml"
    ))
    .unwrap()
        + "on_elected = [\"sh\", \"-c\", \"ip addr add 192.0.2.10/32 dev lo; echo $? >/run/leaderd/vip\"]\n";
    let check = format!(
        r#"round() {{
  systemctl daemon-reload
  systemctl start leaderd.service
  for _ in $(seq 1 150); do [ -s /run/leaderd/vip ] && break; sleep 0.2; done
  echo "$1: ip=$(cat /run/leaderd/vip) address=$(ip -o addr show dev lo | grep -c 192.0.2.10)"
  ip addr del 192.0.2.10/32 dev lo 2>/dev/null
  systemctl stop leaderd.service
}}
drop_in=/etc/systemd/system/leaderd.service.d/vip.conf
round bare
printf '%s' '{partial}' >$drop_in
round partial
printf '%s' '{drop_in}' >$drop_in
round full
"#
    );
    let result = in_container(&config, &[], &check, true);
    // Refused: the socket (bare) or the address (partial); `ip` exits 1 or 2.
    for round in ["bare", "partial"] {
        let line = result
            .lines()
            .find(|l| l.starts_with(&format!("{round}: ")))
            .unwrap_or_else(|| panic!("{result}"));
        assert!(
            line.ends_with("address=0") && !line.contains("ip=0"),
            "{result}"
        );
    }
    assert!(result.contains("full: ip=0 address=1"), "{result}");
}
