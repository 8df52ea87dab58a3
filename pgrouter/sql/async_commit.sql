-- Makes the transaction commit without waiting for its WAL to be flushed
-- (or replicated): a resolution's marks only need to outlive the
-- operations still on their way to this server, which a crash ends as
-- well.
SELECT set_config('synchronous_commit', 'off', true)
