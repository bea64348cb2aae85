//! What the database answered against what the model answered: everything but times
//! exactly; times within a tolerance (how far the real statements ran from the model's
//! instants, plus the rounding of milliseconds).

use leaderd::store::{HeldRow, LeaseRow, Member};
use std::fmt::Debug;
use std::time::Duration;

/// `Err` names the first field that differs.
pub(super) type Verdict = Result<(), String>;

fn same<T: PartialEq + Debug>(what: &str, db: &T, model: &T) -> Verdict {
    match db == model {
        true => Ok(()),
        false => Err(format!("{what}: database {db:?}, model {model:?}")),
    }
}

fn close(what: &str, db: Duration, model: Duration, tolerance: Duration) -> Verdict {
    match db.abs_diff(model) <= tolerance {
        true => Ok(()),
        false => Err(format!(
            "{what}: database {db:?}, model {model:?} (tolerance {tolerance:?})"
        )),
    }
}

fn close_opt(
    what: &str,
    db: Option<Duration>,
    model: Option<Duration>,
    tolerance: Duration,
) -> Verdict {
    match (db, model) {
        (Some(db), Some(model)) => close(what, db, model, tolerance),
        (None, None) => Ok(()),
        _ => Err(format!("{what}: database {db:?}, model {model:?}")),
    }
}

pub(super) fn lease_rows(
    db: &Option<LeaseRow>,
    model: &Option<LeaseRow>,
    tolerance: Duration,
) -> Verdict {
    let (db, model) = match (db, model) {
        (Some(db), Some(model)) => (db, model),
        (None, None) => return Ok(()),
        _ => return Err(format!("row: database {db:?}, model {model:?}")),
    };
    same("holder", &db.holder, &model.holder)?;
    same("term", &db.term, &model.term)?;
    same("term_token", &db.term_token, &model.term_token)?;
    close("lease", db.lease, model.lease, tolerance)?;
    close("age", db.age, model.age, tolerance)?;
    close_opt("held_for", db.held_for, model.held_for, tolerance)?;
    let (dp, mp) = (&db.pending, &model.pending);
    close_opt("paused_for", dp.paused_for, mp.paused_for, tolerance)?;
    same("handover_to", &dp.handover_to, &mp.handover_to)?;
    close_opt("handover_for", dp.handover_for, mp.handover_for, tolerance)?;
    same("resign_term", &dp.resign_term, &mp.resign_term)?;
    match (db.clock_offset_us, model.clock_offset_us) {
        (Some(d), Some(m)) if d.abs_diff(m) <= tolerance.as_micros() as u64 => Ok(()),
        (d, m) => Err(format!("clock_offset_us: database {d:?}, model {m:?}")),
    }
}

pub(super) fn members(db: &[Member], model: &[Member], tolerance: Duration) -> Verdict {
    let ids = |members: &[Member]| members.iter().map(|m| m.node_id.clone()).collect();
    same::<Vec<String>>("members", &ids(db), &ids(model))?;
    for (db, model) in db.iter().zip(model) {
        let what = |field: &str| format!("member {} {field}", db.node_id);
        same(&what("candidate"), &db.candidate, &model.candidate)?;
        same(&what("standing"), &db.standing, &model.standing)?;
        same(&what("priority"), &db.priority, &model.priority)?;
        same(&what("version"), &db.version, &model.version)?;
        same(&what("host"), &db.host, &model.host)?;
        close(
            &what("member_for"),
            db.member_for,
            model.member_for,
            tolerance,
        )?;
        close(&what("seen_ago"), db.seen_ago, model.seen_ago, tolerance)?;
        close_opt(
            &what("no_preempt_for"),
            db.no_preempt_for,
            model.no_preempt_for,
            tolerance,
        )?;
    }
    Ok(())
}

pub(super) fn held_rows(db: &[HeldRow], model: &[HeldRow], tolerance: Duration) -> Verdict {
    let keys = |rows: &[HeldRow]| {
        rows.iter()
            .map(|r| (r.name.clone(), r.holder.clone(), r.term))
            .collect()
    };
    same::<Vec<(String, String, i64)>>("held rows", &keys(db), &keys(model))?;
    for (db, model) in db.iter().zip(model) {
        let what = |field: &str| format!("held row {} {field}", db.name);
        close(&what("lease"), db.lease, model.lease, tolerance)?;
        close(&what("age"), db.age, model.age, tolerance)?;
        close_opt(&what("held"), db.held, model.held, tolerance)?;
    }
    Ok(())
}
