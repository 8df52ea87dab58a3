-- Wakes the Routers of @queue in every process (those LISTENing on
-- @channel).
SELECT pg_notify(@channel, @queue)
