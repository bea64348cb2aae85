//! What can go wrong with a lock, each error naming the lock as its user did.

use std::time::Duration;

use crate::election::settings::{Setting, SettingsError};
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{}", held_message(.name, .holder, *.term, *.lapses_in, *.waited))]
    Held {
        name: String,
        /// Who holds the lock now.
        holder: String,
        term: i64,
        /// When its lease lapses unless it renews (as the database saw it).
        lapses_in: Duration,
        /// How long this attempt waited before giving up.
        waited: Duration,
    },
    #[error("cannot use the database for lock {name:?}: {source}")]
    Unavailable {
        name: String,
        #[source]
        source: StoreError,
    },
    #[error("cannot use the database for lock {name:?}: the lock's background task ended")]
    TaskEnded { name: String },
    #[error("lock {name:?} was lost in term {term}: its lease was not renewed in time")]
    Lost { name: String, term: i64 },
    #[error("gave up waiting for lock {name:?}")]
    Cancelled { name: String },
    #[error("lock {what} {value:?}: {reason}")]
    Invalid {
        what: &'static str,
        value: String,
        reason: String,
    },
}

fn held_message(
    name: &str,
    holder: &str,
    term: i64,
    lapses_in: Duration,
    waited: Duration,
) -> String {
    let waited = match waited.is_zero() {
        true => String::new(),
        false => format!(
            " (gave up after waiting {})",
            humantime::format_duration(waited)
        ),
    };
    format!(
        "lock {name:?} is held by {holder} (term {term}); its lease lapses in {} unless renewed{waited}",
        humantime::format_duration(round_to_ms(lapses_in))
    )
}

/// How a lock names each election setting.
fn option_name(setting: Setting) -> &'static str {
    match setting {
        Setting::Name => "name",
        Setting::NodeId => "holder",
        Setting::Ttl => "ttl",
        Setting::Interval | Setting::Poll => "renewal interval",
    }
}

impl From<SettingsError> for LockError {
    fn from(error: SettingsError) -> Self {
        LockError::Invalid {
            what: option_name(error.setting()),
            value: error.value(),
            reason: error.reason(option_name),
        }
    }
}

fn round_to_ms(duration: Duration) -> Duration {
    Duration::from_millis(duration.as_millis() as u64)
}
