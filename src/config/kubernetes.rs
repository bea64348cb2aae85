//! The validated `[kubernetes]` section, and the rule its label key must meet.

use std::path::PathBuf;

/// The validated `[kubernetes]` section. Labelling is on when `role_label` is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubernetesConfig {
    /// The label key set to `leader` or `follower` on this node's pod.
    pub role_label: Option<String>,
    /// This node's pod: `kubernetes.pod_name`, else `POD_NAME`, else the host name (which
    /// is the pod's name unless the pod sets `hostname`).
    pub pod_name: Option<String>,
    /// `kubernetes.namespace`, else `POD_NAMESPACE`, else the service account's namespace
    /// file (read when the labeller starts).
    pub namespace: Option<String>,
    /// The API server: in-cluster (`KUBERNETES_SERVICE_HOST`/`_PORT`) unless set.
    pub api_url: Option<String>,
    /// The bearer token file: the service account's unless set. Read again as it rotates.
    pub token_file: Option<PathBuf>,
    /// The API server's CA bundle (PEM): the service account's unless set.
    pub ca_file: Option<PathBuf>,
}

/// Why a `[kubernetes]` value is refused (reported under its key by the configuration).
pub fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    if name_ok && prefix_ok {
        Ok(())
    } else {
        Err(
            "not a Kubernetes label key: write it as an optional DNS prefix and a name, \
             such as \"leaderd.io/role\" (name: up to 63 letters, digits, '-', '_', '.')"
                .into(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys() {
        for good in [
            "leaderd.io/role",
            "role",
            "a.b-c.d/x_y.z",
            "app.kubernetes.io/r",
        ] {
            assert!(check_label_key(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "/role",
            "leaderd.io/",
            "Leaderd.io/role",
            "-role",
            "a/b/c",
            "role-",
        ] {
            assert!(check_label_key(bad).is_err(), "{bad}");
        }
        assert!(check_label_key(&"x".repeat(64)).is_err());
    }
}
