-- A no-op ALTER SEQUENCE: its lock makes concurrent nextval calls wait
-- until the transaction ends, so no token is issued between reading the
-- sequence and raising it (tokens_raise.sql).
ALTER SEQUENCE /*schema*/leaserouter_token CACHE 1
