-- Marks the claims or lease operations @ids abandoned (resolved by their
-- client): a statement carrying one of these ids acts on nothing from
-- then on (see outcome.go).
INSERT INTO /*schema*/leaserouter_abandoned_claims (id) SELECT unnest(@ids::bigint[]) ON CONFLICT DO NOTHING
