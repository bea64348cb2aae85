//! The rules names and timings must meet, and how their errors read.

use std::time::Duration;

use crate::election::settings::*;

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

#[test]
fn names_and_node_ids_must_fit_the_table() {
    let ok = |name: &str| ElectionSettings::new(name, "node-a", ms(1200), ms(1000));
    assert!(ok(&"x".repeat(MAX_NAME_CHARS)).is_ok());
    assert!(
        ok("é".repeat(MAX_NAME_CHARS).as_str()).is_ok(),
        "characters, not bytes"
    );
    let long = "x".repeat(MAX_NAME_CHARS + 1);
    let error = ok(&long).unwrap_err();
    assert_eq!(
        error,
        SettingsError::TooLong {
            setting: Setting::Name,
            value: long.clone()
        }
    );
    assert!(
        error
            .to_string()
            .starts_with(&format!("election name {long:?}: is 101 characters long")),
        "{error}"
    );
    assert_eq!(
        ok("").unwrap_err(),
        SettingsError::Empty {
            setting: Setting::Name
        }
    );
    assert!(matches!(ok(" jobs"), Err(SettingsError::Padded { .. })));
    assert!(matches!(ok("jobs "), Err(SettingsError::Padded { .. })));
    assert!(matches!(
        ok("jo\nbs"),
        Err(SettingsError::ControlCharacter { .. })
    ));
    let id = ElectionSettings::new("jobs", &long, ms(1200), ms(1000)).unwrap_err();
    assert_eq!(id.setting(), Setting::NodeId);
    assert_eq!(id.value(), long);
}

#[test]
fn timing_leaves_a_renewal_room() {
    let timing = |ttl, interval| ElectionSettings::new("jobs", "a", ms(ttl), ms(interval));
    assert!(timing(1200, 1000).is_ok());
    assert!(timing(1020, 1000).is_ok());
    assert_eq!(
        timing(1000, 1000).unwrap_err(),
        SettingsError::TtlNotAboveInterval {
            ttl: ms(1000),
            interval: ms(1000)
        }
    );
    let tight = timing(1003, 1000).unwrap_err();
    assert!(
        tight
            .to_string()
            .starts_with("ttl \"1s 3ms\": leaves 3ms after interval (1s) for a renewal"),
        "{tight}"
    );
    assert_eq!(
        timing(0, 1000).unwrap_err(),
        SettingsError::Zero {
            setting: Setting::Ttl
        }
    );
    assert_eq!(timing(1200, 0).unwrap_err().setting(), Setting::Interval);
    assert!(matches!(
        timing(25 * 3600 * 1000, 1000),
        Err(SettingsError::OverADay { .. })
    ));
}

#[test]
fn poll_is_at_most_the_interval() {
    let settings = ElectionSettings::new("jobs", "a", ms(1200), ms(1000)).unwrap();
    assert_eq!(settings.clone().with_poll(ms(300)).unwrap().poll(), ms(300));
    assert!(settings.clone().with_poll(ms(1001)).is_err());
    let error = settings.with_poll(Duration::ZERO).unwrap_err();
    assert_eq!(
        error.to_string(),
        "poll \"0s\": must be above zero and at most interval (1s)"
    );
}

#[test]
fn reasons_can_name_settings_the_caller_s_way() {
    let error = check_timing(ms(1000), ms(1000)).unwrap_err();
    let key = |setting| match setting {
        Setting::Interval => "election.interval",
        _ => "election.ttl",
    };
    assert!(
        error
            .reason(key)
            .starts_with("must be greater than election.interval (1s)"),
        "{error}"
    );
}

#[test]
fn a_suffixed_id_keeps_its_suffix() {
    let id = id_with_suffix(&"h".repeat(200), ":4711");
    assert_eq!(id.chars().count(), MAX_NAME_CHARS);
    assert!(id.ends_with(":4711"));
    assert!(check_name(Setting::NodeId, &id).is_ok());
    assert_eq!(id_with_suffix("web-1", ":4711"), "web-1:4711");
}
