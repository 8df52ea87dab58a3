-- Registers the periodic job @name of @queue and returns its since (the
-- database's clock at the first registration of the pair ever: later
-- ones keep it), its last_tick (the latest tick a scheduler took; NULL:
-- none) and the database's clock now. ON CONFLICT DO UPDATE rather than
-- DO NOTHING and a read: the row a concurrent first registration
-- committed after this statement's snapshot is returned all the same.
INSERT INTO leaserouter_periodic AS p (queue, name) VALUES (@queue, @name)
ON CONFLICT (queue, name) DO UPDATE SET since = p.since
RETURNING p.since, p.last_tick, clock_timestamp()
