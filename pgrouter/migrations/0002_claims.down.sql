-- Undoes version 2: claims given up and each job's claim id go.
DROP TABLE IF EXISTS /*schema*/leaserouter_abandoned_claims;
ALTER TABLE /*schema*/leaserouter_jobs DROP COLUMN IF EXISTS claim;
