-- Every queue paused or resumed once, and whether it is paused.
SELECT queue, paused FROM /*schema*/leaserouter_queues
