-- pgrouter schema, version 5: the hand-back rule written once, as the
-- rules of version 3 are. Where a lease handed back unstarted (granted
-- ahead of its turn and never started, or granted by a claim whose
-- outcome was unknown) leaves its job: pending again in its old place
-- (ready_at and requeued as they were), the attempt not counted, no
-- owner, no expiry, and ended saying why the job's previous lease ended
-- (as before the grant). The statements set updated_at themselves.
-- Use: UPDATE ... SET (state, attempt, owner, lease_expires_at, ended) =
-- (SELECT * FROM leaserouter_hand_back(j.attempt, j.requeued)). Declared
-- as leaserouter_end_lease is (a table function, IMMUTABLE), so that the
-- planner inlines it; it would not, were an argument volatile (such as
-- clock_timestamp()). Only adds a function.
CREATE OR REPLACE FUNCTION /*schema*/leaserouter_hand_back(granted_attempt integer, was_requeued boolean)
RETURNS TABLE (state /*schema*/leaserouter_job_state, attempt integer, owner text, lease_expires_at timestamptz,
	ended text)
LANGUAGE sql IMMUTABLE
AS $$
SELECT 'pending'::/*schema*/leaserouter_job_state, granted_attempt - 1, '', NULL::timestamptz,
	CASE WHEN was_requeued THEN 'expired' ELSE 'released' END
$$;
