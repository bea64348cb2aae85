-- One row per election (or lock). The holder renews `timestamp`; a lease is live while
-- `timestamp` + lease_ms is ahead of the database clock. term grows whenever a node
-- starts holding the row and serves as the fencing token.
-- utf8mb4_bin: node ids and names compare byte for byte, so "Node-A" never renews the
-- lease of "node-a" (the default collation is case-insensitive).
CREATE TABLE IF NOT EXISTS service_leader_lock (
    id           BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name         VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL UNIQUE,
    container_id VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL,
    `timestamp`  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    term         BIGINT NOT NULL DEFAULT 0,
    lease_ms     BIGINT NOT NULL DEFAULT 0
) ENGINE = InnoDB;
