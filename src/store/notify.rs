//! Release notifications on PostgreSQL: the release statement also runs
//! `pg_notify('leaderd_release', <name>)`, and waiting nodes LISTEN on a connection of their
//! own, so they try to take a released lease at once instead of at their next poll.
//!
//! A notification is only a hint to poll now: nothing is decided on it, and polling goes
//! on as before, so a lost notification or a dead listener costs time, never safety.

use diesel_async::SimpleAsyncConnection;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tracing::{debug, info};

use super::DatabaseUrl;

/// The channel the release statement notifies (see `dialect/`); the payload is the name.
pub const CHANNEL: &str = "leaderd_release";
/// How often an idle listener checks its connection: a connection that died without a
/// FIN or RST would otherwise go unnoticed.
const PING_EVERY: Duration = Duration::from_secs(30);
/// The check of an idle listener where the URL asks for a server that accepts writes: it
/// also fails once the server turned read-only (a primary demoted while it runs), whose
/// connections nothing else breaks, so the listener moves on to the new primary, where
/// the releases are written.
const PING_WRITABLE: &str = "DO $$ BEGIN IF current_setting('transaction_read_only') = 'on' \
                             THEN RAISE EXCEPTION 'the server no longer accepts writes'; \
                             END IF; END $$";

fn ping_for(url: &DatabaseUrl) -> &'static str {
    match url.expose().contains("target_session_attrs=read-write") {
        true => PING_WRITABLE,
        false => "SELECT 1",
    }
}

/// Between attempts to reconnect a listener.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// Starts listening for releases of `name`; each one is delivered as one `()` (several
/// before they are read count as one). The listener stops when the receiver is dropped.
pub fn listen(url: Arc<DatabaseUrl>, connect_timeout: Duration, name: &str) -> mpsc::Receiver<()> {
    let (sender, receiver) = mpsc::channel(1);
    let name = name.to_owned();
    tokio::spawn(async move {
        let mut reported = false;
        // An outage said and its end not yet: said once LISTEN works again.
        let mut unavailable = false;
        loop {
            tokio::select! {
                _ = sender.closed() => return,
                (listened, ended) = listen_once(&url, connect_timeout, &name, &sender, &mut unavailable) => {
                    // Said once per outage: polling carries on regardless.
                    if listened || !reported {
                        info!(%ended, "release notifications unavailable; relying on polling");
                        unavailable = true;
                    }
                    reported = true;
                }
            }
            tokio::select! {
                _ = sender.closed() => return,
                _ = tokio::time::sleep(RECONNECT_AFTER) => {}
            }
        }
    });
    receiver
}

/// One listening connection, until it fails; returns whether it got as far as listening,
/// and why it ended.
async fn listen_once(
    url: &DatabaseUrl,
    connect_timeout: Duration,
    name: &str,
    wake: &mpsc::Sender<()>,
    unavailable: &mut bool,
) -> (bool, String) {
    match listen_until_failure(url, connect_timeout, name, wake, unavailable).await {
        Ok(ended) => (true, ended),
        Err(ended) => (false, ended),
    }
}

/// `Err` if it never listened, else `Ok` once the listening connection failed.
async fn listen_until_failure(
    url: &DatabaseUrl,
    connect_timeout: Duration,
    name: &str,
    wake: &mpsc::Sender<()>,
    unavailable: &mut bool,
) -> Result<String, String> {
    let mut conn = match timeout(connect_timeout, super::tls::connect_postgres(url)).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(error)) => return Err(format!("cannot connect: {error}")),
        Err(_) => return Err("connecting timed out".to_owned()),
    };
    let listen = format!("SET application_name = 'leaderd listener'; LISTEN {CHANNEL}");
    match timeout(connect_timeout, conn.batch_execute(&listen)).await {
        Ok(Ok(())) => debug!(channel = CHANNEL, "listening for releases"),
        Ok(Err(error)) => return Err(format!("LISTEN failed: {error}")),
        Err(_) => return Err("LISTEN timed out".to_owned()),
    }
    if std::mem::take(unavailable) {
        info!("release notifications available again");
    }
    // A release between a poll and this LISTEN is caught by the next poll.
    let _ = wake.try_send(());
    loop {
        let next = {
            let mut notifications = std::pin::pin!(conn.notifications_stream());
            timeout(PING_EVERY, notifications.next()).await
        };
        match next {
            Ok(Some(Ok(notification))) if notification.payload == name => {
                debug!(election = name, "wake-up: release notified");
                let _ = wake.try_send(());
            }
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(error))) => return Ok(format!("connection failed: {error}")),
            Ok(None) => return Ok("connection closed".to_owned()),
            Err(_) => {
                if !matches!(
                    timeout(connect_timeout, conn.batch_execute(ping_for(url))).await,
                    Ok(Ok(()))
                ) {
                    return Ok("connection stopped answering, or its server no longer \
                               accepts writes"
                        .to_owned());
                }
            }
        }
    }
}
