-- The leases that the completions @ops (statement ids of leases_end.sql
-- whose outcome their client did not see) ended by deleting their jobs'
-- rows (migration 0020): each lease's token and the instant it ended.
-- Sent after the statement that retries them, in its transaction, so
-- that it reads what an earlier statement that held a row committed
-- (a statement of its own reads the database as of its start).
SELECT t.token, t.at FROM /*schema*/leaserouter_ended e, unnest(e.tokens, e.ats) AS t(token, at)
WHERE e.op = ANY (@ops::bigint[])
