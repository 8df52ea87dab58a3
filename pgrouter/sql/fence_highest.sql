-- The highest token admitted for fence @key (after fence.sql refused one:
-- the row is locked by this transaction, so this reads its latest).
SELECT token FROM /*schema*/leaserouter_fences WHERE key = @key
