//! The signals `leaderd lock` receives while COMMAND runs, passed on to it.

use nix::sys::signal::Signal;
use std::future::Future;
use tokio::sync::mpsc;

/// The signals `leaderd lock` receives: passed on to COMMAND while it runs.
pub(super) struct Signals {
    received: mpsc::UnboundedReceiver<Signal>,
    open: bool,
}

impl Signals {
    pub(super) fn new(received: mpsc::UnboundedReceiver<Signal>) -> Self {
        Signals {
            received,
            open: true,
        }
    }

    /// The next signal; pending for ever once none can come.
    async fn next(&mut self) -> Signal {
        if self.open {
            match self.received.recv().await {
                Some(signal) => return signal,
                None => self.open = false,
            }
        }
        std::future::pending().await
    }

    /// Runs `run` (COMMAND) with every signal that arrives meanwhile passed on to it.
    pub(super) async fn forward_while<F: Future>(
        &mut self,
        run: impl FnOnce(mpsc::UnboundedReceiver<Signal>) -> F,
    ) -> F::Output {
        let (forward, forwarded) = mpsc::unbounded_channel();
        let run = run(forwarded);
        tokio::pin!(run);
        loop {
            tokio::select! {
                output = &mut run => return output,
                signal = self.next() => {
                    let _ = forward.send(signal);
                }
            }
        }
    }
}
