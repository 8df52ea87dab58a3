-- Admits token @token for fence @key (records it as the key's highest)
-- iff it is at least the highest admitted so far, and returns whether it
-- did. The key's row stays locked until the caller's transaction ends.
WITH up AS (
	INSERT INTO /*schema*/leaserouter_fences AS f (key, token) VALUES (@key, @token)
	ON CONFLICT (key) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token
	RETURNING 1)
SELECT EXISTS (SELECT FROM up)
