-- When the current term started (`leaderd locks` shows the time held), and which term
-- that was: written by every claim and reacquire, kept by renewals, holds and releases.
-- taken_term tells a current taken_at from one a term of an older node left behind (an
-- older node starts terms without writing either). Rows from before this migration, and
-- terms started by older nodes, show no time held ("-") until the next claim.
ALTER TABLE service_leader_lock ADD COLUMN IF NOT EXISTS taken_at TIMESTAMPTZ(6) DEFAULT NULL;
ALTER TABLE service_leader_lock ADD COLUMN IF NOT EXISTS taken_term BIGINT DEFAULT NULL;
