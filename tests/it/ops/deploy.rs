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
    // A bad configuration (78) fails the unit instead of restarting it in a loop.
    assert!(unit.contains("\nRestart=on-failure\n"));
    assert!(unit.contains("\nRestartPreventExitStatus=78\n"));
    // Hooks get cgroups of their own: delegated, and not made read-only.
    assert!(unit.contains("\nDelegate=yes\n") && !unit.contains("\nProtectControlGroups=yes"));
    // The installed path does not exist here: point the unit at the binary under test.
    let dir = tempdir("unit");
    let path = dir.join("leaderd.service");
    std::fs::write(
        &path,
        unit.replace("/usr/bin/leaderd", env!("CARGO_BIN_EXE_leaderd")),
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

pub(super) fn tempdir(prefix: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(common::unique(prefix));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The validator scripts/test.sh installs (Kubernetes schemas bundled, no cluster needed).
fn kubernetes_validate() -> std::process::Command {
    let tool = std::env::var("LEADERD_KUBERNETES_VALIDATE").unwrap_or_else(|_| {
        let cache = std::env::var("XDG_CACHE_HOME")
            .unwrap_or_else(|_| format!("{}/.cache", std::env::var("HOME").unwrap_or_default()));
        format!("{cache}/leaderd-tools/venv/bin/kubernetes-validate")
    });
    assert!(
        Path::new(&tool).exists(),
        "{tool} missing: scripts/test.sh installs it (pip install kubernetes-validate)"
    );
    let mut command = std::process::Command::new(tool);
    command.arg("--strict");
    command
}

const MANIFESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/kubernetes");

/// The manifests (every YAML file but the kustomization), by file name.
fn manifest_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(MANIFESTS)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml") && name != "kustomization.yaml")
        .collect();
    files.sort();
    files
}

/// Every document of `file` as JSON, through the YAML parser in kubernetes-validate's
/// virtualenv.
fn yaml_documents(file: &Path) -> Vec<serde_json::Value> {
    let validate = kubernetes_validate().get_program().to_owned();
    let python = Path::new(&validate).with_file_name("python3");
    let output = std::process::Command::new(python)
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
        ])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The one resource of `kind` named `name` among all the manifests.
fn resource(all: &[serde_json::Value], kind: &str, name: &str) -> serde_json::Value {
    all.iter()
        .find(|r| r["kind"] == kind && r["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name}"))
        .clone()
}

#[test]
fn the_kubernetes_manifests_pass_the_schema_check() {
    let files = manifest_files();
    let output = kubernetes_validate()
        .args(files.iter().map(|f| Path::new(MANIFESTS).join(f)))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{text}");
    for resource in [
        "serviceaccount/leaderd",
        "role/leaderd",
        "rolebinding/leaderd",
        "configmap/leaderd",
        "deployment/leaderd",
        "service/leaderd-leader",
        "service/leaderd-metrics",
        "poddisruptionbudget/leaderd",
    ] {
        assert!(
            text.contains(&format!("passed for resource {resource}")),
            "{text}"
        );
    }
    // Every file passed, nothing was skipped for want of a schema.
    assert_eq!(
        text.matches(" passed for resource ").count(),
        files.len(),
        "{text}"
    );
    // The check can fail: a misspelt field is refused.
    let broken = tempdir("manifest").join("broken.yaml");
    let original = std::fs::read_to_string(Path::new(MANIFESTS).join("deployment.yaml")).unwrap();
    std::fs::write(
        &broken,
        original.replace("terminationGracePeriodSeconds", "terminationGracePeriod"),
    )
    .unwrap();
    let output = kubernetes_validate().arg(&broken).output().unwrap();
    assert!(!output.status.success(), "a misspelt field passed");
}

