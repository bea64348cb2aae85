-- What a member is, beside `candidate` (which stays "may lead now", for nodes of the
-- previous release): observer, candidate, starting or unhealthy (its health check has
-- not passed yet, or fails), or stopped (it stepped down and left; `leaderd status` lists
-- it as gone at once, and `handover` refuses it). NULL in records of older versions.
ALTER TABLE leaderd_member ADD COLUMN IF NOT EXISTS standing VARCHAR(16) DEFAULT NULL;
