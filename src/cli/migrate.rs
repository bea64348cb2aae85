//! `leaderd migrate`: the migrations, and the fence's trigger on a Galera member.

use anyhow::Context;

use crate::config::Config;
use crate::store::DbConnection;

/// Applies the migrations and says how many ran; on a Galera member, also creates the
/// trigger the fence needs there (docs/fencing.md), which a node's own start never does.
pub(super) async fn migrate(config: Config) -> anyhow::Result<()> {
    config
        .store(true)
        .connect()
        .await
        .with_context(|| format!("cannot migrate {}", config.database.url))?;
    // The fence's trigger on a Galera member (docs/fencing.md): here, not at a node's start.
    let fence = async {
        let timeout = config.database.query_timeout;
        DbConnection::connect(&config.database.url, timeout)
            .await?
            .create_galera_fence_trigger()
            .await
    };
    match fence.await {
        Ok(true) => {
            println!("created the trigger leaderd_fence_term, which the fence needs on Galera")
        }
        Ok(false) => {}
        Err(error) => eprintln!(
            "leaderd: could not create the trigger leaderd_fence_term on this Galera member \
             ({error}): the fence for leader work refuses to run here until a user who may \
             create triggers (with the binary log on: SUPER, or log_bin_trust_function_creators \
             = 1) runs `leaderd migrate`"
        ),
    }
    match crate::store::migrations_applied() {
        0 => println!(
            "{} is up to date: no migration to apply",
            config.database.url
        ),
        1 => println!("1 migration applied to {}", config.database.url),
        n => println!("{n} migrations applied to {}", config.database.url),
    }
    Ok(())
}
