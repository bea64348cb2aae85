-- When the current term started (`leaderd locks` shows the time held), and which term
-- that was: written by every claim and reacquire, kept by renewals, holds and releases.
-- taken_term tells a current taken_at from one a term of an older node left behind (an
-- older node starts terms without writing either). Rows from before this migration, and
-- terms started by older nodes, show no time held ("-") until the next claim.
-- UTC text with milliseconds, like "timestamp". SQLite runs this and its version record
-- in one transaction.
ALTER TABLE service_leader_lock ADD COLUMN taken_at TEXT DEFAULT NULL;
ALTER TABLE service_leader_lock ADD COLUMN taken_term INTEGER DEFAULT NULL;