/// kustomization.yaml lists every manifest, and only those; `kubectl kustomize` builds
/// it where kubectl is installed.
#[test]
fn the_kustomization_lists_every_manifest() {
    let kustomization = yaml_documents(&Path::new(MANIFESTS).join("kustomization.yaml"));
    let mut listed: Vec<String> = kustomization[0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    listed.sort();
    assert_eq!(listed, manifest_files());
    if let Ok(output) = std::process::Command::new("kubectl")
        .args(["kustomize", MANIFESTS])
        .output()
    {
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let built = String::from_utf8_lossy(&output.stdout);
        assert_eq!(
            built.matches("\nkind: ").count() + built.starts_with("kind: ") as usize,
            8,
            "{built}"
        );
    }
}

/// What the issue asks of the manifest set, read from the files.
#[test]
fn the_kubernetes_manifests_route_by_label_and_every_pod_is_ready_when_healthy() {
    let all: Vec<serde_json::Value> = manifest_files()
        .iter()
        .flat_map(|f| yaml_documents(&Path::new(MANIFESTS).join(f)))
        .collect();
    let config = resource(&all, "ConfigMap", "leaderd")["data"]["leaderd.toml"]
        .as_str()
        .unwrap()
        .to_owned();
    let config: toml::Table = config.parse().unwrap();
    let label = config["kubernetes"]["role_label"]
        .as_str()
        .unwrap()
        .to_owned();

    // RBAC: get and patch pods, nothing else.
    let role = resource(&all, "Role", "leaderd");
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]}])
    );
    let binding = resource(&all, "RoleBinding", "leaderd");
    assert_eq!(binding["roleRef"]["name"], "leaderd");
    assert_eq!(binding["subjects"][0]["name"], "leaderd");

    let deployment = resource(&all, "Deployment", "leaderd");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "leaderd");
    let container = &pod["containers"][0];
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(container[probe]["httpGet"]["path"], "/healthz", "{probe}");
    }
    // The downward API gives the pod's name and namespace.
    let env = container["env"].as_array().unwrap();
    let field = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .map(|e| e["valueFrom"]["fieldRef"]["fieldPath"].clone())
    };
    assert_eq!(field("POD_NAME"), Some("metadata.name".into()));
    assert_eq!(field("POD_NAMESPACE"), Some("metadata.namespace".into()));
    assert_eq!(config["log"]["format"].as_str(), Some("json"));
    // Locked down, with scratch space.
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let mounts = container["volumeMounts"].as_array().unwrap();
    let volume_at = |path: &str| {
        let mount = mounts
            .iter()
            .find(|m| m["mountPath"] == path)
            .unwrap_or_else(|| panic!("nothing mounted at {path}"));
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap()
            .clone()
    };
    assert!(volume_at("/tmp")["emptyDir"].is_object());
    let status = config["status"]["path"].as_str().unwrap();
    assert!(
        volume_at(Path::new(status).parent().unwrap().to_str().unwrap())["emptyDir"].is_object()
    );
    // The database URL is a file of the mounted Secret, not an environment variable.
    let url_file = Path::new(config["database"]["url_file"].as_str().unwrap());
    let secret = volume_at(url_file.parent().unwrap().to_str().unwrap());
    assert_eq!(secret["secret"]["secretName"], "leaderd-database");
    assert!(
        !env.iter()
            .any(|e| e["valueFrom"]["secretKeyRef"].is_object())
    );
    // Spread over nodes.
    assert!(
        !pod["topologySpreadConstraints"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // The grace period covers the hooks' budget, the release and the last label.
    let shutdown =
        humantime::parse_duration(config["hooks"]["shutdown_timeout"].as_str().unwrap()).unwrap();
    let ttl = humantime::parse_duration(config["election"]["ttl"].as_str().unwrap()).unwrap();
    let grace = Duration::from_secs(pod["terminationGracePeriodSeconds"].as_u64().unwrap());
    assert!(
        grace >= shutdown + ttl + Duration::from_secs(5) + Duration::from_secs(5),
        "terminationGracePeriodSeconds {grace:?} for hooks.shutdown_timeout {shutdown:?}"
    );

    // Leader traffic follows the label; metrics come from every pod.
    let leader = resource(&all, "Service", "leaderd-leader");
    assert_eq!(leader["spec"]["selector"][&label], "leader");
    let metrics = resource(&all, "Service", "leaderd-metrics");
    assert_eq!(metrics["spec"]["clusterIP"], "None");
    assert!(metrics["spec"]["selector"].get(&label).is_none());
    let pdb = resource(&all, "PodDisruptionBudget", "leaderd");
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );

    // The file is a configuration leaderd accepts (with a URL file that exists here).
    let dir = tempdir("configmap");
    let file = dir.join("leaderd.toml");
    std::fs::write(&file, toml::to_string(&config).unwrap()).unwrap();
    std::fs::write(dir.join("url"), "postgres://leaderd:pw@db:5432/app").unwrap();
    let output = leaderd()
        .args(["--config", file.to_str().unwrap(), "check-config"])
        .env("LEADERD_DATABASE__URL_FILE", dir.join("url"))
        // /run/leaderd is the pod's emptyDir; check-config wants to write there.
        .env("LEADERD_STATUS__PATH", dir.join("status.json"))
        .env("POD_NAME", "leaderd-0")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The optional PodMonitor: a kustomize Component that an overlay adds to the set
/// (kubectl builds it), scraping the pods' `http` port at /metrics with the job label
/// the alert rules expect ("leaderd", from the pods' app.kubernetes.io/name).
#[test]
fn the_podmonitor_component_scrapes_every_pod() {
    let component = Path::new(MANIFESTS).join("components/podmonitor");
    let kustomization = yaml_documents(&component.join("kustomization.yaml"));
    assert_eq!(kustomization[0]["kind"], "Component");
    let monitor = yaml_documents(&component.join("podmonitor.yaml"))
        .into_iter()
        .next()
        .unwrap();
    assert_eq!(monitor["kind"], "PodMonitor");
    let all: Vec<serde_json::Value> = manifest_files()
        .iter()
        .flat_map(|f| yaml_documents(&Path::new(MANIFESTS).join(f)))
        .collect();
    let pod = &resource(&all, "Deployment", "leaderd")["spec"]["template"];
    let labels = pod["metadata"]["labels"].as_object().unwrap();
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(labels.get(key), Some(value), "selector {key}");
    }
    let job_label = monitor["spec"]["jobLabel"].as_str().unwrap();
    assert_eq!(
        labels[job_label], "leaderd",
        "the job label LeaderdDown expects"
    );
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    let ports = pod["spec"]["containers"][0]["ports"].as_array().unwrap();
    assert!(
        ports.iter().any(|p| p["name"] == endpoint["port"]),
        "{ports:?}"
    );
    if let Ok(version) = std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
    {
        assert!(version.status.success());
        // An overlay inside the repository (kustomize wants relative paths).
        let overlay = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target")
            .join(common::unique("overlay"));
        std::fs::create_dir_all(&overlay).unwrap();
        std::fs::write(
            overlay.join("kustomization.yaml"),
            "resources: [../../config/kubernetes]\n\
             components: [../../config/kubernetes/components/podmonitor]\n",
        )
        .unwrap();
        let output = std::process::Command::new("kubectl")
            .arg("kustomize")
            .arg(&overlay)
            .output()
            .unwrap();
        std::fs::remove_dir_all(&overlay).unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let built = String::from_utf8_lossy(&output.stdout);
        assert_eq!(built.matches("\nkind: ").count(), 9, "{built}");
        assert!(built.contains("\nkind: PodMonitor\n"), "{built}");
    }
}

