//! What a node holds in the database, as far as it knows: the state a round starts from.

use super::clock::Instants;

/// What this node holds in the database, as far as it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hold {
    /// Nothing: this node follows.
    None,
    /// Acting as leader in `term` until `deadline`.
    Leading { term: i64, deadline: Instants },
    /// The row may still be ours in `term`, but this node stopped acting as leader (its
    /// deadline passed). Leadership resumes only through a new term.
    Lapsed { term: i64 },
}

impl Hold {
    pub(super) fn term(self) -> Option<i64> {
        match self {
            Hold::None => None,
            Hold::Leading { term, .. } | Hold::Lapsed { term } => Some(term),
        }
    }
}
