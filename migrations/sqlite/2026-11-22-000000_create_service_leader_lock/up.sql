-- One row per election (or lock). The holder renews "timestamp" (UTC, millisecond text);
-- a lease is live while "timestamp" + lease_ms is ahead of the database clock. term grows
-- whenever a node starts holding the row and serves as the fencing token.
CREATE TABLE IF NOT EXISTS service_leader_lock (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         VARCHAR(100) NOT NULL UNIQUE,
    container_id VARCHAR(100) DEFAULT NULL,
    "timestamp"  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    term         INTEGER NOT NULL DEFAULT 0 CHECK (term >= 0),
    lease_ms     INTEGER NOT NULL DEFAULT 0 CHECK (lease_ms >= 0)
);