/// The examples beside the set: a sidecar Deployment and a NetworkPolicy, valid for the
/// schema, and consistent with the set: the sidecar shares the status file's directory
/// with the application, and the policy selects leaderd's pods and opens their HTTP port.
#[test]
fn the_sidecar_and_networkpolicy_examples_are_valid_and_fit_the_set() {
    let examples = Path::new(MANIFESTS).join("examples");
    let output = kubernetes_validate()
        .arg(examples.join("sidecar.yaml"))
        .arg(examples.join("networkpolicy.yaml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{text}");
    assert_eq!(text.matches(" passed for resource ").count(), 2, "{text}");

    let all: Vec<serde_json::Value> = manifest_files()
        .iter()
        .flat_map(|f| yaml_documents(&Path::new(MANIFESTS).join(f)))
        .collect();
    let config: toml::Table = resource(&all, "ConfigMap", "leaderd")["data"]["leaderd.toml"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let status_path = config["status"]["path"].as_str().unwrap();
    let status_dir = Path::new(status_path).parent().unwrap().to_str().unwrap();

    let sidecar = yaml_documents(&examples.join("sidecar.yaml")).remove(0);
    let pod = &sidecar["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 2, "an application and leaderd");
    let mount_of = |container: &serde_json::Value| {
        container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"] == status_dir)
            .map(|m| m["name"].clone())
    };
    let (app, leaderd) = (&containers[0], &containers[1]);
    assert_eq!(leaderd["args"][0], "run");
    let shared = mount_of(leaderd).expect("leaderd mounts the status directory");
    assert_eq!(mount_of(app), Some(shared.clone()), "the app mounts it too");
    assert!(
        app["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["value"] == status_path),
        "the app is told the status file"
    );
    assert_eq!(pod["serviceAccountName"], "leaderd");

    let policy = yaml_documents(&examples.join("networkpolicy.yaml")).remove(0);
    let deployment = resource(&all, "Deployment", "leaderd");
    let labels = deployment["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap();
    for (key, value) in policy["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(labels.get(key), Some(value), "podSelector {key}");
    }
    let port = deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
        .clone();
    for rule in policy["spec"]["ingress"].as_array().unwrap() {
        assert!(
            rule["ports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["port"] == port),
            "{rule}"
        );
    }
}

/// The Dockerfile: ca-certificates in the runtime image, and a dependency layer built
/// from the manifest alone, whose stubs cover every target Cargo finds in it (checked by
/// running the stub step in a directory of its own and asking `cargo metadata`). Where a
/// Docker daemon answers, the image is built and its trust store looked at; where none
/// does (as where this was written: no daemon, no registry), the test says so.
#[test]
fn the_dockerfile_caches_dependencies_and_ships_the_trust_store() {
    let dockerfile =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Dockerfile")).unwrap();
    let (build, runtime) = dockerfile.split_once("\nFROM debian").expect("two stages");
    assert!(
        runtime.contains("apt-get install -y --no-install-recommends ca-certificates"),
        "{runtime}"
    );
    // The dependency layer copies nothing but the manifest, lock file and build script
    // before building.
    let (deps, rest) = build
        .split_once("\nCOPY . .")
        .expect("COPY . . after the deps");
    let copies: Vec<&str> = deps.lines().filter(|l| l.starts_with("COPY ")).collect();
    assert_eq!(copies, ["COPY Cargo.toml Cargo.lock build.rs ./"], "{deps}");
    assert!(deps.contains("cargo build --release --locked"), "{deps}");
    assert!(rest.contains("touch src/lib.rs src/main.rs"), "{rest}");
    // Run the stub step (up to its build) in a directory with those three files.
    let run = deps.split("\nRUN ").last().unwrap().replace("\\\n", " ");
    let stub: Vec<&str> = run
        .split("&&")
        .map(str::trim)
        .take_while(|part| !part.starts_with("cargo build"))
        .collect();
    let dir = tempdir("docker-deps");
    for file in ["Cargo.toml", "Cargo.lock", "build.rs"] {
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(file),
            dir.join(file),
        )
        .unwrap();
    }
    let status = std::process::Command::new("sh")
        .args(["-ec", &stub.join(" && ")])
        .current_dir(&dir)
        .status()
        .unwrap();
    assert!(status.success(), "{stub:?}");
    let metadata = std::process::Command::new("cargo")
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        metadata.status.success(),
        "{}",
        String::from_utf8_lossy(&metadata.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&metadata.stdout).unwrap();
    let targets = metadata["packages"][0]["targets"].as_array().unwrap();
    let kinds: Vec<String> = targets
        .iter()
        .map(|t| t["kind"][0].as_str().unwrap().to_owned())
        .collect();
    for kind in ["lib", "bin", "bench", "custom-build"] {
        assert!(kinds.iter().any(|k| k == kind), "{kinds:?}");
    }
    for target in targets {
        let path = Path::new(target["src_path"].as_str().unwrap());
        assert!(path.exists(), "the stubs lack {}", path.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();

    let daemon = std::process::Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success());
    if !daemon {
        eprintln!(
            "[not checked] no Docker daemon answers here: the image was not built, and its \
             trust store was not looked at"
        );
        return;
    }
    let tag = common::unique("leaderd-test").to_lowercase();
    let built = std::process::Command::new("docker")
        .args(["build", "-t", &tag, env!("CARGO_MANIFEST_DIR")])
        .status()
        .unwrap();
    assert!(built.success(), "docker build failed");
    let listed = std::process::Command::new("docker")
        .args([
            "run",
            "--rm",
            "--entrypoint",
            "ls",
            &tag,
            "/etc/ssl/certs/ca-certificates.crt",
        ])
        .output()
        .unwrap();
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", &tag])
        .status();
    assert!(listed.status.success(), "no trust store in the image");
}
