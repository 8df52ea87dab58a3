-- The database's clock, read by the periodic scheduler at each wake-up:
-- it decides which tick is due, and measures the offset of the local
-- clock its timer runs on.
SELECT clock_timestamp()
