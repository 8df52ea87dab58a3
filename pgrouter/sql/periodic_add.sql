-- Registers the periodic job @name of @queue and returns its since (the
-- database's clock at the first registration of the pair ever: later
-- ones keep it), its last_tick (the latest tick a scheduler committed;
-- NULL: none) and the database's clock now. It never waits for a
-- scheduler's transaction locking the row (a stalled one may lock it for
-- long): an existing row is only read, and the insert happens only when
-- the row is missing, then skipped if a concurrent first registration
-- inserted it meanwhile (ON CONFLICT DO NOTHING). No row returned: that
-- registration committed after this statement's snapshot; the caller
-- runs the statement again, whose new snapshot sees it.
WITH found AS (
	SELECT since, last_tick FROM /*schema*/leaserouter_periodic WHERE queue = @queue AND name = @name
), added AS (
	INSERT INTO /*schema*/leaserouter_periodic (queue, name)
	SELECT @queue, @name WHERE NOT EXISTS (SELECT FROM found)
	ON CONFLICT (queue, name) DO NOTHING
	RETURNING since, last_tick
)
SELECT since, last_tick, clock_timestamp() FROM found
UNION ALL
SELECT since, last_tick, clock_timestamp() FROM added
