-- Whether @queue is paused (no row: not paused).
SELECT coalesce((SELECT paused FROM /*schema*/leaserouter_queues WHERE queue = @queue), false)
