-- For each full transaction ID of @xids (in order), whether that
-- transaction is still in progress on the database.
SELECT coalesce(pg_xact_status(x::xid8) = 'in progress', false)
FROM unnest(@xids::text[]) WITH ORDINALITY AS u(x, i) ORDER BY i
